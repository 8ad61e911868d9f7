package envoyrun

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
)

// TCPBackend is a TCP upstream on loopback, as hashlb-proxy's TCP demo
// backends: on each connection it writes one line, "backend NAME\n", then
// echoes every byte it reads until the peer closes. A test learns from the
// first line where Envoy connected it, and from the echo that the proxy
// carries data both ways.
type TCPBackend struct {
	Name string
	Addr string // 127.0.0.1:PORT

	conns atomic.Int64
	ln    net.Listener
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
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.conns.Add(1)
			go func() {
				defer c.Close()
				if _, err := fmt.Fprintf(c, "backend %s\n", b.Name); err != nil {
					return
				}
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return b
}

// Port is the backend's port.
func (b *TCPBackend) Port() int {
	_, p, _ := net.SplitHostPort(b.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Conns is how many connections it has accepted.
func (b *TCPBackend) Conns() int64 { return b.conns.Load() }

// ReadTCPBackendName reads a TCPBackend's first line from r and returns the
// name in it ("b1" from "backend b1\n").
func ReadTCPBackendName(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the backend's line: %v (read %q)", err, line)
	}
	var name string
	if _, err := fmt.Sscanf(line, "backend %s\n", &name); err != nil {
		return "", fmt.Errorf("backend line %q: %v", line, err)
	}
	return name, nil
}
