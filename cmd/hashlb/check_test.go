package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// update (-update) rewrites the golden files of testdata/check,
// testdata/explain and testdata/nsconf.
var update = flag.Bool("update", false, "rewrite the golden files")

// runGolden runs the hashlb command line args and compares its exit status,
// stdout and stderr with testdata/<dir>/<name>.golden.
func runGolden(t *testing.T, dir, name string, args []string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	var got bytes.Buffer
	got.WriteString("$ hashlb " + strings.Join(quoteArgs(args), " ") + "\n")
	got.WriteString("exit " + strconv.Itoa(code) + "\n")
	got.WriteString("-- stdout --\n" + stdout.String())
	got.WriteString("-- stderr --\n" + stderr.String())
	path := filepath.Join("testdata", dir, name+".golden")
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/hashlb -update to create it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("hashlb %s:\n%s\nwant (%s):\n%s", strings.Join(args, " "), got.Bytes(), path, want)
	}
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "" || strings.ContainsAny(a, " '\"${}|*?") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return out
}

// TestCheckGolden: what check prints, and its exit status, for bad and good
// files of every kind it reads.
func TestCheckGolden(t *testing.T) {
	const td = "testdata/check/"
	type run struct {
		name string
		args []string
	}
	tests := []run{
		{"broken-json", []string{td + "broken.json"}},
		{"envoy-bootstrap-json", []string{td + "envoy-bootstrap.json"}},
		{"istio-directory", []string{"../../configs/istio/destinationrule.yaml", "../../configs/istio/envoyfilter.yaml",
			"../../configs/istio/serviceentry.yaml", "../../configs/istio/virtualservice.yaml", "../../configs/istio/wasmplugin.yaml"}},
		{"only-other-resources", []string{"../../configs/istio/serviceentry.yaml"}},
		{"schema", []string{"../../configs/schema.json"}},
		{"missing-file", []string{td + "no-such-file.json", "../../configs/demo.json"}},
		{"several", []string{"../../envoy.yaml", td + "bad-plugin.json", "../../configs/token.json"}},
		{"session-key-inline-strict", []string{"-strict", td + "session-key-inline.yaml"}},
		{"istio-session-key-inline", []string{"-strict", td + "istio-session-key-inline.yaml", "../../configs/istio/destinationrule.yaml",
			"../../configs/istio/envoyfilter.yaml", "../../configs/istio/serviceentry.yaml", "../../configs/istio/virtualservice.yaml"}},
		{"istio-session-key", []string{td + "istio-session-key.yaml", "../../configs/istio/destinationrule.yaml",
			"../../configs/istio/envoyfilter.yaml", "../../configs/istio/serviceentry.yaml", "../../configs/istio/virtualservice.yaml"}},
		{"istio-both-kinds", []string{"../../configs/istio/destinationrule.yaml", "../../configs/istio/envoyfilter.yaml",
			"../../configs/istio/serviceentry.yaml", "../../configs/istio/virtualservice.yaml", "../../configs/istio/wasmplugin.yaml",
			"../../configs/istio/trafficextension/trafficextension.yaml"}},
		{"istio-fleet-without-etcd", []string{"../../configs/istio/fleet/wasmplugin.yaml", "../../configs/istio/serviceentry.yaml"}},
		{"usage", []string{}},
		{"usage-flag", []string{"-q", "x.json"}},
	}
	// One file of testdata/check each, named by the file.
	for _, f := range []string{
		"bad-plugin.json",
		"envoy-bad.yaml",
		"envoy-without-hashlb.yaml",
		"istio-bad.yaml",
		"not-a-config.txt",
		"plugin-in-yaml.yaml",
		"bad-yaml.yaml",
		"comments-only.yaml",
		// Cross-checks: each unsafe file's finding names the file, the node and what to change.
		"unsafe-endpoints.yaml",
		"unsafe-header.yaml",
		"unsafe-fail-open.yaml",
		"kind-network-filter.yaml",
		"kind-http-filter.yaml",
		"fleet-cluster-missing.yaml",
		"retries-fail-open.yaml",
		"session-key-missing.yaml",
		"session-key-given.yaml",
		"session-key-inline.yaml",
		"istio-unsafe.yaml",
		"istio-mixed.yaml",
		"istio-waypoint-unsafe.yaml",
		// The load-balancing policy: refusals, hosts as services, health advice.
		"lbpolicy-bad.yaml",
		"lbpolicy-cds.yaml",
		// Through Istio: the policy in an EnvoyFilter's CLUSTER patch, one it refuses.
		"istio-lbpolicy-bad.yaml",
	} {
		tests = append(tests, run{strings.TrimSuffix(f, filepath.Ext(f)), []string{td + f}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runGolden(t, "check", tt.name, append([]string{"check"}, tt.args...))
		})
	}
}

// TestCheckRepositoryConfigs: every configuration the repository ships
// passes, each named by its place.
func TestCheckRepositoryConfigs(t *testing.T) {
	istio, _ := filepath.Glob("../../configs/istio/*.yaml")
	istioTCP, _ := filepath.Glob("../../configs/istio/tcp/*.yaml")
	istioFleet, _ := filepath.Glob("../../configs/istio/fleet/*.yaml")
	tests := []struct {
		name  string
		files []string
		want  []string // stdout lines, each file's configurations
	}{
		{"envoy.yaml", []string{"../../envoy.yaml"},
			[]string{"../../envoy.yaml: listener hashlb_listener, filter hashlb: ok (URLHASH over 3 services)"}},
		{"envoy-fleet.yaml", []string{"../../configs/envoy-fleet.yaml"},
			[]string{"../../configs/envoy-fleet.yaml: listener hashlb_listener, filter hashlb: ok (URLHASH over 3 services)"}},
		{"envoy-original-dst.yaml", []string{"../../configs/envoy-original-dst.yaml"},
			[]string{"../../configs/envoy-original-dst.yaml: listener hashlb_listener, filter hashlb: ok (URLHASH over 3 services)"}},
		{"envoy-tcp.yaml", []string{"../../configs/envoy-tcp.yaml"},
			[]string{"../../configs/envoy-tcp.yaml: listener hashlb_tcp, filter hashlb: ok (SRCIPSRCPORTHASH over 3 services)"}},
		{"istio-tcp", istioTCP, []string{"../../configs/istio/tcp/wasmplugin.yaml: WasmPlugin demo/hashlb-tcp: ok (SRCIPDESTIPHASH over 3 services)"}},
		{"istio-fleet", istioFleet, []string{"../../configs/istio/fleet/wasmplugin.yaml: WasmPlugin demo/hashlb: ok (SOURCEIPHASH over 3 services)"}},
		{"istio", istio, []string{"../../configs/istio/wasmplugin.yaml: WasmPlugin demo/hashlb: ok (SOURCEIPHASH over 3 services)"}},
		{"istio-ambient", []string{"../../configs/istio/ambient/serviceentry.yaml", "../../configs/istio/ambient/trafficextension.yaml"},
			[]string{"../../configs/istio/ambient/trafficextension.yaml: TrafficExtension demo/hashlb-ambient: ok (URLHASH over 3 services)"}},
		// The load-balancing policy's EnvoyFilter, instead of the filter's two files.
		{"istio-lbpolicy", append(without(without(istio, "wasmplugin.yaml"), "envoyfilter.yaml"), "../../configs/istio/lbpolicy/envoyfilter.yaml"),
			[]string{"../../configs/istio/lbpolicy/envoyfilter.yaml: EnvoyFilter demo/hashlb-lbpolicy, patch 0, cluster outbound|8080||hashlb-backends.demo.internal, " +
				"load-balancing policy envoy.load_balancing_policies.dynamic_modules: ok (URLHASH; hosts not checked: its hosts are the endpoints istiod sends the cluster the patch matches)"}},
		// The ingress gateway's files with the service's.
		{"istio-gateway", []string{"../../configs/istio/serviceentry.yaml", "../../configs/istio/destinationrule.yaml",
			"../../configs/istio/gateway/gateway.yaml", "../../configs/istio/gateway/envoyfilter.yaml", "../../configs/istio/gateway/wasmplugin.yaml"},
			[]string{"../../configs/istio/gateway/wasmplugin.yaml: WasmPlugin istio-system/hashlb: ok (SOURCEIPHASH over 3 services)"}},
		// The TrafficExtension twins, each applied instead of its WasmPlugin.
		{"istio-trafficextension", append(without(istio, "wasmplugin.yaml"), "../../configs/istio/trafficextension/trafficextension.yaml"),
			[]string{"../../configs/istio/trafficextension/trafficextension.yaml: TrafficExtension demo/hashlb: ok (SOURCEIPHASH over 3 services)"}},
		{"istio-trafficextension-fleet", append(without(istio, "wasmplugin.yaml"), "../../configs/istio/fleet/etcd-serviceentry.yaml", "../../configs/istio/trafficextension/fleet/trafficextension.yaml"),
			[]string{"../../configs/istio/trafficextension/fleet/trafficextension.yaml: TrafficExtension demo/hashlb: ok (SOURCEIPHASH over 3 services)"}},
		{"istio-trafficextension-tcp", append(without(istioTCP, "wasmplugin.yaml"), "../../configs/istio/trafficextension/tcp/trafficextension.yaml"),
			[]string{"../../configs/istio/trafficextension/tcp/trafficextension.yaml: TrafficExtension demo/hashlb-tcp: ok (SRCIPDESTIPHASH over 3 services)"}},
	}
	for _, ex := range exampleConfigs(t) {
		f, cfg := ex.path, ex.cfg
		tests = append(tests, struct {
			name  string
			files []string
			want  []string
		}{filepath.Base(f), []string{f}, []string{f + ": ok (" + cfg.LBMethod.String() + " over 3 services)"}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := runCheck(tt.files, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
				t.Fatalf("hashlb check %v = %d, stderr:\n%s", tt.files, code, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout.String(), w+"\n") {
					t.Errorf("hashlb check %v printed\n%s\nwant the line %q", tt.files, stdout.String(), w)
				}
			}
		})
	}
}

// without returns files but the one named base.
func without(files []string, base string) []string {
	var out []string
	for _, f := range files {
		if filepath.Base(f) != base {
			out = append(out, f)
		}
	}
	return out
}

// TestModuleNeverLinksYAML: the CLI reads YAML; the module must not.
func TestModuleNeverLinksYAML(t *testing.T) {
	for _, env := range [][]string{nil, {"GOOS=wasip1", "GOARCH=wasm"}} {
		cmd := exec.Command("go", "list", "-deps", "../../filter")
		cmd.Env = append(cmd.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps ./filter %v: %v\n%s", env, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.Contains(dep, "yaml") {
				t.Errorf("the module (%v) depends on %s", env, dep)
			}
		}
	}
}

// TestCLIDocExamples: docs/cli.md shows real output. Each "$ hashlb …" line
// of its console blocks is run from the repository root and must print the
// lines that follow it (stdout, then stderr).
func TestCLIDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	type example struct {
		args []string
		want string
	}
	var examples []example
	inBlock := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case line == "```console":
			inBlock = true
		case line == "```":
			inBlock = false
		case inBlock && strings.HasPrefix(line, "$ hashlb "):
			cmd, _, _ := strings.Cut(strings.TrimPrefix(line, "$ hashlb "), "  #")
			examples = append(examples, example{args: strings.Fields(cmd)})
		case inBlock && len(examples) > 0:
			examples[len(examples)-1].want += line + "\n"
		}
	}
	if len(examples) < 3 {
		t.Fatalf("docs/cli.md: %d examples, want one of each command and a failing check", len(examples))
	}
	t.Chdir("../..")
	for _, ex := range examples {
		var stdout, stderr bytes.Buffer
		run(ex.args, &stdout, &stderr)
		if got := stdout.String() + stderr.String(); got != ex.want {
			t.Errorf("hashlb %s prints\n%s\ndocs/cli.md says\n%s", strings.Join(ex.args, " "), got, ex.want)
		}
	}
}

// TestCheckTrafficExtensionTwins: a broken TrafficExtension is refused with
// the messages of its broken WasmPlugin twin. Each case breaks the shipped
// WasmPlugin bundle and the same bundle with the TrafficExtension of
// configs/istio/trafficextension/ in its place, the same way; both runs
// must fail, print want, and print the same lines once the kind, the
// spec.wasm prefix and line numbers are set aside.
func TestCheckTrafficExtensionTwins(t *testing.T) {
	const istio = "../../configs/istio/"
	http := []string{"destinationrule.yaml", "envoyfilter.yaml", "serviceentry.yaml", "virtualservice.yaml"}
	tests := []struct {
		name   string
		plugin [2]string // the WasmPlugin and the TrafficExtension, under configs/istio/
		others []string  // the files given with it, under configs/istio/
		file   string    // the file to break: "plugin" or one of others
		old    string
		new    [2]string // the replacement in the WasmPlugin's run and in the TrafficExtension's
		want   string
	}{
		{"wrong header", [2]string{"wasmplugin.yaml", "trafficextension/trafficextension.yaml"}, http, "envoyfilter.yaml",
			"- header: x-envoy-original-dst-host", [2]string{"- header: x-upstream", "- header: x-upstream"}, `override_host reads header ["x-upstream"]`},
		{"plugin writes another header", [2]string{"wasmplugin.yaml", "trafficextension/trafficextension.yaml"}, http, "plugin",
			"upstreamHeader: x-envoy-original-dst-host", [2]string{"upstreamHeader: x-upstream", "upstreamHeader: x-upstream"}, `writes upstreamHeader "x-upstream"`},
		{"fleet without cluster", [2]string{"fleet/wasmplugin.yaml", "trafficextension/fleet/trafficextension.yaml"}, []string{"serviceentry.yaml"}, "",
			"", [2]string{}, `persistence.fleet.cluster "outbound|2379||etcd.hashlb-system.svc.cluster.local": no ServiceEntry given with it makes that cluster`},
		{"fleet cluster not Istio's name", [2]string{"fleet/wasmplugin.yaml", "trafficextension/fleet/trafficextension.yaml"}, append([]string{"fleet/etcd-serviceentry.yaml"}, http...), "plugin",
			"cluster: outbound|2379||etcd.hashlb-system.svc.cluster.local", [2]string{"cluster: etcd", "cluster: etcd"}, `Istio names the etcd cluster`},
		{"fleet etcd port not HTTP", [2]string{"fleet/wasmplugin.yaml", "trafficextension/fleet/trafficextension.yaml"}, append([]string{"fleet/etcd-serviceentry.yaml"}, http...), "fleet/etcd-serviceentry.yaml",
			"protocol: HTTP", [2]string{"protocol: GRPC", "protocol: GRPC"}, `port protocol "GRPC": want HTTP`},
		{"fail open", [2]string{"wasmplugin.yaml", "trafficextension/trafficextension.yaml"}, http, "plugin",
			"failStrategy: FAIL_CLOSE", [2]string{"failStrategy: FAIL_OPEN", "failStrategy: FAIL_OPEN"}, "failStrategy FAIL_OPEN: must be FAIL_CLOSE"},
		{"NETWORK type for an HTTP configuration", [2]string{"wasmplugin.yaml", "trafficextension/trafficextension.yaml"}, http, "plugin",
			"type: HTTP", [2]string{"type: NETWORK", "type: NETWORK"}, "type NETWORK with filterType http"},
		{"invalid configuration", [2]string{"wasmplugin.yaml", "trafficextension/trafficextension.yaml"}, http, "plugin",
			"upstreamCount: 3", [2]string{"upstreamCount: 30", "upstreamCount: 30"}, "upstreamCount: 30 is out of range [1, 8]"},
		{"unknown configuration field", [2]string{"wasmplugin.yaml", "trafficextension/trafficextension.yaml"}, http, "plugin",
			"upstreamCount: 3", [2]string{"upstreamCount: 3\n    lbMthod: URLHASH", "upstreamCount: 3\n      lbMthod: URLHASH"}, "lbMthod: unknown field"},
		{"selectors differ", [2]string{"wasmplugin.yaml", "trafficextension/trafficextension.yaml"}, http, "envoyfilter.yaml",
			"      app: frontend", [2]string{"      app: other", "      app: other"}, "selector map[app:frontend] differ"},
		{"service missing from the cluster", [2]string{"wasmplugin.yaml", "trafficextension/trafficextension.yaml"}, http, "serviceentry.yaml",
			"  - address: 10.10.0.13\n", [2]string{"", ""}, `services[2] "backend-3" 10.10.0.13:8080 is not an endpoint`},
		{"retries beyond the ranking", [2]string{"wasmplugin.yaml", "trafficextension/trafficextension.yaml"}, http, "virtualservice.yaml",
			"attempts: 2", [2]string{"attempts: 3", "attempts: 3"}, "retries.attempts 3 needs upstreamCount >= 4"},
		{"tcp: HTTP type for a network configuration", [2]string{"tcp/wasmplugin.yaml", "trafficextension/tcp/trafficextension.yaml"}, []string{"tcp/serviceentry.yaml"}, "plugin",
			"type: NETWORK", [2]string{"type: HTTP", "type: HTTP"}, "type HTTP with filterType network"},
		{"tcp: fail open", [2]string{"tcp/wasmplugin.yaml", "trafficextension/tcp/trafficextension.yaml"}, []string{"tcp/serviceentry.yaml"}, "plugin",
			"failStrategy: FAIL_CLOSE", [2]string{"failStrategy: FAIL_OPEN", "failStrategy: FAIL_OPEN"}, "a skipped NETWORK plugin lets tcp_proxy connect"},
	}
	line := regexp.MustCompile(`\(line \d+\)`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var outs [2]string
			for k := range 2 {
				dir := t.TempDir()
				var args []string
				for _, f := range append([]string{tt.plugin[k]}, tt.others...) {
					data, err := os.ReadFile(istio + f)
					if err != nil {
						t.Fatal(err)
					}
					name := f
					if f == tt.plugin[k] {
						name = "plugin"
					}
					if name == tt.file {
						s := string(data)
						if !strings.Contains(s, tt.old) {
							t.Fatalf("%s has no %q", f, tt.old)
						}
						data = []byte(strings.Replace(s, tt.old, tt.new[k], 1))
					}
					path := filepath.Join(dir, strings.ReplaceAll(name, "/", "-"))
					if err := os.WriteFile(path, data, 0o644); err != nil {
						t.Fatal(err)
					}
					args = append(args, path)
				}
				var stdout, stderr bytes.Buffer
				code := runCheck(args, &stdout, &stderr)
				if code != 1 || !strings.Contains(stderr.String(), tt.want) {
					t.Fatalf("hashlb check %s = %d, want 1 and %q on stderr:\n%s%s", tt.plugin[k], code, tt.want, stdout.String(), stderr.String())
				}
				out := strings.ReplaceAll(stdout.String()+stderr.String(), dir+string(filepath.Separator), "")
				for _, f := range []string{"pluginConfig", "failStrategy", "type"} {
					if k == 1 && strings.Contains(out, "spec."+f) {
						t.Errorf("the TrafficExtension's finding names spec.%s, which is spec.wasm.%s there:\n%s", f, f, out)
					}
				}
				out = strings.ReplaceAll(out, "TrafficExtension", "WasmPlugin")
				out = strings.ReplaceAll(out, "spec.wasm.", "spec.")
				outs[k] = line.ReplaceAllString(out, "(line _)")
			}
			if outs[0] != outs[1] {
				t.Errorf("the WasmPlugin's run printed\n%s\nthe TrafficExtension's\n%s", outs[0], outs[1])
			}
		})
	}
}
