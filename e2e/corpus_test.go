package e2e

// The same request corpus through the compiled module under every host we
// have: hostsim with 1 and 4 workers under both import profiles, and the
// SDK's own wasm runner (proxytest.NewWasmVMContext), a host we did not
// write. lbcore is the oracle: a hash decision must be exactly lbcore's, and
// the same on every host; a decision that depends on per-worker state or a
// random seed (round robin, least connection, backups) must name configured,
// enabled services. The corpus itself is internal/corpus; e2e/envoy sends it
// through real Envoy (TestCorpusThroughEnvoy).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// corpusServices is the corpus's pool (internal/corpus, shared with the
// real-Envoy tests of e2e/envoy).
const corpusServices = corpus.Services

// corpusConfigs has one configuration per lbMethod, plus persistence and a
// pool with nothing enabled (corpus.Configs).
var corpusConfigs = corpus.Configs

// corpusConfig returns the JSON of corpusConfigs[i]: every config but the
// last is completed with corpusServices and the debug header.
func corpusConfig(i int) []byte { return corpusConfigs[i].Complete(corpusServices) }

// corpusRequest is one request of the corpus (corpus.Request): headers as
// Envoy hands them to a filter (lower-case names) and the connection's
// addresses ("" when the host has no such property).
type corpusRequest struct {
	headers  [][2]string
	src, dst string
}

func (r corpusRequest) shared() corpus.Request {
	return corpus.Request{Headers: r.headers, Source: r.src, Dest: r.dst}
}

func fromShared(rs []corpus.Request) []corpusRequest {
	out := make([]corpusRequest, len(rs))
	for i, r := range rs {
		out[i] = corpusRequest{headers: r.Headers, src: r.Source, dst: r.Dest}
	}
	return out
}

// corpusN returns the n requests of corpus.Requests.
func corpusN(n int) []corpusRequest { return fromShared(corpus.Requests(n)) }

// hostDecision is what one request left behind on a host.
type hostDecision struct {
	upstream []string // every value of x-envoy-original-dst-host after the filter
	service  []string // every value of x-hashlb-service
	status   int      // local reply status, 0 when the request went upstream
	body     string   // local reply body
	debug    string   // x-hashlb-decision on the response
}

func (d hostDecision) outcome() corpus.Outcome {
	return corpus.Outcome{Upstream: d.upstream, Service: d.service, Status: d.status, Body: d.body, Debug: d.debug}
}

func headerValues(headers [][2]string, name string) []string {
	return corpus.HeaderValues(headers, name)
}

func firstOf(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[0]
}

// runOn runs request r as one whole stream on worker w of h and returns
// what the module decided.
func runOn(h *hostsim.Host, w int, r corpusRequest) (hostDecision, error) {
	var d hostDecision
	s := h.Stream(w)
	props := map[string][]byte{}
	if r.src != "" {
		props["source.address"] = hostsim.PropString(r.src)
	}
	if r.dst != "" {
		props["destination.address"] = hostsim.PropString(r.dst)
	}
	res := s.RequestHeaders(r.headers, props)
	if res.Err != nil {
		return d, fmt.Errorf("VM error: %w", res.Err)
	}
	if l := res.LocalReply; l != nil {
		d.status, d.body = l.Status, string(l.Body)
		d.debug, _ = l.Header("x-hashlb-decision")
	} else {
		d.upstream = headerValues(res.Headers, "x-envoy-original-dst-host")
		d.service = headerValues(res.Headers, "x-hashlb-service")
		resp := s.ResponseHeaders([][2]string{{":status", "200"}})
		if resp.Err != nil {
			return d, fmt.Errorf("response headers: %w", resp.Err)
		}
		d.debug, _ = resp.Header("x-hashlb-decision")
	}
	return d, s.Finish()
}

// runHostsim runs the corpus through hostsim, requests spread round robin
// over the workers, each a whole stream.
func runHostsim(wasm, config []byte, workers int, profile string, reqs []corpusRequest) ([]hostDecision, error) {
	ctx := context.Background()
	h, err := hostsim.New(ctx, wasm, hostsim.Config{Workers: workers, Profile: profile, PluginConfig: config, LogLevel: hostsim.LogWarn})
	if err != nil {
		return nil, fmt.Errorf("hostsim.New: %w", err)
	}
	defer h.Close(ctx)
	out := make([]hostDecision, len(reqs))
	for i, r := range reqs {
		if out[i], err = runOn(h, i%workers, r); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	for w := 0; w < workers; w++ {
		if err := h.Err(w); err != nil {
			return nil, fmt.Errorf("worker %d died: %w", w, err)
		}
	}
	return out, nil
}

// runProxytest runs the corpus through the SDK's wasm runner on vm, with a
// new emulator (and so a new plugin context) for config, as Envoy reuses a
// VM when only the plugin configuration changes. The emulator is global, so
// this holds it only for the duration of the call. It refuses an empty
// property and cannot remove one, so an absent address is given as "-",
// which the module reads as no address, as it does an absent one.
func runProxytest(vm proxytest.WasmVMContext, config []byte, reqs []corpusRequest) ([]hostDecision, error) {
	h, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(vm).WithPluginConfiguration(config))
	defer reset()
	if st := h.StartVM(); st != types.OnVMStartStatusOK {
		return nil, fmt.Errorf("StartVM = %v", st)
	}
	if st := h.StartPlugin(); st != types.OnPluginStartStatusOK {
		return nil, fmt.Errorf("StartPlugin = %v", st)
	}
	out := make([]hostDecision, len(reqs))
	for i, r := range reqs {
		for _, p := range []struct {
			path []string
			val  string
		}{{[]string{"source", "address"}, r.src}, {[]string{"destination", "address"}, r.dst}} {
			if p.val == "" {
				p.val = "-"
			}
			if err := h.SetProperty(p.path, []byte(p.val)); err != nil {
				return nil, err
			}
		}
		id := h.InitializeHttpContext()
		h.CallOnRequestHeaders(id, withoutSteering(r.headers), true)
		d := &out[i]
		if l := h.GetSentLocalResponse(id); l != nil {
			d.status, d.body = int(l.StatusCode), string(l.Data)
		} else {
			hs := h.GetCurrentRequestHeaders(id)
			d.upstream = headerValues(hs, "x-envoy-original-dst-host")
			d.service = headerValues(hs, "x-hashlb-service")
			h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
			d.debug = firstOf(headerValues(h.GetCurrentResponseHeaders(id), "x-hashlb-decision"))
		}
		h.CompleteHttpContext(id)
	}
	return out, nil
}

// briefHeaders formats headers for a failure message, long values clipped.
func briefHeaders(headers [][2]string) string { return corpus.Brief(headers) }

// oracleDecision is lbcore's decision for r (corpus.Oracle).
func oracleDecision(b *lbcore.Balancer, r corpusRequest) lbcore.Decision {
	return corpus.Oracle(b, r.shared())
}

// checkDecision compares what a host did with lbcore's decision want
// (corpus.Check).
func checkDecision(c *lbcore.Config, want lbcore.Decision, persist bool, got hostDecision) error {
	return corpus.Check(c, want, persist, got.outcome())
}

func TestCorpusSameDecisionsOnEveryHost(t *testing.T) {
	wasm := module(t)
	reqs := asEnvoyDecodes(corpusN(300))
	vm, err := proxytest.NewWasmVMContext(wasm)
	if err != nil {
		t.Fatalf("NewWasmVMContext: %v", err)
	}
	t.Cleanup(func() { vm.Close() })
	// Compile once into hostsim's cache before four hosts start at once.
	if _, err := runHostsim(wasm, corpusConfig(0), 1, hostsim.ProfileEnvoy133, nil); err != nil {
		t.Fatal(err)
	}
	type hostRun struct {
		name string
		run  func(config []byte) ([]hostDecision, error)
	}
	var hosts []hostRun
	for _, prof := range hostsim.Profiles() {
		for _, workers := range []int{1, 4} {
			hosts = append(hosts, hostRun{fmt.Sprintf("hostsim/%s/workers=%d", prof, workers), func(config []byte) ([]hostDecision, error) {
				return runHostsim(wasm, config, workers, prof, reqs)
			}})
		}
	}
	// The SDK's emulator is global: proxytest runs on this goroutine, the
	// hostsim runs beside it.
	hosts = append(hosts, hostRun{"proxytest", func(config []byte) ([]hostDecision, error) {
		return runProxytest(vm, config, reqs)
	}})

	for ci, cc := range corpusConfigs {
		t.Run(cc.Name, func(t *testing.T) {
			config := corpusConfig(ci)
			c, err := lbcore.ParseConfig(config)
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			b := lbcore.NewBalancer(c, 0)
			want := make([]lbcore.Decision, len(reqs))
			reasons := map[string]int{}
			for i, r := range reqs {
				want[i] = oracleDecision(b, r)
				reasons[want[i].Reason.String()]++
			}
			t.Logf("lbcore reasons over %d requests: %v", len(reqs), reasons)
			if c.LBMethod.IsHash() && !cc.Whole && (reasons["hash"] == 0 || reasons["backup"] == 0) {
				t.Fatalf("corpus does not exercise both %s and its fallback: %v", c.LBMethod, reasons)
			}

			got := make([][]hostDecision, len(hosts))
			errs := make([]error, len(hosts))
			var wg sync.WaitGroup
			for hi := range hosts[:len(hosts)-1] {
				wg.Go(func() { got[hi], errs[hi] = hosts[hi].run(config) })
			}
			last := len(hosts) - 1
			got[last], errs[last] = hosts[last].run(config)
			wg.Wait()

			for hi, host := range hosts {
				if errs[hi] != nil {
					t.Errorf("%s: %v", host.name, errs[hi])
					continue
				}
				bad := 0
				for i := range reqs {
					err := checkDecision(c, want[i], cc.Persist, got[hi][i])
					// Beyond lbcore: every host agrees on hash decisions.
					if ref := got[0]; err == nil && ref != nil && want[i].Reason == lbcore.ReasonHash &&
						(firstOf(got[hi][i].upstream) != firstOf(ref[i].upstream) || firstOf(got[hi][i].service) != firstOf(ref[i].service)) {
						err = fmt.Errorf("%q/%q, %s: %q/%q", got[hi][i].upstream, got[hi][i].service, hosts[0].name, ref[i].upstream, ref[i].service)
					}
					if err != nil {
						if bad++; bad <= 5 {
							t.Errorf("%s: request %d %s src=%q dst=%q: %v", host.name, i, briefHeaders(reqs[i].headers), reqs[i].src, reqs[i].dst, err)
						}
					}
				}
				if bad > 0 {
					t.Errorf("%s: %d of %d requests differ", host.name, bad, len(reqs))
				}
			}
		})
	}
}

// asEnvoyDecodes gives each request as Envoy's HTTP/1 codec hands it to a
// filter (corpus.AsEnvoyDecodes).
func asEnvoyDecodes(reqs []corpusRequest) []corpusRequest {
	rs := make([]corpus.Request, len(reqs))
	for i, r := range reqs {
		rs[i] = r.shared()
	}
	return fromShared(corpus.AsEnvoyDecodes(rs))
}

// withoutSteering drops the client's copies of hashlb's two headers. The SDK
// emulator's replace changes only the first copy, where Envoy's (setCopy)
// removes every copy and adds one (docs/envoy-host.md), so under the
// emulator the copies would outlive the replace; that the module leaves none
// is checked under hostsim and V8 (TestHostCallsPerRequest, TestV8).
func withoutSteering(headers [][2]string) [][2]string {
	var out [][2]string
	for _, kv := range headers {
		if !strings.EqualFold(kv[0], "x-envoy-original-dst-host") && !strings.EqualFold(kv[0], "x-hashlb-service") {
			out = append(out, kv)
		}
	}
	return out
}
