package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// jwtAlice is a JWT whose payload is {"sub":"alice","iss":"https://idp.example.com"}
// (the signature is not verified: jwt() reads claims only).
const jwtAlice = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlzcyI6Imh0dHBzOi8vaWRwLmV4YW1wbGUuY29tIn0.c2lnbmF0dXJl"

// TestExplainGolden: the report an operator reads for each kind of decision.
func TestExplainGolden(t *testing.T) {
	const td = "testdata/explain/"
	tests := []struct {
		name string
		args []string
	}{
		{"envoy-urlhash", []string{"../../envoy.yaml", "-url", "/some/path"}},
		// The load-balancing policy: the hosts of the cluster's EDS file (hashId,
		// IPv6, an LB weight, a draining host), the failover a retry walks.
		{"lbpolicy-eds", []string{"testdata/check/lbpolicy-cds.yaml", "-config", "shop", "-url", "/cart/42"}},
		{"lbpolicy-eds-json", []string{"testdata/check/lbpolicy-cds.yaml", "-config", "shop", "-url", "/cart/42", "-down", "cart-1", "-json"}},
		{"lbpolicy-refused", []string{"testdata/check/lbpolicy-bad.yaml", "-config", "refused", "-url", "/cart/42"}},
		// The Citrix example: /h1/7 ranks S1 > S2 > S3.
		{"citrix-all-up", []string{td + "citrix.json", "-url", "/h1/7"}},
		{"citrix-s1-down", []string{td + "citrix.json", "-url", "/h1/7", "-down", "S1"}},
		{"citrix-s1-s2-down", []string{td + "citrix.json", "-url", "/h1/7", "-down", "S1,S2"}},
		{"citrix-all-down", []string{td + "citrix.json", "-url", "/h1/7", "-down", "S1,S2,S3"}},
		{"token-jwt", []string{td + "token-jwt.json", "-url", "/api/orders", "-header", "authorization: Bearer " + jwtAlice}},
		{"token-jwt-json", []string{td + "token-jwt.json", "-url", "/api/orders", "-header", "authorization: Bearer " + jwtAlice, "-json"}},
		{"token-missing", []string{td + "token-jwt.json", "-url", "/api/orders", "-seed", "3"}},
		{"urlhash-without-url", []string{"../../configs/urlhash.json", "-url", ""}},
		{"domainhash-missing-host", []string{"../../configs/domainhash.json", "-url", "/x"}},
		{"domainhash-absolute-url", []string{td + "weighted.json", "-url", "http://Images.Example.COM.:8080/a.png", "-header", "host: other.example.com"}},
		{"weighted-disabled", []string{td + "weighted.json", "-url", "/", "-authority", "shop.example.com"}},
		{"persistence", []string{"../../configs/persistence.json", "-url", "/", "-client", "192.0.2.10:5555", "-header", "x-client-id: 42"}},
		{"persistence-skip-empty", []string{"../../configs/persistence.json", "-url", "/"}},
		{"persistence-shared-v6", []string{td + "persistence-shared.json", "-url", "/", "-client", "[2001:db8:1:2:3::9]:40000",
			"-header", "cookie: theme=dark; session=s-77", "-header", "x-user: Bob"}},
		{"persistence-shared-empty", []string{td + "persistence-shared.json", "-url", "/", "-client", "[2001:db8:1:2:3::9]:40000"}},
		{"tcp-network-filter", []string{"../../configs/tcp.json", "-url", "", "-client", "192.0.2.1:5000", "-dest", "198.51.100.1:443"}},
		{"srcipdestiphash", []string{"../../configs/srcipdestiphash.json", "-client", "192.0.2.10:5555", "-dest", "10.0.0.1:80", "-url", "/"}},
		{"forged-header", []string{"../../configs/demo.json", "-url", "/x", "-header", "X-Envoy-Original-Dst-Host: 203.0.113.9:80"}},
		{"istio-wasmplugin", []string{"-url", "/", "-client", "10.1.2.3:40000", "../../configs/istio/wasmplugin.yaml"}},
		{"istio-trafficextension", []string{"-url", "/", "-client", "10.1.2.3:40000", "../../configs/istio/trafficextension/trafficextension.yaml"}},
		{"istio-mixed-kinds", []string{"-config", "TrafficExtension shop/hashlb-tcp", "-url", "", "-client", "10.1.2.3:40000", "-dest", "240.240.0.10:5432", "testdata/check/istio-mixed.yaml"}},
		{"istio-mixed-kinds-unchosen", []string{"-url", "/", "testdata/check/istio-mixed.yaml"}},
		{"roundrobin", []string{"../../configs/roundrobin.json", "-url", "/"}},
		// Slow start: web-3 12 s into a ramp of 10 % every 5 s (30 % now).
		{"slowstart-ramp", []string{td + "slowstart.json", "-url", "/obj/7", "-ramp", "web-3=12s", "-at", "2026-01-01T12:00:00Z"}},
		{"slowstart-ramp-json", []string{td + "slowstart.json", "-url", "/obj/7", "-ramp", "web-3=12s", "-at", "2026-01-01T12:00:00Z", "-json"}},
		{"slowstart-no-block", []string{"../../configs/demo.json", "-url", "/", "-ramp", "b1=1s"}},
		{"choose-invalid-config", []string{"testdata/check/envoy-bad.yaml", "-config", "2", "-url", "/"}},
		{"choose-config-by-place", []string{"testdata/check/envoy-bad.yaml", "-config", "public", "-url", "/", "-authority", "www.example.com"}},
		{"choose-config-ambiguous", []string{"testdata/check/envoy-bad.yaml", "-config", "filter hashlb", "-url", "/"}},
		{"several-configs", []string{"testdata/check/envoy-bad.yaml", "-url", "/"}},
		{"no-url", []string{"../../configs/demo.json"}},
		{"unknown-service", []string{"../../configs/demo.json", "-url", "/", "-down", "b9"}},
		{"bad-header", []string{"../../configs/demo.json", "-url", "/", "-header", "no colon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runGolden(t, "explain", tt.name, append([]string{"explain"}, tt.args...))
		})
	}
}

// TestExplainMatchesDecide: for every example configuration and many
// requests, explain -json names the service and failover order a fresh
// Balancer's Decide gives.
func TestExplainMatchesDecide(t *testing.T) {
	for _, ex := range exampleConfigs(t) {
		f, cfg := ex.path, ex.cfg
		t.Run(filepath.Base(f), func(t *testing.T) {
			for i := range 40 {
				path := fmt.Sprintf("/item/%d?v=%d", i, i%3)
				client := fmt.Sprintf("192.0.2.%d:%d", i%200+1, 20000+i)
				dest := fmt.Sprintf("198.51.100.%d:443", i%7+1)
				host := fmt.Sprintf("h%d.example.com", i%11)
				callID := fmt.Sprintf("%d@pc33.example.com", i)
				tenant := fmt.Sprintf("t%d", i%13)
				down := cfg.Services[i%len(cfg.Services)].Name
				args := []string{"explain", f, "-json", "-url", path, "-client", client, "-dest", dest, "-authority", host,
					"-header", "call-id: " + callID, "-header", "x-tenant: " + tenant, "-down", down}
				r := explainJSON(t, args)
				got := []string{}
				if r.Chosen != nil {
					got = append(got, r.Chosen.Name)
				}
				for _, s := range r.Failover {
					got = append(got, s.Name)
				}

				b := lbcore.NewBalancer(cfg, 0)
				b.SetDown(i%len(cfg.Services), true)
				req := lbcore.Request{Target: path, Authority: host, Method: "GET", Source: client, Dest: dest,
					Headers: [][2]string{{"call-id", callID}, {"x-tenant", tenant}}}
				d := b.Decide(&req, time.Now())
				want := []string{}
				for j := 0; j < d.Len(); j++ {
					want = append(want, cfg.Services[d.At(j)].Name)
				}
				if !slices.Equal(got, want) || r.Reason != d.Reason.String() {
					t.Errorf("hashlb %s: %v (%s), Decide: %v (%s)", strings.Join(args[1:], " "), got, r.Reason, want, d.Reason)
				}
			}
		})
	}
}

// TestExplainCapped: a token cut by an input cap is reported.
func TestExplainCapped(t *testing.T) {
	args := []string{"explain", "testdata/explain/token-jwt.json", "-url", "/", "-json",
		"-header", "authorization: Bearer " + strings.Repeat("x", lbcore.MaxJWTBytes+1)}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("hashlb explain = %d: %s", code, stderr.String())
	}
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Capped || r.Input || r.Reason != "backup" {
		t.Errorf("explain with a %d-byte JWT: capped %v, input %v, reason %s; want capped, no input, backup",
			lbcore.MaxJWTBytes+1, r.Capped, r.Input, r.Reason)
	}
}

// exampleConfig is one of the repository's configs/*.json plugin
// configurations, parsed.
type exampleConfig struct {
	path string
	cfg  *lbcore.Config
}

// exampleConfigs returns every plugin configuration in configs/ (not the
// schema), parsed by lbcore; one that does not parse fails t.
func exampleConfigs(t *testing.T) []exampleConfig {
	t.Helper()
	files, _ := filepath.Glob("../../configs/*.json")
	var out []exampleConfig
	for _, f := range files {
		if filepath.Base(f) == "schema.json" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := lbcore.ParseConfig(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, exampleConfig{f, cfg})
	}
	return out
}

// explainJSON runs hashlb explain with args (which ask for -json) and
// returns its report; it fails the test unless the exit status is 0.
func explainJSON(t *testing.T, args []string) report {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("hashlb %s = %d: %s", strings.Join(args[1:], " "), code, stderr.String())
	}
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestExplainSlowStart: with -ramp, explain names the service and failover
// order that a Balancer whose service is that far into its ramp decides,
// and reports its effective weight.
func TestExplainSlowStart(t *testing.T) {
	const file = "testdata/explain/slowstart.json"
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := lbcore.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg := *c
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	moved := 0
	for _, elapsed := range []time.Duration{0, 12 * time.Second, 30 * time.Second} {
		b := lbcore.NewBalancer(&cfg, 0)
		b.Ramp(3, at.Add(-elapsed))
		for i := range 100 {
			path := fmt.Sprintf("/obj/%d", i)
			args := []string{"explain", file, "-json", "-url", path, "-ramp", "web-3=" + lbcore.FormatDuration(elapsed),
				"-at", at.Format(time.RFC3339)}
			r := explainJSON(t, args)
			got := []string{r.Chosen.Name}
			for _, s := range r.Failover {
				got = append(got, s.Name)
			}
			d := b.Decide(&lbcore.Request{Target: path, Method: "GET"}, at)
			var want []string
			for k := range d.Len() {
				want = append(want, cfg.Services[d.At(k)].Name)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("-ramp web-3=%v %s: explain %v, lbcore %v", elapsed, path, got, want)
			}
			if len(r.SlowStart) != 1 || r.SlowStart[0].Name != "web-3" {
				t.Fatalf("-ramp web-3=%v: slowStart %+v", elapsed, r.SlowStart)
			}
			if want := 10 * float64(elapsed/(5*time.Second)+1); r.SlowStart[0].Percent-want > 1e-9 || want-r.SlowStart[0].Percent > 1e-9 {
				t.Fatalf("-ramp web-3=%v: %v %%, want %v %%", elapsed, r.SlowStart[0].Percent, want)
			}
			if r.Chosen.Name == "web-3" {
				moved++
			}
		}
	}
	if moved == 0 {
		t.Error("web-3 was chosen for no key: the test shows nothing")
	}
}
