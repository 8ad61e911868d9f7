package lbcore

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// normalized is the effective configuration, every default filled in, as
// the golden files hold it.
func normalized(c *Config) []byte {
	type svc struct {
		Name    string `json:"name"`
		Address string `json:"address"`
		Weight  int    `json:"weight"`
		Enabled bool   `json:"enabled"`
		HashID  string `json:"hashId,omitempty"`
		ID      string `json:"id"`
	}
	out := map[string]any{
		"lbMethod": c.LBMethod.String(), "hashLength": c.HashLength, "netmask": fmt.Sprintf("/%d", c.Netmask),
		"v6NetmaskLen": c.V6NetmaskLen, "backupLBMethod": c.BackupLBMethod.String(), "upstreamHeader": c.UpstreamHeader,
		"upstreamCount": c.UpstreamCount, "serviceHeader": c.ServiceHeader, "trustedForwardedHops": c.TrustedForwardedHops,
		"hashBalanceFactor": c.HashBalanceFactor, "debugHeader": c.DebugHeader,
		"filterType": c.FilterType, "upstreamVia": c.UpstreamVia,
	}
	if c.Token != nil {
		out["token"] = c.Token.String()
	}
	var ss []svc
	for _, s := range c.Services {
		ss = append(ss, svc{s.Name, s.Address, s.Weight, s.Enabled, s.HashID, fmt.Sprintf("%016x", s.ID)})
	}
	out["services"] = ss
	if p := c.Persistence; p != nil {
		var keys []string
		for _, k := range p.Keys {
			keys = append(keys, k.String())
		}
		out["persistence"] = map[string]any{"keys": keys, "tableSize": p.TableSize, "expire": FormatDuration(p.Expire), "emptyKey": p.EmptyKey}
	}
	if h := c.HealthCheck; h != nil {
		out["healthCheck"] = map[string]any{"path": h.Path, "interval": FormatDuration(h.Interval), "timeout": FormatDuration(h.Timeout),
			"healthyThreshold": h.HealthyThreshold, "unhealthyThreshold": h.UnhealthyThreshold,
			"expectedStatuses": h.ExpectedStatuses.String(), "cluster": h.Cluster}
	}
	if p := c.PassiveHealth; p != nil {
		out["passiveHealth"] = map[string]any{"consecutiveFailures": p.ConsecutiveFailures,
			"ejectionTime": FormatDuration(p.EjectionTime), "failureStatuses": p.FailureStatuses.String()}
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	return append(b, '\n')
}

// TestGoldenConfigs parses testdata/config/valid/*.json (golden: the
// normalised form) and invalid/*.json (golden: the exact error text).
func TestGoldenConfigs(t *testing.T) {
	files, _ := filepath.Glob("testdata/config/*/*.json")
	if len(files) < 10 {
		t.Fatalf("found %d golden configs, want the testdata/config tree", len(files))
	}
	for _, f := range files {
		t.Run(strings.TrimPrefix(f, "testdata/config/"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseConfig(data)
			valid := filepath.Base(filepath.Dir(f)) == "valid"
			var got []byte
			switch {
			case valid && err != nil:
				t.Fatalf("ParseConfig: %v, want success", err)
			case valid:
				got = normalized(c)
			case err == nil:
				t.Fatal("ParseConfig succeeded, want errors")
			default:
				got = []byte(err.Error() + "\n")
			}
			golden := strings.TrimSuffix(f, ".json") + map[bool]string{true: ".golden", false: ".err"}[valid]
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./lbcore -run Golden -update)", err)
			}
			if string(got) != string(want) {
				t.Errorf("ParseConfig(%s) =\n%s\nwant\n%s", f, got, want)
			}
		})
	}
}

// TestFieldRanges checks the published field table against the validator:
// each integer bound is accepted and one past it refused, each default is
// what an absent field gives.
func TestFieldRanges(t *testing.T) {
	base := `"services":[{"name":"a","address":"10.0.0.1:80"}]`
	wrap := func(path, value string) string {
		parts := strings.Split(path, ".")
		switch {
		case strings.HasPrefix(path, "services"):
			return ""
		case len(parts) == 1:
			return fmt.Sprintf(`{%s:%s,%s}`, quote(parts[0]), value, base)
		case len(parts) == 3 && parts[1] == "fleet":
			return fmt.Sprintf(`{"persistence":{"keys":["${client.ip}"],"fleet":{"cluster":"etcd",%s:%s}},%s}`, quote(parts[2]), value, base)
		case parts[0] == "slowStart":
			return fmt.Sprintf(`{"slowStart":{"window":"1m",%s:%s},%s}`, quote(parts[1]), value, base)
		case parts[0] == "persistence":
			return fmt.Sprintf(`{"persistence":{"keys":["${client.ip}"],%s:%s},%s}`, quote(parts[1]), value, base)
		default:
			return fmt.Sprintf(`{%s:{%s:%s},%s}`, quote(parts[0]), quote(parts[1]), value, base)
		}
	}
	for _, f := range Fields() {
		if f.Type != "integer" || f.Min == nil || f.Path == "hashBalanceFactor" {
			continue
		}
		lo, hi := f.Min.(int), f.Max.(int)
		for _, tc := range []struct {
			v  int
			ok bool
		}{{lo, true}, {hi, true}, {lo - 1, false}, {hi + 1, false}} {
			js := wrap(f.Path, fmt.Sprint(tc.v))
			if js == "" {
				continue
			}
			_, err := ParseConfig([]byte(js))
			if (err == nil) != tc.ok {
				t.Errorf("%s = %d: ParseConfig error %v, want ok %v", f.Path, tc.v, err, tc.ok)
			} else if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("[%d, %d]", lo, hi)) {
				t.Errorf("%s = %d: error %q does not name the range [%d, %d]", f.Path, tc.v, err, lo, hi)
			}
		}
	}
}

func quote(s string) string { return `"` + s + `"` }

func TestDefaults(t *testing.T) {
	c := mustConfig(t, `{"services":[{"name":"a","address":"10.0.0.1:80"}],"persistence":{"keys":["${client.ip}"]},"healthCheck":{},"passiveHealth":{}}`)
	checks := []struct {
		name      string
		got, want any
	}{
		{"lbMethod", c.LBMethod, MethodRoundRobin},
		{"hashLength", c.HashLength, 80},
		{"netmask", c.Netmask, 32},
		{"v6NetmaskLen", c.V6NetmaskLen, 128},
		{"backupLBMethod", c.BackupLBMethod, MethodLeastConnection},
		{"upstreamHeader", c.UpstreamHeader, "x-envoy-original-dst-host"},
		{"upstreamCount", c.UpstreamCount, 1},
		{"serviceHeader", c.ServiceHeader, "x-hashlb-service"},
		{"services[0].weight", c.Services[0].Weight, 1},
		{"services[0].enabled", c.Services[0].Enabled, true},
		{"persistence.tableSize", c.Persistence.TableSize, 3000000},
		{"persistence.expire", FormatDuration(c.Persistence.Expire), "7d"},
		{"persistence.emptyKey", c.Persistence.EmptyKey, "skip"},
		{"healthCheck.interval", FormatDuration(c.HealthCheck.Interval), "5s"},
		{"healthCheck.timeout", FormatDuration(c.HealthCheck.Timeout), "2s"},
		{"healthCheck.expectedStatuses", c.HealthCheck.ExpectedStatuses.String(), "200-399"},
		{"passiveHealth.consecutiveFailures", c.PassiveHealth.ConsecutiveFailures, 5},
		{"passiveHealth.ejectionTime", FormatDuration(c.PassiveHealth.EjectionTime), "30s"},
		{"passiveHealth.failureStatuses", c.PassiveHealth.FailureStatuses.String(), "502-504"},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("default %s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
	// The published defaults agree.
	for _, f := range Fields() {
		if f.Path == "lbMethod" && f.Default != c.LBMethod.String() || f.Path == "hashLength" && f.Default != c.HashLength {
			t.Errorf("Fields() default of %s = %v disagrees with the parser", f.Path, f.Default)
		}
	}
}

func TestDurations(t *testing.T) {
	for _, s := range []string{"500ms", "90s", "10m", "36h", "7d", "365d"} {
		d, err := ParseDuration(s)
		if err != nil || FormatDuration(d) != s {
			t.Errorf("ParseDuration(%q) = %v, %v; formats back as %q", s, d, err, FormatDuration(d))
		}
	}
	for _, s := range []string{"", "7", "d", "1.5h", "-1s", "1w", "99999999999999999999d", "1h30m"} {
		if _, err := ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) succeeded, want an error", s)
		}
	}
}

// TestAppendDuration: the append form writes what FormatDuration writes
// after what dst holds, and into a buffer with room it allocates nothing
// (the module's health log lines: filter/health.go).
func TestAppendDuration(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want string
	}{
		{"days", 7 * 24 * time.Hour, "7d"},
		{"seconds", 90 * time.Second, "90s"},
		{"milliseconds", 1500 * time.Millisecond, "1500ms"},
		{"zero", 0, "0ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]byte, 0, 64)
			if got := string(AppendDuration(append(buf, "for "...), tt.d)); got != "for "+tt.want {
				t.Errorf("AppendDuration(%q, %v) = %q, want %q", "for ", tt.d, got, "for "+tt.want)
			}
			if got := FormatDuration(tt.d); got != tt.want {
				t.Errorf("FormatDuration(%v) = %q, want %q", tt.d, got, tt.want)
			}
			if n := testing.AllocsPerRun(10, func() { buf = AppendDuration(buf[:0], tt.d) }); n != 0 {
				t.Errorf("AppendDuration(buf with room, %v) made %v allocations, want 0", tt.d, n)
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/config/*/*.json")
	for _, file := range files {
		data, _ := os.ReadFile(file)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err == nil {
			b := NewBalancer(c, 1)
			b.Decide(&Request{Target: string(data), Source: "192.0.2.1:1", Dest: "192.0.2.2:2"}, epoch)
		}
	})
}

func TestAddrPortError(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"host name", "localhost:18081", `"localhost" is a host name, not an IP address: hashlb needs each service's ip:port (resolve it)`},
		{"leading zero", "10.0.0.01:80", `"10.0.0.01" has a field with a leading zero, which is not an IPv4 address hashlb reads (write it without)`},
		{"IPv6 without brackets", "::1:8080", "an IPv6 address needs brackets: write [::1]:8080"},
		{"no port", "10.0.0.1", "no port: write ip:port"},
		{"port zero", "10.0.0.1:0", "port 0 is out of range [1, 65535]"},
		{"port too big", "10.0.0.1:70000", "port 70000 is out of range [1, 65535]"},
		{"port not a number", "10.0.0.1:http", `port "http" is not a number`},
		{"not canonical", "[::0001]:80", "not written canonically: write [::1]:80"},
		{"IPv4 in brackets", "[10.0.0.1]:80", "an IPv4 address in brackets: write ip:port"},
		{"zone", "[fe80::1%eth0]:80", "an IPv6 zone (%eth0) is not allowed"},
		{"empty", "", "empty"},
		{"bad IP", "10.0.0.256:80", `"10.0.0.256" is not an IP address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := AddrPortError(tt.in)
			if err == nil || err.Error() != tt.want {
				t.Errorf("AddrPortError(%q) = %v, want %q", tt.in, err, tt.want)
			}
		})
	}
	for _, ok := range []string{"10.0.0.1:80", "[::1]:8080", "[2001:db8::1]:443"} {
		if err := AddrPortError(ok); err != nil {
			t.Errorf("AddrPortError(%q) = %v, want nil", ok, err)
		}
	}
}
