package fleettest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// FreeAddr is a loopback address (host:port) whose port was free a moment
// ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// EtcdArgs is the command line, after the binary, of etcd (3.4's flags) as
// a one-member cluster called name with its data in dir, serving clients at
// the URL client and its peer at the URL peer, logging errors only.
func EtcdArgs(name, dir, client, peer string) []string {
	return []string{"--name", name, "--data-dir", dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", name + "=" + peer, "--log-level", "error"}
}

// WaitGateway polls POST /v3/kv/range on addr until etcd answers 200, the
// process exits (exited closed; nil for none), or limit passes.
func WaitGateway(addr string, limit time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(limit)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := c.Post("http://"+addr+"/v3/kv/range", "application/json", bytes.NewReader([]byte(`{"key":"AA=="}`)))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("etcd exited before its gateway answered")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd's gateway on %s did not answer within %v (last: %v)", addr, limit, err)
		}
	}
}

// Placement is one request's outcome: when it was decided, its key, the
// proxy that served it and the service it went to.
type Placement struct {
	At      time.Time
	Key     string
	Proxy   int
	Service string
}

// LastSplit is the time of the last placement after from that went to
// another service than a placement of the same key through another proxy
// within the second before it (zero when there is none: the fleet agreed),
// with an example.
func LastSplit(ps []Placement, from time.Time) (last time.Time, example string) {
	byKey := map[string][]Placement{}
	for _, p := range ps {
		if p.At.After(from) {
			byKey[p.Key] = append(byKey[p.Key], p)
		}
	}
	for k, rs := range byKey {
		for i, r := range rs {
			for j := i - 1; j >= 0 && r.At.Sub(rs[j].At) <= time.Second; j-- {
				if rs[j].Proxy != r.Proxy && rs[j].Service != r.Service && r.At.After(last) {
					last = r.At
					example = fmt.Sprintf("%s: proxy %d got %s, proxy %d got %s %v later", k, rs[j].Proxy, rs[j].Service, r.Proxy, r.Service,
						r.At.Sub(rs[j].At).Round(time.Millisecond))
				}
			}
		}
	}
	return last, example
}
