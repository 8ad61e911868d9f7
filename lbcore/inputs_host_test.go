package lbcore

import "testing"

// TestFallbackHeaderOnly: HostOnlyForAuthority and
// CompactCallIDOnlyAsFallback are true only when the configuration reads
// the fallback header (host, i) where Request does, as the stand-in for a
// missing :authority or call-id, and never by its own name.
func TestFallbackHeaderOnly(t *testing.T) {
	const host, callID = "HostOnlyForAuthority", "CompactCallIDOnlyAsFallback"
	preds := map[string]func(*Config) bool{
		host:   (*Config).HostOnlyForAuthority,
		callID: (*Config).CompactCallIDOnlyAsFallback,
	}
	tests := []struct {
		name, call, config string
		want               bool
	}{
		{"domain", host, pool("DOMAINHASH", 2, ""), true},
		{"request.host in a token", host, pool("TOKEN", 2, `"token":"${request.host}"`), true},
		{"url reads no host", host, pool("URLHASH", 2, ""), false},
		{"host header beside request.host", host, pool("TOKEN", 2, `"token":"${request.host}${request.header.Host}"`), false},
		{"host header in a persistence key", host, pool("DOMAINHASH", 2, `"persistence":{"keys":["${request.header.host}"]}`), false},
		{"host header read alone", host, pool("TOKEN", 2, `"token":"${request.header.host}"`), false},
		{"callid", callID, pool("CALLIDHASH", 2, ""), true},
		{"sip.callid in a token", callID, pool("TOKEN", 2, `"token":"${sip.callid}"`), true},
		{"url reads no call id", callID, pool("URLHASH", 2, ""), false},
		{"i header beside sip.callid", callID, pool("TOKEN", 2, `"token":"${sip.callid}${request.header.I}"`), false},
		{"i header in a persistence key", callID, pool("CALLIDHASH", 2, `"persistence":{"keys":["${request.header.i}"]}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := preds[tt.call](mustConfig(t, tt.config)); got != tt.want {
				t.Errorf("%s() = %v, want %v", tt.call, got, tt.want)
			}
		})
	}
}
