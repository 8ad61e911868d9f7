package lbcore

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// ipv4TextRef is ipv4Text as parseIPv4Port and a search for the port's colon.
func ipv4TextRef(s string) (string, bool) {
	if _, _, ok := parseIPv4Port(s); !ok {
		return "", false
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return s[:i], true
	}
	return s, true
}

// TestIPv4TextMatchesParse: ${client.ip}'s one-pass reading of a dotted quad
// accepts exactly what parseIPv4Port accepts and returns the address part,
// on edge cases and on random strings of digits, dots and colons.
func TestIPv4TextMatchesParse(t *testing.T) {
	cases := []string{"192.0.2.7:5000", "192.0.2.7", "192.0.2.7:", "192.0.2.7:65535", "192.0.2.7:65536",
		"0.0.0.0", "255.255.255.255:0", "256.1.1.1", "1.2.3.4.5", "01.2.3.4", "1.2.3.04", "1.2.3.0", "1.2.3",
		"1234.1.1.1", "1.2.3.4:0080", "1.2.3.4:+80", "1.2.3.4 ", "", ".", "1..2.3", "1.2.3.4::80", "9.9.9.999"}
	rng := rand.New(rand.NewPCG(5, 6))
	const alphabet = "0123456789..:x"
	for range 200000 {
		b := make([]byte, rng.IntN(22))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		got, gotOK := ipv4Text(s)
		want, wantOK := ipv4TextRef(s)
		if got != want || gotOK != wantOK {
			t.Fatalf("ipv4Text(%q) = %q, %v; parseIPv4Port reads %q, %v", s, got, gotOK, want, wantOK)
		}
	}
}
