package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelp: -h is asked for, so it is not an error: the usage goes to
// stdout and the exit status is 0, for hashlb and for each command; every
// flag has a description.
func TestHelp(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // parts of stdout
	}{
		{"hashlb -h", []string{"-h"}, []string{"usage: hashlb <command>", "check FILE…", "explain CONFIG"}},
		{"hashlb help", []string{"help"}, []string{"usage: hashlb <command>"}},
		{"check -h", []string{"check", "-h"}, []string{"usage: hashlb check FILE…", "Exit status"}},
		{"explain -h", []string{"explain", "-h"}, []string{"usage: hashlb explain CONFIG -url URL [flags]",
			"  -client IP:PORT\n    \tthe connection's peer (source.address), IP:PORT", "  -url URL\n"}},
		{"explain --help", []string{"explain", "--help"}, []string{"usage: hashlb explain"}},
		{"import-nsconf -h", []string{"import-nsconf", "-h"}, []string{"usage: hashlb import-nsconf ns.conf [-vserver NAME] [-o DIR]",
			"  -vserver NAME\n    \twrite only lb vserver NAME"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
				t.Fatalf("hashlb %s = exit %d, stderr %q; want 0 and nothing on stderr", strings.Join(tt.args, " "), code, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("hashlb %s printed\n%s\nwant it to contain %q", strings.Join(tt.args, " "), stdout.String(), w)
				}
			}
			if strings.Contains(stdout.String(), "\n    \t\n") {
				t.Errorf("hashlb %s: a flag without a description:\n%s", strings.Join(tt.args, " "), stdout.String())
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := run(nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage: hashlb") {
		t.Errorf("hashlb without a command = exit %d, stderr %q; want 2 and the usage", code, stderr.String())
	}
}

// TestExplainAddresses: -client and -dest take what Envoy's source.address
// and destination.address hold, and a refusal says why.
func TestExplainAddresses(t *testing.T) {
	tests := []struct {
		name, flag, value, want string
	}{
		{"host name", "-client", "banana:80", `hashlb explain: -client banana:80: "banana" is a host name, not an IP address`},
		{"localhost", "-dest", "localhost:18081", `hashlb explain: -dest localhost:18081: "localhost" is a host name, not an IP address`},
		{"leading zero", "-client", "10.0.0.01:80", `-client 10.0.0.01:80: "10.0.0.01" has a field with a leading zero`},
		{"IPv6 without brackets", "-client", "::1:8080", "-client ::1:8080: an IPv6 address needs brackets: write [::1]:8080"},
		{"no port", "-dest", "10.0.0.1", "-dest 10.0.0.1: no port: write ip:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"explain", "../../configs/demo.json", "-url", "/", tt.flag, tt.value}, &stdout, &stderr)
			if first, _, _ := strings.Cut(stderr.String(), "\n"); code != 2 || !strings.Contains(first, tt.want) {
				t.Errorf("hashlb explain %s %s = exit %d, first stderr line %q; want 2 and %q", tt.flag, tt.value, code, first, tt.want)
			}
		})
	}
}
