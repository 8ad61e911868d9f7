package deploycheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashlb/hashlb/lbcore"
	"gopkg.in/yaml.v3"
)

// An Item is one hashlb configuration found in a file, or a note on
// something read there that is not hashlb's.
type Item struct {
	// where names it inside the file: "" for a plugin configuration file,
	// else the listener and filter, or the manifest's kind and name.
	Where string
	// data is what the module receives as its configuration; nil when the
	// filter has none.
	Data []byte
	// problem, when set, says why the configuration could not be read out of
	// the file (a value that is not a string, YAML Istio would refuse…).
	Problem string
	// skipped, when set, makes this no configuration but a note on something
	// read and not hashlb's, such as "ServiceEntry demo/backends: no hashlb
	// configuration".
	Skipped string
	// Node is the filter's PluginConfig (an Envoy wasm filter's config),
	// the WasmPlugin resource the configuration is read from, or a
	// load-balancing policy's typed_config.
	Node *yaml.Node
	// Policy, when set, makes this the configuration of hashlb's
	// load-balancing policy on a cluster (lb_policy_config), with the
	// cluster's hosts.
	Policy *Policy
}

// Prefix is how output lines about e begin: "FILE: " or "FILE: WHERE: ".
func (e *Item) Prefix(file string) string {
	if e.Where == "" {
		return file + ": "
	}
	return file + ": " + e.Where + ": "
}

// Parse validates e as the module does (filter/plugin.go): lbcore.ParseConfig,
// every problem one line. A load-balancing policy's configuration is
// validated as the policy does (ParsePolicy); its configuration is then
// over the cluster's hosts when they are known, else over one placeholder.
func (e *Item) Parse() (*lbcore.Config, []string) {
	if e.Problem != "" {
		return nil, []string{e.Problem}
	}
	if e.Policy != nil {
		pol, problems := e.ParsePolicy()
		if problems != nil {
			return nil, problems
		}
		if e.Policy.Unknown == "" {
			if cfg, _, err := pol.Services(e.Policy.Hosts); err == nil {
				return cfg, nil
			}
		}
		return pol.Config, nil
	}
	cfg, err := lbcore.ParseConfig(e.Data)
	if err != nil {
		return nil, strings.Split(err.Error(), "\n")
	}
	return cfg, nil
}

// A File is what a file holds: its configurations and notes on what is not
// hashlb's, in file order, and its YAML documents (none for a plugin
// configuration file).
type File struct {
	Items []Item
	Docs  []*yaml.Node
}

// Configs returns the configurations, without the notes.
func (src *File) Configs() []Item {
	var out []Item
	for _, e := range src.Items {
		if e.Skipped == "" {
			out = append(out, e)
		}
	}
	return out
}

// skip adds a note on something that is not hashlb's.
func (src *File) skip(note string) { src.Items = append(src.Items, Item{Skipped: note}) }

// skipped returns the notes.
func (src *File) skipped() []string {
	var out []string
	for _, e := range src.Items {
		if e.Skipped != "" {
			out = append(out, e.Skipped)
		}
	}
	return out
}

// ScanFile reads file ("-" is stdin) and finds the hashlb configurations in
// it. An EDS file a load-balancing policy's cluster reads is looked for in
// the working directory, else beside file.
func ScanFile(file string) (*File, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, err
	}
	dir := ""
	if file != "-" {
		dir = filepath.Dir(file)
	}
	return scan(data, dir)
}

// envoyTopLevel are fields of Envoy's Bootstrap, of a discovery response and
// of a config dump: a JSON object with one of them is read as Envoy
// configuration, any other as a plugin configuration.
var envoyTopLevel = []string{"static_resources", "dynamic_resources", "admin", "node", "layered_runtime",
	"overload_manager", "cluster_manager", "resources", "configs", "load_balancing_policy"}

// Scan finds the hashlb configurations in a file's contents; an EDS file
// is looked for in the working directory.
func Scan(data []byte) (*File, error) { return scan(data, "") }

// scan is Scan of a file in dir.
func scan(data []byte, dir string) (*File, error) {
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	if len(trimmed) == 0 {
		return nil, errors.New("empty file")
	}
	if trimmed[0] == '{' || trimmed[0] == '[' {
		var top map[string]json.RawMessage
		if json.Unmarshal(trimmed, &top) == nil && top["$schema"] != nil {
			src := &File{}
			src.skip("a JSON Schema of the configuration (configs/schema.json, for editors), not a configuration: skipped")
			return src, nil
		}
		if json.Unmarshal(trimmed, &top) != nil || !isEnvoyOrManifest(top) {
			// A plugin configuration, or broken JSON: ParseConfig says which.
			return &File{Items: []Item{{Data: data}}}, nil
		}
	}
	return scanYAML(data, dir)
}

func isEnvoyOrManifest(top map[string]json.RawMessage) bool {
	if top["apiVersion"] != nil && top["kind"] != nil {
		return true
	}
	for _, k := range envoyTopLevel {
		if top[k] != nil {
			return true
		}
	}
	return false
}

// scanYAML reads every document of a YAML (or JSON) file: Kubernetes
// manifests by kind, anything else as Envoy configuration.
func scanYAML(data []byte, dir string) (*File, error) {
	src := &File{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	docs, envoyDocs, wasmSeen := 0, 0, 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not a plugin configuration (JSON) and not YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		root := deref(&doc)
		if root == nil || root.Kind == yaml.DocumentNode && len(root.Content) == 0 {
			continue
		}
		if root.Kind == yaml.DocumentNode {
			root = deref(root.Content[0])
		}
		if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
			continue // an empty document
		}
		docs++
		src.Docs = append(src.Docs, root)
		if root.Kind != yaml.MappingNode {
			return nil, errors.New("not a hashlb configuration (JSON), an Envoy configuration or Kubernetes manifests")
		}
		if get(root, "apiVersion") != nil && get(root, "kind") != nil {
			src.manifest(root)
			continue
		}
		if get(root, "services") != nil || get(root, "lbMethod") != nil {
			return nil, fmt.Errorf("line %d: a hashlb configuration in YAML: the module reads JSON (write it as JSON, or as a WasmPlugin's pluginConfig)", root.Line)
		}
		envoyDocs++
		w := &wasmWalk{src: src}
		w.walk(root, walkCtx{})
		wasmSeen += w.seen + src.policies(root, dir)
	}
	if docs == 0 {
		return nil, errors.New("no hashlb configuration: the file holds no YAML or JSON document")
	}
	if envoyDocs > 0 && wasmSeen == 0 {
		return nil, errors.New("no hashlb configuration: no envoy.filters.http.wasm or envoy.filters.network.wasm filter and no dynamic-module load-balancing policy in this Envoy configuration")
	}
	if envoyDocs > 0 && len(src.Configs()) == 0 {
		return nil, fmt.Errorf("no hashlb configuration: %s", strings.Join(src.skipped(), "; "))
	}
	return src, nil
}

// manifest handles one Kubernetes resource (or a List of them).
func (src *File) manifest(m *yaml.Node) {
	api, kind := str(get(m, "apiVersion")), str(get(m, "kind"))
	name := str(get(get(m, "metadata"), "name"))
	if ns := str(get(get(m, "metadata"), "namespace")); ns != "" {
		name = ns + "/" + name
	}
	where := kind + " " + name
	group, _, _ := strings.Cut(api, "/")
	switch {
	case strings.HasSuffix(kind, "List") && get(m, "items") != nil:
		for _, it := range items(get(m, "items")) {
			if it.Kind == yaml.MappingNode {
				src.manifest(it)
			}
		}
	case (kind == "WasmPlugin" || kind == "TrafficExtension") && group == "extensions.istio.io":
		src.wasmPlugin(m, kind, where)
	case kind == "EnvoyFilter" && group == "networking.istio.io":
		n := len(src.Items)
		for i, p := range items(get(get(m, "spec"), "configPatches")) {
			w := &wasmWalk{src: src, prefix: fmt.Sprintf("%s, patch %d", where, i)}
			w.walk(get(get(p, "patch"), "value"), walkCtx{})
			if str(get(p, "applyTo")) == "CLUSTER" {
				src.patchPolicy(p, i, where)
			}
		}
		if len(src.Items) == n {
			src.skip(where + ": no hashlb configuration (no wasm filter or hashlb load-balancing policy in its patches)")
		}
	default:
		src.skip(where + ": no hashlb configuration")
	}
}

// wasmFields returns the node of a WasmPlugin or TrafficExtension that
// holds the Wasm fields (url, pluginName, pluginConfig, failStrategy,
// type), and its path: a WasmPlugin's spec, a TrafficExtension's spec.wasm
// (istio.io/api v1.32.0 extensions/v1alpha1/traffic_extension.proto:
// TrafficExtension.wasm is a WasmConfig; selector, targetRefs, phase,
// priority and match stay in spec). nil for a TrafficExtension without wasm.
func wasmFields(m *yaml.Node) (*yaml.Node, string) {
	spec := get(m, "spec")
	if str(get(m, "kind")) == "TrafficExtension" {
		return get(spec, "wasm"), "spec.wasm"
	}
	return spec, "spec"
}

// misplacedWasmFields are WasmPlugin fields a TrafficExtension takes under
// spec.wasm, not in spec.
var misplacedWasmFields = []string{"url", "sha256", "pluginConfig", "pluginName", "failStrategy", "type", "imagePullPolicy", "imagePullSecret", "vmConfig"}

// wasmPlugin reads the pluginConfig of an Istio WasmPlugin (spec) or
// TrafficExtension (spec.wasm), which Istio hands to the module as JSON
// (protojson of a google.protobuf.Struct: keys sorted, numbers as doubles).
func (src *File) wasmPlugin(m *yaml.Node, kind, where string) {
	spec := get(m, "spec")
	w, at := wasmFields(m)
	name := str(get(get(m, "metadata"), "name"))
	if !mentionsHashlb(name, str(get(w, "url")), str(get(w, "pluginName"))) {
		if w == nil && get(spec, "lua") != nil {
			src.skip(where + ": a Lua extension, not hashlb's")
			return
		}
		src.skip(where + ": not hashlb's (neither its name, url nor pluginName mentions hashlb)")
		return
	}
	e := Item{Where: where, Node: m}
	if kind == "TrafficExtension" {
		for _, f := range misplacedWasmFields {
			if n := get(spec, f); n != nil {
				e.Problem = fmt.Sprintf("spec.%s (line %d): a TrafficExtension has no spec.%s (its CRD's schema): the Wasm fields go under spec.wasm (spec.wasm.%s)", f, n.Line, f, f)
				src.Items = append(src.Items, e)
				return
			}
		}
		if w == nil {
			e.Problem = "spec.wasm: missing: hashlb is a Wasm module (a TrafficExtension takes exactly one of wasm and lua)"
			src.Items = append(src.Items, e)
			return
		}
	}
	// An absent or empty pluginConfig gives the module no configuration at
	// all: only a Struct with fields is marshalled (istio/istio
	// pilot/pkg/model/extensions.go at 86c9f01, buildWasmConfig, which a
	// WasmPlugin reaches too, turned into a TrafficExtension).
	if pc := get(w, "pluginConfig"); pc != nil && pc.ShortTag() != "!!null" && !(pc.Kind == yaml.MappingNode && len(pc.Content) == 0) {
		if pc.Kind != yaml.MappingNode {
			e.Problem = fmt.Sprintf("%s.pluginConfig (line %d): a %s; Istio takes a mapping and passes it to the module as JSON", at, pc.Line, kindName(pc))
		} else if v, err := structValue(pc); err != nil {
			e.Problem = at + ".pluginConfig: " + err.Error()
		} else {
			e.Data, err = marshalJSON(v)
			if err != nil {
				e.Problem = at + ".pluginConfig: " + err.Error()
			}
		}
	}
	src.Items = append(src.Items, e)
}

// The Envoy types a hashlb filter is configured with.
const (
	wasmType        = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	netWasmType     = "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm"
	stringValueType = "type.googleapis.com/google.protobuf.StringValue"
)

// typedStructTypes wrap a typed config in EnvoyFilter patches and xDS.
var typedStructTypes = []string{"type.googleapis.com/udpa.type.v1.TypedStruct", "type.googleapis.com/xds.type.v3.TypedStruct"}

// wasmWalk finds the wasm filters in an Envoy configuration.
type wasmWalk struct {
	src    *File
	prefix string // for EnvoyFilter patches: the resource and patch
	seen   int    // wasm filters found, hashlb's or not
}

// walkCtx is where the walk is: the enclosing listener and filter entry.
type walkCtx struct{ listener, filter string }

func (w *wasmWalk) walk(n *yaml.Node, ctx walkCtx) {
	n = deref(n)
	if n == nil {
		return
	}
	switch n.Kind {
	case yaml.SequenceNode:
		for _, c := range n.Content {
			w.walk(c, ctx)
		}
		return
	case yaml.MappingNode:
	default:
		return
	}
	if get(n, "filter_chains") != nil || get(n, "default_filter_chain") != nil {
		ctx.listener = str(get(n, "name"))
	}
	if get(n, "typed_config") != nil && get(n, "name") != nil {
		ctx.filter = str(get(n, "name"))
	}
	switch typ := str(get(n, "@type")); {
	case typ == wasmType || typ == netWasmType:
		w.filter(get(n, "config"), ctx)
		return
	case slices.Contains(typedStructTypes, typ) && (str(get(n, "type_url")) == wasmType || str(get(n, "type_url")) == netWasmType):
		w.filter(get(get(n, "value"), "config"), ctx)
		return
	}
	for i := 1; i < len(n.Content); i += 2 {
		w.walk(n.Content[i], ctx)
	}
}

// filter reads one wasm filter's PluginConfig: hashlb's when its name,
// root_id, vm_id or module path says so.
func (w *wasmWalk) filter(cfg *yaml.Node, ctx walkCtx) {
	w.seen++
	vm := get(cfg, "vm_config")
	code := get(vm, "code")
	name := str(get(cfg, "name"))
	var where []string
	if w.prefix != "" {
		where = append(where, w.prefix)
	}
	if ctx.listener != "" {
		where = append(where, "listener "+ctx.listener)
	}
	rootID := str(get(cfg, "root_id"))
	switch {
	case name != "":
		where = append(where, "filter "+name)
	case rootID != "":
		where = append(where, "filter with root_id "+rootID)
	case ctx.filter != "":
		where = append(where, "filter "+ctx.filter)
	default:
		where = append(where, fmt.Sprintf("wasm filter at line %d", cfg.Line))
	}
	e := Item{Where: strings.Join(where, ", "), Node: cfg}
	if !mentionsHashlb(name, rootID, str(get(vm, "vm_id")),
		str(get(get(code, "local"), "filename")), str(get(get(get(code, "remote"), "http_uri"), "uri"))) {
		w.src.skip(e.Where + ": not hashlb's (neither its name, root_id, vm_id nor module mentions hashlb)")
		return
	}
	if c := get(cfg, "configuration"); c != nil {
		switch typ, v := str(get(c, "@type")), get(c, "value"); {
		case typ != stringValueType:
			e.Problem = fmt.Sprintf("configuration (line %d): @type %q; hashlb reads its JSON from a %s", c.Line, typ, stringValueType)
		case v == nil:
			e.Data = []byte{}
		case v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str":
			e.Problem = fmt.Sprintf("configuration.value (line %d): a %s, not a string holding hashlb's JSON", v.Line, kindName(v))
		default:
			e.Data = []byte(v.Value)
		}
	}
	w.src.Items = append(w.src.Items, e)
}

func mentionsHashlb(names ...string) bool {
	for _, s := range names {
		if strings.Contains(strings.ToLower(s), "hashlb") {
			return true
		}
	}
	return false
}

// deref follows YAML aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// get returns the value of key in mapping m (merge keys included), or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	m = deref(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key && m.Content[i].ShortTag() != "!!merge" {
			return deref(m.Content[i+1])
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].ShortTag() == "!!merge" {
			for _, src := range merged(m.Content[i+1]) {
				if v := get(src, key); v != nil {
					return v
				}
			}
		}
	}
	return nil
}

// merged lists the mappings a merge key's value names.
func merged(v *yaml.Node) []*yaml.Node {
	v = deref(v)
	if v.Kind == yaml.SequenceNode {
		var out []*yaml.Node
		for _, c := range v.Content {
			out = append(out, deref(c))
		}
		return out
	}
	return []*yaml.Node{v}
}

// items returns a sequence's elements, or nil.
func items(n *yaml.Node) []*yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		out[i] = deref(c)
	}
	return out
}

// str returns a scalar's value, or "".
func str(n *yaml.Node) string {
	if n = deref(n); n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	switch n.ShortTag() {
	case "!!str":
		return "string"
	case "!!int", "!!float":
		return "number"
	case "!!bool":
		return "boolean"
	case "!!null":
		return "null"
	}
	return "scalar"
}

// structValue converts YAML into the value a google.protobuf.Struct holds:
// objects, lists, strings, doubles, booleans and null.
func structValue(n *yaml.Node) (any, error) {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		var merges []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.ShortTag() == "!!merge" {
				merges = append(merges, merged(v)...)
				continue
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: %q twice in one mapping", k.Line, k.Value)
			}
			x, err := structValue(v)
			if err != nil {
				return nil, err
			}
			m[k.Value] = x
		}
		for _, src := range merges { // explicit keys win over merged ones
			x, err := structValue(src)
			if err != nil {
				return nil, err
			}
			if sm, ok := x.(map[string]any); ok {
				for k, v := range sm {
					if _, have := m[k]; !have {
						m[k] = v
					}
				}
			}
		}
		return m, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			x, err := structValue(c)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	}
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		err := n.Decode(&b)
		return b, err
	case "!!int", "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, fmt.Errorf("line %d: %q is not a number Istio can pass", n.Line, n.Value)
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("line %d: %s is not a JSON number", n.Line, n.Value)
		}
		return f, nil
	}
	return n.Value, nil
}

// marshalJSON writes v as compact JSON with sorted keys, as protojson writes a
// Struct (encoding/json sorts map keys and formats doubles the same way).
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
