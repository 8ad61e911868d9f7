package deploycheck

import (
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
