package envoyrun

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"testing"
)

// StartBackendAt is StartBackend on a given address: "[::1]:0" for an IPv6
// backend, "127.0.0.2:0" for another loopback address (port 0: a free one).
func StartBackendAt(t testing.TB, name, addr string) *Backend {
	t.Helper()
	b := &Backend{Name: name}
	if err := b.listen(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

// ListenerAddresses returns every address a listener is bound to, as
// /listeners reports them: its address first, then its
// additional_addresses, each "127.0.0.1:41234" or "[::1]:41234".
func (e *Envoy) ListenerAddresses(name string) ([]string, error) {
	body, _, err := e.Get("/listeners?format=json")
	if err != nil {
		return nil, err
	}
	type sockAddr struct {
		SocketAddress struct {
			Address   string `json:"address"`
			PortValue int    `json:"port_value"`
		} `json:"socket_address"`
	}
	var ls struct {
		ListenerStatuses []struct {
			Name                     string     `json:"name"`
			LocalAddress             sockAddr   `json:"local_address"`
			AdditionalLocalAddresses []sockAddr `json:"additional_local_addresses"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal([]byte(body), &ls); err != nil {
		return nil, fmt.Errorf("/listeners: %v: %s", err, body)
	}
	for _, l := range ls.ListenerStatuses {
		if l.Name != name {
			continue
		}
		var out []string
		for _, a := range append([]sockAddr{l.LocalAddress}, l.AdditionalLocalAddresses...) {
			out = append(out, net.JoinHostPort(a.SocketAddress.Address, strconv.Itoa(a.SocketAddress.PortValue)))
		}
		return out, nil
	}
	return nil, fmt.Errorf("no listener %q in /listeners: %s", name, body)
}
