package fleettest

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// ResetProxy forwards TCP connections from a loopback address to an etcd
// member and, while its rate is above 0, resets that share of them: each
// new connection with that chance as it is accepted, and each open one
// with that chance every second (a long-lived gRPC connection is hit
// too). A reset closes both sides at once with an RST, as a faulty
// network path or a middlebox does.
type ResetProxy struct {
	Addr   string // host:port clients dial
	target string
	ln     net.Listener
	mu     sync.Mutex
	rate   float64
	conns  map[net.Conn]net.Conn // client side → member side
	resets int
	wg     sync.WaitGroup
}

// StartResetProxy starts a ResetProxy to target (host:port) at rate 0; it
// is closed at t's cleanup.
func StartResetProxy(t testing.TB, target string) *ResetProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ResetProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]net.Conn{}}
	stop := make(chan struct{})
	p.wg.Add(2)
	go p.accept()
	go p.tick(stop)
	t.Cleanup(func() {
		close(stop)
		ln.Close()
		p.mu.Lock()
		for c, u := range p.conns {
			c.Close()
			u.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// SetRate sets the share of connections reset (0 to 1).
func (p *ResetProxy) SetRate(rate float64) {
	p.mu.Lock()
	p.rate = rate
	p.mu.Unlock()
}

// Resets is how many connections the proxy has reset.
func (p *ResetProxy) Resets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resets
}

func (p *ResetProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		hit := rand.Float64() < p.rate
		if hit {
			p.resets++
		}
		p.mu.Unlock()
		if hit {
			reset(c)
			continue
		}
		u, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c] = u
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, u, c)
		go p.pipe(u, c, c)
	}
}

// pipe copies src to dst until either fails, then closes both and forgets
// the connection whose client side is c.
func (p *ResetProxy) pipe(dst, src, c net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// tick resets each open connection with the rate's chance every second.
func (p *ResetProxy) tick(stop <-chan struct{}) {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		for c, u := range p.conns {
			if rand.Float64() < p.rate {
				p.resets++
				reset(c)
				reset(u)
				delete(p.conns, c)
			}
		}
		p.mu.Unlock()
	}
}

// reset closes c with an RST rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
