package e2e

// BenchmarkSession: one full stream through the module under hostsim with
// session persistence, interleaved (interleaved in persist_bench_test.go):
// a valid session cookie (checked, stripped, nothing set), no cookie (the
// response gets a new Set-Cookie), a forged one, and the same request with
// no session block. Run with
//
//	go test -run '^$' -bench Session -benchmem ./e2e

import (
	"context"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

func BenchmarkSession(b *testing.B) {
	key := map[string]string{lbcore.SessionKeyEnv: sessionKey}
	newHost := func(session bool) *hostsim.Host {
		var s map[string]any
		if session {
			s = map[string]any{"type": "cookie", "idleTimeout": "10m"}
		}
		cfg := sessionConfig(b, s, sessionServices(4, nil), map[string]any{"debugHeader": false})
		h, err := hostsim.New(context.Background(), module(b), hostsim.Config{PluginConfig: cfg, RootID: persistRootID, Env: key})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close(context.Background()) })
		return h
	}
	withS, without := newHost(true), newHost(false)
	first, err := sessionRequest(withS, 0, 200)
	if err != nil {
		b.Fatal(err)
	}
	v, _, _ := first.sessionCookie(b, "hashlb-session")
	base := persistBenchHeaders("")
	valid := append(append([][2]string(nil), base...), [2]string{"cookie", "theme=dark; hashlb-session=" + v})
	forged := append(append([][2]string(nil), base...), [2]string{"cookie", "theme=dark; hashlb-session=" + flipFirst(v)})
	plain := append(append([][2]string(nil), base...), [2]string{"cookie", "theme=dark"})
	names := []string{"off", "valid", "new", "forged"}
	total := interleaved(b, len(names), func(_, j int) func() {
		switch j {
		case 0:
			return func() { persistStream(b, without, 0, plain) }
		case 1:
			return func() { persistStream(b, withS, 0, valid) }
		case 2:
			return func() { persistStream(b, withS, 0, plain) }
		}
		return func() { persistStream(b, withS, 0, forged) }
	})
	for j, name := range names {
		b.ReportMetric(float64(total[j].Nanoseconds())/float64(b.N)/1e3, name+"_us")
		if j > 0 {
			b.ReportMetric(float64(total[j])/float64(total[0]), name+"_x_off")
		}
	}
}
