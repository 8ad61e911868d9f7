package e2e

// Per-request cost of hashlb in hostsim against a module that does nothing,
// and the time to start one worker.
//
//	go test ./e2e -run '^$' -bench 'HostsimRequest|VMStart' -benchtime 2s

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// benchMethods are one config per lbMethod over four services.
var benchMethods = []struct{ method, extra string }{
	{"URLHASH", ""},
	{"DOMAINHASH", ""},
	{"DESTINATIONIPHASH", ""},
	{"SOURCEIPHASH", ""},
	{"SRCIPDESTIPHASH", ""},
	{"SRCIPSRCPORTHASH", ""},
	{"CALLIDHASH", ""},
	{"TOKEN", `"token": "${request.header.x-tenant||request.cookie.tenant}",`},
	{"LEASTCONNECTION", ""},
	{"ROUNDROBIN", ""},
}

func benchConfig(method, extra string) []byte {
	return []byte(fmt.Sprintf(`{"lbMethod": %q, %s "services": [
	  {"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"},
	  {"name": "c", "address": "10.0.0.3:80"}, {"name": "d", "address": "10.0.0.4:80"}]}`, method, extra))
}

// benchRequests are a few typical requests carrying every method's input.
var benchRequests = func() [][][2]string {
	var out [][][2]string
	for i := 0; i < 16; i++ {
		out = append(out, [][2]string{
			{":method", "GET"}, {":scheme", "https"}, {":authority", fmt.Sprintf("shop-%d.example.com", i%4)},
			{":path", fmt.Sprintf("/api/v1/catalog/items/%d?view=full&lang=en", i)},
			{"user-agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)"},
			{"accept", "application/json"}, {"accept-encoding", "gzip, br"},
			{"cookie", fmt.Sprintf("session=0123456789abcdef; tenant=t%d", i%5)},
			{"x-tenant", fmt.Sprintf("tenant-%d", i%7)},
			{"call-id", fmt.Sprintf("%d-a84b4c76e66710@pc33.example.com", i)},
			{"x-request-id", "f81d4fae-7dec-11d0-a765-00a0c91e6bf6"},
		})
	}
	return out
}()

var benchProps = map[string][]byte{
	"source.address":      hostsim.PropString("192.0.2.10:51234"),
	"destination.address": hostsim.PropString("10.1.0.5:8080"),
}

// benchStreams runs b.N whole streams on worker 0 of a fresh host.
func benchStreams(b *testing.B, wasm, config []byte, routed bool) {
	ctx := context.Background()
	h, err := hostsim.New(ctx, wasm, hostsim.Config{PluginConfig: config, LogLevel: hostsim.LogWarn})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(ctx)
	resp := benchResponse
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := h.Stream(0)
		res := s.RequestHeaders(benchRequests[i%len(benchRequests)], benchProps)
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		if routed {
			if _, ok := res.Header("x-envoy-original-dst-host"); !ok {
				b.Fatalf("request %d was not routed", i)
			}
		}
		s.ResponseHeaders(resp)
		if err := s.Finish(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := h.Err(0); err != nil {
		b.Fatal(err)
	}
}

func noopModule(b testing.TB) []byte { return buildModule(b, "./e2e/testdata/noop") }

// noopNs is the no-op module's cost per stream, measured by the noop
// sub-benchmark (or on demand when only a method is benchmarked).
var noopNs float64

// BenchmarkHostsimRequest is the cost of one whole stream (request headers,
// response headers, done/log/delete) through hashlb in hostsim, per method,
// and through the no-op module; x-noop is hashlb's cost ÷ the no-op's.
func BenchmarkHostsimRequest(b *testing.B) {
	wasm, noop := module(b), noopModule(b)
	b.Run("noop", func(b *testing.B) {
		benchStreams(b, noop, nil, false)
		noopNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	for _, m := range benchMethods {
		b.Run(m.method, func(b *testing.B) {
			if noopNs == 0 {
				r := testing.Benchmark(func(b *testing.B) { benchStreams(b, noop, nil, false) })
				noopNs = float64(r.NsPerOp())
			}
			benchStreams(b, wasm, benchConfig(m.method, m.extra), true)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/noopNs, "x-noop")
		})
	}
}

// BenchmarkVMStart is the time to start workers as Envoy does: check the
// module's ABI marker and imports, instantiate it, _initialize, create the
// root context, proxy_on_vm_start and proxy_on_configure. The module is
// compiled before the timer starts and the compilation cache serves every
// iteration. workers=1 is one host with one worker (hostsim.New's fixed cost
// included); workers=5 also reports ns/worker, the cost of each worker beyond
// the first: (t(5) - t(1)) / 4.
func BenchmarkVMStart(b *testing.B) {
	for _, mod := range []struct {
		name   string
		wasm   []byte
		config []byte
	}{{"hashlb", module(b), benchConfig("URLHASH", "")}, {"noop", noopModule(b), nil}} {
		var one float64 // ns/op of workers=1
		for _, workers := range []int{1, 5} {
			b.Run(fmt.Sprintf("%s/workers=%d", mod.name, workers), func(b *testing.B) {
				ctx := context.Background()
				cfg := hostsim.Config{Workers: workers, PluginConfig: mod.config}
				start := time.Now()
				h, err := hostsim.New(ctx, mod.wasm, cfg)
				if err != nil {
					b.Fatal(err)
				}
				h.Close(ctx)
				if compile := time.Since(start); compile > time.Second {
					b.Logf("first start, compiling: %v", compile)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					h, err := hostsim.New(ctx, mod.wasm, cfg)
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					h.Close(ctx)
					b.StartTimer()
				}
				b.StopTimer()
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				if workers == 1 {
					one = ns
				} else if one > 0 {
					b.ReportMetric((ns-one)/float64(workers-1), "ns/worker")
				}
			})
		}
	}
}

// benchResponse is the upstream's response headers in every benchmark stream.
var benchResponse = [][2]string{{":status", "200"}, {"content-type", "application/json"}, {"content-length", "512"}}
