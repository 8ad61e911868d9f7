package nsconf

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/hashlb/hashlb/lbcore"
)

// translator replays an ns.conf in order, as the appliance would: a line may
// name only what earlier lines added. A line that fails adds nothing; the
// lines after it are still read.
type translator struct {
	file    string
	entries []*Entry

	servers  map[string]*server
	services map[string]*service
	groups   map[string]*group
	vservers map[string]*vserver
	vsOrder  []*vserver
	// failed remembers names whose add failed, to say so when they are used.
	failed map[string]int

	named     map[string]string // add policy expression: name → expression
	namedLine map[string]int
	exprUsed  []string                   // named expressions the vserver being built used
	exprUsers map[string]map[string]bool // named expression → lb vservers using it

	usePort     bool // set lb parameter -usePortForHashLb (default YES)
	usePortLine int

	// What names which lb vservers a line concerns (for -vserver): the
	// vservers that bind (or tried to bind) each service or group, and the
	// services and groups that use each server.
	boundBy     map[string]map[string]bool
	serverUsers map[string]map[string]bool

	monitors map[string]*monitor  // lb monitors added, and built-in ones bound
	monBinds map[string][]monBind // service or group → its monitor bindings
	// unused says, for a line that counts only if used, what it is when no
	// written configuration uses it, and why (instead of "not used").
	unused map[*Entry]unusedWhy
	// monWarned: the monitors whose translation warnings were given.
	monWarned map[*monitor]bool
	// commands counts the lines that start like a NetScaler command.
	commands int
}

type unusedWhy struct {
	status Status
	why    string
}

type server struct {
	e        *Entry
	name     string
	ip       netip.Addr
	fqdn     string
	disabled bool
	implicit bool // an IP address written where a server name goes
}

// backend is what a service or a service-group member becomes: one hashlb
// service.
type backend struct {
	e        *Entry // the add service or bind serviceGroup line
	name     string // the hashlb service name, before sanitising
	srv      *server
	port     int
	hashID   string
	weight   int
	disabled bool
	noHealth bool   // -healthMonitor NO
	problem  string // why it cannot be written ("" if it can)
}

type service struct {
	backend
	typ string
}

type group struct {
	e        *Entry
	name     string
	typ      string
	disabled bool
	noHealth bool // -healthMonitor NO
	members  []*backend
}

// setting is one value of a vserver and the line that set it (0: not set).
type setting struct {
	s    string
	n    int
	line int
}

type vsSettings struct {
	lbMethod, hashLength, netmask, v6netmasklen, backup, rule setting
	persistType, persistMask, v6persist, timeout, state       setting
	// COOKIEINSERT's cookie and its backup persistence.
	cookieName, cookieDomain, httpOnly, persistBackup, backupTimeout setting
	// Slow start: -newServiceRequest N [PER_SECOND|PERCENT] (newSvcUnit
	// the unit as given, "" when absent) and its increment interval.
	newSvc, newSvcUnit, newSvcInterval setting
}

type vserver struct {
	e    *Entry
	name string
	typ  string
	vsSettings
	binds []*binding
}

type binding struct {
	e      *Entry
	svc    *service
	grp    *group
	weight int
}

// ref is an object a report entry is about.
type ref struct {
	kind byte // 'v' lb vserver, 's' service or service group, 'h' server, 'm' lb monitor, 'x' named expression, 'g' every vserver
	name string
}

// cmdLine is one parsed command.
type cmdLine struct {
	e     *Entry
	pos   []word
	flags map[string]flagVal // by lower-case name
}

type flagVal struct {
	name string // as the reference spells it
	vals []word
}

// flagText is flag name's values as written, joined by spaces.
func (c *cmdLine) flagText(name string) string {
	var out []string
	for _, w := range c.flags[strings.ToLower(name)].vals {
		out = append(out, w.text)
	}
	return strings.Join(out, " ")
}

// value returns the single value of flag name, and whether it was given.
func (c *cmdLine) value(name string) (string, bool) {
	f, ok := c.flags[strings.ToLower(name)]
	if !ok || len(f.vals) == 0 {
		return "", false
	}
	return f.vals[0].text, true
}

func newTranslator(file string) *translator {
	return &translator{
		file:        file,
		servers:     map[string]*server{},
		services:    map[string]*service{},
		groups:      map[string]*group{},
		vservers:    map[string]*vserver{},
		failed:      map[string]int{},
		named:       map[string]string{},
		namedLine:   map[string]int{},
		exprUsers:   map[string]map[string]bool{},
		usePort:     true,
		boundBy:     map[string]map[string]bool{},
		serverUsers: map[string]map[string]bool{},
		monitors:    map[string]*monitor{},
		monBinds:    map[string][]monBind{},
		unused:      map[*Entry]unusedWhy{},
		monWarned:   map[*monitor]bool{},
	}
}

// lineError fails the line being read: it adds nothing.
type lineError struct{ msg string }

func (e *lineError) Error() string { return e.msg }

func failf(format string, args ...any) error { return &lineError{fmt.Sprintf(format, args...)} }

// read handles one line of the file (n is its 1-based number).
func (t *translator) read(n int, text string) {
	text = strings.TrimRight(text, "\r")
	trimmed := strings.TrimSpace(text)
	if trimmed == "" {
		return
	}
	e := &Entry{Line: n}
	t.entries = append(t.entries, e)
	if trimmed[0] == '#' {
		e.Status, e.Detail = Ignored, "comment"
		return
	}
	words, lexErr := splitLine(text)
	if isCommand(words) {
		t.commands++
	}
	if what, why, ok := builtinLine(words); ok && lexErr == nil {
		e.Status, e.What, e.Detail = BuiltIn, what, why
		return
	}
	cmd, nw := findCommand(words)
	if cmd == nil {
		t.other(e, words)
		if lexErr != nil {
			e.Status, e.Detail, e.refs = Failed, lexErr.Error(), []ref{{kind: 'g'}}
		}
		return
	}
	c := &cmdLine{e: e}
	e.What = describe(words, nw, cmd)
	err := parseArgs(c, cmd, words[nw:])
	if lexErr != nil {
		err = lexErr
	}
	switch {
	case cmd.about == 'g':
		e.refs = []ref{{kind: 'g'}}
	case len(c.pos) > 0:
		e.refs = []ref{{kind: cmd.about, name: c.pos[0].text}}
	default:
		e.refs = []ref{{kind: 'g'}} // no name: it may concern any vserver
	}
	if err != nil {
		name := ""
		if cmd.words[0] == "add" && len(c.pos) > 0 {
			name = c.pos[0].text
		}
		t.fail(c, name, err)
		return
	}
	cmd.run(t, c)
}

// findCommand returns the translated command words starts with, and how many
// words name it.
func findCommand(words []word) (*command, int) {
	for i := range commands {
		if hasWords(words, commands[i].words) {
			return &commands[i], len(commands[i].words)
		}
	}
	return nil, 0
}

func hasWords(words []word, want []string) bool {
	if len(words) < len(want) {
		return false
	}
	for i, w := range want {
		if words[i].quoted || !strings.EqualFold(words[i].text, w) {
			return false
		}
	}
	return true
}

// describe is the report's name for a command line: its command words as
// written and its positional arguments (the first only for add and set,
// whose later positionals are details).
func describe(words []word, nw int, cmd *command) string {
	var parts []string
	for i, w := range words {
		if i >= nw && w.isFlag() {
			break
		}
		if i >= nw+1 && (cmd.words[0] == "add" || cmd.words[0] == "set") {
			break
		}
		parts = append(parts, w.shown())
	}
	return strings.Join(parts, " ")
}

// parseArgs splits args into positionals and flags and checks them against
// cmd's specification; warnings of flagWarn flags go to c.e.
func parseArgs(c *cmdLine, cmd *command, args []word) error {
	i := 0
	for i < len(args) && !args[i].isFlag() {
		c.pos = append(c.pos, args[i])
		i++
	}
	if len(c.pos) < cmd.minPos {
		return failf("%s needs %d arguments before its flags, got %d", strings.Join(cmd.words, " "), cmd.minPos, len(c.pos))
	}
	if len(c.pos) > cmd.maxPos {
		return failf("%q: unexpected argument (%s takes at most %d before its flags)", c.pos[cmd.maxPos].text, strings.Join(cmd.words, " "), cmd.maxPos)
	}
	c.flags = map[string]flagVal{}
	var warns []string
	for i < len(args) {
		name := args[i]
		i++
		var vals []word
		for i < len(args) && !args[i].isFlag() {
			vals = append(vals, args[i])
			i++
		}
		key := strings.ToLower(name.text)
		spec, ok := cmd.flags[key]
		if !ok && cmd.lenient {
			warns = append(warns, fmt.Sprintf("%s: not translated: not a flag this importer reads", name.text))
			continue
		}
		if !ok {
			return failf("%s: unknown flag (not a flag of %s in the NetScaler command reference)", name.text, strings.Join(cmd.words, " "))
		}
		if _, dup := c.flags[key]; dup {
			return failf("%s: given twice", spec.name)
		}
		c.flags[key] = flagVal{name: spec.name, vals: vals}
		switch spec.kind {
		case flagUse:
			if len(vals) != 1 {
				return failf("%s: needs one value, got %d", spec.name, len(vals))
			}
		case flagUseN:
			if len(vals) == 0 {
				return failf("%s: needs a value", spec.name)
			}
		case flagWarn:
			if len(vals) > 0 && slices.Contains(spec.off, strings.ToUpper(vals[0].text)) {
				continue
			}
			shown := spec.name
			for _, v := range vals {
				shown += " " + v.text
			}
			warns = append(warns, fmt.Sprintf("%s: not translated: %s", shown, spec.why))
		}
	}
	c.e.Warnings = append(c.e.Warnings, warns...)
	return nil
}

// other reports a line that is not a translated command: a load-balancing
// command hashlb has no equivalent for, or not load balancing at all.
func (t *translator) other(e *Entry, words []word) {
	e.What = leadingWords(words, 4)
	for _, nt := range notTranslated {
		if hasWords(words, nt.words) {
			e.What = leadingWords(words, len(nt.words)+1)
			e.Status, e.Detail = NotTranslated, nt.why
			if len(words) > len(nt.words) && !words[len(nt.words)].isFlag() {
				name := words[len(nt.words)].text
				switch nt.words[len(nt.words)-1] {
				case "vserver":
					e.refs = []ref{{kind: 'v', name: name}}
				case "service", "servicegroup":
					e.refs = []ref{{kind: 's', name: name}}
				case "server":
					e.refs = []ref{{kind: 'h', name: name}}
				}
			}
			return
		}
	}
	e.Status, e.Detail = Ignored, "not load balancing"
	if !isCommand(words) {
		e.Detail = "not a NetScaler command"
	}
	if len(words) > 1 {
		obj := strings.ToLower(words[1].text)
		if why, ok := ignoredObjects[obj]; ok {
			e.Detail = why
		}
		if obj == "lb" {
			// An lb command this importer does not know at all: say so
			// rather than call it "not load balancing".
			e.Status, e.Detail = NotTranslated, "not a command this importer translates"
		}
	}
}

// leadingWords joins the first n words of a command, stopping at its first
// flag.
func leadingWords(ws []word, n int) string {
	var s []string
	for i, w := range ws {
		if i >= n || (i > 0 && w.isFlag()) {
			break
		}
		s = append(s, w.shown())
	}
	return strings.Join(s, " ")
}

// ---- add server, add service, add serviceGroup, bind serviceGroup ----

func (t *translator) taken(name string) (int, bool) {
	if s, ok := t.services[name]; ok {
		return s.e.Line, true
	}
	if g, ok := t.groups[name]; ok {
		return g.e.Line, true
	}
	return 0, false
}

func (t *translator) addServer(c *cmdLine) {
	name, addr := c.pos[0].text, c.pos[1].text
	c.e.refs = []ref{{kind: 'h', name: name}}
	if s, dup := t.servers[name]; dup {
		t.fail(c, "", failf("server %s was already added at %s", name, t.at(s.e.Line)))
		return
	}
	s := &server{e: c.e, name: name}
	disabled, err := stateFlag(c)
	if err != nil {
		t.fail(c, name, err)
		return
	}
	s.disabled = disabled
	if ip, err := netip.ParseAddr(addr); err == nil && ip.Zone() == "" {
		if ip.Is4In6() {
			c.e.Warnings = append(c.e.Warnings, fmt.Sprintf("%s is an IPv4-mapped IPv6 address: written as %s", addr, ip.Unmap()))
			ip = ip.Unmap()
		}
		s.ip = ip
		c.e.Status, c.e.ifUsed = Translated, true
	} else if isDomainName(addr) {
		s.fqdn = addr
		c.e.Status, c.e.Detail = NotTranslated, fmt.Sprintf("%s is a domain name: hashlb needs each service's ip:port (resolve it and add the addresses as servers, or balance it with an Envoy STRICT_DNS cluster)", addr)
	} else {
		t.fail(c, name, failf("%q is neither an IP address nor a domain name", addr))
		return
	}
	t.servers[name] = s
}

// isDomainName reports whether s looks like a host name (letters, digits,
// hyphens and dots, with a letter somewhere).
func isDomainName(s string) bool {
	letter := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c|0x20 && c|0x20 <= 'z':
			letter = true
		case '0' <= c && c <= '9', c == '-', c == '.':
		default:
			return false
		}
	}
	return letter && len(s) <= 253
}

// resolveServer returns the server named tok, or an implicit one when tok is
// an IP address (the CLI accepts either).
func (t *translator) resolveServer(tok string) (*server, error) {
	if s, ok := t.servers[tok]; ok {
		return s, nil
	}
	if ip, err := netip.ParseAddr(tok); err == nil && ip.Zone() == "" {
		return &server{name: tok, ip: ip.Unmap(), implicit: true}, nil
	}
	if line, ok := t.failed[tok]; ok {
		return nil, failf("server %s was not added (%s failed)", tok, t.at(line))
	}
	return nil, failf("no server %s (add server must come first, or give an IP address)", tok)
}

// backendFor fills the common part of a service or group member.
func (t *translator) backendFor(c *cmdLine, srvTok, portTok string) (*backend, error) {
	srv, err := t.resolveServer(srvTok)
	if err != nil {
		return nil, err
	}
	b := &backend{e: c.e, srv: srv, weight: 1}
	switch {
	case portTok == "*":
		// "* in CLI is represented as 65535 in NITRO" (NITRO service, port).
		b.problem = "port * (any port): hashlb needs a service's port"
	default:
		p, err := strconv.Atoi(portTok)
		if err != nil || p < 1 || p > 65535 {
			return nil, failf("port %q is not a number in [1, 65535]", portTok)
		}
		b.port = p
	}
	if srv.fqdn != "" {
		b.problem = fmt.Sprintf("its server %s (%s) is a domain name, not an IP address", srv.name, t.at(srv.e.Line))
	}
	if b.disabled, err = stateFlag(c); err != nil {
		return nil, err
	}
	if b.noHealth, err = healthMonitorFlag(c); err != nil {
		return nil, err
	}
	if v, ok := c.value("-hashId"); ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n < 1 {
			return nil, failf("-hashId %q is not a positive integer", v)
		}
		b.hashID = v
	}
	if v, ok := c.value("-weight"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return nil, failf("-weight %q is not a number in [1, 100]", v)
		}
		b.weight = n
	}
	return b, nil
}

// stateFlag reads -state (ENABLED by default).
func stateFlag(c *cmdLine) (disabled bool, err error) {
	return switchFlag(c, "-state", "ENABLED", "DISABLED")
}

// healthMonitorFlag reads -healthMonitor (YES by default).
func healthMonitorFlag(c *cmdLine) (no bool, err error) {
	return switchFlag(c, "-healthMonitor", "YES", "NO")
}

// switchFlag reads the flag name, whose value (in any case) is off, the
// default, or on, and reports whether it is on.
func switchFlag(c *cmdLine, name, off, on string) (bool, error) {
	v, ok := c.value(name)
	if !ok {
		return false, nil
	}
	switch strings.ToUpper(v) {
	case off:
		return false, nil
	case on:
		return true, nil
	}
	return false, failf("%s %q is not %s or %s", name, v, off, on)
}

func (t *translator) addService(c *cmdLine) {
	name, srvTok, typ, portTok := c.pos[0].text, c.pos[1].text, c.pos[2].text, c.pos[3].text
	c.e.refs = []ref{{kind: 's', name: name}}
	t.uses(srvTok, name)
	if line, dup := t.taken(name); dup {
		t.fail(c, "", failf("%s was already added at %s", name, t.at(line)))
		return
	}
	b, err := t.backendFor(c, srvTok, portTok)
	if err != nil {
		t.fail(c, name, err)
		return
	}
	b.name = name
	t.services[name] = &service{backend: *b, typ: typ}
	c.e.Status, c.e.ifUsed = Translated, true
	if b.problem != "" {
		c.e.Status, c.e.Detail = NotTranslated, b.problem
	}
}

// uses notes that service or group name uses server srvTok.
func (t *translator) uses(srvTok, name string) {
	if t.serverUsers[srvTok] == nil {
		t.serverUsers[srvTok] = map[string]bool{}
	}
	t.serverUsers[srvTok][name] = true
}

func (t *translator) addGroup(c *cmdLine) {
	name, typ := c.pos[0].text, c.pos[1].text
	c.e.refs = []ref{{kind: 's', name: name}}
	if line, dup := t.taken(name); dup {
		t.fail(c, "", failf("%s was already added at %s", name, t.at(line)))
		return
	}
	disabled, err := stateFlag(c)
	if err != nil {
		t.fail(c, name, err)
		return
	}
	noHealth, err := healthMonitorFlag(c)
	if err != nil {
		t.fail(c, name, err)
		return
	}
	t.groups[name] = &group{e: c.e, name: name, typ: typ, disabled: disabled, noHealth: noHealth}
	c.e.Status, c.e.ifUsed = Translated, true
}

func (t *translator) bindGroup(c *cmdLine) {
	name := c.pos[0].text
	c.e.refs = []ref{{kind: 's', name: name}}
	g, ok := t.groups[name]
	if !ok {
		t.fail(c, "", t.missing("service group", name))
		return
	}
	if len(c.pos) == 1 {
		if v, mon := c.value("-monitorName"); mon {
			t.bindMonitor(c, name, v)
			return
		}
		t.fail(c, "", failf("bind serviceGroup %s needs a server and a port", name))
		return
	}
	if len(c.pos) == 2 {
		t.fail(c, "", failf("bind serviceGroup %s %s needs a port", name, c.pos[1].text))
		return
	}
	srvTok, portTok := c.pos[1].text, c.pos[2].text
	t.uses(srvTok, name)
	for _, m := range g.members {
		if m.srv.name == srvTok && strconv.Itoa(m.port) == portTok {
			t.fail(c, "", failf("%s %s is already a member of %s (%s)", srvTok, portTok, name, t.at(m.e.Line)))
			return
		}
	}
	b, err := t.backendFor(c, srvTok, portTok)
	if err != nil {
		t.fail(c, "", err)
		return
	}
	b.name = name + "_" + srvTok + "_" + portTok
	g.members = append(g.members, b)
	c.e.Status, c.e.ifUsed = Translated, true
	if b.problem != "" {
		c.e.Status, c.e.Detail = NotTranslated, b.problem
	}
}

// missing is the error for a name that was never added, or whose add failed.
func (t *translator) missing(kind, name string) error {
	if line, ok := t.failed[name]; ok {
		return failf("%s %s was not added (%s failed)", kind, name, t.at(line))
	}
	return failf("no %s %s", kind, name)
}

// fail marks the line failed; name, if set, is remembered as a failed add.
func (t *translator) fail(c *cmdLine, name string, err error) {
	c.e.Status, c.e.Detail, c.e.Warnings = Failed, err.Error(), nil
	if name != "" {
		if _, ok := t.failed[name]; !ok {
			t.failed[name] = c.e.Line
		}
	}
}

func (t *translator) at(line int) string { return fmt.Sprintf("%s:%d", t.file, line) }

// ---- lb vservers ----

// nsMethods are NetScaler's -lbMethod values (the apidoc's
// setlbvserver_lbmethod; USER_TOKEN from the NITRO lbvserver resource).
var nsMethods = []string{"ROUNDROBIN", "LEASTCONNECTION", "LEASTRESPONSETIME", "URLHASH", "DOMAINHASH",
	"DESTINATIONIPHASH", "SOURCEIPHASH", "SRCIPDESTIPHASH", "LEASTBANDWIDTH", "LEASTPACKETS", "TOKEN",
	"SRCIPSRCPORTHASH", "LRTM", "CALLIDHASH", "CUSTOMLOAD", "USER_TOKEN"}

// nsBackupMethods are NetScaler's -backupLBMethod values.
var nsBackupMethods = []string{"ROUNDROBIN", "LEASTCONNECTION", "LEASTRESPONSETIME", "SOURCEIPHASH",
	"LEASTBANDWIDTH", "LEASTPACKETS", "CUSTOMLOAD"}

// nsPersistence are NetScaler's -persistenceType values (the apidoc's
// setlbvserver_persistencetype).
var nsPersistence = []string{"SOURCEIP", "COOKIEINSERT", "SSLSESSION", "RULE", "URLPASSIVE", "CUSTOMSERVERID",
	"DESTIP", "SRCIPDESTIP", "CALLID", "RTSPSID", "DIAMETER", "FIXSESSION", "USERSESSION", "NONE"}

// applySettings returns s with the line's flags applied, or the first error.
func applySettings(s vsSettings, c *cmdLine) (vsSettings, error) {
	line := c.e.Line
	enum := func(flag string, allowed []string, dst *setting) error {
		v, ok := c.value(flag)
		if !ok {
			return nil
		}
		u := strings.ToUpper(v)
		if !slices.Contains(allowed, u) {
			return failf("%s %q is not one of %s", flag, v, strings.Join(allowed, ", "))
		}
		*dst = setting{s: u, line: line}
		return nil
	}
	number := func(flag string, lo, hi int, dst *setting) error {
		v, ok := c.value(flag)
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return failf("%s %q is not a number in [%d, %d]", flag, v, lo, hi)
		}
		*dst = setting{s: v, n: n, line: line}
		return nil
	}
	mask := func(flag string, dst *setting) error {
		v, ok := c.value(flag)
		if !ok {
			return nil
		}
		bits, ok := lbcore.NetmaskBits(v)
		if !ok {
			return failf("%s %q is not a contiguous IPv4 mask such as 255.255.255.0", flag, v)
		}
		*dst = setting{s: v, n: bits, line: line}
		return nil
	}
	for _, err := range []error{
		enum("-lbMethod", nsMethods, &s.lbMethod),
		number("-hashLength", 1, 4096, &s.hashLength),
		mask("-netmask", &s.netmask),
		number("-v6netmasklen", 1, 128, &s.v6netmasklen),
		enum("-backupLBMethod", nsBackupMethods, &s.backup),
		enum("-persistenceType", nsPersistence, &s.persistType),
		mask("-persistMask", &s.persistMask),
		number("-v6persistmasklen", 1, 128, &s.v6persist),
		// Minutes: 0 is allowed for cookie persistence, 2 is the least for
		// the others, 1440 the most (docs.citrix.com, "Configure persistence
		// types that do not require a rule").
		number("-timeout", 0, 1440, &s.timeout),
		enum("-state", []string{"ENABLED", "DISABLED"}, &s.state),
		enum("-persistenceBackup", []string{"SOURCEIP", "NONE"}, &s.persistBackup),
		number("-backupPersistenceTimeout", 2, 1440, &s.backupTimeout),
		// Seconds, 0 (no automatic increment) to 3600 (the NITRO apidoc's
		// setlbvserver_newservicerequestincrementinterval).
		number("-newServiceRequestIncrementInterval", 0, 3600, &s.newSvcInterval),
		enum("-httpOnlyCookieFlag", []string{"ENABLED", "DISABLED"}, &s.httpOnly),
	} {
		if err != nil {
			return s, err
		}
	}
	if f, ok := c.flags["-newservicerequest"]; ok && len(f.vals) > 0 {
		v := f.vals[0].text
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || len(f.vals) > 2 {
			return s, failf("-newServiceRequest %s: not a whole number and an optional unit, PER_SECOND or PERCENT", c.flagText("-newServiceRequest"))
		}
		s.newSvc, s.newSvcUnit = setting{s: v, n: n, line: line}, setting{line: line}
		if len(f.vals) == 2 {
			u := strings.ToUpper(f.vals[1].text)
			if u != "PER_SECOND" && u != "PERCENT" {
				return s, failf("-newServiceRequest %s %q: the unit is not one of PER_SECOND, PERCENT", v, f.vals[1].text)
			}
			s.newSvcUnit.s = u
		}
	}
	if v, ok := c.value("-rule"); ok {
		s.rule = setting{s: v, line: line}
	}
	if v, ok := c.value("-cookieName"); ok {
		s.cookieName = setting{s: v, line: line}
	}
	if v, ok := c.value("-cookieDomain"); ok {
		s.cookieDomain = setting{s: v, line: line}
	}
	return s, nil
}

func (t *translator) addVserver(c *cmdLine) {
	name, typ := c.pos[0].text, c.pos[1].text
	c.e.refs = []ref{{kind: 'v', name: name}}
	if v, dup := t.vservers[name]; dup {
		t.fail(c, "", failf("lb vserver %s was already added at %s", name, t.at(v.e.Line)))
		return
	}
	s, err := applySettings(vsSettings{}, c)
	if err != nil {
		t.fail(c, name, err)
		return
	}
	v := &vserver{e: c.e, name: name, typ: strings.ToUpper(typ), vsSettings: s}
	t.vservers[name] = v
	t.vsOrder = append(t.vsOrder, v)
	c.e.Status = Translated
}

func (t *translator) setVserver(c *cmdLine) {
	v := t.vserverOf(c)
	if v == nil {
		return
	}
	s, err := applySettings(v.vsSettings, c)
	if err != nil {
		t.fail(c, "", err)
		return
	}
	v.vsSettings = s
	c.e.Status = Translated
}

// disableVserver and enableVserver are "disable lb vserver NAME" and
// "enable lb vserver NAME": -state DISABLED or ENABLED from this line on.
func (t *translator) disableVserver(c *cmdLine) { t.stateVserver(c, "DISABLED") }
func (t *translator) enableVserver(c *cmdLine)  { t.stateVserver(c, "ENABLED") }

func (t *translator) stateVserver(c *cmdLine, state string) {
	v := t.vserverOf(c)
	if v == nil {
		return
	}
	v.state = setting{s: state, line: c.e.Line}
	c.e.Status = Translated
}

// vserverOf is the lb vserver the line names first, which becomes the
// line's reference; nil, the line failed, when none was added.
func (t *translator) vserverOf(c *cmdLine) *vserver {
	name := c.pos[0].text
	c.e.refs = []ref{{kind: 'v', name: name}}
	v, ok := t.vservers[name]
	if !ok {
		t.fail(c, "", t.missing("lb vserver", name))
		return nil
	}
	return v
}

func (t *translator) bindVserver(c *cmdLine) {
	name := c.pos[0].text
	c.e.refs = []ref{{kind: 'v', name: name}}
	v, ok := t.vservers[name]
	if len(c.pos) == 1 {
		// The flag's warning already says why; the line binds nothing else.
		for _, f := range []struct{ flag, why string }{{"-policyname", whyPolicy}, {"-monitorname", whyMonitorBind}} {
			if _, ok := c.flags[f.flag]; ok {
				c.e.Warnings = nil
				c.e.Status, c.e.Detail = NotTranslated, f.why
				return
			}
		}
		t.fail(c, "", failf("bind lb vserver %s needs a service or service group", name))
		return
	}
	target := c.pos[1].text
	if t.boundBy[target] == nil {
		t.boundBy[target] = map[string]bool{}
	}
	t.boundBy[target][name] = true
	if !ok {
		t.fail(c, "", t.missing("lb vserver", name))
		return
	}
	for _, b := range v.binds {
		if (b.svc != nil && b.svc.name == target) || (b.grp != nil && b.grp.name == target) {
			t.fail(c, "", failf("%s is already bound to %s (%s)", target, name, t.at(b.e.Line)))
			return
		}
	}
	b := &binding{e: c.e, weight: 1}
	if s, ok := t.services[target]; ok {
		b.svc = s
	} else if g, ok := t.groups[target]; ok {
		if _, w := c.flags["-weight"]; w {
			t.fail(c, "", failf("-weight: %s is a service group; its members' weights are set by bind serviceGroup", target))
			return
		}
		b.grp = g
	} else {
		t.fail(c, "", t.missing("service or service group", target))
		return
	}
	if w, ok := c.value("-weight"); ok {
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 || n > 100 {
			t.fail(c, "", failf("-weight %q is not a number in [1, 100]", w))
			return
		}
		b.weight = n
	}
	v.binds = append(v.binds, b)
	c.e.Status = Translated
}

// ---- set lb parameter, add policy expression ----

func (t *translator) setLBParameter(c *cmdLine) {
	c.e.refs = []ref{{kind: 'g'}}
	v, ok := c.value("-usePortForHashLb")
	if !ok {
		if len(c.e.Warnings) > 0 {
			c.e.Status, c.e.Detail = NotTranslated, "sets nothing hashlb has (see the warnings)"
		} else {
			c.e.Status, c.e.Detail = Ignored, "sets nothing that chooses a service"
		}
		return
	}
	switch strings.ToUpper(v) {
	case "YES":
		t.usePort = true
	case "NO":
		t.usePort = false
	default:
		t.fail(c, "", failf("-usePortForHashLb %q is not YES or NO", v))
		return
	}
	t.usePortLine = c.e.Line
	c.e.Status = Translated
}

func (t *translator) addPolicyExpression(c *cmdLine) {
	name := c.pos[0].text
	c.e.refs = []ref{{kind: 'x', name: name}}
	if line, dup := t.namedLine[name]; dup {
		t.fail(c, "", failf("policy expression %s was already added at %s", name, t.at(line)))
		return
	}
	t.named[name] = c.pos[1].text
	t.namedLine[name] = c.e.Line
	c.e.Status, c.e.ifUsed = Translated, true // Ignored at the end unless a translated -rule uses it
}
