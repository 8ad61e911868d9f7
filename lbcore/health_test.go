package lbcore

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

func TestActiveThresholds(t *testing.T) {
	h := &HealthCheck{HealthyThreshold: 2, UnhealthyThreshold: 3}
	var s ServiceHealth
	steps := []struct {
		ok          bool
		wantDown    bool
		wantChanged bool
	}{
		{false, false, false}, {false, false, false}, {true, false, false}, // a success resets the streak
		{false, false, false}, {false, false, false}, {false, true, true}, // three in a row: DOWN
		{true, true, false}, {false, true, false}, {true, true, false}, {true, false, true}, // two good in a row: UP
	}
	for i, st := range steps {
		changed := h.Probe(&s, st.ok)
		if s.Down != st.wantDown || changed != st.wantChanged {
			t.Fatalf("step %d Probe(%v): down %v changed %v, want %v %v", i, st.ok, s.Down, changed, st.wantDown, st.wantChanged)
		}
	}
}

func TestPassiveEjection(t *testing.T) {
	p := &PassiveHealth{ConsecutiveFailures: 3, EjectionTime: 30 * time.Second}
	var s ServiceHealth
	now := epoch
	for i := 0; i < 2; i++ {
		if p.response(&s, true, now) {
			t.Fatalf("ejected after %d failures, want 3", i+1)
		}
	}
	p.response(&s, false, now) // a success in between resets the count
	for i := 0; i < 2; i++ {
		p.response(&s, true, now)
	}
	if !p.response(&s, true, now) || s.Selectable(now) {
		t.Fatal("three consecutive failures did not eject the service")
	}
	if s.Selectable(now.Add(29 * time.Second)) {
		t.Error("selectable again before the ejection time")
	}
	if !s.Selectable(now.Add(30 * time.Second)) {
		t.Error("not selectable after the ejection time")
	}
}

func TestHealthEncoding(t *testing.T) {
	in := ServiceHealth{Down: true, Streak: 2, Failures: 7, EjectedUntil: 1234567890123}
	out, ok := decodeHealth(encodeHealth(nil, &in))
	if !ok || out != in {
		t.Errorf("DecodeHealth(EncodeHealth(%+v)) = %+v, %v", in, out, ok)
	}
	for _, bad := range [][]byte{nil, {1}, {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if s, ok := decodeHealth(bad); ok || !s.Selectable(epoch) {
			t.Errorf("DecodeHealth(%v) = %+v, %v; want a healthy default, false", bad, s, ok)
		}
	}
}

func TestUpdateHealthShared(t *testing.T) {
	w := healthBoards(t, 4)
	p := &PassiveHealth{ConsecutiveFailures: 4, EjectionTime: time.Minute}
	// Four workers each see one failure: the shared record ejects on the fourth.
	var ejected bool
	for _, b := range w {
		b.Update(1, func(s *ServiceHealth) bool { ejected = p.response(s, true, epoch); return ejected })
	}
	if s := w[0].Read(1); !ejected || s.Selectable(epoch) {
		t.Errorf("after 4 failures across workers: ejected %v, record %+v", ejected, s)
	}
}

// TestHealthCheckVerdict: a probe passes on an expected status and, with
// expectBody, only when the first MaxHealthBodyBytes of its body hold the text.
func TestHealthCheckVerdict(t *testing.T) {
	far := append(bytes.Repeat([]byte("x"), MaxHealthBodyBytes), "Status=running"...)
	edge := append(bytes.Repeat([]byte("x"), MaxHealthBodyBytes-len("Status=running")), "Status=running"...)
	tests := []struct {
		name   string
		config string
		status int
		body   []byte
		want   bool
	}{
		{name: "status only", config: `{}`, status: 200, want: true},
		{name: "status outside the set", config: `{}`, status: 503, want: false},
		{name: "no response", config: `{}`, status: 0, want: false},
		{name: "body holds the text", config: `{"expectBody":"Status=running"}`, status: 200, body: []byte("app: Status=running\n"), want: true},
		{name: "body lacks the text", config: `{"expectBody":"Status=running"}`, status: 200, body: []byte("Status=stopped"), want: false},
		{name: "empty body", config: `{"expectBody":"ok"}`, status: 200, want: false},
		{name: "case matters", config: `{"expectBody":"OK"}`, status: 200, body: []byte("ok"), want: false},
		{name: "text ends at the bound", config: `{"expectBody":"Status=running"}`, status: 200, body: edge, want: true},
		{name: "text past the bound", config: `{"expectBody":"Status=running"}`, status: 200, body: far, want: false},
		{name: "text but a bad status", config: `{"expectBody":"ok","expectedStatuses":"200"}`, status: 500, body: []byte("ok"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(`{"healthCheck":` + tt.config + `,"services":[{"name":"a","address":"10.0.0.1:80"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.HealthCheck.Healthy(tt.status, tt.body); got != tt.want {
				t.Errorf("Healthy(%d, %d bytes) with %s = %v, want %v", tt.status, len(tt.body), tt.config, got, tt.want)
			}
		})
	}
}

// TestHealthCheckProbeTarget: port replaces the service's port in the
// address probed (IPv4 and IPv6); host replaces the :authority.
func TestHealthCheckProbeTarget(t *testing.T) {
	tests := []struct {
		name, config, addr   string
		wantAddr, wantAuthor string
	}{
		{name: "defaults", config: `{}`, addr: "10.0.0.1:80", wantAddr: "10.0.0.1:80", wantAuthor: "10.0.0.1:80"},
		{name: "port", config: `{"port":8585}`, addr: "10.0.0.1:80", wantAddr: "10.0.0.1:8585", wantAuthor: "10.0.0.1:8585"},
		{name: "port on IPv6", config: `{"port":8585}`, addr: "[2001:db8::2]:443", wantAddr: "[2001:db8::2]:8585", wantAuthor: "[2001:db8::2]:8585"},
		{name: "host", config: `{"host":"app.example.com"}`, addr: "10.0.0.1:80", wantAddr: "10.0.0.1:80", wantAuthor: "app.example.com"},
		{name: "host and port", config: `{"host":"app.example.com:8443","port":9000}`, addr: "10.0.0.1:80", wantAddr: "10.0.0.1:9000", wantAuthor: "app.example.com:8443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(`{"healthCheck":` + tt.config + `,"services":[{"name":"a","address":"` + tt.addr + `"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.HealthCheck.ProbeAddress(tt.addr); got != tt.wantAddr {
				t.Errorf("ProbeAddress(%s) = %s, want %s", tt.addr, got, tt.wantAddr)
			}
			if got := c.HealthCheck.ProbeAuthority(tt.addr); got != tt.wantAuthor {
				t.Errorf("ProbeAuthority(%s) = %s, want %s", tt.addr, got, tt.wantAuthor)
			}
		})
	}
}

// TestRoundDue: a round is due from half a tick before its time, so a host
// whose ticks come a little early probes every interval, not every interval
// plus one tick; a tick more than half a period early waits.
func TestRoundDue(t *testing.T) {
	next := time.Unix(100, 0)
	for _, tt := range []struct {
		at   time.Duration // from next
		want bool
	}{
		{-time.Millisecond, true},
		{-500 * time.Millisecond, true},
		{-501 * time.Millisecond, false},
		{-999 * time.Millisecond, false},
		{0, true},
		{3 * time.Second, true},
	} {
		if got := RoundDue(next.Add(tt.at), next, time.Second); got != tt.want {
			t.Errorf("RoundDue(next%+v, next, 1s) = %v, want %v", tt.at, got, tt.want)
		}
	}
	// Ticks 1 ms early every second, interval 5 s: a round every 5 ticks.
	var rounds []int
	due := next
	for i := 0; i < 20; i++ {
		now := next.Add(time.Duration(i)*time.Second - time.Millisecond)
		if RoundDue(now, due, time.Second) {
			rounds = append(rounds, i)
			due = now.Add(5 * time.Second)
		}
	}
	if want := []int{0, 5, 10, 15}; !slices.Equal(rounds, want) {
		t.Errorf("rounds at ticks %v, want %v", rounds, want)
	}
}
