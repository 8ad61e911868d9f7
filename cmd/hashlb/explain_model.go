package main

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashlb/hashlb/lbcore"
)

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
	// SlowStart lists the services in a slow-start ramp.
	SlowStart []ramp `json:"slowStart,omitempty"`
	// Policy is set for hashlb's load-balancing policy: the cluster whose
	// hosts are the services.
	Policy *policyInfo `json:"policy,omitempty"`

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

// ramp is where a service is in its slow-start ramp.
type ramp struct {
	Name string `json:"name"`
	// Weight is the configured weight; Effective the weight it ranks with,
	// Percent that as a percentage of Weight.
	Weight    int     `json:"weight"`
	Effective float64 `json:"effectiveWeight"`
	Percent   float64 `json:"percent"`
	// Elapsed is how far into the ramp and Length how long it lasts, as
	// configuration durations are written; Ends is when it reaches Weight
	// (RFC 3339).
	Elapsed string `json:"elapsed"`
	Length  string `json:"length"`
	Ends    string `json:"ends"`
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

// newReport builds the report of lbcore's explanation x of req under cfg.
func newReport(file, where string, cfg *lbcore.Config, req *lbcore.Request, x *lbcore.Explanation,
	stripped []string, seed uint64, now time.Time) *report {
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
		r.setKey(cfg, x)
	}
	r.Services = services(cfg, x)
	r.setChoice(cfg, &x.Decision)
	r.Backup = backupOf(cfg, x)
	if x.WorkerState && x.Decision.Len() > 0 {
		r.WorkerNote = workerNote(x.Decision.Method, seed)
	}
	if p := x.Persistence; p != nil {
		r.Persist = persistReport(cfg.Persistence, p, r.Chosen)
	}
	if s := x.Session; s != nil {
		r.Session = sessionReport(cfg, s, r.Chosen)
	}
	for _, rx := range x.Ramps {
		s := &cfg.Services[rx.Index]
		r.SlowStart = append(r.SlowStart, ramp{Name: s.Name, Weight: s.Weight, Effective: rx.Effective, Percent: 100 * rx.Fraction,
			Elapsed: lbcore.FormatDuration(now.Sub(rx.Since).Round(time.Millisecond)), Length: lbcore.FormatDuration(rx.Ends.Sub(rx.Since)),
			Ends: rx.Ends.UTC().Format(time.RFC3339)})
	}
	return r
}

// setKey records the hashed key: its text when it is UTF-8, its hex, what
// an IP method's key means, and its hash.
func (r *report) setKey(cfg *lbcore.Config, x *lbcore.Explanation) {
	if utf8.Valid(x.Key) {
		k := string(x.Key)
		r.Key = &k
	}
	r.KeyHex = hex.EncodeToString(x.Key)
	r.KeyMeaning = keyMeaning(cfg, x.Key)
	r.KeyHash = fmt.Sprintf("%016x", x.KeyHash)
}

// services lists the services in rank order with their scores when the
// method ranked them, else in configuration order.
func services(cfg *lbcore.Config, x *lbcore.Explanation) []service {
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
	var out []service
	if x.Ranking != nil {
		for i := range x.Ranking {
			rs := &x.Ranking[i]
			out = append(out, svc(rs.Index, rs.Rank, rs))
		}
	} else {
		for i := range cfg.Services {
			out = append(out, svc(i, 0, nil))
		}
	}
	return out
}

// setChoice records the chosen service, the failover order and the headers
// (or filter state) the module writes for decision d.
func (r *report) setChoice(cfg *lbcore.Config, d *lbcore.Decision) {
	if d.Len() == 0 {
		return
	}
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

// backupOf says which method chose when a hash method found no input; nil
// otherwise.
func backupOf(cfg *lbcore.Config, x *lbcore.Explanation) *backup {
	if !cfg.LBMethod.IsHash() || x.HasInput {
		return nil
	}
	why := "backupLBMethod " + x.Backup.String() + " chooses"
	if x.OwnBackup {
		why = fmt.Sprintf("%s without its input is balanced %s, as Citrix does (backupLBMethod is not used)", cfg.LBMethod, x.Backup)
	}
	return &backup{Method: x.Backup.String(), Why: why}
}

// workerNote says what of a choice by m depends on the worker, shown as a
// fresh worker with seed picks.
func workerNote(m lbcore.Method, seed uint64) string {
	switch m {
	case lbcore.MethodRoundRobin:
		return fmt.Sprintf("ROUNDROBIN depends on the worker's position in its cycle: shown is what a fresh worker (-seed %d) picks; the failover order depends on its decision counter", seed)
	case lbcore.MethodLeastConnection:
		return fmt.Sprintf("LEASTCONNECTION depends on active requests and, among equal loads, on the worker's decision counter: shown is what a fresh worker (-seed %d) with no active requests picks", seed)
	default:
		return "hashBalanceFactor: the choice depends on active requests; shown with none"
	}
}

// persistReport describes the request's persistence key and what an empty
// table would do with it.
func persistReport(pc *lbcore.Persistence, p *lbcore.PersistExplanation, chosen *svcRef) *persist {
	rp := &persist{Key: string(p.Key), KeyHex: hex.EncodeToString(p.Key), Empty: p.Empty,
		EmptyKey: pc.EmptyKey, Stored: p.Stored}
	for i, k := range pc.Keys {
		rp.Keys = append(rp.Keys, persistKey{Expr: k.String(), Value: string(p.Values[i])})
	}
	switch {
	case p.Empty && pc.EmptyKey == "skip":
		rp.Outcome = "every key is empty: emptyKey skip balances the request by lbMethod and stores nothing"
	case p.Stored && chosen != nil:
		rp.Outcome = fmt.Sprintf("an empty table (offline) misses and stores %s under this key: later requests with it go to %s while it is selectable, until %s without use",
			chosen.Name, chosen.Name, duration(pc.Expire))
		if p.Empty {
			rp.Outcome = fmt.Sprintf("every key is empty: with emptyKey shared, every request without a key shares this entry; an empty table (offline) misses and stores %s under it, until %s without use",
				chosen.Name, duration(pc.Expire))
		}
	default:
		rp.Outcome = "nothing is stored: no service was chosen"
	}
	return rp
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
		out.Outcome = fmt.Sprintf("forged: the %s is not a value hashlb signed with these keys for this name and root_id (malformed, altered, another key's, or another plugin's); it selects nothing, and the method decides", what)
	case s.State == lbcore.SessionExpired:
		out.Outcome = fmt.Sprintf("expired: issued more than absoluteTimeout %s ago (for %s); the method decides", duration(sc.AbsoluteTimeout), named)
	case s.State == lbcore.SessionIdle:
		out.Outcome = fmt.Sprintf("idle: unused for idleTimeout %s or more (for %s); the method decides", duration(sc.IdleTimeout), named)
	case s.State == lbcore.SessionUnknown:
		out.Outcome = "signed, but names a service this configuration does not have (gone); the method decides"
	case s.State == lbcore.SessionUnselectable:
		out.Outcome = fmt.Sprintf("names %s, which is disabled, DOWN or ejected: the request falls back to the method", named)
	case s.State == lbcore.SessionFuture:
		out.Outcome = fmt.Sprintf("future: signed more than clockSkew %s ahead of this clock (a proxy whose clock ran ahead); it selects nothing, and the method decides", duration(sc.ClockSkew))
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
