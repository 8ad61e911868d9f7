package e2e

// Stress: many requests through hashlb under envoy-1.33 with 4 workers per
// host, each worker driven by its own goroutine, with mixed methods and
// requests large and varied enough for many garbage collections in the
// guest. No VM may trap, and no worker's linear memory may grow by more than
// 5 % between the halfway point and the end: Go's heap first grows to its GC
// target, so the first requests are no baseline.
//
// CI runs 3·10^5 requests: the filter makes little garbage per request, and
// with 10^5 spread over twelve workers a worker's halfway point came before
// its heap had reached the GC target, so the ratio measured the warm-up.
//
//	go test ./e2e -run TestStress -v                      # 3·10^5 requests (CI)
//	go test ./e2e -run TestStress -v -stress.full         # 10^6 requests
//	HASHLB_STRESS_FULL=1 go test ./e2e -run TestStress -v # the same

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

var stressFull = flag.Bool("stress.full", false, "run the stress test with 10^6 requests instead of 3·10^5")

const stressWorkers = 4

// stressConfigs are the hosts of the stress run, one per method group; every
// request goes to one of them in turn. Three hosts × four workers: with 10^5
// requests each VM gets 8333, so its halfway point (4166) lies beyond the
// heap's warm-up (about 3300 of these requests).
var stressConfigs = []struct{ name, config string }{
	{"URLHASH", `{"lbMethod": "URLHASH", "hashLength": 4096, "upstreamCount": 2, "debugHeader": true,
	  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80", "weight": 3},
	    {"name": "c", "address": "[fd00::3]:80"}, {"name": "d", "address": "10.0.0.4:80"}]}`},
	{"SOURCEIPHASH+persistence", `{"lbMethod": "SOURCEIPHASH", "hashBalanceFactor": 150,
	  "persistence": {"keys": ["${client.ip}", "${request.header.x-client-id}"], "tableSize": 100000, "expire": "10m"},
	  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"},
	    {"name": "c", "address": "10.0.0.3:80"}, {"name": "d", "address": "10.0.0.4:80", "enabled": false},
	    {"name": "e", "address": "10.0.0.5:80"}]}`},
	{"TOKEN", `{"lbMethod": "TOKEN", "backupLBMethod": "LEASTCONNECTION", "upstreamCount": 3, "debugHeader": true,
	  "token": "${request.cookie.tenant|lower||request.header.authorization|jwt(\"sub\")||request.query.user|prefix(16)}",
	  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"},
	    {"name": "c", "address": "10.0.0.3:80"}, {"name": "d", "address": "10.0.0.4:80"}]}`},
}

func stressRequests() int {
	if *stressFull || os.Getenv("HASHLB_STRESS_FULL") == "1" {
		return 1_000_000
	}
	return 300_000
}

// stressGen makes varied requests: long paths and queries, many and long
// headers, JWTs, cookies, Call-IDs, forged upstream headers.
type stressGen struct {
	rng  *rand.Rand
	text string // random URL-safe bytes to cut paths and values from
	jwts []string
}

func newStressGen(seed uint64) *stressGen {
	g := &stressGen{rng: rand.New(rand.NewPCG(seed, 99))}
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_/"
	b := make([]byte, 8192)
	for i := range b {
		b[i] = alphabet[g.rng.IntN(len(alphabet))]
	}
	g.text = string(b)
	enc := base64.RawURLEncoding.EncodeToString
	for i := 0; i < 64; i++ {
		claims := fmt.Sprintf(`{"sub":"user-%d","pad":%q}`, i, g.cut(g.rng.IntN(400)))
		g.jwts = append(g.jwts, "Bearer "+enc([]byte(`{"alg":"HS256"}`))+"."+enc([]byte(claims))+"."+enc([]byte(g.cut(43))))
	}
	return g
}

// cut returns n random bytes of g.text.
func (g *stressGen) cut(n int) string {
	off := g.rng.IntN(len(g.text) - n)
	return g.text[off : off+n]
}

func (g *stressGen) request() ([][2]string, map[string][]byte) {
	r := g.rng
	hs := make([][2]string, 0, 16)
	add := func(k, v string) { hs = append(hs, [2]string{k, v}) }
	path := "/" + g.cut(1+r.IntN(r.IntN(2000)+1))
	if r.IntN(3) == 0 {
		path += "?user=" + g.cut(r.IntN(40)) + "&q=" + g.cut(r.IntN(200))
	}
	add(":method", "GET")
	add(":scheme", "http")
	add(":authority", fmt.Sprintf("host-%d.example.com", r.IntN(1000)))
	add(":path", path)
	add("user-agent", "stress/1 "+g.cut(r.IntN(120)))
	switch r.IntN(4) {
	case 0:
		add("cookie", "session="+g.cut(r.IntN(300))+"; tenant=Tenant-"+fmt.Sprint(r.IntN(500)))
	case 1:
		add("authorization", g.jwts[r.IntN(len(g.jwts))])
	}
	if r.IntN(3) > 0 {
		add("call-id", fmt.Sprintf("%x@%s", r.Uint64(), g.cut(r.IntN(30))))
	}
	if r.IntN(2) == 0 {
		add("x-client-id", fmt.Sprint(r.IntN(5000)))
	}
	if r.IntN(10) == 0 {
		add("x-envoy-original-dst-host", "6.6.6.6:666")
	}
	for n := r.IntN(8); n > 0; n-- {
		add(fmt.Sprintf("x-extra-%d", n), g.cut(r.IntN(512)))
	}
	src := fmt.Sprintf("10.%d.%d.%d:%d", r.IntN(4), r.IntN(256), r.IntN(256), 1024+r.IntN(60000))
	return hs, map[string][]byte{"source.address": hostsim.PropString(src),
		"destination.address": hostsim.PropString("192.168.0.1:8080")}
}

func TestStress(t *testing.T) {
	wasm := module(t)
	total := stressRequests()
	ctx := context.Background()
	hosts := make([]*hostsim.Host, len(stressConfigs))
	for i, c := range stressConfigs {
		h, err := hostsim.New(ctx, wasm, hostsim.Config{Workers: stressWorkers, Profile: hostsim.ProfileEnvoy133,
			PluginConfig: []byte(c.config), LogLevel: hostsim.LogWarn})
		if err != nil {
			t.Fatalf("%s: hostsim.New: %v", c.name, err)
		}
		t.Cleanup(func() { h.Close(ctx) })
		hosts[i] = h
	}

	// mem[w][k][h] is worker w's memory on host h after k tenths of its requests.
	perWorker := total / stressWorkers
	var mem [stressWorkers][11][]uint32
	var failures [stressWorkers]error
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < stressWorkers; w++ {
		wg.Go(func() {
			g := newStressGen(uint64(w))
			sample := func(k int) { mem[w][k] = memorySizes(hosts, w) }
			sample(0)
			for i := 0; i < perWorker; i++ {
				hi := i % len(hosts)
				h := hosts[hi]
				if w == 0 && i%5000 == 4999 {
					for _, h := range hosts {
						h.Advance(time.Minute) // between calls: persistence entries expire
					}
				}
				headers, props := g.request()
				s := h.Stream(w)
				res := s.RequestHeaders(headers, props)
				if res.Err != nil || res.LocalReply != nil {
					failures[w] = fmt.Errorf("%s worker %d request %d: err %v, local reply %v", stressConfigs[hi].name, w, i, res.Err, res.LocalReply)
					return
				}
				if up, _ := res.Header("x-envoy-original-dst-host"); up == "" || strings.Contains(up, "6.6.6.6") {
					failures[w] = fmt.Errorf("%s worker %d request %d: upstream %q", stressConfigs[hi].name, w, i, up)
					return
				}
				if r := s.ResponseHeaders([][2]string{{":status", "200"}, {"content-length", "0"}}); r.Err != nil {
					failures[w] = fmt.Errorf("%s worker %d request %d: response: %v", stressConfigs[hi].name, w, i, r.Err)
					return
				}
				if err := s.Finish(); err != nil {
					failures[w] = fmt.Errorf("%s worker %d request %d: finish: %v", stressConfigs[hi].name, w, i, err)
					return
				}
				if (i+1)%(perWorker/10) == 0 && (i+1)/(perWorker/10) <= 10 {
					sample((i + 1) / (perWorker / 10))
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range failures {
		if err != nil {
			t.Error(err)
		}
	}
	traps := 0
	for hi, h := range hosts {
		for w := 0; w < stressWorkers; w++ {
			if err := h.Err(w); err != nil {
				traps++
				t.Errorf("%s worker %d: VM died: %v", stressConfigs[hi].name, w, err)
			}
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("%d requests (%d per worker goroutine, %d hosts × %d workers, envoy-1.33) in %v: %.0f req/s, %d traps",
		total, perWorker, len(hosts), stressWorkers, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), traps)
	for hi, c := range stressConfigs {
		checkMemoryFlat(t, c.name, hi, &mem, 0)
	}
}

// checkMemoryFlat logs host hi's memory per worker at every tenth of the
// run and fails when a worker's memory at the end exceeds its memory at the
// halfway point by more than 5 % and by more than floor bytes. Go's heap first
// grows to its GC target, so the first half is warm-up, not a baseline.
func checkMemoryFlat(t *testing.T, name string, hi int, mem *[stressWorkers][11][]uint32, floor uint32) {
	t.Helper()
	for w := 0; w < stressWorkers; w++ {
		var line strings.Builder
		for k := 0; k <= 10; k++ {
			fmt.Fprintf(&line, " %5.2f", float64(mem[w][k][hi])/(1<<20))
		}
		half, end := mem[w][5][hi], mem[w][10][hi]
		ratio := float64(end) / float64(half)
		t.Logf("%-25s worker %d memory MiB at 0,10..100%%:%s  end/half %.3f", name, w, line.String(), ratio)
		if end > half+max(half/20, floor) {
			t.Errorf("%s worker %d: memory at the end %d ÷ at the halfway point %d = %.3f, want ≤ 1.05 (or ≤ %d bytes more)", name, w, end, half, ratio, floor)
		}
	}
}

// memorySizes is worker w's memory on each of hosts.
func memorySizes(hosts []*hostsim.Host, w int) []uint32 {
	m := make([]uint32, len(hosts))
	for i, h := range hosts {
		m[i] = h.MemorySize(w)
	}
	return m
}
