package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
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
	tests := []struct {
		name string
		args []string
	}{
		{"bad-plugin", []string{td + "bad-plugin.json"}},
		{"broken-json", []string{td + "broken.json"}},
		{"envoy-bad", []string{td + "envoy-bad.yaml"}},
		{"envoy-bootstrap-json", []string{td + "envoy-bootstrap.json"}},
		{"envoy-without-hashlb", []string{td + "envoy-without-hashlb.yaml"}},
		{"istio-bad", []string{td + "istio-bad.yaml"}},
		{"istio-directory", []string{"../../configs/istio/destinationrule.yaml", "../../configs/istio/envoyfilter.yaml",
			"../../configs/istio/serviceentry.yaml", "../../configs/istio/virtualservice.yaml", "../../configs/istio/wasmplugin.yaml"}},
		{"only-other-resources", []string{"../../configs/istio/serviceentry.yaml"}},
		{"not-a-config", []string{td + "not-a-config.txt"}},
		{"plugin-in-yaml", []string{td + "plugin-in-yaml.yaml"}},
		{"bad-yaml", []string{td + "bad-yaml.yaml"}},
		{"comments-only", []string{td + "comments-only.yaml"}},
		{"schema", []string{"../../configs/schema.json"}},
		{"missing-file", []string{td + "no-such-file.json", "../../configs/demo.json"}},
		{"several", []string{"../../envoy.yaml", td + "bad-plugin.json", "../../configs/token.json"}},
		{"usage", []string{}},
		{"usage-flag", []string{"-q", "x.json"}},
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
	tests := []struct {
		name  string
		files []string
		want  []string // stdout lines, each file's configurations
	}{
		{"envoy.yaml", []string{"../../envoy.yaml"},
			[]string{"../../envoy.yaml: listener hashlb_listener, filter hashlb: ok (URLHASH over 3 services)"}},
		{"envoy-original-dst.yaml", []string{"../../configs/envoy-original-dst.yaml"},
			[]string{"../../configs/envoy-original-dst.yaml: listener hashlb_listener, filter hashlb: ok (URLHASH over 3 services)"}},
		{"envoy-tcp.yaml", []string{"../../configs/envoy-tcp.yaml"},
			[]string{"../../configs/envoy-tcp.yaml: listener hashlb_tcp, filter hashlb: ok (SRCIPSRCPORTHASH over 3 services)"}},
		{"istio-tcp", istioTCP, []string{"../../configs/istio/tcp/wasmplugin.yaml: WasmPlugin demo/hashlb-tcp: ok (SRCIPDESTIPHASH over 3 services)"}},
		{"istio", istio, []string{"../../configs/istio/wasmplugin.yaml: WasmPlugin demo/hashlb: ok (SOURCEIPHASH over 3 services)"}},
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

// TestPluginConfigAsIstio: a WasmPlugin's pluginConfig reaches ParseConfig as
// the JSON Istio sends the module (protojson of a google.protobuf.Struct), so
// check reports what the proxy would log, in the order it would log it.
func TestPluginConfigAsIstio(t *testing.T) {
	tests := []struct {
		name, yaml string
	}{
		{"example", `{lbMethod: URLHASH, upstreamCount: 3, services: [{name: a, address: "10.0.0.1:80"}]}`},
		{"numbers", `{hashLength: 80.0, upstreamCount: 1e1, trustedForwardedHops: 0x10, services: [{name: a, address: "10.0.0.1:80", weight: 1.5}], hashBalanceFactor: 12345678901234567890}`},
		{"types and order", `{zeta: true, alpha: null, services: [], debugHeader: "yes", persistence: {keys: ["${client.ip}"], tableSize: 3000000}}`},
		{"text", `{token: "${request.header.x<y> | replace(\"&\", \"\")}", lbMethod: token, services: [{name: "é", address: "[::1]:80"}]}`},
		{"anchors", `{base: &b {name: a, address: "10.0.0.1:80"}, services: [*b, {<<: *b, name: c}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var node yaml.Node
			if err := yaml.Unmarshal([]byte(tt.yaml), &node); err != nil {
				t.Fatal(err)
			}
			v, err := structValue(node.Content[0])
			if err != nil {
				t.Fatal(err)
			}
			got, err := marshalJSON(v)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := yaml.Unmarshal([]byte(tt.yaml), &m); err != nil {
				t.Fatal(err)
			}
			s, err := structpb.NewStruct(normalise(m).(map[string]any))
			if err != nil {
				t.Fatal(err)
			}
			pj, err := protojson.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := json.Compact(&want, pj); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Errorf("pluginConfig %s as JSON:\n got %s\nwant %s (protojson)", tt.yaml, got, want.Bytes())
			}
		})
	}
}

// normalise turns what yaml.v3 decodes into what structpb takes.
func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalise(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalise(e)
		}
		return x
	case int:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return v
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
