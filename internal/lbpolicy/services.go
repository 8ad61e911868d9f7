package lbpolicy

import (
	"fmt"

	"github.com/hashlb/hashlb/lbcore"
)

// HostInfo is what the policy reads of one host to make it an lbcore
// service: its address, its LB weight and its endpoint metadata under the
// filter name "hashlb" (the string values of the keys hashId and name; ""
// for an absent key or a value that is not a string).
type HostInfo struct {
	Address      string
	Weight       int
	HashID, Name string
}

// maxWeight is the largest weight lbcore ranks; a larger LB weight is
// ranked as it.
const maxWeight = 100

// ServiceOf returns the lbcore service a host is: its identity is its
// metadata hashlb.hashId, else hashlb.name, else its address; its name
// hashlb.name, else the identity; its weight its LB weight, at least 1 and
// at most 100. clamped reports an LB weight over 100. The strings are h's:
// a caller whose strings alias Envoy's memory clones them first.
// Worker.Update and hashlb explain (cmd/hashlb) both make services with it,
// so that the explanation ranks the hosts as Envoy's workers do.
func ServiceOf(h HostInfo) (s lbcore.Service, clamped bool) {
	s.Address, s.Enabled = h.Address, true
	s.HashID = h.HashID
	if s.HashID == "" {
		s.HashID = h.Name
	}
	switch {
	case h.Name != "":
		s.Name = h.Name
	case s.HashID != "":
		s.Name = s.HashID
	default:
		s.Name = h.Address
	}
	s.Weight = h.Weight
	if s.Weight > maxWeight {
		s.Weight, clamped = maxWeight, true
	}
	if s.Weight < 1 {
		s.Weight = 1
	}
	return s, clamped
}

// ClampWarning is the warning for a host whose LB weight ServiceOf clamped.
func ClampWarning(h HostInfo) string {
	return fmt.Sprintf("host %s: LB weight %d is over hashlb's %d, ranked as %d", h.Address, h.Weight, maxWeight, maxWeight)
}

// Services returns the services the hosts are, in host order, and p's
// configuration over them: what Worker.Update decides with. warnings name
// the hosts whose weight was clamped; an error says why the hosts cannot be
// services (two with one identity, an address lbcore refuses).
func (p *Policy) Services(hosts []HostInfo) (cfg *lbcore.Config, warnings []string, err error) {
	svcs := make([]lbcore.Service, len(hosts))
	for i, h := range hosts {
		var clamped bool
		svcs[i], clamped = ServiceOf(h)
		if clamped {
			warnings = append(warnings, ClampWarning(h))
		}
	}
	cfg, err = p.Config.WithServices(svcs)
	if err != nil {
		return nil, warnings, fmt.Errorf("the cluster's hosts cannot be hashlb's services: %v", err)
	}
	return cfg, warnings, nil
}
