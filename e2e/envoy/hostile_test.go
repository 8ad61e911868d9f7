package envoy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/hostile"
	"github.com/hashlb/hashlb/lbcore"
)

// hostileRichPlugin reads every input the corpus attacks: JWT claims,
// cookies, x-forwarded-for, a quadratic-prone replace(), the host.
const hostileRichPlugin = `"lbMethod": "TOKEN",
  "debugHeader": true,
  "trustedForwardedHops": 1,
  "hashBalanceFactor": 150,
  "token": "${request.header.authorization | jwt(\"sub\") || request.cookie.session | jwt(\"sub\") || request.header.x-client-id | lower | prefix(64)}",
  "persistence": {"keys": ["${request.url | replace(\"a.*b|a\", \"x\")}", "${request.cookie.session | hash}",
    "${client.ip | mask(24)}", "${request.host || sip.callid}"], "tableSize": 10000, "expire": "10m"},
  "passiveHealth": {}`

// hostileLimitPlugin is the members (for rigConfig) of the costliest
// replace() configuration lbcore accepts (as e2e/v8_test.go's
// limit-replace): MaxExprFuncs replace() calls of a large program over the
// URL, in the token and in 8 persistence keys.
func hostileLimitPlugin() string {
	bigRE := strings.Repeat("[a-z]{0,50}", 5)
	expr := func(pattern, with string) string {
		var b strings.Builder
		b.WriteString("${request.url")
		for range lbcore.MaxExprFuncs {
			fmt.Fprintf(&b, " | replace(%q, %q)", pattern, with)
		}
		b.WriteString("}")
		return b.String()
	}
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var keys []string
	for i := range 8 {
		keys = append(keys, q(expr(fmt.Sprintf("%s%d", bigRE, i), "-")))
	}
	return `"lbMethod": "TOKEN",
  "token": ` + q(expr(bigRE+"x", "$0$0")) + `,
  "persistence": {"keys": [` + strings.Join(keys, ", ") + `], "tableSize": 10000, "expire": "10m"}`
}

// msPerRequestBound is SECURITY.md's bound: each hostile request under
// 10 ms of the module's CPU, a figure the bench holds (docs/performance.md,
// "V8 module CPU per request"). Here Envoy's whole process CPU (parsing,
// proxying, the backend's answer through Envoy, the module) per request,
// averaged per class, is logged against it, and the test fails at
// msPerRequestGross: a CPU time per request grows when other processes
// share the cores (caches, frequency), while what the bound guards against
// (an input whose cost is unbounded) costs tens to thousands of times more.
const (
	msPerRequestBound = 10.0
	msPerRequestGross = 5 * msPerRequestBound
)

// TestEnvoyHostileCorpus sends internal/hostile's corpus (and the benign
// one) through real Envoy, over raw HTTP/1.1 (each request on its own
// connection, bytes as the corpus has them), with two configurations: one
// that reads every attacked input and the costliest replace() one. Asserted:
// every request gets an HTTP answer (the backend's 200, or Envoy's own
// 400/431 for what its codec refuses before any filter, or hashlb's 503),
// no VM failure (no wasm trap or failed callback in the log, hashlb's
// internal_error 0, Envoy's wasm VM stats unchanged), and Envoy's CPU per
// request within five times SECURITY.md's 10 ms, per class (msPerRequestBound).
func TestEnvoyHostileCorpus(t *testing.T) {
	t.Parallel()
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		hostileRun(t, bin)
	})
}

// hostileRun starts one Envoy with two listeners, envoy.yaml's with
// hostileRichPlugin and a copy with hostileLimitPlugin (its own vm_id and
// plugin name), both with Envoy's codec limits raised to their maximum
// (raiseLimits), so that as much of the corpus as HTTP/1.1 can carry
// reaches the filter (SECURITY.md: the default 60 KiB "can be raised to
// 8 MiB"; the caps must hold whatever the host allows), and sends the
// corpora through each.
func hostileRun(t *testing.T, bin envoyrun.Binary) {
	var bs []*envoyrun.Backend
	r := startRig(t, bin, hostileRichPlugin, func(b []*envoyrun.Backend) { bs = b }, func(b *bootstrap) {
		p := shippedPlugin(rigConfig(hostileLimitPlugin(), bs))
		p.Name, p.GetVmConfig().VmId = "hashlb_limit", "hashlb_limit"
		b.other = append(b.other, shippedListener(t, "hashlb_listener_limit", loopback[0], p))
		for _, l := range b.other {
			editHCM(t, l, raiseLimits)
		}
	})
	if len(pluginConfigs(t, r.yaml)) != 2 {
		t.Fatal("want two hashlb configurations")
	}
	before, err := r.e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct{ name, listener string }{{"rich", "hashlb_listener"}, {"limit-replace", "hashlb_listener_limit"}} {
		corpusThrough(t, r, l.name, r.e.MustListener(t, l.listener))
	}
	vmHealthy(t, r, before)
}

// corpusThrough sends the hostile and benign corpora to addr, class by
// class, and checks and logs what Envoy answered and the CPU it used.
func corpusThrough(t *testing.T, r *rig, label, addr string) {
	bad := hostile.Requests()
	byClass := map[string][]hostile.Request{}
	classes := append(hostile.Classes(), "benign")
	for _, q := range bad {
		byClass[q.Class] = append(byClass[q.Class], q)
	}
	byClass["benign"] = hostile.Benign()

	type tally struct {
		n, unsendable int
		status        map[int]int
		cpu           time.Duration
	}
	tallies := map[string]*tally{}
	var sent int
	var cpuAll time.Duration
	rejected := map[string]int{} // 400s by class and method
	for _, class := range classes {
		tl := &tally{status: map[int]int{}}
		tallies[class] = tl
		cpu0, err := r.e.CPUTime()
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range byClass[class] {
			raw, ok := rawHTTP1(q)
			if !ok {
				tl.unsendable++
				continue
			}
			tl.n++
			st, err := sendRaw(addr, raw)
			if err != nil {
				t.Errorf("%s: %s: no answer: %v", class, describeHostile(q), err)
				continue
			}
			tl.status[st]++
			if st == 400 {
				rejected[fmt.Sprintf("%s %.12q", class, strings.SplitN(string(raw), " ", 2)[0])]++
			}
			switch st {
			// 404: the router found no route for an absolute-form target
			// without a path ("http://evil.example?user=a/b"). 403: an
			// https:// absolute-form target on a plaintext connection, which
			// Envoy refuses itself behind use_remote_address: true
			// (details http1.https_url_on_plaintext_connection).
			case 200, 400, 403, 404, 431, 503:
			default:
				t.Errorf("%s: %s: status %d", class, describeHostile(q), st)
			}
		}
		cpu1, _ := r.e.CPUTime()
		tl.cpu = cpu1 - cpu0
		cpuAll += tl.cpu
		sent += tl.n
	}
	var lines []string
	for _, class := range classes {
		tl := tallies[class]
		per := 0.0
		if tl.n > 0 {
			per = float64(tl.cpu) / float64(time.Millisecond) / float64(tl.n)
		}
		var sts []string
		for _, s := range sortedKeys(tl.status) {
			sts = append(sts, fmt.Sprintf("%d×%d", tl.status[s], s))
		}
		lines = append(lines, fmt.Sprintf("%-18s sent %3d (unsendable in HTTP/1.1 %d): %s; Envoy CPU %.2f ms/request", class, tl.n, tl.unsendable, strings.Join(sts, " "), per))
		// The CPU clock ticks in 10 ms: a class's mean is only meaningful
		// over its total, and the total may be a tick more than was used
		// (the bound is held to the least the total can mean).
		least := float64(tl.cpu-10*time.Millisecond) / float64(time.Millisecond) / float64(max(tl.n, 1))
		if tl.n > 0 && tl.cpu > 20*time.Millisecond && least > msPerRequestBound {
			report := t.Logf
			if least > msPerRequestGross {
				report = t.Errorf
			}
			report("%s: Envoy used %.2f ms of CPU per request, over SECURITY.md's %v ms (the test fails over %v ms; the bench holds the bound)", class, per, msPerRequestBound, msPerRequestGross)
		}
	}
	t.Logf("%s: Envoy's 400s by class and method: %v", label, rejected)
	t.Logf("%s: hostile corpus through Envoy %s (%d sent, %v CPU, %.2f ms/request):\n%s", label, r.e.Bin.Version, sent, cpuAll, float64(cpuAll)/float64(time.Millisecond)/float64(sent), strings.Join(lines, "\n"))

	p := "/after/hostile"
	if code, got, _ := r.get(t, p); code != 200 || got == "" {
		t.Errorf("after the corpus: GET %s: %d from %q", p, code, got)
	}
}

// vmHealthy checks that no VM failed: nothing in the log, no internal
// error, Envoy's wasm stats of failures and reloads unchanged.
func vmHealthy(t *testing.T, r *rig, before map[string]int64) {
	log := r.e.Log()
	for _, bad := range []string{"wasm trap", "Function: proxy_on", "failed: Uncaught", "RangeError", "panic:", "VM failed", "Wasm VM failed"} {
		if strings.Contains(log, bad) {
			i := strings.Index(log, bad)
			t.Errorf("Envoy's log has %q: %s", bad, log[max(0, i-200):min(len(log), i+300)])
		}
	}
	after, err := r.e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if n := after["wasmcustom.hashlb.internal_error"]; n != 0 {
		t.Errorf("hashlb.internal_error = %d", n)
	}
	var wasmStats []string
	for name, v := range after {
		if strings.HasPrefix(name, "wasm.") {
			wasmStats = append(wasmStats, fmt.Sprintf("%s %d→%d", name, before[name], v))
			if (strings.Contains(name, "fail") || strings.Contains(name, "reload") || strings.Contains(name, "crash")) && v != before[name] {
				t.Errorf("Envoy stat %s went from %d to %d", name, before[name], v)
			}
			if strings.HasSuffix(name, ".active") && v != before[name] {
				t.Errorf("Envoy stat %s went from %d to %d: a VM was replaced", name, before[name], v)
			}
		}
	}
	sort.Strings(wasmStats)
	t.Logf("Envoy's wasm stats: %s", strings.Join(wasmStats, ", "))
}

func sortedKeys(m map[int]int) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}

func describeHostile(q hostile.Request) string {
	n := 0
	path := ""
	for _, h := range q.Headers {
		n += len(h[0]) + len(h[1])
		if h[0] == ":path" && path == "" {
			path = h[1]
		}
	}
	if len(path) > 60 {
		path = path[:60] + "…"
	}
	return fmt.Sprintf("%q (%d header lines, %d bytes)", path, len(q.Headers), n)
}

// rawHTTP1 writes a corpus request as HTTP/1.1 bytes: :method and :path make
// the request line, :authority the Host line, the rest header lines as they
// are, in order (invalid bytes included: Envoy's codec judges them). A
// request without :method or :path has no HTTP/1.1 form.
func rawHTTP1(q hostile.Request) ([]byte, bool) {
	var method, path, authority string
	var haveM, haveP, haveA bool
	var b strings.Builder
	for _, h := range q.Headers {
		switch h[0] {
		case ":method":
			if !haveM {
				method, haveM = h[1], true
			}
			continue
		case ":path":
			if !haveP {
				path, haveP = h[1], true
			}
			continue
		case ":authority":
			if !haveA {
				authority, haveA = h[1], true
			}
			continue
		case ":scheme":
			continue
		}
		if strings.HasPrefix(h[0], ":") {
			continue // a second pseudo-header: HTTP/1.1 has no line for it
		}
		b.WriteString(h[0] + ": " + h[1] + "\r\n")
	}
	if !haveM || !haveP {
		return nil, false
	}
	head := method + " " + path + " HTTP/1.1\r\n"
	if haveA {
		head += "Host: " + authority + "\r\n"
	}
	return []byte(head + b.String() + "Connection: close\r\n\r\n"), true
}

// sendRaw sends one request on a new connection and returns the status of
// the first response.
func sendRaw(addr string, raw []byte) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	// Write in the background: Envoy may answer 431 and close before it
	// has read a 1 MiB request.
	go c.Write(raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
