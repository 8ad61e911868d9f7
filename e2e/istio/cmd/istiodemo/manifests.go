package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"sigs.k8s.io/yaml"

	"github.com/hashlb/hashlb/e2e/istio/internal/istioenv"
	"github.com/hashlb/hashlb/internal/deploycheck"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// manifest is one file applied, by its name under configs/istio/, with its
// objects as the demo applies them.
type manifest struct {
	name string
	data []byte
}

// demoManifests are the files of configs/istio/ the demo applies, in
// order, each changed only where the demo differs from a cluster: the
// plugin configuration pc (JSON), the module at modulePath, the gateway's
// port listen.
func demoManifests(root string, pc []byte, modulePath string, listen int) ([]manifest, error) {
	var cfg struct {
		Services []struct{ Address string } `json:"services"`
	}
	if err := json.Unmarshal(pc, &cfg); err != nil {
		return nil, fmt.Errorf("the demo's plugin configuration: %v", err)
	}
	var plugin map[string]any
	if err := json.Unmarshal(pc, &plugin); err != nil {
		return nil, err
	}
	edits := []struct {
		name string
		edit func(obj map[string]any) error
	}{
		// The demo backends are the endpoints: the plugin's services.
		{"serviceentry.yaml", func(obj map[string]any) error {
			var eps []any
			for _, s := range cfg.Services {
				host, port, err := net.SplitHostPort(s.Address)
				if err != nil {
					return err
				}
				p, err := strconv.Atoi(port)
				if err != nil {
					return err
				}
				eps = append(eps, map[string]any{"address": host, "ports": map[string]any{"http": p}})
			}
			spec(obj)["endpoints"] = eps
			return nil
		}},
		{"destinationrule.yaml", nil},
		// The gateway listens where the README's curl lines go.
		{"gateway/gateway.yaml", func(obj map[string]any) error {
			if obj["kind"] != "Gateway" {
				return nil
			}
			for _, s := range spec(obj)["servers"].([]any) {
				srv := s.(map[string]any)
				srv["port"].(map[string]any)["number"] = listen
				srv["bind"] = "127.0.0.1"
			}
			return nil
		}},
		{"gateway/envoyfilter.yaml", nil},
		// The module built from the tree, with the demo's configuration.
		{"gateway/wasmplugin.yaml", func(obj map[string]any) error {
			sp := spec(obj)
			sp["url"] = "file://" + modulePath
			delete(sp, "sha256")
			sp["pluginConfig"] = plugin
			return nil
		}},
	}
	var out []manifest
	for _, e := range edits {
		data, err := os.ReadFile(filepath.Join(root, "configs", "istio", e.name))
		if err != nil {
			return nil, err
		}
		if e.edit != nil {
			if data, err = editObjects(data, e.edit); err != nil {
				return nil, fmt.Errorf("configs/istio/%s: %v", e.name, err)
			}
		}
		out = append(out, manifest{e.name, data})
	}
	return out, nil
}

// spec is an object's spec.
func spec(obj map[string]any) map[string]any {
	s, _ := obj["spec"].(map[string]any)
	if s == nil {
		s = map[string]any{}
		obj["spec"] = s
	}
	return s
}

// editObjects applies edit to every object of a YAML file and writes them
// back as one YAML file.
func editObjects(data []byte, edit func(map[string]any) error) ([]byte, error) {
	var out []byte
	for _, doc := range istioenv.Docs(data) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		if err := edit(obj); err != nil {
			return nil, err
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, b...)
	}
	return out, nil
}

// demoPluginConfig is the plugin configuration ./build.sh envoy runs:
// envoy.yaml's, with debugHeader on (envoyrun.DemoBootstrap says why this
// one and not configs/demo.json).
func demoPluginConfig(root string) ([]byte, error) {
	src, err := os.ReadFile(filepath.Join(root, "envoy.yaml"))
	if err != nil {
		return nil, err
	}
	b, err := envoyrun.DemoBootstrap(src)
	if err != nil {
		return nil, err
	}
	f, err := deploycheck.Scan(b)
	if err != nil {
		return nil, err
	}
	return f.Configs()[0].Data, nil
}
