package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// hostileEtcdAnswers are answers no etcd sends but a compromised one, or a
// man in the middle, could send to every proxy of a fleet at once: nested
// 10^4 levels deep (gjson's validator recurses once per level) and 1 MiB
// bodies, with status 200 and 400.
var hostileEtcdAnswers = []struct {
	name   string
	status int
	body   string
}{
	{"[×10^4", 200, strings.Repeat("[", 10000)},
	{"[×10^4, 400", 400, strings.Repeat("[", 10000)},
	{`{"a":×10^4`, 200, strings.Repeat(`{"a":`, 10000)},
	{`{"a":×10^4, 400`, 400, strings.Repeat(`{"a":`, 10000)},
	{"1 MiB value", 200, `{"header":{"revision":"2"},"kvs":[{"value":"` + strings.Repeat("A", 1<<20) + `","mod_revision":"2"}]}`},
	{"1 MiB of spaces, 400", 400, strings.Repeat(" ", 1<<20)},
}

// TestFleetHostileEtcdAnswers: an etcd whose every answer is nested 10^4
// deep or 1 MiB long: no trap, every request decided (locally), each such
// answer a failed call, and the refusal logged once per worker.
func TestFleetHostileEtcdAnswers(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		a := hostileEtcdAnswers[n%len(hostileEtcdAnswers)]
		n++
		served[a.name]++
		mu.Unlock()
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(a.status)
		w.Write([]byte(a.body))
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	const workers = 2
	h := fleetHosts(t, 1, workers, fleetConfig(t, map[string]any{"cluster": "etcd", "timeout": "2s"}, fourServices(), nil),
		addr, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), false)[0]
	for i, id := range keysN("hostile", 60) {
		if _, err := fleetRoundTrip(h, i%workers, id); err != nil {
			t.Fatal(err)
		}
		h.Advance(2 * time.Second) // past any backoff: etcd is asked again
	}
	for w := range workers {
		if err := h.Err(w); err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
	}
	mu.Lock()
	for _, a := range hostileEtcdAnswers {
		if served[a.name] == 0 {
			t.Errorf("etcd never sent the answer %s: the test did not reach it", a.name)
		}
	}
	calls := n
	mu.Unlock()
	failed := persistMetric(h, "hashlb.persistence_fleet_error") + persistMetric(h, "hashlb.persistence_fleet_timeout")
	if failed == 0 {
		t.Errorf("persistence_fleet_error + _timeout = 0 after %d hostile answers, want them counted as failed calls", calls)
	}
	refused := 0
	for _, l := range h.Logs() {
		if strings.Contains(l.Message, "refused unread") {
			refused++
		}
	}
	if refused != workers {
		t.Errorf("%d log lines about refused answers, want one per worker (%d)", refused, workers)
	}
	t.Logf("%d hostile etcd answers; %d transactions failed; %d refusal log lines", calls, failed, refused)
}
