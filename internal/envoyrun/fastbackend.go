package envoyrun

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// FastBackend is the benchmark's upstream: a minimal HTTP/1.1 server that
// answers every request with the same short 200 (body "ok\n", header
// X-Backend: its name, or with Any the local address the connection was
// made to), so that the CPU it takes from the proxy it serves is small and
// the same whatever the proxy does. Unlike Backend it echoes nothing; it
// reads requests without a body only (GET), as the benchmark sends.
type FastBackend struct {
	Name string
	Addr string // the listening address

	any      bool
	requests atomic.Int64
	ln       net.Listener
	mu       sync.Mutex
	conns    map[net.Conn]bool
	closed   bool
}

// StartFastBackend starts a fast backend on a free loopback port; it stops
// when the test ends.
func StartFastBackend(t testing.TB, name string) *FastBackend {
	t.Helper()
	return startFast(t, name, "127.0.0.1:0", false)
}

// StartFastBackendAny starts a fast backend on port of every address
// (0.0.0.0), so that it answers for any loopback address 127.x.y.z: one
// backend stands for as many endpoints as a cluster lists on that port. It
// closes every connection that does not come from a loopback address (the
// port is open on the machine's other addresses while it runs), and names
// itself in X-Backend by the address the connection was made to
// ("127.1.0.7:PORT"). port 0: a free one.
func StartFastBackendAny(t testing.TB, port int) *FastBackend {
	t.Helper()
	return startFast(t, "", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)), true)
}

func startFast(t testing.TB, name, addr string, any bool) *FastBackend {
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	b := &FastBackend{Name: name, Addr: ln.Addr().String(), any: any, ln: ln, conns: map[net.Conn]bool{}}
	go b.accept()
	t.Cleanup(b.Stop)
	return b
}

// Port is the backend's port.
func (b *FastBackend) Port() int { return b.ln.Addr().(*net.TCPAddr).Port }

// Requests is how many requests it has answered.
func (b *FastBackend) Requests() int64 { return b.requests.Load() }

// Stop closes the listener and every connection.
func (b *FastBackend) Stop() {
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.ln.Close()
}

func (b *FastBackend) accept() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		if b.any && !c.RemoteAddr().(*net.TCPAddr).IP.IsLoopback() {
			c.Close()
			continue
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			c.Close()
			return
		}
		b.conns[c] = true
		b.mu.Unlock()
		go b.serve(c)
	}
}

func (b *FastBackend) serve(c net.Conn) {
	defer func() {
		b.mu.Lock()
		delete(b.conns, c)
		b.mu.Unlock()
		c.Close()
	}()
	name := b.Name
	if b.any {
		name = c.LocalAddr().String()
	}
	answer := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\nX-Backend: %s\r\n\r\nok\n", name))
	r := bufio.NewReaderSize(c, 16<<10)
	w := bufio.NewWriterSize(c, 4<<10)
	for {
		// A request ends at its empty line; a GET has no body.
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				break
			}
		}
		b.requests.Add(1)
		w.Write(answer)
		// Answer at once unless the next request is already here (pipelining).
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}
