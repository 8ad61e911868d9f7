package lbcore

import "testing"

func TestHostOnlyForAuthority(t *testing.T) {
	tests := []struct {
		name, config string
		want         bool
	}{
		{"domain", pool("DOMAINHASH", 2, ""), true},
		{"request.host in a token", pool("TOKEN", 2, `"token":"${request.host}"`), true},
		{"url reads no host", pool("URLHASH", 2, ""), false},
		{"host header beside request.host", pool("TOKEN", 2, `"token":"${request.host}${request.header.Host}"`), false},
		{"host header in a persistence key", pool("DOMAINHASH", 2, `"persistence":{"keys":["${request.header.host}"]}`), false},
		{"host header read alone", pool("TOKEN", 2, `"token":"${request.header.host}"`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustConfig(t, tt.config).HostOnlyForAuthority(); got != tt.want {
				t.Errorf("HostOnlyForAuthority() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCompactCallIDOnlyAsFallback(t *testing.T) {
	tests := []struct {
		name, config string
		want         bool
	}{
		{"callid", pool("CALLIDHASH", 2, ""), true},
		{"sip.callid in a token", pool("TOKEN", 2, `"token":"${sip.callid}"`), true},
		{"url reads no call id", pool("URLHASH", 2, ""), false},
		{"i header beside sip.callid", pool("TOKEN", 2, `"token":"${sip.callid}${request.header.I}"`), false},
		{"i header in a persistence key", pool("CALLIDHASH", 2, `"persistence":{"keys":["${request.header.i}"]}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustConfig(t, tt.config).CompactCallIDOnlyAsFallback(); got != tt.want {
				t.Errorf("CompactCallIDOnlyAsFallback() = %v, want %v", got, tt.want)
			}
		})
	}
}
