package deploycheck

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

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
