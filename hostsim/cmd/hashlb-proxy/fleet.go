package main

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
)

// clusterFlags is the repeatable -cluster NAME=HOST:PORT: Envoy clusters the
// module's proxy_http_call reaches asynchronously (hostsim.Config.Clusters).
type clusterFlags map[string]string

func (c clusterFlags) String() string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		names[i] = n + "=" + c[n]
	}
	return strings.Join(names, ",")
}

func (c clusterFlags) Set(s string) error {
	name, addr, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want NAME=HOST:PORT", s)
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("%q: want NAME=HOST:PORT (%v)", s, err)
	}
	if _, dup := c[name]; dup {
		return fmt.Errorf("cluster %s given twice", name)
	}
	c[name] = addr
	return nil
}

// fleetAddrs returns the n listen addresses of a fleet: listen, then the
// following ports on the same host. Port 0 gives every member a free port.
func fleetAddrs(listen string, n int) ([]string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: %w", listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+n-1 > 65535 {
		return nil, fmt.Errorf("-listen %q: no room for %d consecutive ports", listen, n)
	}
	addrs := make([]string, n)
	for i := range addrs {
		q := p + i
		if p == 0 {
			q = 0
		}
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(q))
	}
	return addrs, nil
}
