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
		e := bootstrapStart(t, bin, envoyrun.WorkDir(t), yaml)
		addr := e.MustListener(t, "hashlb_tcp")
		bal := lbcore.NewBalancer(cfg, 0)
		const n = 30
		got := map[string]int{}
		for i := range n {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			d := bal.Decide(&lbcore.Request{Source: c.LocalAddr().String(), Dest: addr}, time.Time{})
			if d.Len() == 0 {
				t.Fatal("lbcore chose nothing")
			}
			want := cfg.Services[d.At(0)].Name
			rd := bufio.NewReader(c)
			name, err := envoyrun.ReadTCPBackendName(rd)
			if err != nil {
				t.Fatalf("connection %d from %s: %v", i, c.LocalAddr(), err)
			}
			got[name]++
			if name != want {
				t.Errorf("connection from %s: backend %s, want %s (lbcore)", c.LocalAddr(), name, want)
			}
			msg := fmt.Sprintf("ping %d\n", i)
			io.WriteString(c, msg)
			if back, err := rd.ReadString('\n'); err != nil || back != msg {
				t.Errorf("echo through tcp_proxy: %q, %v; want %q", back, err, msg)
			}
			c.Close()
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
