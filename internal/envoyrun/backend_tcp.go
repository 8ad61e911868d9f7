package envoyrun

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// TCPBackend is a TCP upstream on loopback for the network-filter tests: on
// each connection it writes its name and a newline, then echoes what it
// reads until the peer closes. Conns counts the connections it accepted.
type TCPBackend struct {
	Name string
	Addr string // 127.0.0.1:PORT

	conns atomic.Int64
	ln    net.Listener
	wg    sync.WaitGroup
}

// StartTCPBackend starts a TCP backend on a free loopback port; it stops
// when the test ends.
func StartTCPBackend(t testing.TB, name string) *TCPBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &TCPBackend{Name: name, Addr: ln.Addr().String(), ln: ln}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.Stop)
	return b
}

func (b *TCPBackend) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.conns.Add(1)
		go func() {
			defer c.Close()
			if _, err := io.WriteString(c, b.Name+"\n"); err != nil {
				return
			}
			io.Copy(c, c)
		}()
	}
}

// Conns is how many connections it has accepted.
func (b *TCPBackend) Conns() int64 { return b.conns.Load() }

// Port is the backend's port.
func (b *TCPBackend) Port() int { return b.ln.Addr().(*net.TCPAddr).Port }

// Stop closes the listener (connections already accepted run on until
// their peer closes).
func (b *TCPBackend) Stop() {
	b.ln.Close()
	b.wg.Wait()
}
