package lbpolicy

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/lbcore"
)

// TestServicesAsWorker: Policy.Services (what hashlb explain ranks over)
// makes of a host set exactly the services Worker.Update makes, with the
// same warnings: identities from hashId, name or address, names, weights
// clamped to 1–100.
func TestServicesAsWorker(t *testing.T) {
	p := mustPolicy(t, `{"lbMethod":"URLHASH"}`)
	f := newFakeHosts(6)
	f.hs[0].name = "b1"
	f.hs[1].hashID, f.hs[1].name = "cache-1", "b2"
	f.hs[2].hashID = "only-id"
	f.hs[3].weight = 250
	f.hs[4].weight = 0
	f.hs[5].weight, f.hs[5].name = 7, "b6"
	f.sync()
	w := p.NewWorker("c")
	notes, err := w.Update(f)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []HostInfo
	for i := range f.Count(0) {
		hosts = append(hosts, HostInfo{Address: f.Address(0, i), Weight: f.Weight(0, i),
			HashID: f.Metadata(0, i, "hashId"), Name: f.Metadata(0, i, "name")})
	}
	cfg, warn, err := p.Services(hosts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Services, w.Services(); !slices.Equal(got, want) {
		t.Errorf("Services =\n%+v\nWorker.Update made\n%+v", got, want)
	}
	if len(warn) != notes.Clamped {
		t.Errorf("Services warns %q, Worker.Update counted %d clamped weights", warn, notes.Clamped)
	}
	if len(warn) != 1 || !strings.Contains(warn[0], "250") {
		t.Errorf("warnings %q, want one for the weight 250", warn)
	}
}

// TestServicesRefusesDuplicates: two hosts with one identity cannot be
// services, and the error says so.
func TestServicesRefusesDuplicates(t *testing.T) {
	p := mustPolicy(t, `{"lbMethod":"URLHASH"}`)
	_, _, err := p.Services([]HostInfo{{Address: "10.0.0.1:80", Weight: 1, Name: "a"}, {Address: "10.0.0.2:80", Weight: 1, Name: "a"}})
	if err == nil || !strings.HasPrefix(err.Error(), "the cluster's hosts cannot be hashlb's services: ") {
		t.Errorf("Services(two named a) = %v, want the hosts refused", err)
	}
}

// TestParseConfigRefusesSession: the policy refuses a session block at load,
// naming session and Envoy's stateful_session filter.
func TestParseConfigRefusesSession(t *testing.T) {
	_, err := ParseConfig([]byte(`{"lbMethod":"URLHASH","session":{"type":"cookie"}}`))
	if err == nil || !strings.HasPrefix(err.Error(), "session: not served by the load-balancing policy: ") ||
		!strings.Contains(err.Error(), "envoy.filters.http.stateful_session") {
		t.Errorf("ParseConfig(session) = %v, want session refused with stateful_session as the alternative", err)
	}
}

// policyLimits are, for each field lbcore's host table says the policy
// serves with some values refused, a configuration with one such value.
var policyLimits = map[string]string{
	"lbMethod":         `{"lbMethod":"DESTINATIONIPHASH"}`,
	"token":            `{"lbMethod":"TOKEN","token":"${server.port}"}`,
	"persistence.keys": `{"lbMethod":"URLHASH","persistence":{"keys":["${client.ip}"]}}`,
}

// TestPolicyLimits: every field the host table says the policy serves with
// some values refused has such a value here, and ParseConfig refuses it
// with a problem that names the field.
func TestPolicyLimits(t *testing.T) {
	for _, f := range lbcore.Fields() {
		r, _ := lbcore.HostRuleOf(lbcore.HostPolicy, f.Path)
		js, ok := policyLimits[f.Path]
		switch {
		case r.Support != lbcore.Limit && ok:
			t.Errorf("%s: a sample of a limit, but the table says the policy %s it", f.Path, r.Support)
			continue
		case r.Support != lbcore.Limit:
			continue
		case !ok:
			t.Errorf("%s: limited for the policy (%s), and policyLimits has no value it refuses", f.Path, r.Why)
			continue
		}
		_, err := ParseConfig([]byte(js))
		if err == nil || !slices.ContainsFunc(strings.Split(err.Error(), "\n"), func(l string) bool { return strings.HasPrefix(l, f.Path+":") }) {
			t.Errorf("ParseConfig(%s) = %v, want a problem naming %s", js, err, f.Path)
		}
	}
}

// TestParseConfigRefusesSrcIPSrcPort: SRCIPSRCPORTHASH hashes the
// connection's port, which no header carries: refused, and the message does
// not send the operator to trustedForwardedHops, which cannot help.
func TestParseConfigRefusesSrcIPSrcPort(t *testing.T) {
	for _, js := range []string{`{"lbMethod":"SRCIPSRCPORTHASH"}`, `{"lbMethod":"SRCIPSRCPORTHASH","trustedForwardedHops":1}`} {
		_, err := ParseConfig([]byte(js))
		if err == nil || !strings.HasPrefix(err.Error(), "lbMethod: SRCIPSRCPORTHASH hashes the connection's client address and port") ||
			strings.Contains(err.Error(), "set trustedForwardedHops") {
			t.Errorf("ParseConfig(%s) = %v, want SRCIPSRCPORTHASH refused for the port", js, err)
		}
	}
}
