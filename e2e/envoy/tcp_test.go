package envoy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// TestEnvoyTCPNetworkFilter: configs/envoy-tcp.yaml as shipped (only ports
// moved): hashlb as the network filter before tcp_proxy decides each
// connection with the file's SRCIPSRCPORTHASH, sets the ORIGINAL_DST filter
// state, and tcp_proxy connects where lbcore says for the connection's
// source address and port (known to the client) and the listener's address.
// Data flows both ways; the connection counters count each connection and
// the active gauges return to 0 when they close.
func TestEnvoyTCPNetworkFilter(t *testing.T) {
	t.Parallel()
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		var bs []*envoyrun.TCPBackend
		for i := range 3 {
			bs = append(bs, envoyrun.StartTCPBackend(t, fmt.Sprintf("b%d", i+1)))
		}
		yaml := envoyrun.Ports(t, envoyrun.ReadRepoFile(t, "configs/envoy-tcp.yaml"), map[int]int{
			9901: 0, 10001: 0, 19081: bs[0].Port(), 19082: bs[1].Port(), 19083: bs[2].Port(),
		})
		cfg := pluginConfigs(t, yaml)[0]
		if cfg.LBMethod.String() != "SRCIPSRCPORTHASH" {
			t.Fatalf("configs/envoy-tcp.yaml uses %v; this test's oracle input is the source port", cfg.LBMethod)
		}
		e := envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: envoyrun.WorkDir(t)}) // validated as shipped by TestBootstrapsStart
		addr := e.MustListener(t, "hashlb_tcp")
		bal := lbcore.NewBalancer(cfg, 0)
		const n = 30
		got := map[string]int{}
		for i := range n {
			name, src, err := tcpEcho(addr, fmt.Sprintf("ping %d\n", i))
			if err != nil {
				t.Fatalf("connection %d from %s through tcp_proxy: %v", i, src, err)
			}
			d := bal.Decide(&lbcore.Request{Source: src, Dest: addr}, time.Time{})
			if d.Len() == 0 {
				t.Fatal("lbcore chose nothing")
			}
			got[name]++
			if want := cfg.Services[d.At(0)].Name; name != want {
				t.Errorf("connection from %s: backend %s, want %s (lbcore)", src, name, want)
			}
		}
		t.Logf("%d connections: %v", n, got)
		if len(got) < 2 {
			t.Errorf("every connection went to one backend (%v): the source port is not in the decision", got)
		}
		var conns, active int64
		eventually(t, func() string {
			return fmt.Sprintf("after %d connections closed: requests counters sum %d, active gauges sum %d; want %d and 0", n, conns, active, n)
		}, func() bool {
			s, err := e.Stats()
			if err != nil {
				t.Fatal(err)
			}
			conns, active = 0, 0
			for _, b := range bs {
				conns += s["wasmcustom.hashlb.service."+b.Name+".requests"]
				active += s["wasmcustom.hashlb.service."+b.Name+".active"]
			}
			return conns == n && active == 0
		})
		var accepted int64
		for _, b := range bs {
			accepted += b.Conns()
		}
		if accepted != n {
			t.Errorf("backends accepted %d connections, want %d", accepted, n)
		}
	})
}

// tcpEcho opens a connection to addr (a listener in front of envoyrun's TCP
// backends), reads the backend's greeting, sends msg and reads it back: the
// backend's name, the connection's source address, and the first error.
func tcpEcho(addr, msg string) (backend, source string, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	source = c.LocalAddr().String()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if backend, err = envoyrun.ReadTCPBackendName(r); err != nil {
		return "", source, err
	}
	if _, err = io.WriteString(c, msg); err != nil {
		return backend, source, err
	}
	echo, err := r.ReadString('\n')
	if err == nil && echo != msg {
		err = fmt.Errorf("echo %q, want %q", echo, msg)
	}
	return backend, source, err
}
