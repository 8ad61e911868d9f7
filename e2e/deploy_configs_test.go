package e2e

// Every file under configs/ is checked here, by the rule its name selects; a
// file no rule covers fails the test, so a new example cannot go unchecked.
//   configs/*.json (but schema.json)  lbcore.ParseConfig and the schema, plus
//                                     what the example is meant to show
//   configs/schema.json               TestSchemaMatchesFields
//   configs/envoy-*.yaml              Envoy bootstrap checks (deploy_envoy_test.go)
//   configs/envoy-lbpolicy.yaml,      the load-balancing policy's bootstrap and its
//   configs/lbpolicy-endpoints.yaml   endpoints file (deploy_lbpolicy_test.go)
//   configs/envoy-lbpolicy-fleet.yaml the policy's bootstrap with persistence.fleet over
//                                     three etcd members, otherwise envoy-lbpolicy.yaml
//                                     (deploy_lbpolicy_test.go)
//   configs/envoy-ecds.yaml           a valid bootstrap here; its ECDS wiring and the files
//                                     hashlb-controller writes for it are checked in that
//                                     module (cmd/hashlb-controller/controller/ecds_test.go)
//   configs/istio/controller/*.yaml   cmd/hashlb-controller/manifests_test.go (its own module)
//   configs/istio/*.yaml              Istio checks (deploy_istio_test.go)
//   configs/istio/tcp/*.yaml          Istio NETWORK plugin checks (deploy_istio_variants_test.go)
//   configs/istio/fleet/*.yaml        Istio checks of configs/istio with fleet/ applied
//   configs/istio/trafficextension/   each TrafficExtension applied instead of its WasmPlugin
//                                     twin, with that twin's bundle (deploy_istio_test.go, deploy_istio_variants_test.go)
//   configs/istio/ambient/*.yaml      Istio ambient waypoint checks (deploy_istio_variants_test.go)
//   configs/istio/lbpolicy/*.yaml     the load-balancing policy's EnvoyFilter, with configs/istio's
//                                     other files in the place of its two (deploy_lbpolicy_test.go)
//   configs/istio/gateway/*.yaml      e2e/istio's TestShippedGateway (its own module), through istiod

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/internal/deploycheck"
	"github.com/hashlb/hashlb/lbcore"
)

// pluginConfigFiles lists the example plugin configs: configs/*.json but the schema.
func pluginConfigFiles(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repoRoot(t), "configs"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && e.Name() != "schema.json" {
			out = append(out, e.Name())
		}
	}
	return out
}

// exampleIntent is what each example config is there to show, beyond what
// its name says: configs/<method>.json, one per method of lbcore.Methods(),
// must use that method (TestConfigsPluginExamples); any other example needs
// an entry here.
var exampleIntent = map[string]func(c *lbcore.Config) bool{
	"demo.json": func(c *lbcore.Config) bool { return len(c.Services) > 0 },
	"sourceiphash.json": func(c *lbcore.Config) bool {
		return c.Netmask == 24 && c.V6NetmaskLen == 64
	},
	"token.json": func(c *lbcore.Config) bool {
		return c.Token != nil &&
			strings.Contains(c.Token.String(), "request.header.x-tenant") && strings.Contains(c.Token.String(), "request.cookie.tenant")
	},
	"persistence.json": func(c *lbcore.Config) bool {
		p := c.Persistence
		return p != nil && len(p.Keys) == 2 && strings.Contains(p.Keys[0].String(), "client.ip") &&
			strings.Contains(p.Keys[1].String(), "request.header.x-client-id")
	},
	"health.json": func(c *lbcore.Config) bool { return c.HealthCheck != nil && c.PassiveHealth != nil },
	// The fleet demo (hashlb-proxy -etcd -fleet 3 -config configs/fleet.json):
	// a method that differs between proxies, made to agree by etcd.
	"fleet.json": func(c *lbcore.Config) bool {
		p := c.Persistence
		return p != nil && p.Fleet != nil && p.Fleet.Cluster == "etcd" && c.LBMethod == lbcore.MethodLeastConnection
	},
	"tcp.json": func(c *lbcore.Config) bool { return c.Network() && c.ViaFilterState() },
}

func TestConfigsPluginExamples(t *testing.T) {
	files := pluginConfigFiles(t)
	// The example of each method is named after it.
	methodOf := map[string]string{}
	for _, m := range lbcore.Methods() {
		name := strings.ToLower(m) + ".json"
		methodOf[name] = m
		if !slices.Contains(files, name) {
			t.Errorf("no example config for %s (configs/%s)", m, name)
		}
	}
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			c, err := lbcore.ParseConfig(readRepoFile(t, "configs/"+name))
			if err != nil {
				t.Fatalf("ParseConfig(configs/%s): %v", name, err)
			}
			m, isMethod := methodOf[name]
			if isMethod && c.LBMethod.String() != m {
				t.Errorf("configs/%s: lbMethod %s, want %s", name, c.LBMethod, m)
			}
			intent, ok := exampleIntent[name]
			switch {
			case !ok && !isMethod:
				t.Fatalf("configs/%s: add what it demonstrates to exampleIntent", name)
			case ok && !intent(c):
				t.Errorf("configs/%s does not show what its name promises", name)
			}
		})
	}
}

// TestConfigsDirCovered walks configs/ and runs each file's check; a file no
// rule covers is an error.
func TestConfigsDirCovered(t *testing.T) {
	root := filepath.Join(repoRoot(t), "configs")
	schema := loadSchema(t)
	// dirOnce checks the files of a directory that are checked together, at
	// the first of them.
	seen := map[string]bool{}
	dirOnce := func(dir string, check func() error) {
		if seen[dir] {
			return
		}
		seen[dir] = true
		if err := check(); err != nil {
			t.Errorf("configs/%s: %v", dir, err)
		}
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case rel == "schema.json":
			// TestSchemaMatchesFields and TestSchemaExamples.
			if _, ok := schema["properties"]; !ok {
				t.Errorf("configs/schema.json has no properties")
			}
		case path.Dir(rel) == "." && path.Ext(rel) == ".json":
			if _, err := lbcore.ParseConfig(data); err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case rel == "envoy-ecds.yaml":
			if _, err := loadBootstrap(data); err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case rel == "ecds/demo_hashlb.json":
			// The controller module's TestECDSBootstrap: byte for byte what it
			// writes; here, that hashlb accepts the configuration it carries.
			f, err := deploycheck.Scan(data)
			if err != nil || len(f.Configs()) != 1 {
				t.Errorf("configs/%s: want one hashlb configuration (err %v)", rel, err)
				break
			}
			if _, problems := f.Configs()[0].Parse(); problems != nil {
				t.Errorf("configs/%s: %v", rel, problems)
			}
		case path.Dir(rel) == "istio/controller" && path.Ext(rel) == ".yaml":
			// Checked by the controller module's TestManifests and TestRBAC.
		case path.Dir(rel) == "istio/gateway" && path.Ext(rel) == ".yaml":
			// Applied as shipped to istiod with an ingress gateway's Envoy
			// by e2e/istio's TestShippedGateway (its own module).
		case rel == "envoy-lbpolicy.yaml":
			if _, err := checkLBPolicyBootstrap(data); err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case rel == "envoy-lbpolicy-fleet.yaml":
			base, err := os.ReadFile(filepath.Join(filepath.Dir(p), "envoy-lbpolicy.yaml"))
			if err != nil {
				return err
			}
			if err := checkLBPolicyFleetBootstrap(data, base); err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case rel == "lbpolicy-endpoints.yaml":
			boot, err := os.ReadFile(filepath.Join(filepath.Dir(p), "envoy-lbpolicy.yaml"))
			if err != nil {
				return err
			}
			users, err := checkLBPolicyBootstrap(boot)
			if err == nil {
				err = checkLBPolicyEndpoints(data, users)
			}
			if err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case path.Dir(rel) == "." && strings.HasPrefix(rel, "envoy-") && path.Ext(rel) == ".yaml":
			if err := checkBootstrapFile(data); err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case path.Dir(rel) == "istio/tcp" && path.Ext(rel) == ".yaml":
			dirOnce("istio/tcp", func() error { return checkIstioBundle(readIstioFiles(t, "tcp"), checkIstioTCP) })
		case path.Dir(rel) == "istio/ambient" && path.Ext(rel) == ".yaml":
			dirOnce("istio/ambient", func() error { return checkIstioBundle(readIstioFiles(t, "ambient"), checkIstioAmbient) })
		case path.Dir(rel) == "istio/fleet" && path.Ext(rel) == ".yaml":
			dirOnce("istio/fleet", func() error { return checkIstioFiles(readIstioFleet(t)) })
		case rel == "istio/trafficextension/trafficextension.yaml":
			if err := checkIstioFiles(readTrafficExtension(t, readIstioDir(t), "trafficextension/trafficextension.yaml")); err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case rel == "istio/trafficextension/fleet/trafficextension.yaml":
			if err := checkIstioFiles(readTrafficExtension(t, readIstioFleet(t), "trafficextension/fleet/trafficextension.yaml")); err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case rel == "istio/trafficextension/tcp/trafficextension.yaml":
			if err := checkIstioBundle(readTrafficExtension(t, readIstioFiles(t, "tcp"), "trafficextension/tcp/trafficextension.yaml"), checkIstioTCP); err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case rel == "istio/lbpolicy/envoyfilter.yaml":
			if err := checkIstioLBPolicy(readIstioLBPolicy(t)); err != nil {
				t.Errorf("configs/%s: %v", rel, err)
			}
		case path.Dir(rel) == "istio" && path.Ext(rel) == ".yaml":
			dirOnce("istio", func() error { return checkIstioFiles(readIstioDir(t)) })
		default:
			t.Errorf("configs/%s: no test checks this file; add a rule to TestConfigsDirCovered", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
