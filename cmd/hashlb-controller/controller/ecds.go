package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hashlb/hashlb/internal/atomicfile"
)

// Type URLs of the ECDS resource (go-control-plane's names; the controller
// writes JSON by hand so that it needs no Envoy library).
const (
	typedExtensionConfigType = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
	httpWasmType             = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	networkWasmType          = "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm"
	stringValueType          = "type.googleapis.com/google.protobuf.StringValue"
)

// ECDS writes, for each annotated WasmPlugin, the whole filter configuration
// as an Envoy extension config discovery file: a DiscoveryResponse holding
// one TypedExtensionConfig named like the WasmPlugin, whose Wasm filter
// carries hashlb's JSON as its configuration. Envoy's path_config_source
// reloads the file when it is renamed into place, so every write is a
// temporary file in the same directory renamed over the old one.
type ECDS struct {
	// Dir holds the files, named <namespace>_<name>.json.
	Dir string
	// Module is the Wasm file loaded when the WasmPlugin's url is not file://.
	Module string
}

// Path is the file of one WasmPlugin.
func (e *ECDS) Path(key types.NamespacedName) string { return e.pathOf(WasmPlugin, key) }

// pathOf is the file of one object of kind k: <namespace>_<name>.json for a
// WasmPlugin, <namespace>_<name>_trafficextension.json for a
// TrafficExtension, so that the two kinds' objects of one name (a migration
// from one to the other) never share a file.
func (e *ECDS) pathOf(k *Kind, key types.NamespacedName) string {
	// Namespaces are DNS labels and names DNS subdomains: neither holds '_'.
	suffix := ""
	if k != WasmPlugin {
		suffix = "_" + strings.ToLower(k.GVK.Kind)
	}
	return filepath.Join(e.Dir, key.Namespace+"_"+key.Name+suffix+".json")
}

// Resource is the file's content for wp with plugin configuration cfg.
func (e *ECDS) Resource(wp *unstructured.Unstructured, cfg map[string]any) ([]byte, error) {
	kind := kindOf(wp)
	config, err := json.Marshal(cfg) // map keys sorted: the same config, the same bytes
	if err != nil {
		return nil, badf("%s: %v", kind.Field("pluginConfig"), err)
	}
	module := e.Module
	if url, _, _ := unstructured.NestedString(wp.Object, kind.Path("url")...); strings.HasPrefix(url, "file://") {
		module = strings.TrimPrefix(url, "file://")
	}
	wasmType := httpWasmType
	if t, _, _ := unstructured.NestedString(wp.Object, kind.Path("type")...); strings.EqualFold(t, "NETWORK") {
		wasmType = networkWasmType
	}
	plugin := map[string]any{
		"name": wp.GetName(),
		"vm_config": map[string]any{
			// One vm_id for every hashlb plugin of a proxy, as in envoy.yaml:
			// Envoy keys shared data by vm_id.
			"vm_id":   "hashlb",
			"runtime": "envoy.wasm.runtime.v8",
			"code":    map[string]any{"local": map[string]any{"filename": module}},
		},
		// Fail closed whatever the WasmPlugin says: a bypassed hashlb would
		// leave a client's own upstream header in place. FAIL_RELOAD also
		// fails closed (503) but makes a new VM after a runtime failure, as
		// envoy.yaml does (docs/deploy.md, "Failure policy").
		"fail_open":      false,
		"failure_policy": "FAIL_RELOAD",
		"configuration":  map[string]any{"@type": stringValueType, "value": string(config)},
	}
	if root, _, _ := unstructured.NestedString(wp.Object, kind.Path("pluginName")...); root != "" {
		plugin["root_id"] = root
	}
	env, err := environment(wp, kind.Wasm...)
	if err != nil {
		return nil, err
	}
	if env != nil {
		plugin["vm_config"].(map[string]any)["environment_variables"] = env
	}
	doc := map[string]any{
		"type_url": typedExtensionConfigType,
		"resources": []any{map[string]any{
			"@type":        typedExtensionConfigType,
			"name":         wp.GetName(),
			"typed_config": map[string]any{"@type": wasmType, "config": plugin},
		}},
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// Stale reports whether wp's file differs from data.
func (e *ECDS) Stale(wp *unstructured.Unstructured, data []byte) bool {
	old, err := os.ReadFile(e.pathOf(kindOf(wp), types.NamespacedName{Namespace: wp.GetNamespace(), Name: wp.GetName()}))
	return err != nil || !bytes.Equal(old, data)
}

// Write replaces wp's file with data atomically (write, sync, rename).
func (e *ECDS) Write(wp *unstructured.Unstructured, data []byte) error {
	path := e.pathOf(kindOf(wp), types.NamespacedName{Namespace: wp.GetNamespace(), Name: wp.GetName()})
	if err := atomicfile.Write(path, data); err != nil {
		return fmt.Errorf("ECDS file %s: %w", path, err)
	}
	return nil
}

// Remove deletes the file of an object of kind k that is gone or no longer
// annotated. Envoy keeps the configuration it last read.
func (e *ECDS) Remove(k *Kind, key types.NamespacedName) error {
	if err := os.Remove(e.pathOf(k, key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// environment is the vm_config.environment_variables of Envoy's Wasm
// PluginConfig for the object's vmConfig.env (under the path wasm), nil when
// there is none. As istiod converts it (istio/istio pilot/pkg/model,
// buildVMConfig): an entry with valueFrom HOST names a variable copied from
// Envoy's own environment (host_env_keys), any other (INLINE, the default)
// gives its value inline (key_values). This is how the fleet's etcd
// credentials, HASHLB_ETCD_USER and HASHLB_ETCD_PASSWORD, reach the VM. The
// session key inline is refused: it would be written into the file.
func environment(wp *unstructured.Unstructured, wasm ...string) (map[string]any, error) {
	path := append(append([]string(nil), wasm...), "vmConfig", "env")
	list, found, err := unstructured.NestedSlice(wp.Object, path...)
	if err != nil {
		return nil, badf("%s: %v", strings.Join(path, "."), err)
	}
	if !found || len(list) == 0 {
		return nil, nil
	}
	var host []any
	inline := map[string]any{}
	for i, e := range list {
		m, ok := e.(map[string]any)
		name, _ := m["name"].(string)
		if !ok || name == "" {
			return nil, badf("%s[%d]: an entry needs a name", strings.Join(path, "."), i)
		}
		switch from := m["valueFrom"]; from {
		case "HOST", int64(1), float64(1):
			host = append(host, name)
		case nil, "", "INLINE", int64(0), float64(0):
			if name == sessionKeyEnv {
				// The file, and Envoy's /config_dump, would show the key.
				return nil, badf("%s[%d] (%s): the session key is written inline (valueFrom INLINE, the default), and hashlb-controller never writes a key into an ECDS file: use valueFrom HOST and set the proxy's environment from a Secret", strings.Join(path, "."), i, name)
			}
			value, _ := m["value"].(string)
			inline[name] = value
		default:
			return nil, badf("%s[%d] (%s): valueFrom %v is not INLINE or HOST", strings.Join(path, "."), i, name, from)
		}
	}
	env := map[string]any{}
	if len(host) > 0 {
		env["host_env_keys"] = host
	}
	if len(inline) > 0 {
		env["key_values"] = inline
	}
	return env, nil
}
