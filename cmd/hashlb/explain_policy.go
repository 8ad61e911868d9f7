package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/hashlb/hashlb/internal/deploycheck"
	"github.com/hashlb/hashlb/lbcore"
)

// policyInfo is what a report of hashlb's load-balancing policy adds: the
// cluster and where its hosts were read.
type policyInfo struct {
	Cluster string `json:"cluster"`
	Hosts   string `json:"hosts"`
}

// explainPolicy explains a request to hashlb's load-balancing policy on a
// cluster: the hosts are the cluster's (its load_assignment or EDS file),
// made services as Envoy's workers make them (lbpolicy.Policy.Services),
// those whose EDS health_status is not healthy, those of a priority not
// served and those -down names down;
// the failover order is the ranking a retry walks.
func explainPolicy(in *explainInput, item deploycheck.Item, stdout, stderr io.Writer) int {
	p := item.Policy
	pol, problems := item.ParsePolicy()
	if problems != nil {
		for _, pr := range problems {
			fmt.Fprintf(stderr, "%s%s\n", item.Prefix(in.file), pr)
		}
		return 1
	}
	if p.Unknown != "" {
		fmt.Fprintf(stderr, "%sthe cluster's hosts are not known: %s\n", item.Prefix(in.file), p.Unknown)
		return 1
	}
	cfg, warnings, err := pol.Services(p.Hosts)
	if err != nil {
		fmt.Fprintf(stderr, "%s%v\n", item.Prefix(in.file), err)
		return 1
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "%swarning: %s\n", item.Prefix(in.file), w)
	}
	b, code, done := in.balancer(cfg, stderr)
	if done {
		return code
	}
	// A host is chosen only when healthy at the level served, the lowest
	// priority with a healthy host (docs/deploy.md, "Priorities").
	serving := p.Serving()
	if serving > 0 {
		fmt.Fprintf(stderr, "%spriority 0 has no healthy host: the policy serves priority %d\n", item.Prefix(in.file), serving)
	}
	for i, down := range p.Down {
		if down || p.Priority[i] != serving {
			b.SetDown(i, true)
		}
	}
	// The policy reads no header of its own: nothing is stripped.
	plain := *cfg
	plain.UpstreamHeader, plain.ServiceHeader = "", ""
	req, _ := in.request(&plain)
	x := b.Explain(&req, in.now)
	r := newReport(in.file, item.Where, cfg, &req, &x, nil, in.seed)
	r.Policy = &policyInfo{Cluster: p.Cluster, Hosts: p.From}
	r.Settings = strings.TrimSuffix(strings.TrimSuffix(r.Settings, "upstreamCount 1"), ", ")
	r.Headers, r.FilterState = [][2]string{}, nil // the policy sets no header
	if r.Chosen != nil {
		// A retry walks the method's order, as the policy's does
		// (lbcore.Balancer.RankInto).
		var d lbcore.Decision
		b.RankInto(&d, &req)
		r.Failover = []svcRef{}
		first := x.Decision.At(0)
		for k := range d.Len() {
			if i := d.At(k); i != first {
				s := &cfg.Services[i]
				r.Failover = append(r.Failover, svcRef{s.Name, s.Address})
			}
		}
	}
	if code := r.print(stdout, stderr, in.asJSON); code != 0 {
		return code
	}
	if r.Chosen == nil {
		return 1
	}
	return 0
}
