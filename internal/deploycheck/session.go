package deploycheck

import (
	"fmt"
	"slices"

	"github.com/hashlb/hashlb/lbcore"
	"gopkg.in/yaml.v3"
)

// A plugin with a session block refuses to start without its signing key in
// the VM's environment (lbcore.SessionKeyEnv; SECURITY.md, "Session
// persistence"): the proxy would then reject the filter. These checks find
// the environment the file gives the VM and say so before deployment. They
// cannot see the key's value (host_env_keys copies it from the proxy's own
// environment), only whether the VM is given one.

// sessionKey checks an Envoy wasm filter's PluginConfig (config) for the
// session key in vm_config.environment_variables.
func (c *envoyCheck) sessionKey(p plugin, at located) {
	if p.cfg.Session == nil {
		return
	}
	env := get(get(at.n, "vm_config"), "environment_variables")
	var names []string
	for _, k := range items(get(env, "host_env_keys")) {
		names = append(names, str(k))
	}
	if kv := get(env, "key_values"); kv != nil && kv.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(kv.Content); i += 2 {
			names = append(names, kv.Content[i].Value)
		}
	}
	if !slices.Contains(names, lbcore.SessionKeyEnv) {
		c.add(p, located{at.n, at.path + ".vm_config.environment_variables"}, false,
			"session needs the signing key in the VM's environment, and the plugin refuses to start without it: add %s to environment_variables.host_env_keys (Envoy copies it from its own environment; key_values would show it in /config_dump)", lbcore.SessionKeyEnv)
	}
}

// sessionKey checks a WasmPlugin's (or TrafficExtension's wasm)
// vmConfig.env for the session key.
func (c *istioCheck) sessionKey(r resource, p plugin, w *yaml.Node, at string) {
	if p.cfg.Session == nil {
		return
	}
	for _, e := range items(get(get(w, "vmConfig"), "env")) {
		if str(get(e, "name")) == lbcore.SessionKeyEnv {
			return
		}
	}
	c.add(p, r, w, at+".vmConfig.env", false,
		"session needs the signing key in the VM's environment, and the plugin refuses to start without it: add {name: %s, valueFrom: HOST} to vmConfig.env (the proxy's own environment, e.g. from a Secret)", lbcore.SessionKeyEnv)
}

// inlineKeys finds the session key written into a file: an Envoy wasm
// filter's vm_config.environment_variables.key_values (also in an ECDS
// resource or an EnvoyFilter patch) or an Istio vmConfig.env entry that is
// not valueFrom HOST (INLINE is Istio's default, and istiod and
// hashlb-controller turn it into key_values). Envoy's /config_dump shows
// such a value, and so does everyone who can read the file or the
// resource. Each is a warning (hashlb check -strict refuses it), with or
// without a session block, and whatever the configuration's validity.
func inlineKeys(files []Named) []Finding {
	var out []Finding
	for _, f := range files {
		for _, it := range f.Configs() {
			n := it.Node
			if n == nil {
				continue
			}
			if vm := get(n, "vm_config"); vm != nil {
				kv := get(get(vm, "environment_variables"), "key_values")
				if kv == nil || kv.Kind != yaml.MappingNode {
					continue
				}
				for i := 0; i+1 < len(kv.Content); i += 2 {
					if k := kv.Content[i]; k.Value == lbcore.SessionKeyEnv {
						out = append(out, Finding{File: f.Name, Where: it.Where, Path: "vm_config.environment_variables.key_values." + k.Value, Line: k.Line, Warning: true, Plugin: n,
							Problem: fmt.Sprintf("the session key is written inline: Envoy's /config_dump shows it, as does everyone who reads this file; name it in environment_variables.host_env_keys: [%s] instead, and set Envoy's own environment from a Secret", lbcore.SessionKeyEnv)})
					}
				}
				continue
			}
			w, at := wasmFields(n)
			for i, e := range items(get(get(w, "vmConfig"), "env")) {
				if str(get(e, "name")) != lbcore.SessionKeyEnv {
					continue
				}
				if from := str(get(e, "valueFrom")); from == "HOST" {
					continue
				}
				out = append(out, Finding{File: f.Name, Where: it.Where, Path: fmt.Sprintf("%s.vmConfig.env[%d]", at, i), Line: e.Line, Warning: true, Plugin: n,
					Problem: fmt.Sprintf("the session key is written inline (valueFrom INLINE, Istio's default): the WasmPlugin, the proxy's /config_dump and an ECDS file show it; use {name: %s, valueFrom: HOST} and set the proxy's environment from a Secret", lbcore.SessionKeyEnv)})
			}
		}
	}
	return out
}
