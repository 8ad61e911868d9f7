package hostsim

import "testing"

// filterStateArgs encodes SetEnvoyFilterStateArguments by hand, as a module does.
func filterStateArgs(path, value string, span int) []byte {
	b := []byte{0x0a, byte(len(path))}
	b = append(b, path...)
	b = append(b, 0x12, byte(len(value)))
	b = append(b, value...)
	if span != 0 {
		b = append(b, 0x18, byte(span))
	}
	return b
}

// TestSetEnvoyFilterState: set_envoy_filter_state answers as Envoy's
// foreign.cc and Context::setEnvoyFilterState do.
func TestSetEnvoyFilterState(t *testing.T) {
	tests := []struct {
		name   string
		args   []byte
		stream bool
		want   uint64
		value  string
	}{
		{"address on a connection", filterStateArgs(originalDstKey, "10.0.0.1:443", 2), true, statusOK, "10.0.0.1:443"},
		{"v6 address", filterStateArgs(originalDstKey, "[2001:db8::1]:80", 0), true, statusOK, "[2001:db8::1]:80"},
		{"unknown field skipped", append(filterStateArgs(originalDstKey, "10.0.0.1:443", 0), 0x20, 0x01), true, statusOK, "10.0.0.1:443"},
		{"tcp_proxy cluster", filterStateArgs("envoy.tcp_proxy.cluster", "c1", 0), true, statusOK, ""},
		{"unknown key", filterStateArgs("my.key", "x", 0), true, statusNotFound, ""},
		{"address without port", filterStateArgs(originalDstKey, "10.0.0.1", 0), true, statusBadArgument, ""},
		{"truncated message", []byte{0x0a, 0x40, 'a'}, true, statusBadArgument, ""},
		{"field number 0", []byte{0x02, 0x00}, true, statusBadArgument, ""},
		{"no stream (root context)", filterStateArgs(originalDstKey, "10.0.0.1:443", 0), false, statusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Stream{id: 2}
			v := &vm{streams: map[uint32]*Stream{}, cur: 2}
			if tt.stream {
				v.streams[2] = s
			}
			if got := v.setEnvoyFilterState(tt.args); got != tt.want {
				t.Fatalf("set_envoy_filter_state(%q) = %d, want %d", tt.args, got, tt.want)
			}
			if tt.value != "" && s.fstate[originalDstKey].Value != tt.value {
				t.Fatalf("filter state %+v, want %s", s.fstate, tt.value)
			}
		})
	}
}
