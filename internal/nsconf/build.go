package nsconf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// outService is one service of a written configuration.
type outService struct {
	Name    string
	Address string
	Weight  int   // 0: not written (1)
	Enabled *bool // nil: not written (true)
	HashID  string
}

// outConfig is a written configuration; fields left at their zero value are
// not written (hashlb's default applies).
type outConfig struct {
	lbMethod     string
	hashLength   int
	netmask      string
	v6NetmaskLen int
	token        string
	backup       string
	persistKeys  []string
	expire       string
	session      *outSession // COOKIEINSERT
	health       *outHealth
	monitor      *monitor // the monitor health comes from
	passive      *outPassive
	slowStart    *outSlowStart
	disabled     bool // the vserver is DISABLED: every service written disabled
	services     []outService
}

// The method facts the translation needs, from the Citrix pages:
//
//   - LEASTCONNECTION is NetScaler's default method ("This is the default
//     load balancing algorithm", https://docs.netscaler.com/en-us/citrix-adc/13/load-balancing/load-balancing-customizing-algorithms);
//     hashlb's default is ROUNDROBIN, so lbMethod is always written.
//   - A hashing method without its input falls back to the backup method,
//     least connection unless -backupLBMethod says otherwise (the
//     setlbvserver_lbmethod apidoc: "If the request does not contain a domain
//     name, the load balancing method defaults to LEASTCONNECTION"), as
//     hashlb's backupLBMethod does; it is written only when ns.conf sets it.
//   - -netmask and -v6netmasklen apply to DESTINATIONIPHASH, SOURCEIPHASH and
//     SRCIPDESTIPHASH (the NITRO lbvserver resource's netmask).
var (
	ipMaskMethods   = []string{"DESTINATIONIPHASH", "SOURCEIPHASH", "SRCIPDESTIPHASH"}
	hashLenMethods  = []string{"URLHASH", "DOMAINHASH"}
	nonHashMethods  = []string{"ROUNDROBIN", "LEASTCONNECTION"}
	hashlbBackups   = []string{"LEASTCONNECTION", "ROUNDROBIN"}
	nearestLeastCon = map[string]string{
		"LEASTRESPONSETIME": "hashlb measures no response times; NetScaler's LEASTRESPONSETIME weighs active connections by response time, and least connection is its connection half",
		"LRTM":              "hashlb measures no response times; LRTM weighs active connections by response time, and least connection is its connection half",
		"LEASTBANDWIDTH":    "hashlb counts no bandwidth; active requests are the load it sees",
		"LEASTPACKETS":      "hashlb counts no packets; active requests are the load it sees",
		"CUSTOMLOAD":        "custom load monitors (SNMP metrics) are not translated; active requests are the load hashlb sees",
		"SOURCEIPHASH":      "hashlb's backup methods need no input (LEASTCONNECTION, ROUNDROBIN); the request already lacks the hash method's input",
	}
	// whyPersistence says why a persistence type is not translated.
	whyPersistence = map[string]string{
		"SSLSESSION":     "TLS session ids are not visible to a Wasm HTTP filter (Envoy terminates TLS before hashlb sees the request)",
		"CUSTOMSERVERID": "the request would name its own server: hashlb never lets a client choose its upstream",
		"URLPASSIVE":     "the request would name its own server: hashlb never lets a client choose its upstream",
		"RTSPSID":        "RTSP sessions are not HTTP requests; hashlb does not see them",
		"DIAMETER":       "Diameter sessions are not HTTP requests; hashlb does not see them",
		"FIXSESSION":     "FIX sessions are not HTTP requests; hashlb does not see them",
		"USERSESSION":    "persistence from a protocol extension is not translated",
	}
)

// build writes the configuration of every vserver, in file order, and
// settles the status of the lines that only count when something uses them.
func (t *translator) build() []Output {
	var outs []Output
	used := map[*Entry]bool{}
	files := map[string]string{} // lower-case file name → vserver
	for _, v := range t.vsOrder {
		cfg, written, ok := t.buildVserver(v)
		if !ok {
			continue
		}
		js := cfg.json()
		if _, err := lbcore.ParseConfig(js); err != nil {
			// Never expected: every value is checked above. Say so rather
			// than write what hashlb check would refuse.
			v.e.Status, v.e.Detail = Failed, "internal error, nothing written: hashlb refuses the translation: "+
				strings.ReplaceAll(err.Error(), "\n", "; ")
			continue
		}
		file := fileName(v.name)
		if other, dup := files[strings.ToLower(file)]; dup {
			base := strings.TrimSuffix(file, ".json")
			for i := 2; ; i++ {
				f := fmt.Sprintf("%s-%d.json", base, i)
				if _, taken := files[strings.ToLower(f)]; !taken {
					v.e.Warnings = append(v.e.Warnings, fmt.Sprintf("written as %s: %s is lb vserver %s's", f, file, other))
					file = f
					break
				}
			}
		}
		files[strings.ToLower(file)] = v.name
		for _, e := range written {
			used[e] = true
		}
		desc := fmt.Sprintf("%s (%s, %d service%s", file, cfg.lbMethod, len(cfg.services), plural(len(cfg.services)))
		if cfg.session != nil {
			desc += ", session cookie"
		}
		if len(cfg.persistKeys) > 0 {
			desc += ", persistence"
		}
		if cfg.passive != nil {
			desc += ", passiveHealth"
		}
		if cfg.slowStart != nil {
			desc += ", slowStart"
		}
		if m := cfg.monitor; m != nil {
			desc += ", healthCheck"
			lines := m.setLines // a customised built-in: its set lines
			if m.e != nil {
				lines = []*Entry{m.e}
			}
			for _, e := range lines {
				if e.Detail == "" {
					e.Detail = "the healthCheck of " + file
				} else {
					e.Detail += ", " + file
				}
			}
		}
		if cfg.disabled {
			desc += ", every service disabled: the vserver is DISABLED"
		}
		v.e.Detail = desc + ")"
		outs = append(outs, Output{VServer: v.name, File: file, JSON: js})
	}
	// A server, service, group, member or named expression counts as
	// translated only when a written configuration uses it.
	for _, e := range t.entries {
		if e.Status == Translated && e.ifUsed && !used[e] {
			e.Status, e.Detail = Ignored, "not used by a translated lb vserver"
			if u, ok := t.unused[e]; ok {
				e.Status, e.Detail = u.status, u.why
			}
		}
	}
	return outs
}

// buildVserver translates v; written are the lines its configuration uses.
// ok is false when nothing can be written.
func (t *translator) buildVserver(v *vserver) (cfg outConfig, written []*Entry, ok bool) {
	warnAt := func(line int, format string, args ...any) {
		e := t.entryAt(line, v.e)
		e.Warnings = append(e.Warnings, fmt.Sprintf(format, args...))
	}
	sw := &serviceWriter{t: t, v: v, cfg: &cfg, warnAt: warnAt, names: map[string]string{}, addrs: map[string]string{},
		idents: map[string]string{}, identLn: map[string]string{}, written: []*Entry{v.e}}
	for _, b := range v.binds {
		sw.bind(b)
	}
	if len(cfg.services) == 0 {
		if len(v.binds) == 0 {
			v.e.Status, v.e.Detail = NotTranslated, "no service is bound to it (a hashlb configuration needs one)"
		} else {
			v.e.Status, v.e.Detail = Failed, "nothing written: none of its services could be translated"
		}
		return cfg, nil, false
	}
	written = sw.written
	t.disabledVserver(v, &cfg, warnAt)
	t.vserverWarnings(v, &cfg, warnAt)
	t.backendTLS(v, sw.members, warnAt)
	written = append(written, t.healthCheck(v, sw.members, &cfg, warnAt)...)
	t.method(v, &cfg, warnAt)
	t.persistence(v, &cfg, warnAt)
	t.slowStart(v, &cfg, warnAt)
	t.ruleUnused(v, &cfg, warnAt)
	return cfg, append(written, t.namedExprsUsed(v)...), true
}

// serviceWriter writes the services of one vserver, in bind order (a
// group's members in their bind order), and remembers what it wrote.
type serviceWriter struct {
	t      *translator
	v      *vserver
	cfg    *outConfig
	warnAt func(int, string, ...any)

	names   map[string]string // written name → its origin, for renames
	addrs   map[string]string // address → service
	idents  map[string]string // hashId, or address → service
	identLn map[string]string // identity → line of its service

	members []member // the written services, for monitors and TLS
	written []*Entry
}

// bind writes the services one bind line brings; a service that cannot be
// written fails the bind, and its own line too unless another configuration
// writes it.
func (w *serviceWriter) bind(b *binding) {
	items, groupDisabled := []*backend{}, false
	if b.svc != nil {
		items = []*backend{&b.svc.backend}
	} else {
		items, groupDisabled = b.grp.members, b.grp.disabled
		w.written = append(w.written, b.grp.e)
		if len(items) == 0 {
			b.e.Status, b.e.Detail = NotTranslated, fmt.Sprintf("service group %s has no members", b.grp.name)
			return
		}
	}
	var problems []string
	for _, it := range items {
		why := w.item(b, it, groupDisabled)
		if why == "" {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s not written: %s", it.name, why))
		// The service's own line says so too, unless another configuration
		// writes it.
		if _, seen := w.t.unused[it.e]; !seen {
			w.t.unused[it.e] = unusedWhy{Failed, fmt.Sprintf("not written for lb vserver %s: %s", w.v.name, why)}
		}
	}
	if len(problems) > 0 {
		b.e.Status, b.e.Detail = Failed, strings.Join(problems, "; ")
	}
	w.written = append(w.written, b.e)
}

// item writes one service; it returns why it cannot ("" when written).
func (w *serviceWriter) item(b *binding, it *backend, groupDisabled bool) string {
	if it.problem != "" {
		return it.problem
	}
	s := outService{Address: netip.AddrPortFrom(it.srv.ip, uint16(it.port)).String()}
	if prev, dup := w.addrs[s.Address]; dup {
		return fmt.Sprintf("%s is %s's address too (hashlb needs one address per service)", s.Address, prev)
	}
	ident, why := w.identity(it, &s)
	if prev, dup := w.idents[ident]; dup {
		return fmt.Sprintf("%s, as %s (%s) does: NetScaler gives both the same hash, "+
			"hashlb needs one identity per service (give one a -hashId)", why, prev, w.identLn[ident])
	}
	w.name(b, it, &s)
	weight := it.weight
	if b.svc != nil {
		weight = b.weight
	}
	if weight != 1 {
		s.Weight = weight
	}
	if it.disabled || groupDisabled || it.srv.disabled {
		f := false
		s.Enabled = &f
	}
	w.names[s.Name], w.addrs[s.Address], w.idents[ident] = it.name, it.name, it.name
	w.identLn[ident] = w.t.at(it.e.Line)
	w.cfg.services = append(w.cfg.services, s)
	w.members = append(w.members, member{b: b, name: it.name, be: it})
	w.written = append(w.written, it.e)
	if it.srv.e != nil {
		w.written = append(w.written, it.srv.e)
	}
	return ""
}

// identity is what NetScaler hashes for the service, and, when it is not
// the address, why (for a collision's message); it sets s.HashID.
func (w *serviceWriter) identity(it *backend, s *outService) (ident, why string) {
	switch {
	case it.hashID != "":
		s.HashID = it.hashID
		return it.hashID, "-hashId " + it.hashID
	case !w.t.usePort:
		// "If you do not configure a hash identifier, but change the
		// default value of the global setting so that it does not
		// specify use of the port number, the hash value is based
		// only on the IP address of the service."
		// (https://docs.citrix.com/en-us/citrix-adc/12-1/load-balancing/load-balancing-customizing/customize-hash-algorithm.html)
		s.HashID = it.srv.ip.String()
		return s.HashID, fmt.Sprintf("-usePortForHashLb NO (%s) hashes it as %s", w.t.at(w.t.usePortLine), s.HashID)
	}
	return s.Address, ""
}

// name gives s hashlb's name for it: sanitised, and made unique within the
// configuration.
func (w *serviceWriter) name(b *binding, it *backend, s *outService) {
	s.Name = sanitizeName(it.name)
	if s.Name != it.name {
		w.warnAt(it.e.Line, "service name %q written as %q (hashlb names are letters, digits and - . _ ~ ! # $ %% & ' * + ^ ` |)", it.name, s.Name)
	}
	if prev, dup := w.names[s.Name]; dup {
		base := s.Name
		for i := 2; ; i++ {
			s.Name = fmt.Sprintf("%s~%d", base, i)
			if _, taken := w.names[s.Name]; !taken {
				break
			}
		}
		w.warnAt(b.e.Line, "service %s written as %s: %s is %s's name", it.name, s.Name, base, prev)
	}
}

// disabledVserver: a DISABLED vserver serves nothing on NetScaler (it is
// OUT OF SERVICE); its configuration is written with every service
// disabled, so that hashlb serves nothing either (503) and the translation
// is kept for the day it is enabled, with the services to enable then.
func (t *translator) disabledVserver(v *vserver, cfg *outConfig, warnAt func(int, string, ...any)) {
	if v.state.s != "DISABLED" {
		return
	}
	var enabled []string
	for i := range cfg.services {
		if cfg.services[i].Enabled == nil {
			enabled = append(enabled, cfg.services[i].Name)
			f := false
			cfg.services[i].Enabled = &f
		}
	}
	cfg.disabled = true
	if len(enabled) == 0 {
		warnAt(v.state.line, "the vserver is DISABLED on NetScaler, which serves nothing on it, and so are all its services: written with every service disabled, hashlb answers every request 503")
		return
	}
	warnAt(v.state.line, "the vserver is DISABLED on NetScaler, which serves nothing on it: written with every service disabled (\"enabled\": false), so hashlb answers every request 503; "+
		"to serve as NetScaler would once the vserver is enabled, remove \"enabled\": false from %s (the services enabled on NetScaler)", strings.Join(enabled, ", "))
}

// vserverWarnings: every service disabled, and a service type hashlb's HTTP
// filter does not balance as NetScaler does.
func (t *translator) vserverWarnings(v *vserver, cfg *outConfig, warnAt func(int, string, ...any)) {
	enabled := false
	for _, s := range cfg.services {
		enabled = enabled || s.Enabled == nil
	}
	if !enabled && !cfg.disabled {
		warnAt(v.e.Line, "every service is disabled: hashlb answers every request 503 until one is enabled")
	}
	if v.typ != "HTTP" && v.typ != "SSL" && v.typ != "SSL_BRIDGE" { // SSL_BRIDGE: backendTLS says what to do
		warnAt(v.e.Line, "service type %s: written for hashlb's HTTP filter (filterType http), which balances requests where Envoy handles this traffic as HTTP; "+
			"to balance TCP connections instead, add \"filterType\": \"network\" and run hashlb before tcp_proxy (README: TCP), with a method and keys that need no HTTP", v.typ)
	}
}

// ruleUnused warns of a -rule neither TOKEN nor RULE persistence reads.
func (t *translator) ruleUnused(v *vserver, cfg *outConfig, warnAt func(int, string, ...any)) {
	if v.rule.line == 0 || strings.EqualFold(v.rule.s, "none") {
		return
	}
	p := v.persistType.s
	if cfg.lbMethod != "TOKEN" && !(p == "RULE" || p == "CUSTOMSERVERID" || p == "URLPASSIVE") && v.lbMethod.s != "TOKEN" {
		warnAt(v.rule.line, "-rule: not written: only TOKEN and RULE persistence use it")
	}
}

// namedExprsUsed returns the lines of the named expressions v's
// translation used, and notes v as their user.
func (t *translator) namedExprsUsed(v *vserver) []*Entry {
	var lines []*Entry
	for _, n := range t.exprUsed {
		lines = append(lines, t.entryAt(t.namedLine[n], v.e))
		if t.exprUsers[n] == nil {
			t.exprUsers[n] = map[string]bool{}
		}
		t.exprUsers[n][v.name] = true
	}
	t.exprUsed = nil
	return lines
}

// member is a written service, the bind that brought it and what it is.
type member struct {
	b    *binding
	name string
	be   *backend
}

// noHealth reports whether the service, or its group, has -healthMonitor NO.
func (mb member) noHealth() bool {
	return mb.be.noHealth || (mb.b.grp != nil && mb.b.grp.noHealth)
}

// optLine is the line that set -healthMonitor NO: the service's, or its
// group's.
func (mb member) optLine() int {
	if mb.b.grp != nil && mb.b.grp.noHealth {
		return mb.b.grp.e.Line
	}
	return mb.be.e.Line
}

// method translates -lbMethod and what goes with it.
func (t *translator) method(v *vserver, cfg *outConfig, warnAt func(int, string, ...any)) {
	m, line := v.lbMethod.s, v.lbMethod.line
	if m == "" {
		m, line = "LEASTCONNECTION", v.e.Line
	}
	backup := "LEASTCONNECTION"
	if b := v.backup.s; b != "" {
		backup = b
		if !slices.Contains(hashlbBackups, b) {
			backup = "LEASTCONNECTION"
			warnAt(v.backup.line, "-backupLBMethod %s: written as LEASTCONNECTION: %s", b, nearestLeastCon[b])
		}
	}
	switch {
	case m == "TOKEN" || m == "USER_TOKEN":
		var why string
		switch {
		case m == "USER_TOKEN":
			why = "tokens from a protocol extension are not translated"
		case v.rule.line == 0 || strings.EqualFold(v.rule.s, "none"):
			why = "TOKEN without -rule reads the TCP payload (-dataOffset, -dataLength), which hashlb does not see"
		default:
			tok, err := t.expr(v.rule.s)
			if err == nil {
				cfg.lbMethod, cfg.token = "TOKEN", tok
				break
			}
			why = "-rule " + strconv.Quote(v.rule.s) + ": " + err.Error()
			line = v.rule.line
		}
		if cfg.lbMethod == "" {
			cfg.lbMethod = backup
			warnAt(line, "-lbMethod %s: written as %s, the backup method NetScaler uses for a request without a token: %s", m, backup, why)
		}
	case slices.Contains(lbcore.Methods(), m):
		cfg.lbMethod = m
	default:
		cfg.lbMethod = "LEASTCONNECTION"
		warnAt(line, "-lbMethod %s: written as LEASTCONNECTION, the nearest hashlb has: %s", m, nearestLeastCon[m])
	}
	if slices.Contains(nonHashMethods, cfg.lbMethod) {
		return
	}
	if v.backup.s != "" {
		cfg.backup = backup
	} else if cfg.lbMethod != "TOKEN" || v.rule.line != 0 {
		warnAt(line, "no -backupLBMethod: requests without the hash's input go to LEASTCONNECTION, hashlb's default and the fallback the Citrix hashing page describes; "+
			"NITRO documents ROUNDROBIN as the attribute's default: add \"backupLBMethod\": \"ROUNDROBIN\" if the appliance spreads them round robin")
	}
	if v.hashLength.line != 0 && slices.Contains(hashLenMethods, cfg.lbMethod) {
		cfg.hashLength = v.hashLength.n
	}
	for _, f := range []struct {
		s    setting
		flag string
		set  func()
	}{
		{v.netmask, "-netmask", func() { cfg.netmask = v.netmask.s }},
		{v.v6netmasklen, "-v6netmasklen", func() { cfg.v6NetmaskLen = v.v6netmasklen.n }},
	} {
		switch {
		case f.s.line == 0:
		case slices.Contains(ipMaskMethods, cfg.lbMethod):
			f.set()
		case cfg.lbMethod == "SRCIPSRCPORTHASH":
			warnAt(f.s.line, "%s %s: not written: the NetScaler reference applies it to DESTINATIONIPHASH, SOURCEIPHASH and SRCIPDESTIPHASH only", f.flag, f.s.s)
		}
	}
}

// persistence translates -persistenceType and its flags.
func (t *translator) persistence(v *vserver, cfg *outConfig, warnAt func(int, string, ...any)) {
	p, line := v.persistType.s, v.persistType.line
	v4, v6 := 32, 128
	if v.persistMask.line != 0 {
		v4 = v.persistMask.n
	}
	if v.v6persist.line != 0 {
		v6 = v.v6persist.n
	}
	// -persistMask and -v6persistmasklen: "Persistence mask for IP based
	// persistence types" (NITRO lbvserver, persistmask), so every address
	// the key holds is masked.
	if p != "COOKIEINSERT" {
		for _, f := range []struct {
			flag string
			s    setting
		}{{"-cookieName", v.cookieName}, {"-cookieDomain", v.cookieDomain}, {"-httpOnlyCookieFlag", v.httpOnly}} {
			if f.s.line != 0 {
				warnAt(f.s.line, "%s %s: not translated: it is COOKIEINSERT's, and -persistenceType is not", f.flag, f.s.s)
			}
		}
		if v.persistBackup.line != 0 && v.persistBackup.s != "NONE" {
			warnAt(v.persistBackup.line, "-persistenceBackup %s: not translated: hashlb keeps one persistence key; the backup is translated for COOKIEINSERT only", v.persistBackup.s)
		}
	}
	switch p {
	case "", "NONE":
		return
	case "COOKIEINSERT":
		t.cookieInsert(v, cfg, v4, v6, warnAt)
		return
	case "SOURCEIP":
		cfg.persistKeys = []string{ipKey("client.ip", v4, v6)}
	case "DESTIP":
		cfg.persistKeys = []string{ipKey("server.ip", v4, v6)}
	case "SRCIPDESTIP":
		cfg.persistKeys = []string{ipKey("client.ip", v4, v6), ipKey("server.ip", v4, v6)}
	case "CALLID":
		cfg.persistKeys = []string{"${sip.callid}"}
	case "RULE":
		if v.rule.line == 0 || strings.EqualFold(v.rule.s, "none") {
			warnAt(line, "-persistenceType RULE: not translated: no -rule says what to persist on")
			return
		}
		key, err := t.expr(v.rule.s)
		if err != nil {
			warnAt(v.rule.line, "-persistenceType RULE: not translated: -rule %q: %v", v.rule.s, err)
			return
		}
		cfg.persistKeys = []string{key}
	default:
		warnAt(line, "-persistenceType %s: not translated: %s", p, whyPersistence[p])
		return
	}
	// The timeout is in minutes; NetScaler's default is 2 for every type
	// (https://docs.citrix.com/en-us/citrix-adc/current-release/load-balancing/load-balancing-persistence/no-rule-persistence.html).
	minutes, tline, given := 2, line, "no -timeout: NetScaler's default is 2 minutes"
	if v.timeout.line != 0 {
		minutes, tline, given = v.timeout.n, v.timeout.line, fmt.Sprintf("-timeout %d (minutes)", v.timeout.n)
	}
	lo, _ := durRange("persistence.expire")
	if least := int(lo / time.Minute); minutes < least {
		warnAt(tline, "%s: persistence.expire written as %s, hashlb's least (clamped)", given, duration(least))
		minutes = least
	}
	cfg.expire = duration(minutes)
}

// outSession is the session block COOKIEINSERT becomes.
type outSession struct {
	name, domain, lifetime, absolute, idle string
	httpOnly                               *bool
}

// cookieInsert translates COOKIEINSERT: hashlb's session cookie, signed
// and naming the service by a keyed tag where NetScaler's NSC_ cookie
// encodes the service's IP and port (docs/nsconf.md). -timeout is in
// minutes, the inactivity after which NetScaler ends the session; 0 is a
// session cookie with no expiry (NetScaler's http-cookie-persistence page).
// So a timeout becomes idleTimeout with a permanent cookie kept for a day
// (NetScaler's longest timeout, 1440 minutes), and 0 a session cookie
// honoured for hashlb's default absoluteTimeout of a day. -persistenceBackup
// SOURCEIP, what NetScaler uses when the client sends no cookie, becomes
// hashlb's persistence on the client IP, the fallback for a request
// without a valid session.
func (t *translator) cookieInsert(v *vserver, cfg *outConfig, v4, v6 int, warnAt func(int, string, ...any)) {
	s := &outSession{name: vserverCookie(v.name)}
	if n := v.cookieName; n.line != 0 {
		if isCookieToken(n.s) && len(n.s) <= 128 {
			s.name = n.s
		} else {
			warnAt(n.line, "-cookieName %q: not a cookie name hashlb accepts (a token of at most 128 bytes): the vserver's own %s is used", n.s, s.name)
		}
	}
	if d := v.cookieDomain; d.line != 0 {
		s.domain = d.s
	}
	if h := v.httpOnly; h.line != 0 {
		on := h.s == "ENABLED"
		s.httpOnly = &on
	}
	switch {
	case v.timeout.line == 0:
		// NetScaler's default, 2 minutes of inactivity.
		s.lifetime, s.absolute, s.idle = "permanent", "1d", "2m"
		warnAt(v.persistType.line, "no -timeout: NetScaler's default is 2 minutes; written as idleTimeout 2m with a permanent cookie kept for 1d")
	case v.timeout.n == 0:
		s.lifetime = "session"
	default:
		s.lifetime, s.absolute, s.idle = "permanent", "1d", duration(v.timeout.n)
	}
	cfg.session = s
	warnAt(v.persistType.line, "-persistenceType COOKIEINSERT: hashlb signs its session cookie with the VM's %s (%d bytes or more, the same on every proxy); without it the plugin refuses to start. NetScaler's NSC_ cookies are not read: their clients start a new session", lbcore.SessionKeyEnv, lbcore.MinSessionKeyBytes)
	if b := v.persistBackup; b.line != 0 && b.s == "SOURCEIP" {
		cfg.persistKeys = []string{ipKey("client.ip", v4, v6)}
		minutes, given := 2, "no -backupPersistenceTimeout: NetScaler's default is 2 minutes"
		if v.backupTimeout.line != 0 {
			minutes, given = v.backupTimeout.n, fmt.Sprintf("-backupPersistenceTimeout %d (minutes)", v.backupTimeout.n)
		}
		if minutes < 10 {
			warnAt(b.line, "%s: persistence.expire written as 10m, hashlb's least (clamped)", given)
			minutes = 10
		}
		cfg.expire = duration(minutes)
	}
}

// isCookieToken reports whether s is an HTTP token (RFC 9110 5.6.2), what
// a cookie name must be.
// vserverCookie is the session cookie name of vserver name without
// -cookieName: NSC_ and the name, as NetScaler names its cookie per vserver
// (NSC_ and the name encoded), so two vservers' sessions never share a
// name, which the session signature covers. A byte a cookie name cannot
// hold becomes '_', and then the name's FNV-1a hash is added, so that two
// names differing there still differ; a long name is cut likewise.
func vserverCookie(name string) string {
	b := []byte("NSC_" + name)
	clean := true
	for i := 4; i < len(b); i++ {
		if !isCookieToken(string(b[i : i+1])) {
			b[i], clean = '_', false
		}
	}
	if clean && len(b) <= 128 {
		return string(b)
	}
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	return fmt.Sprintf("%s_%08x", b[:min(len(b), 128-9)], h)
}

func isCookieToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ipKey is the persistence key of an address variable masked to v4 bits for
// IPv4 and v6 bits for IPv6. mask(n) applies n to both families (capped at
// 32 for IPv4), so when the two differ the key has two alternatives: an IPv6
// address (it has a ":") is emptied in the first, which falls through to the
// second.
func ipKey(v string, v4, v6 int) string {
	m := func(bits, full int) string {
		if bits == full {
			return v
		}
		return fmt.Sprintf("%s | mask(%d)", v, bits)
	}
	switch {
	case v4 == 32 && v6 == 128:
		return "${" + v + "}"
	case v4 == 32 && v6 >= 32:
		return "${" + m(v6, 128) + "}"
	case v4 == v6:
		return "${" + m(v4, 32) + "}"
	}
	return fmt.Sprintf(`${%s | replace(".*:.*", "") | mask(%d) || %s}`, v, v4, m(v6, 128))
}

// duration writes minutes in hashlb's duration syntax, in the largest
// whole unit.
func duration(minutes int) string {
	switch {
	case minutes%(24*60) == 0:
		return fmt.Sprintf("%dd", minutes/(24*60))
	case minutes%60 == 0:
		return fmt.Sprintf("%dh", minutes/60)
	}
	return fmt.Sprintf("%dm", minutes)
}

// expr translates a NetScaler expression, noting the named expressions used.
func (t *translator) expr(src string) (string, error) {
	x := exprTranslator{named: t.named}
	out, err := x.translate(src)
	if err == nil {
		t.exprUsed = append(t.exprUsed, x.used...)
	}
	return out, err
}

// entryAt returns the entry of line n (def when there is none).
func (t *translator) entryAt(n int, def *Entry) *Entry {
	i, ok := slices.BinarySearchFunc(t.entries, n, func(e *Entry, n int) int { return e.Line - n })
	if !ok {
		return def
	}
	return t.entries[i]
}

// sanitizeName maps the characters NetScaler names may have and hashlb
// service names may not (space : @ =) to "_".
func sanitizeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return r
		}
		return '_'
	}, s)
}

// fileName is the configuration file of vserver name: letters, digits,
// "-", "_" and "." kept, anything else "_", never starting with ".".
func fileName(name string) string {
	f := strings.Map(func(r rune) rune {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return r
		}
		return '_'
	}, name)
	if f == "" || f[0] == '.' {
		f = "_" + f
	}
	return f + ".json"
}

// json writes cfg in the layout of configs/*.json: two-space indent, one
// service per line.
func (cfg *outConfig) json() []byte {
	var b bytes.Buffer
	var fields []string
	add := func(k string, v any) { fields = append(fields, fmt.Sprintf("  %s: %s", jsonText(k), jsonText(v))) }
	add("lbMethod", cfg.lbMethod)
	if cfg.hashLength != 0 {
		add("hashLength", cfg.hashLength)
	}
	if cfg.netmask != "" {
		add("netmask", cfg.netmask)
	}
	if cfg.v6NetmaskLen != 0 {
		add("v6NetmaskLen", cfg.v6NetmaskLen)
	}
	if cfg.token != "" {
		add("token", cfg.token)
	}
	if cfg.backup != "" {
		add("backupLBMethod", cfg.backup)
	}
	if len(cfg.persistKeys) > 0 {
		fields = append(fields, fmt.Sprintf("  \"persistence\": {\n    \"keys\": %s,\n    \"expire\": %s\n  }",
			jsonText(cfg.persistKeys), jsonText(cfg.expire)))
	}
	if s := cfg.session; s != nil {
		f := []string{`"type": "cookie"`}
		if s.name != "" {
			f = append(f, `"name": `+jsonText(s.name))
		}
		if s.domain != "" {
			f = append(f, `"domain": `+jsonText(s.domain))
		}
		if s.httpOnly != nil {
			f = append(f, `"httpOnly": `+jsonText(*s.httpOnly))
		}
		f = append(f, `"lifetime": `+jsonText(s.lifetime))
		if s.absolute != "" {
			f = append(f, `"absoluteTimeout": `+jsonText(s.absolute))
		}
		if s.idle != "" {
			f = append(f, `"idleTimeout": `+jsonText(s.idle))
		}
		fields = append(fields, "  \"session\": {"+strings.Join(f, ", ")+"}")
	}
	if cfg.health != nil {
		fields = append(fields, "  \"healthCheck\": "+cfg.health.json())
	}
	if cfg.passive != nil {
		fields = append(fields, "  \"passiveHealth\": "+cfg.passive.json())
	}
	if s := cfg.slowStart; s != nil {
		fields = append(fields, fmt.Sprintf("  \"slowStart\": {\"window\": %s, \"step\": %s}", jsonText(s.window), jsonText(s.step)))
	}
	svcs := make([]string, len(cfg.services))
	for i, s := range cfg.services {
		svcs[i] = "    " + s.json()
	}
	fields = append(fields, "  \"services\": [\n"+strings.Join(svcs, ",\n")+"\n  ]")
	b.WriteString("{\n")
	b.WriteString(strings.Join(fields, ",\n"))
	b.WriteString("\n}\n")
	return b.Bytes()
}

// jsonText marshals v without HTML escaping (expressions hold & and <); a
// list of strings gets a space after each comma.
func jsonText(v any) string {
	if ss, ok := v.([]string); ok {
		parts := make([]string, len(ss))
		for i, s := range ss {
			parts[i] = jsonText(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only strings and ints
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// json writes s on one line, as configs/*.json do.
func (s outService) json() string {
	f := []string{`"name": ` + jsonText(s.Name), `"address": ` + jsonText(s.Address)}
	if s.Weight != 0 {
		f = append(f, `"weight": `+jsonText(s.Weight))
	}
	if s.Enabled != nil {
		f = append(f, `"enabled": false`)
	}
	if s.HashID != "" {
		f = append(f, `"hashId": `+jsonText(s.HashID))
	}
	return "{" + strings.Join(f, ", ") + "}"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// outSlowStart is a written slowStart block.
type outSlowStart struct{ window, step string }

// slowStart translates -newServiceRequest N PERCENT with
// -newServiceRequestIncrementInterval S: the new service takes N % of an
// existing service's load in the first interval and N % more in each
// (NetScaler: "the new service request rate, the amount by which to
// increase ... the percentage of the load being borne, at the time, by the
// existing services", and the final increment is cut at their load). That
// is hashlb's slowStart with step S and window 100·S/N (rounded up to the
// millisecond): a fraction (k+1)·N/100 of the weight in the k-th interval.
// The other forms have no translation, said on the line that set them:
// PER_SECOND (NetScaler's default unit) counts requests, and a hash method
// sends all of a key's requests to its service, so hashlb ramps a share of
// keys, not a request rate; an interval of 0 is NetScaler's manual slow
// start, raised by hand; and NetScaler applies vserver slow start to its
// non-hashing methods, which hashlb's slow start does not ramp (round robin
// and least connection pick by the configured weights).
func (t *translator) slowStart(v *vserver, cfg *outConfig, warnAt func(int, string, ...any)) {
	n, iv := v.newSvc, v.newSvcInterval
	if n.line == 0 || n.n == 0 {
		return // slow start off (0: NetScaler's global startup round robin, which hash methods do not use)
	}
	given := "-newServiceRequest " + n.s
	if v.newSvcUnit.s != "" {
		given += " " + v.newSvcUnit.s
	}
	line := max(n.line, iv.line)
	switch {
	case v.newSvcUnit.s != "PERCENT":
		warnAt(n.line, "%s: not translated: a rate of requests per second (PER_SECOND, NetScaler's default unit) cannot be honoured by hashing, "+
			"which sends every request of a key to its service: hashlb's slowStart ramps the share of keys; -newServiceRequest N PERCENT translates (docs/nsconf.md)", given)
	case iv.line == 0 || iv.n == 0:
		warnAt(n.line, "%s without -newServiceRequestIncrementInterval: not translated: NetScaler's manual slow start, raised by hand; "+
			"give an interval for a ramp hashlb can follow", given)
	case slices.Contains(nonHashMethods, cfg.lbMethod):
		warnAt(line, "%s: not translated: hashlb's slowStart ramps the hashing methods' ranking; %s picks by the configured weights", given, cfg.lbMethod)
	case n.n >= 100:
		warnAt(line, "%s: nothing written: a new service takes its full share from the first interval, as without slow start", given)
	default:
		window := time.Duration((100*int64(iv.n)*1000 + int64(n.n) - 1) / int64(n.n) * int64(time.Millisecond))
		cfg.slowStart = &outSlowStart{window: lbcore.FormatDuration(window), step: lbcore.FormatDuration(time.Duration(iv.n) * time.Second)}
		warnAt(line, "%s -newServiceRequestIncrementInterval %d: written as slowStart window %s, step %s: a new or returning service ranks with %d %% of its weight, "+
			"%d %% more every %d s; NetScaler applies vserver slow start to its non-hashing methods only, hashlb to the hashing methods' share of new keys",
			given, iv.n, cfg.slowStart.window, cfg.slowStart.step, n.n, n.n, iv.n)
	}
}
