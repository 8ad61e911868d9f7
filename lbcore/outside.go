package lbcore

import "fmt"

// WithServices returns a copy of c that decides over services instead of
// c.Services: for a host that learns its services from somewhere other than
// the configuration (the Envoy load-balancing policy takes them from the
// cluster's hosts). Each service needs Name and Address ("ip:port" or
// "[v6]:port" as Envoy prints it); Weight 0 stands for the default, HashID is
// optional, Enabled is kept as given. WithServices sets Addr and ID, and
// checks the set as the services array is checked, except its size: at
// least one service, and no upper bound (the services array's maximum is a
// bound on a configuration's size; a cluster's hosts are as many as the
// proxy serves); each weight's range, and that names, addresses and
// identities are unique. services is kept, not copied.
func (c *Config) WithServices(services []Service) (*Config, error) {
	if len(services) == 0 {
		return nil, fmt.Errorf("services: no services, want at least 1")
	}
	wlo, whi := fServiceWeight.intRange()
	names := make(map[string]int, len(services))
	addrs := make(map[string]int, len(services))
	ids := make(map[uint64]int, len(services))
	for i := range services {
		s := &services[i]
		if s.Weight == 0 {
			s.Weight = fServiceWeight.defaultInt()
		}
		if s.Weight < wlo || s.Weight > whi {
			return nil, fmt.Errorf("services[%d].weight: %d is out of range [%d, %d]", i, s.Weight, wlo, whi)
		}
		ap, ok := parseServiceAddr(s.Address)
		if !ok || ap.Addr().Is4In6() {
			return nil, fmt.Errorf("services[%d].address: %q is not ip:port or [v6]:port: %s", i, s.Address, addrReason(s.Address))
		}
		s.Addr = ap
		if s.Name == "" {
			return nil, fmt.Errorf("services[%d].name: is required", i)
		}
		if j, dup := names[s.Name]; dup {
			return nil, fmt.Errorf("services[%d].name: %q is already used by services[%d]", i, s.Name, j)
		}
		names[s.Name] = i
		if j, dup := addrs[s.Address]; dup {
			return nil, fmt.Errorf("services[%d].address: %q is already used by services[%d]", i, s.Address, j)
		}
		addrs[s.Address] = i
		s.ID = serviceID(s)
		if j, dup := ids[s.ID]; dup {
			return nil, fmt.Errorf("services[%d]: hashes to the same identity as services[%d] (same hashId or address)", i, j)
		}
		ids[s.ID] = i
	}
	out := *c
	out.Services = services
	out.byID, out.byIDOf = ids, services
	return &out, nil
}
