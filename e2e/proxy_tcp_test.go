package e2e

// hashlb-proxy -tcp for real: the command built from source, run as a
// process with the module built from source, proxying real TCP connections
// to real loopback backends that answer each connection with one line.

import (
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// tcpBackend is a loopback TCP server that writes "backend NAME\n" on each
// connection and closes it.
type tcpBackend struct {
	name, addr string
	ln         net.Listener
}

func startTCPBackends(t *testing.T, names ...string) []*tcpBackend {
	t.Helper()
	var bs []*tcpBackend
	for _, name := range names {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, "backend "+name+"\n")
				c.Close()
			}
		}()
		bs = append(bs, &tcpBackend{name: name, addr: ln.Addr().String(), ln: ln})
	}
	return bs
}

// tcpProxyConfig is a network-filter configuration over bs.
func tcpProxyConfig(method, extra string, bs []*tcpBackend) []byte {
	var svcs []string
	for _, b := range bs {
		svcs = append(svcs, fmt.Sprintf(`{"name": %q, "address": %q}`, b.name, b.addr))
	}
	if extra != "" {
		extra += ", "
	}
	return []byte(fmt.Sprintf(`{"filterType": "network", "lbMethod": %q, %s"services": [%s]}`, method, extra, strings.Join(svcs, ", ")))
}

var tcpListenLine = regexp.MustCompile(`^hashlb-proxy: .* on tcp://(\S+), `)

// runTCPProxy starts hashlb-proxy -tcp with config on a free loopback port,
// its own demo backends off, and returns its address once it accepts.
func runTCPProxy(t *testing.T, bin string, config []byte) string {
	t.Helper()
	return startProxy(t, bin, config, tcpListenLine, "-tcp", "127.0.0.1:0")
}

// dialLine opens a connection to the proxy and returns the client's own
// address and the backend's line ("" when the proxy closed the connection
// without one).
func dialLine(t *testing.T, proxy string) (src, name string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", proxy, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading from %s: %v", proxy, err)
	}
	return c.LocalAddr().String(), strings.TrimPrefix(strings.TrimSpace(string(b)), "backend ")
}

// TestTCPProxy: through hashlb-proxy -tcp, connections spread by source
// port under SRCIPSRCPORTHASH, each to the backend lbcore ranks first; all
// go to one backend under SOURCEIPHASH (one client IP); a stopped backend's
// connections move to their next-ranked backend once its probes fail, and
// the others stay.
func TestTCPProxy(t *testing.T) {
	bin := buildProxy(t)
	bs := startTCPBackends(t, "t1", "t2", "t3")
	nameOf := map[string]string{}
	for _, b := range bs {
		nameOf[b.addr] = b.name
	}
	expect := func(b *lbcore.Balancer, c *lbcore.Config, src, dst string) string {
		d := b.Decide(&lbcore.Request{Source: src, Dest: dst}, time.Time{})
		return nameOf[c.Services[d.At(0)].Address]
	}

	t.Run("SOURCEIPHASH", func(t *testing.T) {
		proxy := runTCPProxy(t, bin, tcpProxyConfig("SOURCEIPHASH", "", bs))
		first := ""
		for i := 0; i < 20; i++ {
			_, got := dialLine(t, proxy)
			if got == "" || first != "" && got != first {
				t.Fatalf("connection %d reached %q, the first %q: one client IP, one backend", i, got, first)
			}
			first = got
		}
	})

	t.Run("SRCIPSRCPORTHASH", func(t *testing.T) {
		config := tcpProxyConfig("SRCIPSRCPORTHASH",
			`"healthCheck": {"interval": "1s", "timeout": "500ms", "unhealthyThreshold": 1, "healthyThreshold": 1}`, bs)
		c, err := lbcore.ParseConfig(config)
		if err != nil {
			t.Fatal(err)
		}
		oracle := lbcore.NewBalancer(c, 0)
		proxy := runTCPProxy(t, bin, config)
		count := map[string]int{}
		for i := 0; i < 60; i++ {
			src, got := dialLine(t, proxy)
			if want := expect(oracle, c, src, proxy); got != want {
				t.Fatalf("connection from %s reached %q, want %s", src, got, want)
			}
			count[got]++
		}
		if len(count) != 3 {
			t.Fatalf("60 connections reached %v, want all three backends (spread by source port)", count)
		}

		// Stop t2: once its probes fail, its connections go to their
		// next-ranked backend; every other connection is unchanged.
		bs[1].ln.Close()
		oracle.SetDown(1, true)
		deadline := time.Now().Add(60 * time.Second)
		for ok := 0; ok < 30; {
			if time.Now().After(deadline) {
				t.Fatal("connections still reach the stopped backend t2 after 60s of failed probes")
			}
			if _, got := dialLine(t, proxy); got == "" || got == "t2" {
				ok = 0
				time.Sleep(100 * time.Millisecond) // waiting for the probe round, not timing it
				continue
			}
			ok++
		}
		moved := 0
		for i := 0; i < 60; i++ {
			src, got := dialLine(t, proxy)
			want := expect(oracle, c, src, proxy)
			if got != want {
				t.Fatalf("with t2 stopped, connection from %s reached %q, want %s", src, got, want)
			}
			oracle.SetDown(1, false)
			if expect(oracle, c, src, proxy) == "t2" {
				moved++
			}
			oracle.SetDown(1, true)
		}
		if moved == 0 {
			t.Error("no connection of the 60 would have gone to t2: nothing shown moving")
		}
	})
}
