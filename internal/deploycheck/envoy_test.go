package deploycheck

import (
	"os"
	"strings"
	"testing"
)

// TestClientAddressFromForwardedFor: a configuration that keys on the
// client's address behind an http_connection_manager that takes it from
// x-forwarded-for gets a warning; use_remote_address: true, or a
// configuration that never reads the address, none.
func TestClientAddressFromForwardedFor(t *testing.T) {
	orig, err := os.ReadFile("../../envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := strings.Replace(string(orig), "          use_remote_address: true\n", "", 1)
	source := strings.Replace(base, `"lbMethod": "URLHASH"`, `"lbMethod": "SOURCEIPHASH"`, 1)
	clientKey := strings.Replace(base, `"${request.header.x-client-id}"`, `"${client.ip}"`, 1)
	remote := strings.Replace(source, "          stat_prefix: hashlb\n", "          stat_prefix: hashlb\n          use_remote_address: true\n", 1)
	if source == base || clientKey == base || remote == source {
		t.Fatal("envoy.yaml changed: a substitution did not apply")
	}
	for _, tt := range []struct {
		name, file string
		warn       bool
	}{
		{"SOURCEIPHASH without use_remote_address", source, true},
		{"${client.ip} persistence key without use_remote_address", clientKey, true},
		{"SOURCEIPHASH with use_remote_address", remote, false},
		{"URLHASH, a header key", base, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Scan([]byte(tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got := false
			for _, fd := range Check([]Named{{Name: "envoy.yaml", File: f}}) {
				if strings.Contains(fd.Problem, "use_remote_address") {
					got = got || fd.Warning
				}
			}
			if got != tt.warn {
				t.Errorf("use_remote_address warning = %v, want %v", got, tt.warn)
			}
		})
	}
}
