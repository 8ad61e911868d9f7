package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Render is one GET request as bytes on the wire: Host host, the path, and
// the extra headers in order, keep-alive.
func Render(host, path string, headers ...[2]string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\n", path, host)
	for _, h := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// Result is what one run measured.
type Result struct {
	Requests int64         // answered with 2xx
	Errors   int64         // non-2xx answers, malformed answers, connection errors
	Missed   int64         // Open: requests still unsent when the run ended
	Elapsed  time.Duration // from the first request to the end of the run
	// Latencies of the 2xx answers, sorted. Closed: from the write of the
	// request; Open: from the time the request was due.
	Latencies []time.Duration
	FirstErr  error // the first error seen, for a message
}

// RPS is answered requests per second.
func (r Result) RPS() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// Quantile is the q-quantile of the latencies (0 when none).
func (r Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.Latencies)))
	return r.Latencies[min(i, len(r.Latencies)-1)]
}

// conn is one keep-alive connection to the proxy.
type conn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
}

func (c *conn) close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}

// do sends one request and reads its answer; it reports whether the status
// was 2xx. Any error closes the connection (the next do dials again).
func (c *conn) do(req []byte) (bool, error) {
	if c.c == nil {
		nc, err := net.Dial("tcp", c.addr)
		if err != nil {
			return false, err
		}
		c.c = nc
		if c.r == nil {
			c.r = bufio.NewReaderSize(nc, 16<<10)
		} else {
			c.r.Reset(nc)
		}
	}
	if _, err := c.c.Write(req); err != nil {
		c.close()
		return false, err
	}
	ok, keep, err := readAnswer(c.r)
	if err != nil || !keep {
		c.close()
	}
	return ok, err
}

var errMalformed = errors.New("loadgen: malformed HTTP/1.1 answer")

// readAnswer reads one HTTP/1.1 answer with a Content-Length body.
func readAnswer(r *bufio.Reader) (ok, keep bool, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return false, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return false, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	status := line[9:12]
	ok = status[0] == '2'
	length, keep := -1, true
	for {
		h, err := r.ReadSlice('\n')
		if err != nil {
			return false, false, err
		}
		if len(h) <= 2 {
			break
		}
		colon := bytes.IndexByte(h, ':')
		if colon < 0 {
			return false, false, fmt.Errorf("%w: header %q", errMalformed, h)
		}
		name, val := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case asciiEqualFold(name, "content-length"):
			n, err := strconv.Atoi(string(val))
			if err != nil || n < 0 {
				return false, false, fmt.Errorf("%w: content-length %q", errMalformed, val)
			}
			length = n
		case asciiEqualFold(name, "connection"):
			keep = !asciiEqualFold(val, "close")
		case asciiEqualFold(name, "transfer-encoding"):
			return false, false, fmt.Errorf("%w: transfer-encoding %q (only Content-Length bodies are read)", errMalformed, val)
		}
	}
	if length < 0 {
		return false, false, fmt.Errorf("%w: no content-length (status %s)", errMalformed, status)
	}
	if _, err := r.Discard(length); err != nil {
		return false, false, err
	}
	if !ok {
		return false, keep, fmt.Errorf("loadgen: status %s", status)
	}
	return true, keep, nil
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// worker is one connection's counts, merged at the end.
type worker struct {
	ok, bad int64
	lat     []time.Duration
	err     error
}

func merge(ws []worker, elapsed time.Duration) Result {
	var r Result
	for _, w := range ws {
		r.Requests += w.ok
		r.Errors += w.bad
		r.Latencies = append(r.Latencies, w.lat...)
		if r.FirstErr == nil {
			r.FirstErr = w.err
		}
	}
	slices.Sort(r.Latencies)
	r.Elapsed = elapsed
	return r
}

// Closed runs conns connections against addr for d, each sending the
// requests of reqs in turn (connection i starting at request i·len/conns, so
// the connections do not send the same request at once).
func Closed(ctx context.Context, addr string, reqs [][]byte, conns int, d time.Duration) Result {
	ws := make([]worker, conns)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func(w *worker, next int) {
			defer wg.Done()
			c := &conn{addr: addr}
			defer c.close()
			w.lat = make([]time.Duration, 0, 1<<14)
			for ctx.Err() == nil {
				t := time.Now()
				ok, err := c.do(reqs[next%len(reqs)])
				next++
				if ok {
					w.ok++
					w.lat = append(w.lat, time.Since(t))
				} else {
					w.bad++
					if w.err == nil {
						w.err = err
					}
				}
			}
		}(&ws[i], i*len(reqs)/conns)
	}
	wg.Wait()
	return merge(ws, time.Since(start))
}

// Open sends requests to addr at rate per second for d, over at most conns
// connections (a request waits for a free one when all are busy, and that
// wait is part of its latency). Requests not sent by the end are Missed.
func Open(ctx context.Context, addr string, reqs [][]byte, rate float64, conns int, d time.Duration) Result {
	n := int(rate * d.Seconds())
	p := &openPlan{addr: addr, reqs: reqs, n: n, interval: time.Duration(float64(time.Second) / rate),
		d: d, due: make(chan int, n)}
	ws := make([]worker, conns)
	ctx, cancel := context.WithTimeout(ctx, d+time.Second) // the last requests' answers
	defer cancel()
	p.start = time.Now()
	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			w.lat = make([]time.Duration, 0, n/conns+16)
			p.send(ctx, w)
		}(&ws[i])
	}
	p.pace(ctx)
	close(p.due)
	wg.Wait()
	r := merge(ws, d)
	r.Missed = int64(n) - p.sent.Load()
	return r
}

// openPlan is one open-loop run: request k of n is due at start +
// k·interval and counts only if sent within d.
type openPlan struct {
	addr     string
	reqs     [][]byte
	n        int
	interval time.Duration
	d        time.Duration
	due      chan int
	start    time.Time
	sent     atomic.Int64
}

// send is one connection's worker: it sends each due request it takes and
// records its latency from the due time, until due is closed or ctx ends.
func (p *openPlan) send(ctx context.Context, w *worker) {
	c := &conn{addr: p.addr}
	defer c.close()
	for {
		var k int
		var more bool
		select {
		case k, more = <-p.due:
		case <-ctx.Done():
			return
		}
		if !more {
			return
		}
		if time.Since(p.start) > p.d { // due in time, sent too late to count
			continue
		}
		p.sent.Add(1)
		ok, err := c.do(p.reqs[k%len(p.reqs)])
		if ok {
			w.ok++
			w.lat = append(w.lat, time.Since(p.start.Add(time.Duration(k)*p.interval)))
		} else {
			w.bad++
			if w.err == nil {
				w.err = err
			}
		}
	}
}

// pace releases request k at start + k·interval; a late wake-up releases
// every request due by then at once. It sleeps in the kernel on a thread of
// its own (nanosleep's high-resolution timer): Go's time.Sleep below a
// millisecond may wake only at the next millisecond (the runtime's poller
// waits in whole ms), which would add up to 1 ms to every latency measured
// from the due time.
func (p *openPlan) pace(ctx context.Context) {
	paced := make(chan struct{})
	go func() {
		defer close(paced)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for k := 0; k < p.n && ctx.Err() == nil; {
			if wait := time.Until(p.start.Add(time.Duration(k) * p.interval)); wait > 0 {
				ts := syscall.NsecToTimespec(wait.Nanoseconds())
				syscall.Nanosleep(&ts, nil)
			}
			for now := time.Since(p.start); k < p.n && time.Duration(k)*p.interval <= now; k++ {
				p.due <- k
			}
		}
	}()
	<-paced
}
