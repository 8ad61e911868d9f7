package nsconf

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// Monitors. An HTTP or HTTP-ECV "add lb monitor" becomes the healthCheck of
// every written configuration whose services are bound to it ("bind service
// S -monitorName M", "bind serviceGroup G -monitorName M", "bind lb monitor M
// S"). The NetScaler facts, from the lb monitor page of the command reference
// (https://citrix-landing-page.readthedocs-hosted.com/projects/netscaler-command-reference/en/12.0/lb/lb-monitor/lb-monitor)
// and the built-in monitors page
// (https://docs.netscaler.com/en-us/citrix-adc/current-release/load-balancing/load-balancing-builtin-monitors/monitor-tcp.html):
//
//   - HTTP sends -httpRequest ("HEAD /" by default) and passes on a status in
//     -respCode (200 by default; codes and ranges, several values);
//   - HTTP-ECV sends -send and passes when -recv is "anywhere in the first
//     24K bytes of the HTTP body" (an empty -recv matches any response); it
//     does not check the status;
//   - -interval (5 s), -resptimeout (2 s) and -downTime (30 s) take a unit
//     after the value (MSEC, SEC, MIN) or in -units3, -units4, -units2;
//   - -retries (3) failed probes in a row mark a service DOWN, or, with
//     -failureRetries M, M failed ones out of -retries probes (the NITRO
//     lbmonitor resource, failureretries); -successRetries (1) good ones
//     bring it back;
//   - -destPort probes another port, 0 the port of the service the monitor
//     is bound to (NITRO lbmonitor, destport); -customHeaders adds headers ("Host:
//     x\r\n"); -secure YES probes over TLS; -reverse YES inverts the verdict.
//
// A service bound to no monitor has NetScaler's tcp-default (or
// ping-default): a connection check, which hashlb's HTTP healthCheck is not;
// vshealth.go writes passiveHealth for it.

// monitor is one lb monitor, added by the file or built in.
type monitor struct {
	e       *Entry // nil for a built-in monitor
	name    string
	typ     string // upper case
	flags   map[string]flagVal
	builtin bool
	// setLines are its set lb monitor lines.
	setLines []*Entry
}

// monBind is one binding of a monitor to a service or service group.
type monBind struct {
	e   *Entry
	mon *monitor
}

// outHealth is a written healthCheck.
type outHealth struct {
	method, path, host, expectBody, statuses string
	port                                     int
	interval, timeout                        time.Duration
	healthy, unhealthy                       int
}

// The built-in monitors of a NetScaler 13.x appliance ("show lb monitor" on
// a fresh appliance; tcp-default and ping-default are the ones bound to
// services without a monitor and cannot be changed), with their types. Their
// "set lb monitor" lines in a full "save ns config" are the appliance's own.
var builtinMonitors = map[string]string{
	"ping-default": "PING", "tcp-default": "TCP", "arp": "ARP", "nd6": "ND6", "ping": "PING", "tcp": "TCP",
	"http": "HTTP", "tcp-ecv": "TCP-ECV", "http-ecv": "HTTP-ECV", "udp-ecv": "UDP-ECV", "dns": "DNS", "ftp": "FTP",
	"tcps": "TCPS", "https": "HTTP", "tcps-ecv": "TCPS-ECV", "https-ecv": "HTTP-ECV", "xdm": "CITRIX-XDM", "xnc": "CITRIX-XNC-ECV",
	"mqtt": "MQTT", "mqtt-tls": "MQTT", "http2direct": "HTTP2", "http2ssl": "HTTP2", "ldns-ping": "LDNS-PING",
	"ldns-tcp": "LDNS-TCP", "ldns-dns": "LDNS-DNS", "stasecure": "CITRIX-STA-SERVICE", "sta": "CITRIX-STA-SERVICE",
}

// customisable reports whether built-in monitor name is one whose
// settings "set lb monitor" changes and that hashlb translates: the HTTP
// and HTTP-ECV ones. The appliance fixes only tcp-default and ping-default
// ("You can't delete or modify default monitors",
// https://docs.netscaler.com/en-us/citrix-adc/current-release/load-balancing/load-balancing-builtin-monitors/monitor-tcp.html);
// its other built-ins change too, but are of types hashlb does not
// translate, so their set lines stay the appliance's own.
func customisable(name string) bool {
	switch name {
	case "http", "https", "http-ecv", "https-ecv":
		return true
	}
	return false
}

// newBuiltinMonitor is built-in monitor name with its documented defaults:
// https is http over TLS.
func newBuiltinMonitor(name string) *monitor {
	m := &monitor{name: name, typ: builtinMonitors[name], flags: map[string]flagVal{}, builtin: true}
	if name == "https" || name == "https-ecv" {
		m.flags["-secure"] = flagVal{name: "-secure", vals: []word{{text: "YES"}}}
	}
	return m
}

// monitorFlags are add/set lb monitor's flags. Those of other monitor types
// (LDAP, RADIUS, SIP, databases, scripts, …) are read without a word: a
// monitor of those types is not translated at all, which its line says.
var monitorFlags = flagSet{}.
	use("-httpRequest", "-send", "-recv", "-customHeaders", "-retries", "-failureRetries", "-successRetries",
		"-destPort", "-destIP", "-state", "-reverse", "-secure", "-units1", "-units2", "-units3", "-units4").
	useN("-respCode", "-interval", "-resptimeout", "-downTime").
	quiet("-LRTM", "-deviation", "-resptimeoutThresh", "-alertRetries", "-tos", "-tosId", "-netProfile", "-devno",
		"-transparent", "-ipTunnel", "-sslProfile", "-action", "-maxForwards", "-comment", "-trofsCode", "-trofsString",
		"-rtspRequest", "-sipMethod", "-sipURI", "-sipregURI", "-query", "-queryType", "-scriptName", "-scriptArgs",
		"-dispatcherIP", "-dispatcherPort", "-userName", "-password", "-secondaryPassword", "-logonpointName",
		"-lasVersion", "-radKey", "-radNASid", "-radNASip", "-radAccountType", "-radFramedIP", "-radAPN", "-radMSISDN",
		"-radAccountSession", "-validateCred", "-domain", "-IPAddress", "-group", "-fileName", "-baseDN", "-bindDN",
		"-filter", "-attribute", "-database", "-oracleSid", "-sqlQuery", "-evalRule", "-mssqlProtocolVersion",
		"-snmpOID", "-snmpCommunity", "-snmpThreshold", "-snmpVersion", "-metricTable", "-application", "-sitePath",
		"-storename", "-storefrontacctservice", "-hostName", "-originHost", "-originRealm", "-hostIPAddress",
		"-vendorId", "-productName", "-firmwareRevision", "-authApplicationId", "-acctApplicationId",
		"-inbandSecurityId", "-supportedVendorIds", "-vendorSpecificVendorId", "-vendorSpecificAuthApplicationIds",
		"-vendorSpecificAcctApplicationIds", "-kcdAccount", "-storedb", "-storefrontcheckbackendservices",
		"-mqttClientIdentifier", "-mqttProtocolVersion", "-grpcHealthCheck", "-grpcStatusCode", "-grpcServiceName",
		"-metric", "-metricThreshold", "-metricWeight", "-servicename", "-servicegroupname", "-respcodeRange")

// bindMonitorFlags are bind lb monitor's flags, bindServiceFlags bind
// service's.
var (
	bindMonitorFlags = flagSet{}.use("-monState", "-state", "-passive").quiet("-weight", "-devno")
	bindServiceFlags = flagSet{}.use("-monitorName", "-monState", "-passive").quiet("-weight", "-devno").
				warn(whyPolicy, nil, "-policyName", "-priority", "-gotoPriorityExpression", "-type", "-invoke", "-labelType", "-labelName")
)

// whyNotHTTP says what to use instead of a monitor of a type hashlb's HTTP
// healthCheck cannot express. override_host: Envoy's OverrideHostLoadBalancer
// finds the named address in the cluster's host map and returns it without
// checking its health (source/extensions/load_balancing_policies/override_host/load_balancer.cc,
// findHost, which leaves "Validate that host health status did not change" as
// a TODO), so Envoy's own health checks do not steer hashlb's choice.
func whyNotHTTP(typ string) string {
	const envoy = "; Envoy's cluster health checks do not help here: override_host sends a request to the address hashlb names even when Envoy marks it unhealthy"
	switch typ {
	case "TCP", "TCPS", "TCP-ECV", "TCPS-ECV":
		return "monitor type " + typ + ": it checks a TCP connection, and hashlb's healthCheck is an HTTP probe: add passiveHealth (a failed connection counts as a failure and ejects the service), or an HTTP healthCheck if the servers answer HTTP" + envoy
	case "PING", "ARP", "ND6", "LDNS-PING":
		return "monitor type " + typ + ": it checks reachability below TCP: add passiveHealth (failed connections eject the service)" + envoy
	}
	return "monitor type " + typ + ": it speaks a protocol hashlb's HTTP healthCheck cannot (it sends GET or HEAD and reads the status and body): give the servers an HTTP status page and add a healthCheck for it, or add passiveHealth" + envoy
}

func (t *translator) addMonitor(c *cmdLine) {
	name, typ := c.pos[0].text, strings.ToUpper(c.pos[1].text)
	c.e.refs = []ref{{kind: 'm', name: name}}
	if _, builtin := builtinMonitors[strings.ToLower(name)]; builtin {
		c.e.Status, c.e.Detail, c.e.Warnings = BuiltIn, "a monitor built into the appliance", nil
		return
	}
	if m, dup := t.monitors[name]; dup {
		t.fail(c, "", failf("lb monitor %s was already added at %s", name, t.at(m.e.Line)))
		return
	}
	m := &monitor{e: c.e, name: name, typ: typ, flags: c.flags}
	t.monitors[name] = m
	if typ != "HTTP" && typ != "HTTP-ECV" {
		c.e.Status, c.e.Detail, c.e.Warnings = NotTranslated, whyNotHTTP(typ), nil
		return
	}
	if _, why, _ := m.health(); why != "" {
		c.e.Status, c.e.Detail = NotTranslated, why
		return
	}
	c.e.Status, c.e.ifUsed = Translated, true
}

func (t *translator) setMonitor(c *cmdLine) {
	name := c.pos[0].text
	c.e.refs = []ref{{kind: 'm', name: name}}
	if _, builtin := builtinMonitors[strings.ToLower(name)]; builtin {
		t.setBuiltinMonitor(c, strings.ToLower(name))
		return
	}
	m, ok := t.monitors[name]
	if !ok {
		t.fail(c, "", t.missing("lb monitor", name))
		return
	}
	m.apply(c)
	c.e.Status, c.e.ifUsed = m.e.Status, m.e.Status == Translated
	if m.e.Status != Translated {
		c.e.Detail, c.e.Warnings = m.e.Detail, nil
	}
	if _, why, _ := m.health(); why != "" && m.e.Status == Translated {
		m.e.Status, m.e.Detail, m.e.ifUsed = NotTranslated, fmt.Sprintf("%s (after %s)", why, t.at(c.e.Line)), false
		c.e.Status, c.e.Detail, c.e.ifUsed = NotTranslated, why, false
	}
}

// apply merges a set lb monitor line's flags over the monitor's.
func (m *monitor) apply(c *cmdLine) {
	merged := map[string]flagVal{}
	for k, v := range m.flags {
		merged[k] = v
	}
	for k, v := range c.flags {
		merged[k] = v
	}
	m.flags = merged
	m.setLines = append(m.setLines, c.e)
}

// setBuiltinMonitor is "set lb monitor http …" (https, http-ecv,
// https-ecv): the built-in monitor's settings change for every service bound
// to it, so the line counts when a written configuration's healthCheck
// comes from it. Lines about the other built-ins are caught by builtinLine.
func (t *translator) setBuiltinMonitor(c *cmdLine, name string) {
	m, _ := t.monitor(name)
	m.apply(c)
	c.e.Status, c.e.ifUsed = Translated, true
	t.unused[c.e] = unusedWhy{BuiltIn, "a monitor built into the appliance, with its settings changed; no translated lb vserver's service is bound to it"}
	if _, why, _ := m.health(); why != "" {
		c.e.Status, c.e.Detail, c.e.ifUsed = NotTranslated, fmt.Sprintf("the built-in monitor %s: %s", name, why), false
	}
}

// bindService is "bind service S -monitorName M" and "bind lb monitor M S".
func (t *translator) bindService(c *cmdLine) {
	svc, monName := c.pos[0].text, ""
	if len(c.pos) == 2 { // bind lb monitor M S
		monName, svc = c.pos[0].text, c.pos[1].text
	} else if v, ok := c.value("-monitorName"); ok {
		monName = v
	}
	c.e.refs = []ref{{kind: 's', name: svc}}
	if monName == "" {
		c.e.Status, c.e.Detail = NotTranslated, "binds no monitor: bind service's policies are not translated"
		return
	}
	t.bindMonitor(c, svc, monName)
}

// bindMonitor records that service or group target is bound to monitor
// monName.
func (t *translator) bindMonitor(c *cmdLine, target, monName string) {
	m, err := t.monitor(monName)
	if err != nil {
		t.fail(c, "", err)
		return
	}
	_, isSvc := t.services[target]
	_, isGroup := t.groups[target]
	if !isSvc && !isGroup {
		t.fail(c, "", t.missing("service or service group", target))
		return
	}
	for _, f := range []string{"-monState", "-state"} {
		if v, ok := c.value(f); ok && strings.EqualFold(v, "DISABLED") {
			c.e.Status, c.e.Detail = Ignored, fmt.Sprintf("%s DISABLED: the binding does not monitor", f)
			return
		}
	}
	if v, ok := c.value("-passive"); ok && !strings.EqualFold(v, "NO") {
		c.e.Status, c.e.Detail = NotTranslated, "a passive monitor binding does not take the service DOWN; hashlb's healthCheck does (passiveHealth is the nearest)"
		return
	}
	t.monBinds[target] = append(t.monBinds[target], monBind{e: c.e, mon: m})
	c.e.Status, c.e.ifUsed = Translated, true
	if m.e != nil && m.e.Status != Translated {
		c.e.Status, c.e.Detail, c.e.ifUsed = NotTranslated, fmt.Sprintf("lb monitor %s (%s) is not translated", m.name, t.at(m.e.Line)), false
	} else if m.builtin {
		if _, why, _ := m.health(); why != "" {
			c.e.Status, c.e.Detail, c.e.ifUsed = NotTranslated, fmt.Sprintf("the built-in monitor %s: %s", m.name, why), false
		}
	}
}

// monitor returns the monitor named name: added above, or built in.
func (t *translator) monitor(name string) (*monitor, error) {
	if m, ok := t.monitors[name]; ok {
		return m, nil
	}
	low := strings.ToLower(name)
	if _, ok := builtinMonitors[low]; ok {
		if m, ok := t.monitors[low]; ok && m.builtin {
			return m, nil
		}
		m := newBuiltinMonitor(low)
		t.monitors[low] = m
		return m, nil
	}
	return nil, t.missing("lb monitor", name)
}

// health translates the monitor: the healthCheck, or why there is none, and
// the warnings of an approximate translation. Each step reads one concern
// of the monitor (whether it translates at all, the request, the verdict,
// the port, the timing, the counts) and returns why it does not translate,
// or "".
func (m *monitor) health() (h outHealth, why string, warns []string) {
	if m.typ != "HTTP" && m.typ != "HTTP-ECV" {
		return h, whyNotHTTP(m.typ), nil
	}
	r := &monReader{m: m}
	for _, step := range []func(*outHealth) string{r.refusal, r.request, r.verdict, r.destination, r.timing, r.counts} {
		if why := step(&h); why != "" {
			return h, why, nil
		}
	}
	return h, "", r.warns
}

// monReader reads one monitor's flags for health, collecting warnings.
type monReader struct {
	m     *monitor
	warns []string
}

func (r *monReader) warn(format string, args ...any) {
	r.warns = append(r.warns, fmt.Sprintf(format, args...))
}

// val returns the first value of flag f.
func (r *monReader) val(f string) (string, bool) {
	v, ok := r.m.flags[strings.ToLower(f)]
	if !ok || len(v.vals) == 0 {
		return "", false
	}
	return v.vals[0].text, true
}

func (r *monReader) yes(f string) bool { v, _ := r.val(f); return strings.EqualFold(v, "YES") }

// refusal: the settings that leave nothing hashlb's probe can stand for.
func (r *monReader) refusal(*outHealth) string {
	if v, _ := r.val("-state"); strings.EqualFold(v, "DISABLED") {
		return "the monitor is DISABLED (it marks nothing DOWN)"
	}
	if r.yes("-reverse") {
		return "-reverse YES marks a service DOWN when its probe passes: hashlb's healthCheck has no reverse verdict"
	}
	if v, ok := r.val("-destIP"); ok {
		return fmt.Sprintf("-destIP %s probes another address than the service's: hashlb probes each service's own", v)
	}
	return ""
}

// request: -httpRequest (HTTP) or -send (HTTP-ECV), and -customHeaders.
func (r *monReader) request(h *outHealth) string {
	req, reqFlag := "HEAD /", "-httpRequest"
	if r.m.typ == "HTTP-ECV" {
		req, reqFlag = "", "-send"
	}
	if v, ok := r.val(reqFlag); ok {
		req = v
	}
	if req == "" {
		return reqFlag + " not set: nothing to probe with"
	}
	method, path, host, extra, err := parseHTTPRequest(req)
	if err != "" {
		return fmt.Sprintf("%s %q: %s", reqFlag, req, err)
	}
	h.method, h.path, h.host = method, path, host
	if v, ok := r.val("-customHeaders"); ok {
		for _, hv := range splitHeaderLines(v) {
			k, x, _ := strings.Cut(hv, ":")
			if strings.EqualFold(strings.TrimSpace(k), "host") {
				h.host = strings.TrimSpace(x)
			} else {
				extra = append(extra, hv)
			}
		}
	}
	if h.host != "" && !validAuthority(h.host) {
		r.warn("Host %q: not written: not a host[:port]", h.host)
		h.host = ""
	}
	if len(extra) > 0 {
		r.warn("headers %s: not sent: hashlb's probe sends only :method, :path, :authority and user-agent", strings.Join(extra, ", "))
	}
	return ""
}

// verdict: what passes. HTTP-ECV reads the body (-recv), not the status;
// HTTP reads the status (-respCode).
func (r *monReader) verdict(h *outHealth) string {
	if r.m.typ == "HTTP-ECV" {
		h.statuses = "100-599"
		if v, ok := r.val("-recv"); ok && v != "" {
			if len(v) > lbcore.MaxExpectBodyBytes {
				return fmt.Sprintf("-recv is %d bytes; hashlb's expectBody takes at most %d", len(v), lbcore.MaxExpectBodyBytes)
			}
			h.expectBody = v
		}
		if h.method == "HEAD" && h.expectBody != "" {
			return "-send HEAD with -recv: a HEAD response has no body to search"
		}
		return ""
	}
	h.statuses = "200"
	if v, ok := r.m.flags["-respcode"]; ok {
		h.statuses = strings.Join(wordTexts(v.vals), ",")
		if _, err := lbcore.ParseStatusSet(h.statuses); err != nil {
			return fmt.Sprintf("-respCode %s: not codes or ranges in 100-599", joinWords(v.vals))
		}
	}
	if v, ok := r.val("-recv"); ok && v != "" {
		r.warn("-recv: not read: an HTTP monitor checks the status only (HTTP-ECV reads -recv)")
	}
	return ""
}

// destination: -destPort (0 is the port of the service the monitor is
// bound to, NITRO lbmonitor destport) and -secure.
func (r *monReader) destination(h *outHealth) string {
	if v, ok := r.val("-destPort"); ok {
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 65535 {
			return fmt.Sprintf("-destPort %q is not a port", v)
		}
		if p != 0 {
			h.port = p
			r.warn("-destPort %d: written as healthCheck.port: the probe names ip:%d in the upstream header, so its cluster must reach that address (an ORIGINAL_DST cluster does; an override_host cluster without such an endpoint sends the probe to its fallback policy's host)", p, p)
		}
	}
	if r.yes("-secure") {
		r.warn("-secure YES: the monitor probes over TLS: give healthCheck.cluster an upstream TLS context (transport_socket envoy.transport_sockets.tls)")
	}
	return ""
}

// duration reads a duration flag: a number and a unit after it or in
// unitsFlag, seconds by default.
func (r *monReader) duration(flag, unitsFlag string, def time.Duration) (time.Duration, string) {
	v, ok := r.m.flags[strings.ToLower(flag)]
	if !ok || len(v.vals) == 0 {
		return def, ""
	}
	n, err := strconv.Atoi(v.vals[0].text)
	unit := "SEC"
	if len(v.vals) > 1 {
		unit = strings.ToUpper(v.vals[1].text)
	} else if u, ok := r.val(unitsFlag); ok {
		unit = strings.ToUpper(u)
	}
	scale := map[string]time.Duration{"MSEC": time.Millisecond, "SEC": time.Second, "MIN": time.Minute}[unit]
	if err != nil || n < 0 || scale == 0 {
		return def, fmt.Sprintf("%s %s: not a number and a unit (MSEC, SEC, MIN)", flag, joinWords(v.vals))
	}
	return time.Duration(n) * scale, ""
}

// clampDur clamps *d to hashlb's range of field path, with a warning.
func (r *monReader) clampDur(what, path string, d *time.Duration) {
	lo, hi := durRange(path)
	c := min(max(*d, lo), hi)
	if c != *d {
		r.warn("%s %s: written as %s, hashlb's %s (clamped)", what, lbcore.FormatDuration(*d), lbcore.FormatDuration(c),
			map[bool]string{true: "least", false: "most"}[c == lo])
		*d = c
	}
}

// timing: -interval, -resptimeout and -downTime (defaults 5 s, 2 s, 30 s).
func (r *monReader) timing(h *outHealth) string {
	var bad [3]string
	h.interval, bad[0] = r.duration("-interval", "-units3", 5*time.Second)
	h.timeout, bad[1] = r.duration("-resptimeout", "-units4", 2*time.Second)
	down, bad3 := r.duration("-downTime", "-units2", 30*time.Second)
	bad[2] = bad3
	for _, b := range bad {
		if b != "" {
			return b
		}
	}
	r.clampDur("-interval", "healthCheck.interval", &h.interval)
	r.clampDur("-resptimeout", "healthCheck.timeout", &h.timeout)
	if h.timeout > h.interval {
		r.warn("-resptimeout %s: written as %s, the interval (hashlb's timeout is at most the interval)", lbcore.FormatDuration(h.timeout), lbcore.FormatDuration(h.interval))
		h.timeout = h.interval
	}
	if _, ok := r.m.flags["-downtime"]; ok {
		r.warn("-downTime %s: not translated: hashlb keeps probing a DOWN service every interval (no hold-down)", lbcore.FormatDuration(down))
	}
	return ""
}

// count reads a non-negative count flag.
func (r *monReader) count(flag string, def int) (int, string) {
	v, ok := r.val(flag)
	if !ok {
		return def, ""
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return def, fmt.Sprintf("%s %q is not a number", flag, v)
	}
	return n, ""
}

// clampN clamps *n to hashlb's range of field path, with a warning.
func (r *monReader) clampN(what, path string, n *int) {
	lo, hi := intRange(path)
	if c := min(max(*n, lo), hi); c != *n {
		r.warn("%s %d: written as %d, hashlb's range being %d-%d (clamped)", what, *n, c, lo, hi)
		*n = c
	}
}

// counts: -retries, -failureRetries and -successRetries.
func (r *monReader) counts(h *outHealth) string {
	retries, bad1 := r.count("-retries", 3)
	fails, bad2 := r.count("-failureRetries", 0)
	succ, bad3 := r.count("-successRetries", 1)
	for _, b := range []string{bad1, bad2, bad3} {
		if b != "" {
			return b
		}
	}
	// -failureRetries M of -retries N: "out of the ten probes sent, at
	// least six probes must fail", 0 meaning all N (NITRO lbmonitor,
	// failureretries). hashlb counts failures in a row, so M in a row is
	// the nearest: whenever it marks a service DOWN, M of the last N probes
	// failed, and NetScaler marks it DOWN too; M failures among successes
	// it does not count.
	h.unhealthy = retries
	switch {
	case fails > 0 && fails < retries:
		h.unhealthy = fails
		r.warn("-retries %d -failureRetries %d: NetScaler marks a service DOWN when %d of %d probes fail; hashlb counts failures in a row: "+
			"unhealthyThreshold %d marks it DOWN after %d failures in a row, as NetScaler would, but not after %d failures with successes between them",
			retries, fails, fails, retries, fails, fails, fails)
	case fails > retries:
		r.warn("-failureRetries %d: more than -retries %d: read as all %d probes failing", fails, retries, retries)
	}
	h.healthy = succ
	r.clampN("failed probes to mark DOWN (-retries/-failureRetries)", "healthCheck.unhealthyThreshold", &h.unhealthy)
	r.clampN("-successRetries", "healthCheck.healthyThreshold", &h.healthy)
	return ""
}

// wordTexts returns the words' texts.
func wordTexts(ws []word) []string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = w.text
	}
	return s
}

// parseHTTPRequest reads a monitor's request: "METHOD target [HTTP/x.y]",
// optionally followed by header lines (\r\n, written as the four characters
// or as a line break); Host is returned apart.
func parseHTTPRequest(s string) (method, path, host string, extra []string, why string) {
	lines := splitHeaderLines(s)
	if len(lines) == 0 {
		return "", "", "", nil, "empty request"
	}
	f := strings.Fields(lines[0])
	if len(f) < 2 || len(f) > 3 {
		return "", "", "", nil, "want METHOD /path [HTTP/1.1]"
	}
	method, path = strings.ToUpper(f[0]), f[1]
	if method != "GET" && method != "HEAD" {
		return "", "", "", nil, fmt.Sprintf("method %s: hashlb's probe sends GET or HEAD", method)
	}
	if !strings.HasPrefix(path, "/") {
		return "", "", "", nil, fmt.Sprintf("%q is not an absolute path", path)
	}
	for i := 0; i < len(path); i++ {
		if path[i] <= ' ' || path[i] >= 0x7f {
			return "", "", "", nil, fmt.Sprintf("path %q has a control character or non-ASCII byte (hashlb's probe path is visible ASCII: percent-encode it)", path)
		}
	}
	for _, hv := range lines[1:] {
		k, v, _ := strings.Cut(hv, ":")
		if strings.EqualFold(strings.TrimSpace(k), "host") {
			host = strings.TrimSpace(v)
		} else {
			extra = append(extra, hv)
		}
	}
	return method, path, host, extra, ""
}

// splitHeaderLines splits at \r\n (literal or real) and drops empty lines.
func splitHeaderLines(s string) []string {
	s = strings.NewReplacer(`\r\n`, "\n", `\n`, "\n", "\r\n", "\n", `\r`, "").Replace(s)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// validAuthority reports whether lbcore takes s as healthCheck.host: a host
// name or address and an optional port.
func validAuthority(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c|0x20 && c|0x20 <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-._~:[]", c) >= 0) {
			return false
		}
	}
	return true
}

func joinWords(ws []word) string { return strings.Join(wordTexts(ws), " ") }

// json writes h on one line, in the order of the field table.
func (h *outHealth) json() string {
	var f []string
	if h.method != "GET" {
		f = append(f, `"method": `+jsonText(h.method))
	}
	f = append(f, `"path": `+jsonText(h.path))
	if h.port != 0 {
		f = append(f, `"port": `+jsonText(h.port))
	}
	if h.host != "" {
		f = append(f, `"host": `+jsonText(h.host))
	}
	if h.expectBody != "" {
		f = append(f, `"expectBody": `+jsonText(h.expectBody))
	}
	f = append(f, `"interval": `+jsonText(lbcore.FormatDuration(h.interval)), `"timeout": `+jsonText(lbcore.FormatDuration(h.timeout)),
		`"healthyThreshold": `+jsonText(h.healthy), `"unhealthyThreshold": `+jsonText(h.unhealthy),
		`"expectedStatuses": `+jsonText(h.statuses))
	return "{" + strings.Join(f, ", ") + "}"
}
