//go:build !wasip1

package main

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore/fleet"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

var fleetConfig = `{"lbMethod":"LEASTCONNECTION","persistence":{"keys":["${request.header.x-client-id}"],"expire":"` +
	earlyInSlot(time.Now(), wazeroClock) + `",
	"fleet":{"cluster":"etcd","prefix":"/t/"}},` + services + `}`

// wazeroClock is the wall clock the module reads in the wasm runner:
// wazero, unless told otherwise, gives a guest a fake clock that starts
// at 2022-01-01T00:00:00Z and moves a millisecond per read.
var wazeroClock = time.Unix(1640995200, 0)

// earlyInSlot returns an expire (the default 7d, else a whole number of
// hours below it) whose lease slot (fleet.Slot: expire/8, counted from the
// Unix epoch) each of clocks is in the first half of: in a slot's last
// quarter a worker also pre-grants the next slot's lease, a call these
// tests do not script. The native runner reads the wall clock, the wasm
// runner wazero's; some expire suits both (checked by
// TestEarlyInSlotSuitsBothClocks).
func earlyInSlot(clocks ...time.Time) string {
	for h := 7 * 24; h >= 24; h-- {
		slot := int64(fleet.Slot(time.Duration(h)*time.Hour) / time.Second)
		early := true
		for _, c := range clocks {
			early = early && c.Unix()%slot < slot/2
		}
		if early {
			if h%24 == 0 {
				return strconv.Itoa(h/24) + "d"
			}
			return strconv.Itoa(h) + "h"
		}
	}
	return ""
}

// TestEarlyInSlotSuitsBothClocks: for every wall-clock time of the next
// ten years there is an expire early in its slot and in wazero's, so
// fleetConfig never falls back to a slot's last quarter.
func TestEarlyInSlotSuitsBothClocks(t *testing.T) {
	start := time.Now()
	for d := time.Duration(0); d < 10*365*24*time.Hour; d += 17 * time.Minute {
		if earlyInSlot(start.Add(d), wazeroClock) == "" {
			t.Fatalf("no expire is early in its slot at %v and at %v", start.Add(d), wazeroClock)
		}
	}
	// 7d's slot is 75,600 s: a time nine tenths into one gets another expire.
	if got := earlyInSlot(time.Unix(21706*75600+68040, 0)); got == "7d" || got == "" {
		t.Errorf("late in 7d's slot: expire %q, want another", got)
	}
}

// fleetOpen sends the request headers of a request with x-client-id id and
// returns its context id and the action.
func (h *host) fleetOpen(id string) (uint32, types.Action) {
	ctx := h.InitializeHttpContext()
	act := h.CallOnRequestHeaders(ctx, [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "lb"},
		{"x-client-id", id}}, true)
	return ctx, act
}

// callouts are the fleet calls pending for stream ctx: the emulators list a
// call under the context that was active when it was made, the stream or,
// for the calls an answer leads to, the root context (a host makes every
// call on the root context).
func (h *host) callouts(ctx uint32) []proxytest.HttpCalloutAttribute {
	calls := slices.Clone(h.GetCalloutAttributesFromContext(ctx))
	calls = append(calls, h.GetCalloutAttributesFromContext(proxytest.PluginContextID)...)
	slices.SortFunc(calls, func(a, b proxytest.HttpCalloutAttribute) int { return cmp.Compare(a.CalloutID, b.CalloutID) })
	return calls
}

// answer answers the oldest callout of context ctx with status and body,
// and returns its :path; status 0 delivers a failed call (no headers).
func (h *host) answer(ctx uint32, status string, body string) string {
	h.t.Helper()
	calls := h.callouts(ctx)
	if len(calls) == 0 {
		h.t.Fatalf("context %d has no callout to answer", ctx)
	}
	c := calls[0]
	if c.Upstream != "etcd" {
		h.t.Errorf("callout to cluster %q, want etcd", c.Upstream)
	}
	path := ""
	for _, kv := range c.Headers {
		if kv[0] == ":path" {
			path = strings.Clone(kv[1]) // the wasm runner's views of the module's buffers, which the answer's calls reuse
		}
	}
	if status == "" {
		h.CallOnHttpCallResponse(c.CalloutID, nil, nil, nil)
	} else {
		h.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", status}}, nil, []byte(body))
	}
	return path
}

// TestFleetRequestPath: a miss pauses and asks etcd (lease, then the
// transaction); the stored service wins and the request resumes with it; a
// local hit then never asks; a failed etcd leaves requests decided locally,
// and after three failures in a row the worker stops asking (backoff).
func TestFleetRequestPath(t *testing.T) {
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, fleetConfig)
		ctx, act := h.fleetOpen("ada")
		if act != types.ActionPause {
			t.Fatalf("a new key: action %v, want Pause while etcd answers", act)
		}
		if p := h.answer(ctx, "200", `{"header":{"revision":"2"},"ID":"77","TTL":"700000"}`); p != "/v3/lease/grant" {
			t.Fatalf("first call %s, want /v3/lease/grant", p)
		}
		// Another proxy stored service c first: the answer is the range of the
		// failure branch. (Stamped in 2100: alive whatever the runner's clock says.)
		val := base64.StdEncoding.EncodeToString([]byte("4102444800 10.0.0.3:8080"))
		calls := h.callouts(ctx)
		if len(calls) != 1 || !strings.Contains(string(calls[0].Body), `"create_revision":"0"`) || !strings.Contains(string(calls[0].Body), `"lease":"77"`) {
			t.Fatalf("second call %+v, want the create-or-read transaction on lease 77", calls)
		}
		if p := h.answer(ctx, "200", `{"header":{"revision":"9"},"responses":[{"response_range":{"kvs":[{"mod_revision":"5","value":"`+val+`"}]}}]}`); p != "/v3/kv/txn" {
			t.Fatalf("second call %s, want /v3/kv/txn", p)
		}
		if got := get(h.GetCurrentRequestHeaders(ctx), "x-envoy-original-dst-host"); len(got) != 1 || got[0] != "10.0.0.3:8080" {
			t.Errorf("after etcd's answer: upstream %v, want the stored service 10.0.0.3:8080", got)
		}
		if a := h.GetCurrentHttpStreamAction(ctx); a != types.ActionContinue {
			t.Errorf("after etcd's answer the request is %v, want resumed (Continue)", a)
		}
		h.CompleteHttpContext(ctx)
		if n := h.counter("hashlb.persistence_fleet_hit"); n != 1 {
			t.Errorf("persistence_fleet_hit = %d, want 1", n)
		}

		// A local hit: no wait, no call.
		ctx, act = h.fleetOpen("ada")
		if act != types.ActionContinue || len(h.callouts(ctx)) != 0 {
			t.Fatalf("the same key again: action %v with %d callouts, want a local hit", act, len(h.callouts(ctx)))
		}
		if got := get(h.GetCurrentRequestHeaders(ctx), "x-hashlb-service"); len(got) != 1 || got[0] != "c" {
			t.Errorf("local hit: service %v, want c", got)
		}
		h.CompleteHttpContext(ctx)

		// etcd fails three times: each request is decided locally; then
		// the fourth new key does not ask at all.
		for i, id := range []string{"b1", "b2", "b3"} {
			ctx, act := h.fleetOpen(id)
			if act != types.ActionPause {
				t.Fatalf("new key %s: action %v, want Pause", id, act)
			}
			h.answer(ctx, "", "")
			if got := get(h.GetCurrentRequestHeaders(ctx), "x-hashlb-service"); len(got) != 1 || h.GetCurrentHttpStreamAction(ctx) != types.ActionContinue {
				t.Errorf("failure %d: request %v with service %v, want decided locally and resumed", i+1, h.GetCurrentHttpStreamAction(ctx), got)
			}
			h.CompleteHttpContext(ctx)
		}
		ctx, act = h.fleetOpen("b4")
		if act != types.ActionContinue || len(h.callouts(ctx)) != 0 {
			t.Errorf("after 3 failures: action %v with %d callouts, want decided locally without asking (backoff)", act, len(h.callouts(ctx)))
		}
		h.CompleteHttpContext(ctx)
		if n := h.counter("hashlb.persistence_fleet_skipped"); n != 1 {
			t.Errorf("persistence_fleet_skipped = %d, want 1", n)
		}
		if n := h.counter("hashlb.persistence_fleet_error") + h.counter("hashlb.persistence_fleet_timeout"); n != 3 {
			t.Errorf("persistence_fleet_error + _timeout = %d, want 3", n)
		}
		if logs := strings.Join(h.GetWarnLogs(), "\n"); !strings.Contains(logs, `fleet: etcd on cluster "etcd" failed 3 times in a row`) {
			t.Errorf("warn logs %q, want one line saying etcd failed 3 times", logs)
		}
	})
}

// TestFleetReplacesStaleEntry: an entry past its expiry, or not a record,
// is replaced with a compare on its mod_revision (so that two proxies
// cannot move it to two places), and the request goes to the proposal once
// the replace succeeded.
func TestFleetReplacesStaleEntry(t *testing.T) {
	for _, tt := range []struct{ name, record string }{
		{"expired", "1 10.0.0.3:8080"},
		{"malformed", "garbage"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			eachRunner(t, func(t *testing.T, newHost newHostFunc) {
				h := newHost(t, fleetConfig)
				ctx, _ := h.fleetOpen("ada")
				h.answer(ctx, "200", `{"ID":"77","TTL":"700000"}`)
				val := base64.StdEncoding.EncodeToString([]byte(tt.record))
				h.answer(ctx, "200", `{"header":{"revision":"9"},"responses":[{"response_range":{"kvs":[{"mod_revision":"5","value":"`+val+`"}]}}]}`)
				calls := h.callouts(ctx)
				if len(calls) != 1 || !strings.Contains(string(calls[0].Body), `"target":"MOD","result":"EQUAL","mod_revision":"5"`) {
					t.Fatalf("after a %s entry: calls %+v, want one replace comparing mod_revision 5", tt.name, calls)
				}
				h.answer(ctx, "200", `{"header":{"revision":"10"},"succeeded":true,"responses":[{"response_put":{}}]}`)
				if got := get(h.GetCurrentRequestHeaders(ctx), "x-hashlb-service"); len(got) != 1 || h.GetCurrentHttpStreamAction(ctx) != types.ActionContinue {
					t.Errorf("after the replace: %v with service %v, want resumed with the proposal", h.GetCurrentHttpStreamAction(ctx), got)
				}
				h.CompleteHttpContext(ctx)
				if n := h.counter("hashlb.persistence_fleet_replaced"); n != 1 {
					t.Errorf("persistence_fleet_replaced = %d, want 1", n)
				}
			})
		})
	}
}

// TestFleetDivertsUnusableEntry: a live entry naming a service this proxy
// cannot use (here: not in its configuration) is left as it is for the
// proxies that can; the request goes to the key's second choice, created
// with the proposal under <key>.alt, and is counted as diverted.
func TestFleetDivertsUnusableEntry(t *testing.T) {
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, fleetConfig)
		ctx, _ := h.fleetOpen("ada")
		h.answer(ctx, "200", `{"ID":"77","TTL":"700000"}`)
		val := base64.StdEncoding.EncodeToString([]byte("4102444800 10.9.9.9:80"))
		h.answer(ctx, "200", `{"header":{"revision":"9"},"responses":[{"response_range":{"kvs":[{"mod_revision":"5","value":"`+val+`"}]}}]}`)
		calls := h.callouts(ctx)
		if len(calls) != 1 || !strings.Contains(string(calls[0].Body), `"target":"CREATE"`) {
			t.Fatalf("after an entry on an unknown service: calls %+v, want one create-if-absent", calls)
		}
		key := gjsonKey(t, calls[0].Body)
		if !strings.HasSuffix(key, fleet.AltSuffix) {
			t.Fatalf("the create is of %q, want the key's second choice (suffix %q)", key, fleet.AltSuffix)
		}
		h.answer(ctx, "200", `{"header":{"revision":"10"},"succeeded":true,"responses":[{"response_put":{}}]}`)
		if got := get(h.GetCurrentRequestHeaders(ctx), "x-hashlb-service"); len(got) != 1 || h.GetCurrentHttpStreamAction(ctx) != types.ActionContinue {
			t.Errorf("after the create: %v with service %v, want resumed with the proposal", h.GetCurrentHttpStreamAction(ctx), got)
		}
		h.CompleteHttpContext(ctx)
		if n, r := h.counter("hashlb.persistence_fleet_diverted"), h.counter("hashlb.persistence_fleet_replaced"); n != 1 || r != 0 {
			t.Errorf("persistence_fleet_diverted = %d, _replaced = %d, want 1 and 0", n, r)
		}
	})
}

// gjsonKey is the etcd key a txn body compares.
func gjsonKey(t *testing.T, body []byte) string {
	t.Helper()
	var txn struct {
		Compare []struct{ Key []byte } `json:"compare"`
	}
	if err := json.Unmarshal(body, &txn); err != nil || len(txn.Compare) == 0 {
		t.Fatalf("txn body %s: %v", body, err)
	}
	return string(txn.Compare[0].Key)
}
