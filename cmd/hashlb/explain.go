package main

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashlb/hashlb/internal/deploycheck"
	"github.com/hashlb/hashlb/lbcore"
)

const explainAbout = `Shows how the module decides one request, with its own code (lbcore): the
method, the exact bytes hashed, every service's score in rank order, the
choice and the failover order, the backup method when the input is missing,
and the persistence key. Nothing is sent anywhere.

CONFIG is any FILE "hashlb check" accepts; when it holds several hashlb
configurations, -config chooses one. A connection (a network filter) is
-url '' -client IP:PORT -dest IP:PORT.

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

// headerFlag collects repeated -header flags.
type headerFlag [][2]string

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if strings.HasPrefix(s, ":") { // a pseudo-header such as ":authority: x"
		n, v, ok2 := strings.Cut(s[1:], ":")
		name, value, ok = ":"+n, v, ok2
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("%q is not 'name: value'", s)
	}
	switch name {
	case ":path", ":method", ":scheme":
		return fmt.Errorf("%q: give %s with -url or -method", s, name)
	case ":authority":
		name = "host"
	}
	*h = append(*h, [2]string{name, strings.TrimSpace(value)})
	return nil
}

// runExplain implements "hashlb explain".
func runExplain(args []string, stdout, stderr io.Writer) int {
	c := newCommand("explain", "CONFIG -url URL [flags]", explainAbout, stdout, stderr)
	fset := c.flags
	var headers headerFlag
	target := fset.String("url", "", "the request target `URL` as the module receives it (:path): a path and query, or an absolute\n"+
		"URL, whose host is then :authority unless -authority or a host header says otherwise.\n"+
		"Required; -url '' is a request without one (or a connection)")
	authority := fset.String("authority", "", "the request's :authority (its Host header), `HOST`")
	method := fset.String("method", "GET", "the request's :method, `METHOD`")
	client := fset.String("client", "", "the connection's peer (source.address), `IP:PORT`")
	dest := fset.String("dest", "", "the address the request was received on (destination.address), `IP:PORT`")
	down := fset.String("down", "", "services marked DOWN, as health checks would, `NAME,…`")
	which := fset.String("config", "", "the configuration of CONFIG to explain, `N|TEXT`: its number, or its place as \"hashlb check\"\n"+
		"prints it (or a part of it naming one)")
	seed := fset.Uint64("seed", 0, "the worker's seed `N`: round robin and least connection depend on the worker, and what a\n"+
		"fresh worker with this seed picks is shown")
	asJSON := fset.Bool("json", false, "print the report as JSON")
	keyFile := fset.String("session-key-file", "", "read the session key from `FILE` (its bytes, a final newline dropped)\n"+
		"instead of the environment variable "+lbcore.SessionKeyEnv)
	at := fset.String("at", "", "decide as at `TIME` (RFC 3339, e.g. 2026-01-01T12:00:00Z) instead of now: a session's\n"+
		"issue and last-use times are compared with it")
	fset.Var(&headers, "header", "a request header `'name: value'` (repeatable); host is :authority, as Envoy stores\n"+
		"HTTP/1's Host; client copies of upstreamHeader and serviceHeader are removed, as the module does")
	usageErr := c.usageErr
	files, code, done := c.parse(args)
	if done {
		return code
	}
	set := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case len(files) != 1:
		return usageErr("want one CONFIG, got %d", len(files))
	case !set["url"]:
		return usageErr("-url is required (the request target, such as /some/path)")
	}
	for _, a := range []struct{ flag, value string }{{"client", *client}, {"dest", *dest}} {
		if a.value != "" {
			if err := lbcore.AddrPortError(a.value); err != nil {
				return usageErr("-%s %s: %v", a.flag, a.value, err)
			}
		}
	}
	now := time.Now()
	if *at != "" {
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			return usageErr("-at %s: not an RFC 3339 time such as 2026-01-01T12:00:00Z", *at)
		}
		now = t
	}
	file := files[0]

	src, err := deploycheck.ScanFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", file, err)
		return 1
	}
	configs := src.Configs()
	var e deploycheck.Item
	switch pick, err := chooseConfig(configs, *which); {
	case len(configs) == 0:
		fmt.Fprintf(stderr, "%s: no hashlb configuration\n", file)
		return 1
	case err != nil:
		var b strings.Builder
		for i, c := range configs {
			fmt.Fprintf(&b, "  -config %d   %s\n", i+1, c.Where)
		}
		fmt.Fprintf(stderr, "hashlb explain: %s: %v; its configurations:\n%s", file, err, b.String())
		return 2
	default:
		e = configs[pick]
	}
	cfg, problems := e.Parse()
	if problems != nil {
		for _, p := range problems {
			fmt.Fprintf(stderr, "%s%s\n", e.Prefix(file), p)
		}
		return 1
	}

	b := lbcore.NewBalancer(cfg, *seed)
	if cfg.Session != nil {
		key := os.Getenv(lbcore.SessionKeyEnv)
		if *keyFile != "" {
			k, err := os.ReadFile(*keyFile)
			if err != nil {
				fmt.Fprintf(stderr, "hashlb explain: -session-key-file: %v\n", err)
				return 1
			}
			key = strings.TrimSuffix(string(k), "\n")
		}
		if key != "" {
			if err := b.EnableSession([]byte(key)); err != nil {
				fmt.Fprintf(stderr, "hashlb explain: %v\n", err)
				return 1
			}
		}
	}
	if *down != "" {
		for _, name := range strings.Split(*down, ",") {
			i := serviceNamed(cfg, strings.TrimSpace(name))
			if i < 0 {
				var names []string
				for _, s := range cfg.Services {
					names = append(names, s.Name)
				}
				fmt.Fprintf(stderr, "hashlb explain: -down: no service named %q (services: %s)\n", name, strings.Join(names, ", "))
				return 2
			}
			b.SetDown(i, true)
		}
	}
	req := lbcore.Request{Target: *target, Method: *method, Source: *client, Dest: *dest}
	var stripped []string
	for _, h := range headers {
		switch {
		case h[0] == cfg.UpstreamHeader || h[0] == cfg.ServiceHeader && cfg.ServiceHeader != "":
			stripped = append(stripped, h[0])
		case h[0] == "host":
			if req.Authority == "" {
				req.Authority = h[1]
			}
		default:
			req.Headers = append(req.Headers, h)
		}
	}
	if set["authority"] {
		req.Authority = *authority
	} else if req.Authority == "" {
		req.Authority = absoluteHost(*target)
	}

	x := b.Explain(&req, now)
	r := newReport(file, e.Where, cfg, &req, &x, stripped, *seed)
	if *asJSON {
		out, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "hashlb explain: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", out)
	} else {
		r.write(stdout)
	}
	if r.Chosen == nil {
		return 1
	}
	return 0
}

// chooseConfig picks the configuration -config names: its number (1-based,
// in file order), its place exactly, or the one place that contains it.
// Without -config the file must hold exactly one.
func chooseConfig(configs []deploycheck.Item, which string) (int, error) {
	if which == "" {
		if len(configs) > 1 {
			return 0, fmt.Errorf("holds %d hashlb configurations: choose one with -config", len(configs))
		}
		return 0, nil
	}
	if n, err := strconv.Atoi(which); err == nil {
		if n < 1 || n > len(configs) {
			return 0, fmt.Errorf("-config %d: there is no configuration %d", n, n)
		}
		return n - 1, nil
	}
	found := -1
	for i, c := range configs {
		if c.Where == which {
			return i, nil
		}
		if strings.Contains(c.Where, which) {
			if found >= 0 {
				return 0, fmt.Errorf("-config %q names more than one configuration", which)
			}
			found = i
		}
	}
	if found < 0 {
		return 0, fmt.Errorf("-config %q names no configuration", which)
	}
	return found, nil
}

func serviceNamed(cfg *lbcore.Config, name string) int {
	for i, s := range cfg.Services {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// absoluteHost returns the host[:port] of an absolute URL, or "".
func absoluteHost(target string) string {
	if !strings.Contains(target, "://") {
		return ""
	}
	u, err := url.Parse(target)
	if err != nil {
		return ""
	}
	return u.Host
}

// report is an explanation as hashlb explain prints it; -json prints it as is.
type report struct {
	Config   string   `json:"config"`
	Where    string   `json:"where,omitempty"`
	Request  request  `json:"request"`
	Stripped []string `json:"stripped,omitempty"`
	LBMethod string   `json:"lbMethod"`
	Settings string   `json:"settings,omitempty"`
	Reads    []string `json:"reads"`
	Input    bool     `json:"input"`
	// Key is the hashed bytes as text when they are UTF-8; KeyHex always.
	Key        *string     `json:"key,omitempty"`
	KeyHex     string      `json:"keyHex,omitempty"`
	KeyMeaning string      `json:"keyMeaning,omitempty"`
	KeyHash    string      `json:"keyHash,omitempty"`
	Weighted   bool        `json:"weighted"`
	Ranked     bool        `json:"ranked"`
	Services   []service   `json:"services"`
	Chosen     *svcRef     `json:"chosen"`
	Reason     string      `json:"reason"`
	DecidedBy  string      `json:"decidedBy,omitempty"`
	Failover   []svcRef    `json:"failover"`
	Headers    [][2]string `json:"headers"`
	// FilterState is what upstreamVia filterState (always so for filterType
	// network) sets instead of upstreamHeader: key and address.
	FilterState *[2]string `json:"filterState,omitempty"`
	Backup      *backup    `json:"backup,omitempty"`
	WorkerNote  string     `json:"workerNote,omitempty"`
	Capped      bool       `json:"capped"`
	Persist     *persist   `json:"persistence"`
	Session     *session   `json:"session,omitempty"`

	upstreamCount int
}

type request struct {
	Method    string      `json:"method"`
	URL       string      `json:"url"`
	Authority string      `json:"authority,omitempty"`
	Client    string      `json:"client,omitempty"`
	Dest      string      `json:"dest,omitempty"`
	Headers   [][2]string `json:"headers,omitempty"`
}

type service struct {
	Rank          int      `json:"rank"`
	Name          string   `json:"name"`
	Address       string   `json:"address"`
	Weight        int      `json:"weight"`
	Score         string   `json:"score,omitempty"`
	WeightedScore *float64 `json:"weightedScore,omitempty"`
	State         string   `json:"state"`
}

type svcRef struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

type backup struct {
	Method string `json:"method"`
	Why    string `json:"why"`
}

type persist struct {
	Keys     []persistKey `json:"keys"`
	Key      string       `json:"key"`
	KeyHex   string       `json:"keyHex"`
	Empty    bool         `json:"empty"`
	EmptyKey string       `json:"emptyKey"`
	Stored   bool         `json:"stored"`
	Outcome  string       `json:"outcome"`
}

// session is what the request's session came to.
type session struct {
	Type    string `json:"type"`
	Name    string `json:"name"`
	Checked bool   `json:"checked"`
	Found   bool   `json:"found"`
	State   string `json:"state"`
	Service string `json:"service,omitempty"`
	Issued  string `json:"issued,omitempty"`
	LastUse string `json:"lastUse,omitempty"`
	Expires string `json:"expires,omitempty"`
	Idle    string `json:"idleEnds,omitempty"`
	Outcome string `json:"outcome"`
	// Sets is the header the response adds, name and value; nil for none.
	Sets *[2]string `json:"sets"`
}

type persistKey struct {
	Expr  string `json:"expr"`
	Value string `json:"value"`
}

func newReport(file, where string, cfg *lbcore.Config, req *lbcore.Request, x *lbcore.Explanation,
	stripped []string, seed uint64) *report {
	r := &report{
		Config: file, Where: where, Stripped: stripped,
		Request: request{Method: req.Method, URL: req.Target, Authority: req.Authority, Client: req.Source,
			Dest: req.Dest, Headers: req.Headers},
		LBMethod: cfg.LBMethod.String(),
		Settings: settings(cfg, x.OwnBackup),
		Reads:    reads(x.Reads, cfg),
		Input:    x.HasInput,
		Weighted: x.Weighted,
		Ranked:   x.Ranking != nil,
		Reason:   x.Decision.Reason.String(),
		Capped:   x.Decision.Capped,
		Failover: []svcRef{},

		upstreamCount: cfg.UpstreamCount,
	}
	if x.HasInput {
		if utf8.Valid(x.Key) {
			k := string(x.Key)
			r.Key = &k
		}
		r.KeyHex = hex.EncodeToString(x.Key)
		r.KeyMeaning = keyMeaning(cfg, x.Key)
		r.KeyHash = fmt.Sprintf("%016x", x.KeyHash)
	}
	svc := func(i int, rank int, rs *lbcore.RankedService) service {
		s := &cfg.Services[i]
		out := service{Rank: rank, Name: s.Name, Address: s.Address, Weight: s.Weight, State: x.States[i].String()}
		if rs != nil {
			out.Score = fmt.Sprintf("%016x", rs.Score)
			if x.Weighted {
				w := rs.Weighted
				out.WeightedScore = &w
			}
		}
		return out
	}
	if x.Ranking != nil {
		for i := range x.Ranking {
			rs := &x.Ranking[i]
			r.Services = append(r.Services, svc(rs.Index, rs.Rank, rs))
		}
	} else {
		for i := range cfg.Services {
			r.Services = append(r.Services, svc(i, 0, nil))
		}
	}
	d := &x.Decision
	if d.Len() > 0 {
		r.DecidedBy = d.Method.String()
		s := &cfg.Services[d.At(0)]
		r.Chosen = &svcRef{s.Name, s.Address}
		addrs := []string{s.Address}
		for i := 1; i < d.Len(); i++ {
			f := &cfg.Services[d.At(i)]
			r.Failover = append(r.Failover, svcRef{f.Name, f.Address})
			addrs = append(addrs, f.Address)
		}
		if cfg.ViaFilterState() {
			r.FilterState = &[2]string{lbcore.OriginalDstFilterState, s.Address}
		} else {
			r.Headers = append(r.Headers, [2]string{cfg.UpstreamHeader, strings.Join(addrs, ",")})
		}
		if cfg.ServiceHeader != "" && !cfg.Network() {
			r.Headers = append(r.Headers, [2]string{cfg.ServiceHeader, s.Name})
		}
	}
	if cfg.LBMethod.IsHash() && !x.HasInput {
		why := "backupLBMethod " + x.Backup.String() + " chooses"
		if x.OwnBackup {
			why = fmt.Sprintf("%s without its input is balanced %s, as Citrix does (backupLBMethod is not used)", cfg.LBMethod, x.Backup)
		}
		r.Backup = &backup{Method: x.Backup.String(), Why: why}
	}
	if x.WorkerState && d.Len() > 0 {
		switch d.Method {
		case lbcore.MethodRoundRobin:
			r.WorkerNote = fmt.Sprintf("ROUNDROBIN depends on the worker's position in its cycle: shown is what a fresh worker (-seed %d) picks; the failover order depends on its decision counter", seed)
		case lbcore.MethodLeastConnection:
			r.WorkerNote = fmt.Sprintf("LEASTCONNECTION depends on active requests and, among equal loads, on the worker's decision counter: shown is what a fresh worker (-seed %d) with no active requests picks", seed)
		default:
			r.WorkerNote = "hashBalanceFactor: the choice depends on active requests; shown with none"
		}
	}
	if p := x.Persistence; p != nil {
		pc := cfg.Persistence
		rp := &persist{Key: string(p.Key), KeyHex: hex.EncodeToString(p.Key), Empty: p.Empty,
			EmptyKey: pc.EmptyKey, Stored: p.Stored}
		for i, k := range pc.Keys {
			rp.Keys = append(rp.Keys, persistKey{Expr: k.String(), Value: string(p.Values[i])})
		}
		switch {
		case p.Empty && pc.EmptyKey == "skip":
			rp.Outcome = "every key is empty: emptyKey skip balances the request by lbMethod and stores nothing"
		case p.Stored && r.Chosen != nil:
			rp.Outcome = fmt.Sprintf("an empty table (offline) misses and stores %s under this key: later requests with it go to %s while it is selectable, until %s without use",
				r.Chosen.Name, r.Chosen.Name, duration(pc.Expire))
			if p.Empty {
				rp.Outcome = fmt.Sprintf("every key is empty: with emptyKey shared, every request without a key shares this entry; an empty table (offline) misses and stores %s under it, until %s without use",
					r.Chosen.Name, duration(pc.Expire))
			}
		default:
			rp.Outcome = "nothing is stored: no service was chosen"
		}
		r.Persist = rp
	}
	if s := x.Session; s != nil {
		r.Session = sessionReport(cfg, s, r.Chosen)
	}
	return r
}

// sessionReport describes the request's session and what the response sets.
func sessionReport(cfg *lbcore.Config, s *lbcore.SessionExplanation, chosen *svcRef) *session {
	sc := cfg.Session
	out := &session{Type: sc.Type, Name: sc.Name, Checked: s.Checked, Found: s.Found, State: s.State.String()}
	stamp := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	out.Issued, out.LastUse, out.Expires, out.Idle = stamp(s.Issued), stamp(s.LastUse), stamp(s.Expires), stamp(s.IdleEnds)
	named := ""
	if s.Service >= 0 {
		named = cfg.Services[s.Service].Name
		out.Service = named
	}
	what := sc.Type + " " + sc.Name
	switch {
	case !s.Checked:
		out.State = "not checked"
		out.Outcome = fmt.Sprintf("no key (set %s or -session-key-file): the %s is not checked, and the request is decided as if it carried none", lbcore.SessionKeyEnv, what)
	case s.State == lbcore.SessionAbsent:
		out.Outcome = fmt.Sprintf("the request carries no %s: the method decides", what)
	case s.State == lbcore.SessionValid:
		out.Outcome = fmt.Sprintf("valid: names %s, which is selectable, so it is chosen before persistence, hashing and weights", named)
	case s.State == lbcore.SessionForged:
		out.Outcome = fmt.Sprintf("forged: the %s is not a value hashlb signed with this key and name (malformed, altered, or another key's); it selects nothing, and the method decides", what)
	case s.State == lbcore.SessionExpired:
		out.Outcome = fmt.Sprintf("expired: issued more than absoluteTimeout %s ago (for %s); the method decides", duration(sc.AbsoluteTimeout), named)
	case s.State == lbcore.SessionIdle:
		out.Outcome = fmt.Sprintf("idle: unused for idleTimeout %s or more (for %s); the method decides", duration(sc.IdleTimeout), named)
	case s.State == lbcore.SessionUnknown:
		out.Outcome = "signed, but names a service this configuration does not have (gone); the method decides"
	case s.State == lbcore.SessionUnselectable:
		out.Outcome = fmt.Sprintf("names %s, which is disabled, DOWN or ejected: the request falls back to the method", named)
	}
	switch {
	case s.Header[0] != "":
		h := s.Header
		out.Sets = &h
		if s.State == lbcore.SessionValid {
			out.Outcome += fmt.Sprintf("; last used over a tenth of idleTimeout ago, so the response re-issues it with this use")
		} else if chosen != nil {
			out.Outcome += fmt.Sprintf("; the response starts a new session for %s", chosen.Name)
		}
	case s.Checked && s.State == lbcore.SessionValid:
		out.Outcome += "; the response sets nothing"
	}
	if s.Found {
		out.Outcome += fmt.Sprintf("; the %s is removed before the request goes upstream", what)
	}
	return out
}

// settings lists the configuration fields that shape lbMethod's key and
// ranking.
func settings(cfg *lbcore.Config, ownBackup bool) string {
	var s []string
	switch cfg.LBMethod {
	case lbcore.MethodURLHash, lbcore.MethodDomainHash:
		s = append(s, fmt.Sprintf("hashLength %d", cfg.HashLength))
	case lbcore.MethodDestIPHash, lbcore.MethodSourceIPHash, lbcore.MethodSrcDestIPHash, lbcore.MethodSrcIPSrcPortHash:
		s = append(s, "netmask "+netmask(cfg.Netmask), fmt.Sprintf("v6NetmaskLen %d", cfg.V6NetmaskLen))
	case lbcore.MethodTokenHash:
		s = append(s, "token "+cfg.Token.String())
	}
	if cfg.TrustedForwardedHops > 0 && cfg.LBMethod != lbcore.MethodSrcIPSrcPortHash {
		s = append(s, fmt.Sprintf("trustedForwardedHops %d", cfg.TrustedForwardedHops))
	}
	if cfg.LBMethod.IsHash() && !ownBackup {
		s = append(s, "backupLBMethod "+cfg.BackupLBMethod.String())
	}
	if cfg.HashBalanceFactor > 0 {
		s = append(s, fmt.Sprintf("hashBalanceFactor %d", cfg.HashBalanceFactor))
	}
	s = append(s, fmt.Sprintf("upstreamCount %d", cfg.UpstreamCount))
	return strings.Join(s, ", ")
}

// netmask writes a prefix length as a dotted IPv4 mask.
func netmask(bits int) string {
	m := ^uint32(0) << (32 - bits)
	if bits == 0 {
		m = 0
	}
	return netip.AddrFrom4([4]byte{byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}).String()
}

// reads names what the method reads, with the flag that supplies it.
func reads(in lbcore.Inputs, cfg *lbcore.Config) []string {
	var out []string
	if in.Target {
		out = append(out, ":path (-url)")
	}
	if in.Authority {
		out = append(out, ":authority (-authority)")
	}
	if in.Method {
		out = append(out, ":method (-method)")
	}
	if in.Source {
		out = append(out, "source.address (-client)")
	}
	if in.Dest {
		out = append(out, "destination.address (-dest)")
	}
	for _, h := range in.Headers {
		switch {
		case h == "host" && in.Authority:
			continue // the same as :authority here
		case h == "x-forwarded-for" && cfg.TrustedForwardedHops > 0:
			out = append(out, fmt.Sprintf("x-forwarded-for, entry %d from the right (-header)", cfg.TrustedForwardedHops))
		default:
			out = append(out, h+" (-header)")
		}
	}
	return out
}

// keyMeaning decodes the key of an IP method (lbcore's mask.go: a family
// tag, 4 or 6, then the masked address bytes; a port after them for
// SRCIPSRCPORTHASH).
func keyMeaning(cfg *lbcore.Config, key []byte) string {
	addr := func(k []byte) (netip.Addr, []byte, bool) {
		switch {
		case len(k) >= 5 && k[0] == 4:
			return netip.AddrFrom4([4]byte(k[1:5])), k[5:], true
		case len(k) >= 17 && k[0] == 6:
			return netip.AddrFrom16([16]byte(k[1:17])), k[17:], true
		}
		return netip.Addr{}, nil, false
	}
	masks := fmt.Sprintf("netmask %s, v6NetmaskLen %d", netmask(cfg.Netmask), cfg.V6NetmaskLen)
	switch cfg.LBMethod {
	case lbcore.MethodDestIPHash, lbcore.MethodSourceIPHash:
		if a, rest, ok := addr(key); ok && len(rest) == 0 {
			return fmt.Sprintf("%s (%s)", a, masks)
		}
	case lbcore.MethodSrcIPSrcPortHash:
		if a, rest, ok := addr(key); ok && len(rest) == 2 {
			return fmt.Sprintf("%s port %d (%s)", a, int(rest[0])<<8|int(rest[1]), masks)
		}
	case lbcore.MethodSrcDestIPHash:
		if a, rest, ok := addr(key); ok {
			if b, rest, ok := addr(rest); ok && len(rest) == 0 {
				return fmt.Sprintf("%s and %s, the smaller first, so both directions agree (%s)", a, b, masks)
			}
		}
	}
	return ""
}

// duration writes d in the configuration's units (7d, 36h, 10m, 90s).
func duration(d time.Duration) string {
	for _, u := range []struct {
		unit string
		d    time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}} {
		if d >= u.d && d%u.d == 0 {
			return fmt.Sprintf("%d%s", d/u.d, u.unit)
		}
	}
	return d.String()
}

// quoteKey writes key bytes as a Go string, with hex when they are not all
// printable.
func quoteKey(k []byte) string {
	q := strconv.Quote(string(k))
	printable := utf8.Valid(k)
	for _, r := range string(k) {
		printable = printable && unicode.IsPrint(r)
	}
	if !printable {
		q += " hex " + hex.EncodeToString(k)
	}
	if len(k) == 1 {
		return q + " (1 byte)"
	}
	return fmt.Sprintf("%s (%d bytes)", q, len(k))
}

// write prints the report as text.
func (r *report) write(out io.Writer) {
	line := func(label, format string, a ...any) {
		fmt.Fprintf(out, "%-13s%s\n", label+":", fmt.Sprintf(format, a...))
	}
	cont := func(format string, a ...any) { fmt.Fprintf(out, "%13s%s\n", "", fmt.Sprintf(format, a...)) }
	if r.Where != "" {
		line("config", "%s: %s", r.Config, r.Where)
	} else {
		line("config", "%s", r.Config)
	}
	rq := r.Request
	line("request", "%s %s", rq.Method, strconv.Quote(rq.URL))
	if rq.Authority != "" {
		cont(":authority %s", rq.Authority)
	}
	if rq.Client != "" {
		cont("client %s", rq.Client)
	}
	if rq.Dest != "" {
		cont("received on %s", rq.Dest)
	}
	for _, h := range rq.Headers {
		cont("%s: %s", h[0], h[1])
	}
	for _, h := range r.Stripped {
		cont("%s: removed, as the module removes every client copy", h)
	}
	line("method", "%s (%s)", r.LBMethod, r.Settings)
	switch {
	case r.Input:
		line("input", "found; %s reads %s", r.LBMethod, strings.Join(r.Reads, ", "))
	case r.Backup != nil:
		line("input", "missing: %s found nothing to hash; it reads %s", r.LBMethod, strings.Join(r.Reads, ", "))
	default:
		line("input", "none: %s does not hash", r.LBMethod)
	}
	if r.Input {
		k, _ := hex.DecodeString(r.KeyHex)
		line("key", "%s", quoteKey(k))
		if r.KeyMeaning != "" {
			cont("%s", r.KeyMeaning)
		}
		line("key hash", "%s (xxhash64 of the key)", r.KeyHash)
	}
	if r.Ranked {
		score := "score"
		if r.Weighted {
			score = "score (weighted: -weight/ln u)"
		}
		fmt.Fprintf(out, "ranking:     highest %s first\n", score)
	} else {
		fmt.Fprintln(out, "services:")
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if r.Ranked {
		if r.Weighted {
			fmt.Fprintln(tw, "  rank\tservice\taddress\tweight\tscore\tunit score\tstate")
		} else {
			fmt.Fprintln(tw, "  rank\tservice\taddress\tweight\tscore\tstate")
		}
	} else {
		fmt.Fprintln(tw, "  service\taddress\tweight\tstate")
	}
	for _, s := range r.Services {
		rank := "-"
		if s.Rank > 0 {
			rank = strconv.Itoa(s.Rank)
		}
		switch {
		case !r.Ranked:
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", s.Name, s.Address, s.Weight, s.State)
		case r.Weighted:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%.6g\t%s\t%s\n", rank, s.Name, s.Address, s.Weight, *s.WeightedScore, s.Score, s.State)
		default:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\n", rank, s.Name, s.Address, s.Weight, s.Score, s.State)
		}
	}
	tw.Flush()
	if r.Backup != nil {
		line("backup", "%s", r.Backup.Why)
	}
	if r.Chosen == nil {
		line("chosen", "none: no service is selectable; the module answers 503 %q", "no healthy service")
	} else {
		line("chosen", "%s (%s), by %s (reason %s)", r.Chosen.Name, r.Chosen.Address, r.DecidedBy, r.Reason)
		var f []string
		for _, s := range r.Failover {
			f = append(f, fmt.Sprintf("%s (%s)", s.Name, s.Address))
		}
		switch {
		case len(f) > 0:
		case r.upstreamCount == 1:
			f = append(f, "none named: upstreamCount is 1")
		default:
			f = append(f, "none: nothing else is selectable")
		}
		line("failover", "%s", strings.Join(f, ", "))
	}
	if r.WorkerNote != "" {
		line("note", "%s", r.WorkerNote)
	}
	if fs := r.FilterState; fs != nil {
		line("upstream", "filter state %s = %s (set_envoy_filter_state; an ORIGINAL_DST cluster connects there)", fs[0], fs[1])
	}
	for i, h := range r.Headers {
		if i == 0 {
			line("headers", "%s: %s", h[0], h[1])
		} else {
			cont("%s: %s", h[0], h[1])
		}
	}
	if r.Capped {
		line("input caps", "hit: an input was longer or deeper than a cap and was cut before deciding (docs/config.md, Input caps)")
	} else {
		line("input caps", "none hit")
	}
	if s := r.Session; s != nil {
		line("session", "%s %s: %s", s.Type, s.Name, s.State)
		if s.Issued != "" {
			idle := ""
			if s.Idle != "" {
				idle = ", idle at " + s.Idle
			}
			cont("issued %s, last used %s; ends %s%s", s.Issued, s.LastUse, s.Expires, idle)
		}
		cont("%s", s.Outcome)
		if s.Sets != nil {
			cont("response: %s: %s", s.Sets[0], s.Sets[1])
		}
	}
	p := r.Persist
	if p == nil {
		line("persistence", "off")
		return
	}
	k, _ := hex.DecodeString(p.KeyHex)
	line("persistence", "key %s, the keys joined with \\x1f:", quoteKey(k))
	for _, pk := range p.Keys {
		cont("  %s = %s", pk.Expr, strconv.Quote(pk.Value))
	}
	cont("%s", p.Outcome)
}
