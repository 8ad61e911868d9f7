package envoy

// Session persistence in real Envoy (docs/persistence.md#session-persistence):
// three Envoys of four workers whose VMs share HASHLB_SESSION_KEY
// (vm_config.environment_variables), each with a cookie and a header
// session plugin from ECDS files, over the same four echo backends.
//
// In the newest Envoy (newestEnvoy): sessions bound to the plugin that
// issued them, across key rotation, and never reaching the upstream
// whatever the size of the request's other headers.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

const (
	envoySessionKey = "envoy-e2e-session-key-0123456789abcdef012345"
	// envoySessionClients is how many clients TestSessionEnvoyFleet follows per session type.
	envoySessionClients = 10_000
	// envoySessionAfter is how many of them are followed through the
	// reconfiguration.
	envoySessionAfter = 2500
	// envoySessionConns is how many connections each client pool keeps per
	// Envoy listener: enough that every worker accepts some (the kernel
	// spreads them: 4·(3/4)^48 ≈ 4·10^-6 that one gets none).
	envoySessionConns = 48
)

// sessionPluginConfig is hashlb's configuration of a session test plugin:
// round robin (so that only the session keeps a client on its backend),
// passive health ejecting on one 503, the debug header, and session block s.
func sessionPluginConfig(bs []*envoyrun.Backend, s map[string]any, weights map[string]int, disabled string) []byte {
	var svcs []map[string]any
	for _, b := range bs {
		svc := map[string]any{"name": b.Name, "address": b.Addr}
		if w, ok := weights[b.Name]; ok {
			svc["weight"] = w
		}
		if b.Name == disabled {
			svc["enabled"] = false
		}
		svcs = append(svcs, svc)
	}
	c := map[string]any{"lbMethod": "ROUNDROBIN", "debugHeader": true, "services": svcs, "session": s,
		"passiveHealth": map[string]any{"consecutiveFailures": 1, "ejectionTime": "1h", "failureStatuses": "503"}}
	out, _ := json.Marshal(c)
	return out
}

// sessionECDS is the ECDS file of one session plugin: envoy.yaml's Wasm
// filter with root_id rootID and the VM's environment holding the key.
func sessionECDS(t testing.TB, name, rootID, key string, config []byte) []byte {
	t.Helper()
	p := wasmPlugin(rootID, config)
	p.GetVmConfig().EnvironmentVariables = &wasmv3.EnvironmentVariables{KeyValues: map[string]string{lbcore.SessionKeyEnv: key}}
	return ecdsPlugin(t, name, "", p)
}

// sessionEnvoy is one Envoy of the fleet with its two session listeners.
type sessionEnvoy struct {
	e     *envoyrun.Envoy
	files map[string]string // session type → its ECDS file
	pools map[string][]*http.Client
	addrs map[string]string
}

// sessionTypes are the fleet's two session types; sessionListeners adds
// "permanent", a permanent cookie with an idle timeout.
var (
	sessionTypes     = []string{"cookie", "header"}
	sessionListeners = []string{"cookie", "header", "permanent"}
)

// sessionBlock is the session block of a listener: default name,
// absoluteTimeout 1h; "permanent" is a permanent cookie with idleTimeout 1m.
func sessionBlock(typ string) map[string]any {
	if typ == "permanent" {
		return map[string]any{"type": "cookie", "lifetime": "permanent", "absoluteTimeout": "1h", "idleTimeout": "1m"}
	}
	return map[string]any{"type": typ, "absoluteTimeout": "1h"}
}

// startSessionEnvoys starts n Envoys (in parallel: V8 compiles the module
// in each) with the cookie and header plugins over bs, sharing key.
func startSessionEnvoys(t *testing.T, bin envoyrun.Binary, bs []*envoyrun.Backend, n int, key string) []*sessionEnvoy {
	t.Helper()
	out := make([]*sessionEnvoy, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := t.TempDir()
		se := &sessionEnvoy{files: map[string]string{}, pools: map[string][]*http.Client{}, addrs: map[string]string{}}
		var ls []listenerSpec
		for _, typ := range sessionListeners {
			f := filepath.Join(dir, "ecds", typ+".json")
			writeAtomic(t, f, sessionECDS(t, "hashlb_"+typ, typ, key, sessionPluginConfig(bs, sessionBlock(typ), nil, "")))
			se.files[typ] = f
			ls = append(ls, listenerSpec{name: "session_" + typ, addrs: []string{"127.0.0.1:0"}, ecdsPath: f, ecdsName: "hashlb_" + typ, cluster: "hashlb_upstream"})
		}
		yaml := bootstrap{listeners: ls, clusters: []*cluster{overrideHostCluster(t, "hashlb_upstream", endpoints(bs))}}.yaml(t)
		out[i] = se
		wg.Add(1)
		go func() {
			defer wg.Done()
			se.e, errs[i] = envoyrun.Launch(bin, envoyrun.Options{Bootstrap: yaml, Dir: envoyrun.WorkDir(t), Concurrency: 4, ReadyTimeout: envoyReady})
		}()
	}
	wg.Wait()
	for i, se := range out {
		if se.e != nil {
			t.Cleanup(func() {
				se.e.Stop()
				if t.Failed() {
					t.Logf("envoy %d log (tail):\n%s", i, se.e.LogTail(40))
				}
			})
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, se := range out {
		for _, typ := range sessionListeners {
			se.addrs[typ] = se.e.MustListener(t, "session_"+typ)
			for range envoySessionConns {
				se.pools[typ] = append(se.pools[typ], &http.Client{Timeout: 10 * time.Second,
					Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}})
			}
		}
	}
	return out
}

// sessionAnswer is what one request through Envoy came to.
type sessionAnswer struct {
	backend, reason string
	value           string // the session value the response set, "" for none
	attrs           string // the Set-Cookie attributes after the value
	own             bool   // the backend's own Set-Cookie reached the client
	leaked          bool   // the backend received the session value or its cookie/header
}

// send sends GET /app to listener typ of se over connection c, carrying
// value as the session ("" for none).
func (se *sessionEnvoy) send(typ string, c int, value string) (sessionAnswer, error) {
	req, _ := http.NewRequest("GET", "http://"+se.addrs[typ]+"/app", nil)
	req.Header.Set("Cookie", "theme=dark")
	if value != "" {
		if typ != "header" {
			req.Header.Set("Cookie", "theme=dark; hashlb-session="+value+"; lang=en")
		} else {
			req.Header.Set("hashlb-session", value)
		}
	}
	resp, err := se.pools[typ][c%len(se.pools[typ])].Do(req)
	if err != nil {
		return sessionAnswer{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return sessionAnswer{}, err
	}
	if resp.StatusCode != 200 {
		return sessionAnswer{}, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	a := sessionAnswer{backend: resp.Header.Get("X-Backend")}
	_, a.reason, _ = strings.Cut(resp.Header.Get("x-hashlb-decision"), "reason=")
	if typ != "header" {
		for _, sc := range resp.Header.Values("Set-Cookie") {
			if v, ok := strings.CutPrefix(sc, "hashlb-session="); ok {
				a.value, a.attrs, _ = strings.Cut(v, ";")
			}
		}
		a.own = slices.Contains(resp.Header.Values("Set-Cookie"), "app=backend; Path=/")
	} else {
		a.value = resp.Header.Get("hashlb-session")
	}
	a.leaked = bytes.Contains(body, []byte("hashlb-session")) || bytes.Contains(body, []byte("Hashlb-Session")) ||
		len(value) >= 16 && bytes.Contains(body, []byte(value)) || !bytes.Contains(body, []byte("theme=dark"))
	return a, nil
}

// sessionLoad runs f(client) for clients 0…n-1 on 32 goroutines; the first error ends it.
func sessionLoad(t *testing.T, n int, f func(c int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				if err := f(c); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for c := range n {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		next <- c
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// TestSessionEnvoyFleet: for a cookie and a header session, 10^4 clients
// each get a session from a random connection of one of three Envoys
// (--concurrency 4, the same key) and bring it back on another random
// connection of a random Envoy: none moves, no valid session is re-issued,
// no backend ever receives the session, and every worker of every Envoy
// served. Then every Envoy gets a new configuration by ECDS (b1 at weight 0,
// b2 disabled) and b3 answers 503 once per Envoy (passive ejection): of the
// first 2500 clients, b1's and b4's stay, b2's and b3's fall back to b4 with a new session
// that then holds, and new clients never reach b1.
func TestSessionEnvoyFleet(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		bs := envoyrun.StartBackends(t, 4)
		for _, b := range bs {
			b.SetCookie("app=backend; Path=/") // stays beside hashlb's
		}
		start := time.Now()
		envoys := startSessionEnvoys(t, bin, bs, 3, envoySessionKey)
		t.Logf("3 Envoys ready in %v", time.Since(start).Round(time.Millisecond))
		for _, typ := range sessionTypes {
			values, owner := make([]string, envoySessionClients), make([]string, envoySessionClients)
			at := func(c, pass int) (*sessionEnvoy, int) {
				r := rand.New(rand.NewPCG(uint64(c), uint64(pass)))
				return envoys[r.IntN(len(envoys))], r.IntN(envoySessionConns)
			}
			began := time.Now()
			sessionLoad(t, envoySessionClients, func(c int) error {
				se, conn := at(c, 0)
				a, err := se.send(typ, conn, "")
				switch {
				case err != nil:
					return err
				case a.value == "" || a.backend == "" || a.leaked || typ == "cookie" && !a.own:
					return fmt.Errorf("%s client %d: first answer %+v: want a backend, a new session beside the backend's own cookie, nothing leaked", typ, c, a)
				case typ == "cookie" && (strings.Contains(a.attrs, "Max-Age") || !strings.Contains(a.attrs, "Path=/") || !strings.Contains(a.attrs, "HttpOnly")):
					return fmt.Errorf("%s client %d: Set-Cookie attributes %q, want a session cookie with Path=/ and HttpOnly", typ, c, a.attrs)
				}
				values[c], owner[c] = a.value, a.backend
				return nil
			})
			sessionLoad(t, envoySessionClients, func(c int) error {
				se, conn := at(c, 1)
				a, err := se.send(typ, conn, values[c])
				switch {
				case err != nil:
					return err
				case a.backend != owner[c] || a.reason != "session":
					return fmt.Errorf("%s client %d: session for %s answered by %s (reason %s): moved", typ, c, owner[c], a.backend, a.reason)
				case a.value != "":
					return fmt.Errorf("%s client %d: a valid session was re-issued", typ, c)
				case a.leaked:
					return fmt.Errorf("%s client %d: the backend received the session", typ, c)
				}
				return nil
			})
			t.Logf("%s: %d clients placed and served again by 3 Envoys: 0 moved (%v)", typ, envoySessionClients, time.Since(began).Round(time.Millisecond))
			for i, se := range envoys {
				st, err := se.e.Stats()
				if err != nil {
					t.Fatal(err)
				}
				for w := range 4 {
					if n := st[fmt.Sprintf("listener.session_%s.worker_%d.downstream_cx_total", typ, w)]; n == 0 {
						t.Errorf("Envoy %d, %s listener: worker %d accepted no connection", i, typ, w)
					}
				}
			}

			// b1 weight 0 and b2 disabled everywhere, by ECDS.
			for _, se := range envoys {
				before := strings.Count(se.e.Log(), "hashlb: ROUNDROBIN over 4 services")
				writeAtomic(t, se.files[typ], sessionECDS(t, "hashlb_"+typ, typ, envoySessionKey,
					sessionPluginConfig(bs, sessionBlock(typ), map[string]int{"b1": 0}, "b2")))
				waitConfigured(t, se.e, "hashlb: ROUNDROBIN over 4 services", before, configureCalls)
			}
			// b3 fails once on each Envoy: ejected there, on every worker by the next tick.
			b3 := -1
			for c := range owner {
				if owner[c] == "b3" {
					b3 = c
					break
				}
			}
			bs[2].Fail(503)
			for i, se := range envoys {
				if _, err := se.send(typ, 0, values[b3]); err == nil || !strings.Contains(err.Error(), "status 503") {
					t.Fatalf("Envoy %d: b3's client while b3 fails: %v, want its 503", i, err)
				}
			}
			bs[2].Fail(0)
			tickWait() // every worker ticks (1 s) and reads the ejection
			moved := map[string]int{}
			sessionLoad(t, envoySessionAfter, func(c int) error {
				se, conn := at(c, 2)
				a, err := se.send(typ, conn, values[c])
				if err != nil {
					return err
				}
				if a.leaked {
					return fmt.Errorf("%s client %d: the backend received the session", typ, c)
				}
				switch owner[c] {
				case "b1", "b4":
					if a.backend != owner[c] || a.reason != "session" || a.value != "" {
						return fmt.Errorf("%s client %d of %s (weight 0 or untouched): %+v, want kept", typ, c, owner[c], a)
					}
				default:
					if a.backend != "b4" || a.reason == "session" || a.value == "" {
						return fmt.Errorf("%s client %d of %s (disabled or ejected): %+v, want b4 by round robin and a new session", typ, c, owner[c], a)
					}
					values[c] = a.value
				}
				return nil
			})
			for c := range owner[:envoySessionAfter] {
				if owner[c] == "b2" || owner[c] == "b3" {
					moved[owner[c]]++
					owner[c] = "b4"
				}
			}
			sessionLoad(t, envoySessionAfter, func(c int) error {
				se, conn := at(c, 3)
				if a, err := se.send(typ, conn, values[c]); err != nil || a.backend != owner[c] || a.reason != "session" {
					return fmt.Errorf("%s client %d: its session on %s: %+v, %v", typ, c, owner[c], a, err)
				}
				return nil
			})
			newOnB1 := 0
			for c := range 200 {
				a, err := envoys[c%3].send(typ, c, "")
				if err != nil {
					t.Fatal(err)
				}
				if a.backend == "b1" {
					newOnB1++
				}
			}
			if newOnB1 != 0 {
				t.Errorf("%s: %d of 200 new clients reached b1 at weight 0", typ, newOnB1)
			}
			t.Logf("%s: after b1 weight 0, b2 disabled, b3 ejected: of %d clients b1's and b4's kept their session, %v fell back to b4 and kept their new one", typ, envoySessionAfter, moved)
		}
		sessionValues(t, bs, envoys)
	})
}

// sessionValues, on the fleet's "permanent" listener (a permanent cookie,
// absoluteTimeout 1h, idleTimeout 1m): Gateway API's
// HTTPRouteSessionPersistenceCookiePermanentLifetime (kubernetes-sigs/gateway-api
// pull request 4954, commit 25b5ff03219edc9ccd573bcc5a68157586d9035c): the
// cookie carries Max-Age = absoluteTimeout and holds on every Envoy; then
// values lbcore signs with the same key but older times (Envoy's clock
// cannot be moved on): last used 30 s ago, valid and re-issued with what is
// left of the hour; 2 minutes ago, idle; issued 2 hours ago, expired;
// signed a minute ahead, honoured, and a day ahead, refused; and
// forged ones (every character replaced in turn, truncated, 16 KiB,
// another key's), none of which selects a service, each answered with a
// new session.
func sessionValues(t *testing.T, bs []*envoyrun.Backend, envoys []*sessionEnvoy) {
	const typ = "permanent"
	first, err := envoys[0].send(typ, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if first.value == "" || !strings.Contains(first.attrs, "Max-Age=3600") {
		t.Fatalf("permanent cookie: value %q, attributes %q, want Max-Age=3600 (absoluteTimeout 1h)", first.value, first.attrs)
	}
	for i := range 50 {
		a, err := envoys[i%3].send(typ, i, first.value)
		if err != nil || a.backend != first.backend || a.reason != "session" {
			t.Fatalf("sticky request %d: %+v, %v; want %s by session", i+1, a, err, first.backend)
		}
	}
	// The oracle: lbcore with the same configuration and key.
	sign := func(key string, ago time.Duration) (string, string) {
		c, err := lbcore.ParseConfig(sessionPluginConfig(bs, sessionBlock(typ), nil, ""))
		if err != nil {
			t.Fatal(err)
		}
		b := lbcore.NewBalancer(c, rand.Uint64())
		if err := b.EnableSession([]byte(key), typ); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		d := b.Decide(&lbcore.Request{}, now)
		return string(b.AppendSessionValue(nil, &d, now.Add(-ago))), c.Services[d.At(0)].Name
	}
	v, svc := sign(envoySessionKey, 30*time.Second)
	if a, err := envoys[1].send(typ, 1, v); err != nil || a.backend != svc || a.reason != "session" || a.value == "" || a.value == v {
		t.Errorf("a session last used 30 s ago (idle 1m): %+v, %v; want %s by session and re-issued", a, err, svc)
	} else if !strings.Contains(a.attrs, "Max-Age=357") {
		t.Errorf("re-issued 30 s after issue: attributes %q, want Max-Age=357x (what is left of 1h)", a.attrs)
	}
	for _, tc := range []struct {
		what string
		ago  time.Duration
	}{{"last used 2 minutes ago (idle 1m)", 2 * time.Minute}, {"issued 2 hours ago (absolute 1h)", 2 * time.Hour}} {
		v, svc := sign(envoySessionKey, tc.ago)
		a, err := envoys[2].send(typ, 2, v)
		if err != nil || a.reason == "session" || a.value == "" || !strings.Contains(a.attrs, "Max-Age=3600") {
			t.Errorf("a session %s, for %s: %+v, %v; want balanced again with a new session", tc.what, svc, a, err)
		}
	}
	// Signed ahead of Envoy's clock: a day (a proxy whose clock ran ahead)
	// is refused, a minute (within clockSkew 5m) counts as now.
	ahead, svc := sign(envoySessionKey, -time.Minute)
	if a, err := envoys[0].send(typ, 3, ahead); err != nil || a.backend != svc || a.reason != "session" {
		t.Errorf("a session signed a minute ahead, for %s: %+v, %v; want honoured", svc, a, err)
	}
	ahead, _ = sign(envoySessionKey, -24*time.Hour)
	if a, err := envoys[0].send(typ, 4, ahead); err != nil || a.reason == "session" || a.value == "" {
		t.Errorf("a session signed a day ahead: %+v, %v; want refused with a new session", a, err)
	}
	good, _ := sign(envoySessionKey, 0)
	foreign, _ := sign("another-proxy-key-0123456789abcdef0123456789", 0)
	forged := []string{foreign, strings.Repeat(good, 16*1024/len(good)+1)[:16*1024]}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range len(good) {
		j := (strings.IndexByte(alphabet, good[i]) + 1 + i) % len(alphabet)
		forged = append(forged, good[:i]+alphabet[j:j+1]+good[i+1:], good[:i])
	}
	for i, f := range forged {
		a, err := envoys[i%3].send(typ, i, f)
		if err != nil || a.reason == "session" || a.value == "" || a.leaked {
			t.Fatalf("forged value %d (%.50q…): %+v, %v; want balanced by round robin with a new session, nothing leaked", i, f, a, err)
		}
	}
	t.Logf("%d forged values balanced again, each with a new session", len(forged))
}

// TestSessionEnvoyNoKey: a session block in a VM without HASHLB_SESSION_KEY
// is refused as a bad configuration is: envoy --mode validate (which runs
// hashlb's on_configure) fails with hashlb's message naming the variable.
func TestSessionEnvoyNoKey(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		bs := envoyrun.StartBackends(t, 2)
		yaml := bootstrap{
			listeners: []listenerSpec{{name: "hashlb_listener", addrs: []string{"127.0.0.1:0"},
				config: sessionPluginConfig(bs, sessionBlock("cookie"), nil, ""), cluster: "hashlb_upstream"}},
			clusters: []*cluster{overrideHostCluster(t, "hashlb_upstream", endpoints(bs))},
		}.yaml(t)
		err := envoyrun.Validate(bin, envoyrun.WorkDir(t), yaml)
		if err == nil || !strings.Contains(err.Error(), lbcore.SessionKeyEnv) || !strings.Contains(err.Error(), "Unable to create Wasm plugin hashlb") {
			t.Fatalf("--mode validate without %s: %v; want a refusal naming it", lbcore.SessionKeyEnv, err)
		}
		t.Logf("refused: %s", lastLines(err.Error(), 3))
	})
}

// sessionListener is one listener of startSessionListeners: its plugin's
// root_id, key and session block over bs.
type sessionListener struct {
	name, rootID, key string
	block             map[string]any
	weights           map[string]int
	raised            bool
}

// startSessionListeners starts one Envoy (--concurrency 4) with a listener
// per spec, each plugin from its ECDS file, and returns it as a
// sessionEnvoy whose "types" are the listeners' names.
func startSessionListeners(t *testing.T, bin envoyrun.Binary, bs []*envoyrun.Backend, specs []sessionListener) *sessionEnvoy {
	t.Helper()
	dir := t.TempDir()
	se := &sessionEnvoy{files: map[string]string{}, pools: map[string][]*http.Client{}, addrs: map[string]string{}}
	var ls []listenerSpec
	for _, s := range specs {
		f := filepath.Join(dir, "ecds", s.name+".json")
		writeAtomic(t, f, sessionECDS(t, "hashlb_"+s.name, s.rootID, s.key, sessionPluginConfig(bs, s.block, s.weights, "")))
		se.files[s.name] = f
		ls = append(ls, listenerSpec{name: s.name, addrs: []string{"127.0.0.1:0"}, ecdsPath: f, ecdsName: "hashlb_" + s.name,
			cluster: "hashlb_upstream", raisedLimits: s.raised})
	}
	yaml := bootstrap{listeners: ls, clusters: []*cluster{overrideHostCluster(t, "hashlb_upstream", endpoints(bs))}}.yaml(t)
	e, err := envoyrun.Launch(bin, envoyrun.Options{Bootstrap: yaml, Dir: envoyrun.WorkDir(t), Concurrency: 4, ReadyTimeout: envoyReady})
	if err != nil {
		t.Fatal(err)
	}
	se.e = e
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() {
			t.Logf("envoy log (tail):\n%s", e.LogTail(40))
		}
	})
	for _, s := range specs {
		se.addrs[s.name] = e.MustListener(t, s.name)
		for range 8 {
			se.pools[s.name] = append(se.pools[s.name], &http.Client{Timeout: 30 * time.Second,
				Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}})
		}
	}
	return se
}

// statDelta returns what hashlb counter name (wasmcustom.name in Envoy's
// /stats) of se's Envoy gained since before,
// once it is want or more: each worker gives the host its counts on its
// tick (every second).
func statDelta(t *testing.T, se *sessionEnvoy, before map[string]int64, name string, want int64) int64 {
	t.Helper()
	v, _ := waitStatIs(t, se.e, "wasmcustom."+name, func(v int64) bool { return v-before["wasmcustom."+name] >= want })
	return v - before["wasmcustom."+name]
}

func stats(t *testing.T, se *sessionEnvoy) map[string]int64 {
	t.Helper()
	st, err := se.e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSessionEnvoyScope: two plugins on one Envoy, with the same key, the
// same session name and the same services (so the same tags), b1 drained
// (weight 0) in the second: a cookie the first issued for b1 is forged
// under the second's root_id, counted, and never reaches b1 there; under
// the first it holds.
func TestSessionEnvoyScope(t *testing.T) {
	newestEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 3)
		block := map[string]any{"type": "cookie", "absoluteTimeout": "1h"}
		se := startSessionListeners(t, bin, bs, []sessionListener{
			{name: "shop", rootID: "shop", key: envoySessionKey, block: block},
			{name: "cart", rootID: "cart", key: envoySessionKey, block: block, weights: map[string]int{"b1": 0}},
		})
		var v string
		for i := 0; v == ""; i++ {
			if i == 30 {
				t.Fatal("30 requests to shop: none reached b1")
			}
			a, err := se.send("shop", i, "")
			if err != nil {
				t.Fatal(err)
			}
			if a.backend == "b1" {
				v = a.value
			}
		}
		before := stats(t, se)
		const n = 30
		for i := range n {
			a, err := se.send("cart", i, v)
			if err != nil {
				t.Fatal(err)
			}
			if a.backend == "b1" || a.reason == "session" || a.value == "" || a.leaked {
				t.Fatalf("shop's b1 session at cart (b1 drained), request %d: %+v; want refused, another backend, a new session, nothing leaked", i, a)
			}
		}
		if d := statDelta(t, se, before, "hashlb.session_forged", n); d != n {
			t.Errorf("hashlb.session_forged += %d, want %d (shop's values at cart)", d, n)
		}
		for i := range 10 {
			if a, err := se.send("shop", i, v); err != nil || a.backend != "b1" || a.reason != "session" {
				t.Fatalf("shop's session at shop: %+v, %v; want b1 by session", a, err)
			}
		}
	})
}

// TestSessionEnvoyRotation: sessions issued under key K1; the
// configuration changed to K2 with K1 previous: every session lands on its
// backend and receives a K2 value (counted by key age); K1 removed: the
// K2 values hold, the K1 ones fall back once and get a new session. The
// keys change by ECDS (environment_variables.key_values), which makes new
// VMs in Envoy 1.40; Envoy 1.36 keeps its VMs and their environment then
// (HASHLB_ENVOY=…1.36… fails here: no VM is configured again), so the
// test runs on the newest Envoy only.
func TestSessionEnvoyRotation(t *testing.T) {
	newestEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		const (
			k1 = "rotation-key-one-0123456789abcdef0123456789"
			k2 = "rotation-key-two-0123456789abcdef0123456789"
			n  = 40
		)
		bs := envoyrun.StartBackends(t, 3)
		block := map[string]any{"type": "cookie", "absoluteTimeout": "1h"}
		se := startSessionListeners(t, bin, bs, []sessionListener{{name: "rotate", rootID: "rotate", key: k1, block: block}})
		// A new key is a new vm_config: Envoy makes new VMs, each compiling
		// the module, which takes tens of seconds on a loaded machine.
		reconfigure := func(key string) {
			t.Helper()
			const line = "hashlb: ROUNDROBIN over 3 services"
			before := strings.Count(se.e.Log(), line)
			writeAtomic(t, se.files["rotate"], sessionECDS(t, "hashlb_rotate", "rotate", key, sessionPluginConfig(bs, block, nil, "")))
			waitConfigured(t, se.e, line, before, configureCalls)
		}
		old, owner := make([]string, n), make([]string, n)
		for c := range n {
			a, err := se.send("rotate", c, "")
			if err != nil || a.value == "" {
				t.Fatalf("client %d: %+v, %v; want a session", c, a, err)
			}
			old[c], owner[c] = a.value, a.backend
		}

		reconfigure(k2 + lbcore.SessionKeySep + k1)
		before := stats(t, se)
		renewed := make([]string, n)
		for c := range n {
			a, err := se.send("rotate", c, old[c])
			if err != nil || a.backend != owner[c] || a.reason != "session" || a.value == "" || a.value == old[c] || a.leaked {
				t.Fatalf("K2,K1: client %d's K1 session: %+v, %v; want %s by session and a new value", c, a, err, owner[c])
			}
			renewed[c] = a.value
		}
		if d := statDelta(t, se, before, "hashlb.session_key_previous1", n); d != n {
			t.Errorf("hashlb.session_key_previous1 += %d, want %d", d, n)
		}
		if d := statDelta(t, se, before, "hashlb.session_refreshed", n); d != n {
			t.Errorf("hashlb.session_refreshed += %d, want %d (re-issued with K2)", d, n)
		}

		reconfigure(k2)
		before = stats(t, se)
		for c := range n {
			if a, err := se.send("rotate", c, renewed[c]); err != nil || a.backend != owner[c] || a.reason != "session" || a.value != "" {
				t.Fatalf("K2: client %d's re-issued session: %+v, %v; want %s by session, not re-issued", c, a, err, owner[c])
			}
		}
		if d := statDelta(t, se, before, "hashlb.session_key_current", n); d != n {
			t.Errorf("hashlb.session_key_current += %d, want %d", d, n)
		}
		before = stats(t, se)
		for c := range n {
			if a, err := se.send("rotate", c, old[c]); err != nil || a.reason == "session" || a.value == "" {
				t.Fatalf("K2: client %d's K1 session: %+v, %v; want refused with a new session", c, a, err)
			}
		}
		if d := statDelta(t, se, before, "hashlb.session_forged", n); d != n {
			t.Errorf("hashlb.session_forged += %d, want %d (K1 removed)", d, n)
		}
	})
}

// TestSessionEnvoyLargeHeaders: with max_request_headers_kb 8192, a
// request of 16 header lines of 64 KiB besides its session (more than the
// module reads of a header map) still loses the session value before the
// upstream: the backend's echo shows no hashlb-session, for a cookie
// session (the other cookies kept) and a header session; the cookie one
// is still honoured. A session cookie in a second Cookie line goes too.
func TestSessionEnvoyLargeHeaders(t *testing.T) {
	newestEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 3)
		se := startSessionListeners(t, bin, bs, []sessionListener{
			{name: "big", rootID: "big", key: envoySessionKey, block: map[string]any{"type": "cookie", "absoluteTimeout": "1h"}, raised: true},
			{name: "header", rootID: "bigheader", key: envoySessionKey, block: map[string]any{"type": "header", "absoluteTimeout": "1h"}, raised: true},
		})
		big := strings.Repeat("a", 64<<10)
		for _, tc := range []struct {
			name, listener string
			session        func(h http.Header, v string)
			honoured       bool
		}{
			{"cookie", "big", func(h http.Header, v string) { h.Set("Cookie", "theme=dark; hashlb-session="+v+"; lang=en") }, true},
			{"second cookie line", "big", func(h http.Header, v string) { h["Cookie"] = []string{"theme=dark", "hashlb-session=" + v} }, false},
			{"header", "header", func(h http.Header, v string) { h.Set("Cookie", "theme=dark"); h.Set("hashlb-session", v) }, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				first, err := se.send(tc.listener, 0, "")
				if err != nil || first.value == "" {
					t.Fatalf("first request: %+v, %v", first, err)
				}
				req, _ := http.NewRequest("GET", "http://"+se.addrs[tc.listener]+"/app", nil)
				for i := range 16 {
					req.Header.Set(fmt.Sprintf("x-big-%02d", i), big)
				}
				tc.session(req.Header, first.value)
				resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("status %d, %v: %.200s", resp.StatusCode, err, body)
				}
				var echo envoyrun.Echo
				if err := json.Unmarshal(body, &echo); err != nil {
					t.Fatalf("the echo: %v", err)
				}
				for name, vals := range echo.Header {
					for _, v := range vals {
						if strings.EqualFold(name, "hashlb-session") || strings.Contains(v, "hashlb-session") || strings.Contains(v, first.value) {
							t.Errorf("the upstream received %s: %.80s…", name, v)
						}
					}
				}
				if n := len(echo.Header["X-Big-00"]); n != 1 || !strings.Contains(strings.Join(echo.Header["Cookie"], "; "), "theme=dark") {
					t.Errorf("the upstream's other headers: x-big-00 ×%d, cookie %q; want them forwarded", n, echo.Header["Cookie"])
				}
				_, reason, _ := strings.Cut(resp.Header.Get("x-hashlb-decision"), "reason=")
				if tc.honoured && (reason != "session" || resp.Header.Get("X-Backend") != first.backend) {
					t.Errorf("the session: reason %q on %s, want session on %s", reason, resp.Header.Get("X-Backend"), first.backend)
				}
			})
		}
	})
}
