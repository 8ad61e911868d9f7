package main

import "io"

const explainAbout = `Shows how the module decides one request, with its own code (lbcore): the
method, the exact bytes hashed, every service's score in rank order, the
choice and the failover order, the backup method when the input is missing,
and the persistence key. Nothing is sent anywhere.

CONFIG is any FILE "hashlb check" accepts; when it holds several hashlb
configurations, -config chooses one. A connection (a network filter) is
-url '' -client IP:PORT -dest IP:PORT.

For hashlb's load-balancing policy (a cluster's DynamicModulesLoadBalancerConfig)
the services are the cluster's hosts, from its load_assignment
or its EDS file (path_config_source, looked for in the working directory,
taken to be Envoy's, else beside CONFIG), made services as the policy makes
them: metadata hashlb.hashId, else hashlb.name, else the address, is the
identity; hashlb.name, else the identity, the name; the LB weight, 1 to 100,
the weight. Hosts whose EDS health_status is UNHEALTHY, DRAINING, TIMEOUT or
DEGRADED are down; every other host is taken to pass its health checks
(-down marks more). Only the lowest priority with a host up is ranked, as the
policy serves it. The failover order is the one a retry walks with
retry_host_predicate previous_hosts; no header is set.

Persistence is explained for an empty table: the request's key is shown, and
the method's choice is what the table would store.

A session (the configuration's session block) is checked with the key the
proxies use: HASHLB_SESSION_KEY in this command's environment, or
-session-key-file. The report says whether the request's session is valid,
forged, expired, idle or names a service gone or not selectable, and what
the response would set. Without a key the session is not checked.

Exit status: 0 when the request was explained and a service chosen, 1 when
no service is selectable (the module answers 503; the report is printed) or
CONFIG cannot be read or is invalid, 2 for a usage error.
`

// runExplain implements "hashlb explain": the request and configuration
// from the flags (explain_parse.go), lbcore's explanation of the decision
// as a report (explain_model.go), printed as text or JSON
// (explain_render.go).
func runExplain(args []string, stdout, stderr io.Writer) int {
	in, code, done := parseExplain(args, stdout, stderr)
	if done {
		return code
	}
	item, cfg, code, done := in.config(stderr)
	if done {
		return code
	}
	if item.Policy != nil {
		return explainPolicy(in, item, stdout, stderr)
	}
	b, code, done := in.balancer(cfg, stderr)
	if done {
		return code
	}
	req, stripped := in.request(cfg)
	x := b.Explain(&req, in.now)
	r := newReport(in.file, item.Where, cfg, &req, &x, stripped, in.seed, in.now)
	if code := r.print(stdout, stderr, in.asJSON); code != 0 {
		return code
	}
	if r.Chosen == nil {
		return 1
	}
	return 0
}
