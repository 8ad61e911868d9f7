package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/deploycheck"
	"github.com/hashlb/hashlb/internal/lbpolicy"
)

// policyHosts is lbpolicy.Hosts over the hosts "hashlb explain" read: what
// Envoy's callbacks hand a worker of the policy, level by level.
type policyHosts struct {
	p       *deploycheck.Policy
	levels  [][]int // per priority, indices of p.Hosts
	healthy [][]int // per priority, its healthy hosts
}

func newPolicyHosts(p *deploycheck.Policy) *policyHosts {
	h := &policyHosts{p: p}
	for i, prio := range p.Priority {
		for len(h.levels) <= prio {
			h.levels = append(h.levels, nil)
			h.healthy = append(h.healthy, nil)
		}
		h.levels[prio] = append(h.levels[prio], i)
		if !p.Down[i] {
			h.healthy[prio] = append(h.healthy[prio], i)
		}
	}
	return h
}

func (h *policyHosts) host(p, i int) *lbpolicy.HostInfo { return &h.p.Hosts[h.levels[p][i]] }
func (h *policyHosts) Levels() int                      { return len(h.levels) }
func (h *policyHosts) Count(p int) int                  { return len(h.levels[p]) }
func (h *policyHosts) Address(p, i int) string          { return h.host(p, i).Address }
func (h *policyHosts) Weight(p, i int) int              { return h.host(p, i).Weight }
func (h *policyHosts) Metadata(p, i int, key string) string {
	switch key {
	case "hashId":
		return h.host(p, i).HashID
	case "name":
		return h.host(p, i).Name
	}
	return ""
}
func (h *policyHosts) ActiveRequests(int, int) int64 { return 0 }
func (h *policyHosts) HealthyCount(p int) int        { return len(h.healthy[p]) }
func (h *policyHosts) HealthyAddress(p, i int) string {
	return h.p.Hosts[h.healthy[p][i]].Address
}

// pathCtx is a request of one :path.
type pathCtx struct{ path string }

func (c pathCtx) Header(name string, i int) (string, int) {
	if name == ":path" && i == 0 {
		return c.path, 1
	}
	return "", 0
}
func (c pathCtx) ShouldSelectAnotherHost(int, int) bool { return false }

// policyItem scans file and returns its policy configuration on cluster
// (the first with known hosts when no cluster has that name).
func policyItem(t *testing.T, file, cluster string) deploycheck.Item {
	t.Helper()
	src, err := deploycheck.ScanFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var first *deploycheck.Item
	for _, e := range src.Configs() {
		if e.Policy != nil && e.Policy.Unknown == "" {
			if e.Policy.Cluster == cluster {
				return e
			}
			if first == nil {
				first = &e
			}
		}
	}
	if first != nil {
		return *first
	}
	t.Fatalf("%s: no policy with known hosts", file)
	return deploycheck.Item{}
}

// TestExplainPolicyIsWorker: for every :path of the request corpus,
// "hashlb explain" on a bootstrap that uses the load-balancing policy
// chooses the host that the policy's own worker (internal/lbpolicy.Worker,
// the code Envoy runs) chooses over the same hosts: the shipped
// configs/envoy-lbpolicy.yaml with its EDS file, and a CDS resource whose
// EDS file has hashId, IPv6, a weight and a draining host, and clusters
// of two priorities,, priority 0 partly healthy (its healthy hosts serve)
// and all unhealthy (priority 1's serve).
func TestExplainPolicyIsWorker(t *testing.T) {
	for _, tt := range []struct{ name, dir, file, which string }{
		{"shipped", "../..", "configs/envoy-lbpolicy.yaml", "1"},
		{"cds", ".", "testdata/check/lbpolicy-cds.yaml", "shop"},
		{"priority", ".", "testdata/check/lbpolicy-priority.yaml", "tiers"},
		{"failover", ".", "testdata/check/lbpolicy-priority.yaml", "failover"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Chdir(tt.dir)
			item := policyItem(t, tt.file, tt.which)
			pol, problems := item.ParsePolicy()
			if problems != nil {
				t.Fatal(problems)
			}
			w := pol.NewWorker(item.Policy.Cluster)
			hosts := newPolicyHosts(item.Policy)
			if _, err := w.Update(hosts); err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, r := range corpus.Requests(300) {
				path := r.Headers[0][1]
				for _, h := range r.Headers {
					if h[0] == ":path" {
						path = h[1]
					}
				}
				pr, hi, f := w.Choose(hosts, pathCtx{path}, time.Unix(1767225600, 0))
				want := "none"
				if f == lbpolicy.NoFailure {
					want = hosts.HealthyAddress(pr, hi)
				}
				var stdout, stderr bytes.Buffer
				run([]string{"explain", tt.file, "-config", tt.which, "-url", path, "-json"}, &stdout, &stderr)
				var rep struct {
					Chosen *svcRef `json:"chosen"`
				}
				if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
					t.Fatalf("explain -url %q: %v\n%s%s", path, err, stdout.String(), stderr.String())
				}
				got := "none"
				if rep.Chosen != nil {
					got = rep.Chosen.Address
				}
				if got != want {
					t.Errorf("explain %s -url %q chose %s, the policy's worker %s", tt.file, path, got, want)
				}
				seen[got] = true
			}
			if len(seen) < 2 {
				t.Errorf("the corpus reached %v only: want a spread", seen)
			}
		})
	}
}

// TestCheckShippedPolicy: "hashlb check" on each shipped bootstrap of the
// policy, run where Envoy runs it (the repository root), passes and says
// what it checked: the method, the hosts and, for the fleet's, the etcd
// members the policy's client dials.
func TestCheckShippedPolicy(t *testing.T) {
	t.Chdir("../..")
	for file, want := range map[string]string{
		"configs/envoy-lbpolicy.yaml":       "configs/envoy-lbpolicy.yaml: cluster hashlb_hosts, load-balancing policy hashlb: ok (URLHASH over 3 hosts from EDS file configs/lbpolicy-endpoints.yaml)\n",
		"configs/envoy-lbpolicy-fleet.yaml": "configs/envoy-lbpolicy-fleet.yaml: cluster hashlb_hosts, load-balancing policy hashlb: ok (ROUNDROBIN over 3 hosts from EDS file configs/lbpolicy-endpoints.yaml; persistence.fleet over 3 etcd endpoints)\n",
	} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"check", file}, &stdout, &stderr)
		if code != 0 || stdout.String() != want || stderr.Len() != 0 {
			t.Errorf("hashlb check %s = %d\n%s%s\nwant 0 and %q", file, code, stdout.String(), stderr.String(), want)
		}
	}
}

// TestExplainPolicyNeedsHosts: a cluster whose hosts come from an EDS
// server cannot be explained, and the error says why.
func TestExplainPolicyNeedsHosts(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"explain", "testdata/check/lbpolicy-cds.yaml", "-config", "from-ads", "-url", "/x"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "the cluster's hosts are not known: its hosts come from an EDS server") {
		t.Errorf("explain on an ADS cluster = %d, stderr %q", code, stderr.String())
	}
}
