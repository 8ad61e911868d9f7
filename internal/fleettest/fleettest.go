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
