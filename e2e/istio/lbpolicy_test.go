package istio

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"sigs.k8s.io/yaml"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lbpolicy"
	"github.com/hashlb/hashlb/lbcore"
)

// lbpolicyFiles are the shipped files of the load-balancing policy's
// shape, in the order a user applies them: the sidecar files with
// lbpolicy/envoyfilter.yaml in the place of envoyfilter.yaml and
// wasmplugin.yaml.
var lbpolicyFiles = []string{"serviceentry.yaml", "destinationrule.yaml", "virtualservice.yaml", "lbpolicy/envoyfilter.yaml"}

// TestShippedLBPolicy applies configs/istio/lbpolicy/envoyfilter.yaml with
// the shared ServiceEntry, DestinationRule and VirtualService to a real
// istiod and connects the release's Envoy as the frontend's sidecar, with
// ENVOY_DYNAMIC_MODULES_SEARCH_PATH naming the module built from the tree:
// the outbound cluster runs hashlb's dynamic module with the shipped
// configuration (and the other files' endpoints, outlier detection and
// retries, which skip the hosts already tried), every corpus request reaches the endpoint lbcore ranks first
// over the cluster's endpoints; a policy configuration hashlb refuses
// leaves Envoy on the cluster it had, with hashlb's message in its log; and
// the EnvoyFilter changed as a user might get it wrong fails the checks
// with a message naming it.
func TestShippedLBPolicy(t *testing.T) {
	eachRelease(t, func(t *testing.T, r releaseSetup) {
		cl := startCluster(t, r)
		names := map[string]string{} // endpoint address -> backend name
		for i, name := range []string{"backend-1", "backend-2", "backend-3"} {
			addr := serviceAddrs[i] + ":8080"
			envoyrun.StartBackendAt(t, name, addr)
			names[addr] = name
		}
		files := applyShipped(t, cl, lbpolicyFiles)
		policy := policyConfigJSON(t, files["lbpolicy/envoyfilter.yaml"])
		p, err := lbpolicy.ParseConfig(policy)
		if err != nil {
			t.Fatalf("configs/istio/lbpolicy/envoyfilter.yaml: the policy refuses its configuration: %v", err)
		}
		// The release's own Envoy: the policy needs no Wasm runtime.
		sc := startSidecarOf(t, r, r.Envoy, "frontend-0", map[string]string{"app": "frontend"},
			"ENVOY_DYNAMIC_MODULES_SEARCH_PATH="+env.LBPolicy)
		checks := lbpolicyChecks(policy)
		start := time.Now()
		if err := waitFor(sc, checks, 3*time.Minute, func(err error) bool { return err == nil }); err != nil {
			t.Fatalf("after 3 min, Envoy does not run what the shipped files ask:\n%v\nEnvoy's log (tail):\n%s", err, sc.LogTail(20))
		}
		t.Logf("every shipped file in Envoy's configuration %s after Envoy was ready", time.Since(start).Round(100*time.Millisecond))

		t.Run("corpus", func(t *testing.T) {
			dump, err := sc.configDump()
			if err != nil {
				t.Fatal(err)
			}
			b, err := clusterOracle(p, dump)
			if err != nil {
				t.Fatal(err)
			}
			reqs := corpus.Requests(corpusRequests)
			served := map[string]int{}
			bad := 0
			for i, cr := range reqs {
				c := fromCorpus(cr)
				a, err := c.send(outboundAddr)
				if err == nil {
					d := corpus.Oracle(b, c.seen(a.peer, sidecarShape))
					switch {
					case d.Reason != lbcore.ReasonHash || d.Len() == 0:
						err = fmt.Errorf("lbcore decides it by %s, not by its hash: the corpus request tests nothing here", d.Reason)
					case a.status != 200 || a.backend != names[b.Config().Services[d.At(0)].Address]:
						err = fmt.Errorf("%d from %s, lbcore's choice is %s (%s)", a.status, a.backend,
							names[b.Config().Services[d.At(0)].Address], b.Config().Services[d.At(0)].Address)
					}
				}
				if err != nil {
					if bad++; bad <= 5 {
						t.Errorf("corpus request %d (%s from %s): %v", i, corpus.Brief(c.headers), c.srcIP, err)
					}
					continue
				}
				served[a.backend]++
			}
			if bad > 0 {
				t.Fatalf("%d of %d corpus requests did not reach lbcore's choice", bad, len(reqs))
			}
			t.Logf("%d corpus requests on lbcore's choice (%v)", len(reqs), served)
			if len(served) != len(names) {
				t.Errorf("the corpus proves too little: backends served %v", served)
			}
			for _, s := range []string{"dynamicmodulescustom.no_host", "dynamicmodulescustom.panic", "dynamicmodulescustom.update_error"} {
				if n := sc.Stat(t, s); n != 0 {
					t.Errorf("%s = %d, want 0", s, n)
				}
			}
		})

		const f = "lbpolicy/envoyfilter.yaml"
		t.Run("a configuration hashlb refuses", func(t *testing.T) {
			// istiod passes it on; Envoy rejects the cluster update with
			// hashlb's message and keeps the cluster it had.
			refused := bytes.Replace(files[f], []byte(`"hashLength": 80`), []byte(`"hashLength": 0`), 1)
			if bytes.Equal(refused, files[f]) {
				t.Fatalf("%s has no hashLength 80 to change", f)
			}
			if err := cl.Apply(f, refused); err != nil {
				t.Fatal(err)
			}
			if err := sc.WaitLog("hashlb: configuration refused: hashLength", 3*time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := waitFor(sc, checks, 0, func(err error) bool { return err == nil }); err != nil {
				t.Errorf("after the refusal Envoy no longer runs the cluster it had:\n%v", err)
			}
			if err := cl.Apply(f, files[f]); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("changed manifests name their file", func(t *testing.T) {
			for _, ch := range []struct{ old, new, what string }{
				{"service: " + backendsHost, "service: hashlb-backend.demo.internal", "the cluster match renamed"},
				{"app: frontend", "app: front-end", "a workloadSelector that selects no workload"},
			} {
				changed := bytes.Replace(files[f], []byte(ch.old), []byte(ch.new), 1)
				if bytes.Equal(changed, files[f]) {
					t.Fatalf("%s has no %q to change", f, ch.old)
				}
				if err := cl.Apply(f, changed); err != nil {
					t.Fatal(err)
				}
				err := waitFor(sc, checks, 3*time.Minute, func(err error) bool { return err != nil })
				if err == nil || !strings.Contains(err.Error(), "configs/istio/"+f+" not applied") {
					t.Errorf("%s with %s: the checks say %v, want a failure naming the file", f, ch.what, err)
				} else {
					t.Logf("%s with %s fails the checks:\n%v", f, ch.what, err)
				}
				if err := cl.Apply(f, files[f]); err != nil {
					t.Fatal(err)
				}
				if err := waitFor(sc, checks, 3*time.Minute, func(err error) bool { return err == nil }); err != nil {
					t.Fatalf("the shipped %s applied again, after 3 min: %v", f, err)
				}
			}
		})
	})
}

// lbpolicyChecks are the checks of lbpolicyFiles on a sidecar's config:
// the shared files' as sidecarChecks has them, the route's retry host
// predicate, and the policy's, with policy as its configuration.
func lbpolicyChecks(policy []byte) []check {
	var checks []check
	for _, c := range sidecarChecks("", "", nil) {
		if slices.Contains(lbpolicyFiles, c.file) {
			checks = append(checks, c)
		}
	}
	// A retry asks the policy again, which skips the hosts the route's
	// predicate rejects: with previous_hosts, the next host of hashlb's
	// ranking.
	checks = append(checks, check{"virtualservice.yaml", func(dump gjson.Result) error {
		var preds []string
		section(dump, "RoutesConfigDump").Get("dynamic_route_configs.#.route_config.virtual_hosts").ForEach(func(_, vhs gjson.Result) bool {
			vhs.ForEach(func(_, vh gjson.Result) bool {
				if strings.Contains(vh.Get("domains").Raw, quote(backendsHost)) {
					vh.Get("routes.0.route.retry_policy.retry_host_predicate.#.name").ForEach(func(_, n gjson.Result) bool {
						preds = append(preds, n.String())
						return true
					})
				}
				return true
			})
			return true
		})
		if !slices.Contains(preds, "envoy.retry_host_predicates.previous_hosts") {
			return fmt.Errorf("the route to %s has retry host predicates %v, want envoy.retry_host_predicates.previous_hosts", backendsHost, preds)
		}
		return nil
	}})
	return append(checks, check{"lbpolicy/envoyfilter.yaml", func(dump gjson.Result) error {
		c := section(dump, "ClustersConfigDump").Get(`dynamic_active_clusters.#(cluster.name==` + quote(backendsCluster) + `).cluster`)
		if !c.Exists() {
			return fmt.Errorf("Envoy has no cluster %s", backendsCluster)
		}
		ps := c.Get("load_balancing_policy.policies")
		p := ps.Get("0.typed_extension_config")
		tc := p.Get("typed_config")
		if len(ps.Array()) != 1 || p.Get("name").String() != "envoy.load_balancing_policies.dynamic_modules" ||
			tc.Get("dynamic_module_config.name").String() != envoyrun.LBPolicyName || !tc.Get("dynamic_module_config.do_not_close").Bool() {
			return fmt.Errorf("cluster %s: load_balancing_policy %s, want only envoy.load_balancing_policies.dynamic_modules of %s (do_not_close)",
				backendsCluster, orNone(c.Get("load_balancing_policy").Raw), envoyrun.LBPolicyName)
		}
		if got := tc.Get("lb_policy_config.value").String(); !jsonEqual([]byte(got), policy) {
			return fmt.Errorf("cluster %s: the policy's configuration is %s, want %s", backendsCluster, got, policy)
		}
		return nil
	}})
}

// policyConfigJSON is the policy's configuration in an EnvoyFilter file:
// the lb_policy_config of its first patch's dynamic-module policy.
func policyConfigJSON(t testing.TB, file []byte) []byte {
	t.Helper()
	j, err := yaml.YAMLToJSON(file)
	if err != nil {
		t.Fatal(err)
	}
	v := gjson.GetBytes(j, "spec.configPatches.0.patch.value.load_balancing_policy.policies.0.typed_extension_config.typed_config.lb_policy_config.value")
	if !v.Exists() {
		t.Fatalf("no lb_policy_config.value in the first patch of %.200s", file)
	}
	return []byte(v.String())
}

// clusterOracle is lbcore under the policy's configuration over the shipped
// cluster's endpoints as Envoy has them (address, LB weight, hashlb
// metadata), made services as the module makes them.
func clusterOracle(p *lbpolicy.Policy, dump gjson.Result) (*lbcore.Balancer, error) {
	var hosts []lbpolicy.HostInfo
	ep := section(dump, "EndpointsConfigDump").Get(`dynamic_endpoint_configs.#(endpoint_config.cluster_name==` + quote(backendsCluster) + `).endpoint_config`)
	ep.Get("endpoints").ForEach(func(_, loc gjson.Result) bool {
		loc.Get("lb_endpoints").ForEach(func(_, e gjson.Result) bool {
			a := e.Get("endpoint.address.socket_address")
			w := 1
			if lw := e.Get("load_balancing_weight"); lw.Exists() {
				w = int(lw.Int())
			}
			hosts = append(hosts, lbpolicy.HostInfo{
				Address: fmt.Sprintf("%s:%d", a.Get("address").String(), a.Get("port_value").Int()),
				Weight:  w,
				HashID:  e.Get("metadata.filter_metadata.hashlb.hashId").String(),
				Name:    e.Get("metadata.filter_metadata.hashlb.name").String(),
			})
			return true
		})
		return true
	})
	if len(hosts) == 0 {
		return nil, fmt.Errorf("Envoy has no endpoints for %s", backendsCluster)
	}
	c, _, err := p.Services(hosts)
	if err != nil {
		return nil, err
	}
	return lbcore.NewBalancer(c, 0), nil
}
