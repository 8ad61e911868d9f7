package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// TestHealthLogsSayWhatChanged: a service ejected by passive health, then
// DOWN and UP again by active checks while the ejection still runs, is
// logged as what happened: "passed its health checks; not selectable yet",
// not as a new ejection, and the end of the ejection is logged once, by one
// worker, as "is UP: ejection ended". (Before, the active recovery was
// logged as "ejected for 30s after 2 failed responses" and the end of an
// ejection never.)
func TestHealthLogsSayWhatChanged(t *testing.T) {
	var mu sync.Mutex
	failing := false
	handler := func(r *hostsim.CallRequest) (*hostsim.CallResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		status := "200"
		if failing && r.Header("x-envoy-original-dst-host") == "10.0.0.2:80" {
			status = "503"
		}
		return &hostsim.CallResponse{Headers: [][2]string{{":status", status}}}, nil
	}
	cfg := `{"lbMethod":"URLHASH",
		"healthCheck":{"interval":"1s","timeout":"500ms","unhealthyThreshold":1,"healthyThreshold":1,"cluster":"backends"},
		"passiveHealth":{"consecutiveFailures":2,"ejectionTime":"30s"},
		"services":[{"name":"a","address":"10.0.0.1:80"},{"name":"b","address":"10.0.0.2:80"},{"name":"c","address":"10.0.0.3:80"}]}`
	h := moduleHost(t, hostsim.Config{Workers: 2, PluginConfig: []byte(cfg), HTTPCall: handler})

	// Two failed responses from b eject it.
	for k, failed := 0, 0; failed < 2 && k < 1000; k++ {
		s := h.Stream(0)
		res := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", fmt.Sprintf("/k/%d", k)}, {":authority", "h"}}, nil)
		status := "200"
		if name, _ := res.Header("x-hashlb-service"); name == "b" {
			status, failed = "502", failed+1
		}
		s.ResponseHeaders([][2]string{{":status", status}})
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	failing = true
	mu.Unlock()
	h.Advance(2 * time.Second) // b fails a probe: DOWN
	mu.Lock()
	failing = false
	mu.Unlock()
	h.Advance(2 * time.Second) // b passes a probe: UP by active checks, still ejected
	h.Advance(30 * time.Second)
	h.Advance(2 * time.Second) // the ejection has ended

	var lines []string
	for _, l := range h.LogsAt(hostsim.LogInfo) {
		if strings.Contains(l, "service b ") {
			lines = append(lines, l)
		}
	}
	want := []string{
		"ejected for 30s after 2 failed responses",
		"is DOWN: 1 failed health checks",
		"passed its health checks; not selectable yet: still ejected for",
		"is UP: ejection ended",
	}
	if len(lines) != len(want) {
		t.Fatalf("b's health log lines:\n%s\nwant %d lines, in order, containing %q", strings.Join(lines, "\n"), len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("log line %d = %q, want it to contain %q", i, lines[i], w)
		}
	}
	if name := route(t, h, 1, "/k/0"); name == "" {
		t.Error("no service after b came back")
	}
}
