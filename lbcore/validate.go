package lbcore

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/tidwall/gjson"
)

// maxConfigDepth is the deepest nesting of arrays and objects a
// configuration may have.
const maxConfigDepth = 16

// ParseConfig parses and validates a JSON plugin configuration. Unknown
// fields are errors. Every problem is reported, joined with errors.Join, each
// as "json.path: problem" naming the bad value and the allowed range.
func ParseConfig(data []byte) (*Config, error) { return parseConfig(data, string(data)) }

// ParseConfigOwned is ParseConfig for a caller that hands data over: it
// must not change afterwards, since the configuration's strings (service
// names, addresses, ...) are views of it rather than of a copy. A plugin
// configuration of 10^4 services is about 1 MB, parsed on every worker at
// every change; a copy adds to what a parse allocates (docs/performance.md#reconfiguration-in-real-envoy).
func ParseConfigOwned(data []byte) (*Config, error) {
	return parseConfig(data, unsafe.String(unsafe.SliceData(data), len(data)))
}

// parseConfig parses data, of which text is a string with the same bytes.
func parseConfig(data []byte, text string) (*Config, error) {
	root, err := parseRoot(data, text)
	if err != nil {
		return nil, err
	}
	d := &decoder{}
	c := defaultConfig()
	top := topLevel{root: root}
	d.object("", root, func(name string, v gjson.Result) bool { return d.topField(c, &top, name, v) })
	d.crossChecks(c, &top)
	if err := errors.Join(d.errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// parseRoot checks that data (whose text is text) is a JSON object no
// deeper than maxConfigDepth and returns it.
func parseRoot(data []byte, text string) (gjson.Result, error) {
	// gjson recurses once per nesting level; no configuration nests deeper
	// than a few levels, so a deeper one is refused before it is walked.
	if !JSONDepthOK(data, maxConfigDepth) {
		return gjson.Result{}, fmt.Errorf("configuration: nested deeper than %d levels", maxConfigDepth)
	}
	if !gjson.ValidBytes(data) {
		if len(strings.TrimSpace(string(data))) == 0 {
			return gjson.Result{}, errors.New("configuration: empty, want a JSON object")
		}
		if where := jsonSyntaxError(data); where != "" {
			return gjson.Result{}, errors.New("configuration: not valid JSON: " + where)
		}
		return gjson.Result{}, errors.New("configuration: not valid JSON")
	}
	root := gjson.Parse(text)
	if !root.IsObject() {
		return gjson.Result{}, fmt.Errorf("configuration: %s is not a JSON object", clip(root.Raw))
	}
	return root, nil
}

// defaultConfig is the configuration of an empty object: every field at its
// default (fields.go).
func defaultConfig() *Config {
	return &Config{
		FilterType:           fFilterType.defaultString(),
		UpstreamVia:          fUpstreamVia.defaultString(),
		LBMethod:             mustMethod(fLBMethod.defaultString()),
		HashLength:           fHashLength.defaultInt(),
		Netmask:              mustNetmask(fNetmask.defaultString()),
		V6NetmaskLen:         fV6NetmaskLen.defaultInt(),
		BackupLBMethod:       mustMethod(fBackupLBMethod.defaultString()),
		UpstreamHeader:       fUpstreamHeader.defaultString(),
		UpstreamCount:        fUpstreamCount.defaultInt(),
		ServiceHeader:        fServiceHeader.defaultString(),
		TrustedForwardedHops: fTrustedForwardedHops.defaultInt(),
		HashBalanceFactor:    fHashBalanceFactor.defaultInt(),
		DebugHeader:          fDebugHeader.defaultBool(),
	}
}

// topLevel is what parseConfig's checks across fields need of the walk:
// the token expression (decoded once lbMethod is known), whether services
// was given, and the names set.
type topLevel struct {
	token    gjson.Result
	services bool
	set      fieldSet
	root     gjson.Result
}

// topField decodes the top-level field name into c; false for a name that
// is not one.
func (d *decoder) topField(c *Config, top *topLevel, name string, v gjson.Result) bool {
	top.set.note(name)
	switch name {
	case "filterType":
		d.setEnum(&c.FilterType, fFilterType, name, v)
	case "upstreamVia":
		d.setEnum(&c.UpstreamVia, fUpstreamVia, name, v)
	case "lbMethod":
		c.LBMethod = d.method(fLBMethod, name, v)
	case "hashLength":
		c.HashLength = d.intField(fHashLength, name, v)
	case "netmask":
		c.Netmask = d.netmask(name, v)
	case "v6NetmaskLen":
		c.V6NetmaskLen = d.intField(fV6NetmaskLen, name, v)
	case "token":
		top.token = v
	case "backupLBMethod":
		c.BackupLBMethod = d.method(fBackupLBMethod, name, v)
	case "services":
		top.services = true
		c.Services = d.services(name, v)
	case "persistence":
		c.Persistence = d.persistence(name, v)
	case "healthCheck":
		c.HealthCheck = d.healthCheck(name, v)
	case "passiveHealth":
		c.PassiveHealth = d.passiveHealth(name, v)
	case "session":
		c.Session = d.session(name, v)
	case "upstreamHeader":
		c.UpstreamHeader = d.headerName(fUpstreamHeader, name, v)
	case "upstreamCount":
		c.UpstreamCount = d.intField(fUpstreamCount, name, v)
	case "serviceHeader":
		c.ServiceHeader = d.headerName(fServiceHeader, name, v)
	case "trustedForwardedHops":
		c.TrustedForwardedHops = d.intField(fTrustedForwardedHops, name, v)
	case "hashBalanceFactor":
		c.HashBalanceFactor = d.intField(fHashBalanceFactor, name, v)
	case "slowStart":
		c.SlowStart = d.slowStart(name, v)
	case "debugHeader":
		c.DebugHeader = d.boolean(name, v)
	default:
		return false
	}
	return true
}

// crossChecks reports what no one field shows: services missing, a token
// without lbMethod TOKEN (or the reverse), the service header the same as
// the upstream header, the module's own headers read by an expression,
// steering and session constraints.
func (d *decoder) crossChecks(c *Config, top *topLevel) {
	if !top.services {
		d.errorf("services: is required")
	}
	switch {
	case c.LBMethod == MethodTokenHash && !top.token.Exists():
		d.errorf("token: is required for lbMethod TOKEN")
	case c.LBMethod != MethodTokenHash && top.token.Exists():
		d.errorf("token: is only used with lbMethod TOKEN, not %s", c.LBMethod)
	case top.token.Exists():
		c.Token = d.expr("token", top.token)
	}
	if c.ServiceHeader != "" && c.ServiceHeader == c.UpstreamHeader {
		d.errorf("serviceHeader: %q is the same header as upstreamHeader", c.ServiceHeader)
	}
	d.ownHeadersUnread(c)
	d.steering(c, &top.set, top.root)
	d.sessionChecks(c)
}

// decoder collects every problem found while walking the JSON.
type decoder struct{ errs []error }

func (d *decoder) errorf(format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf(format, args...))
}

// object walks an object's fields in document order; field returns false for
// a name it does not know. Duplicate names are errors (JSON allows them, but
// which one wins differs between parsers).
func (d *decoder) object(path string, v gjson.Result, field func(name string, v gjson.Result) bool) bool {
	if !v.IsObject() {
		d.errorf("%s: %s is not an object", path, clip(v.Raw))
		return false
	}
	seen := map[string]bool{}
	v.ForEach(func(k, val gjson.Result) bool {
		name := k.String()
		p := join(path, name)
		switch {
		case seen[name]:
			d.errorf("%s: duplicate field", p)
		case !field(name, val):
			d.errorf("%s: unknown field", p)
		}
		seen[name] = true
		return true
	})
	return true
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// clip shortens a raw JSON value for an error message.
func clip(raw string) string {
	if len(raw) > 64 {
		return raw[:61] + "..."
	}
	return raw
}

func (d *decoder) str(path string, v gjson.Result) (string, bool) {
	if v.Type != gjson.String {
		d.errorf("%s: %s is not a string", path, clip(v.Raw))
		return "", false
	}
	return v.Str, true
}

func (d *decoder) boolean(path string, v gjson.Result) bool {
	if v.Type != gjson.True && v.Type != gjson.False {
		d.errorf("%s: %s is not a boolean", path, clip(v.Raw))
		return false
	}
	return v.Bool()
}

// integer accepts a JSON number with no fraction or exponent.
func (d *decoder) integer(path string, v gjson.Result) (int64, bool) {
	if v.Type == gjson.Number {
		if n, err := strconv.ParseInt(v.Raw, 10, 64); err == nil {
			return n, true
		}
	}
	d.errorf("%s: %s is not an integer", path, clip(v.Raw))
	return 0, false
}

// intField parses integer field f within its range (or its Off value). On error
// it returns the Off value, else the lower bound, so that later checks see a
// sane value.
func (d *decoder) intField(f fieldID, path string, v gjson.Result) int {
	lo, hi := f.intRange()
	off, hasOff := f.spec().Off.(int)
	bad := lo
	if hasOff {
		bad = off
	}
	n, ok := d.integer(path, v)
	switch {
	case !ok:
		return bad
	case hasOff && n == int64(off):
		return off
	case n >= int64(lo) && n <= int64(hi):
		return int(n)
	case hasOff:
		d.errorf("%s: %d is out of range: %d (off) or [%d, %d]", path, n, off, lo, hi)
	default:
		d.errorf("%s: %d is out of range [%d, %d]", path, n, lo, hi)
	}
	return bad
}

// count checks the length of array field f against its range; noun names
// the items in the error.
func (d *decoder) count(f fieldID, path string, n int, noun string) bool {
	lo, hi := f.intRange()
	if n < lo || n > hi {
		d.errorf("%s: %d %s is out of range [%d, %d]", path, n, noun, lo, hi)
		return false
	}
	return true
}

// method parses a method token of field f, case-insensitively, from the
// field's Enum.
func (d *decoder) method(f fieldID, path string, v gjson.Result) Method {
	s, ok := d.str(path, v)
	if !ok {
		return MethodRoundRobin
	}
	allowed := f.spec().Enum
	for _, a := range allowed {
		if strings.EqualFold(s, a) {
			return mustMethod(a)
		}
	}
	d.errorf("%s: %q is not one of %s", path, s, strings.Join(allowed, ", "))
	return MethodRoundRobin
}

// setEnum sets *dst to string field f when v is a string, and reports one
// that is not among the field's Enum exactly; *dst keeps its value when v is
// no string.
func (d *decoder) setEnum(dst *string, f fieldID, path string, v gjson.Result) {
	if s, ok := d.enum(f, path, v); ok {
		*dst = s
	}
}

// enum parses string field f, one of the field's Enum exactly.
func (d *decoder) enum(f fieldID, path string, v gjson.Result) (string, bool) {
	s, ok := d.str(path, v)
	if !ok {
		return "", false
	}
	if allowed := f.spec().Enum; !slices.Contains(allowed, s) {
		d.errorf("%s: %q is not one of %s", path, s, strings.Join(allowed, ", "))
	}
	return s, true
}

// mustMethod returns the method of a name the field table gives.
func mustMethod(name string) Method {
	m, ok := methodNamed(name)
	if !ok {
		panic("lbcore: field table: no method " + name)
	}
	return m
}

// netmask parses a dotted IPv4 mask and returns its prefix length.
func (d *decoder) netmask(path string, v gjson.Result) int {
	s, ok := d.str(path, v)
	if !ok {
		return 32
	}
	ones, err := parseNetmask(s)
	switch err {
	case errNotIPv4:
		d.errorf("%s: %q is not an IPv4 mask such as 255.255.255.0", path, s)
	case errNotContiguous:
		d.errorf("%s: %q is not a contiguous IPv4 mask (ones then zeros, at least one bit)", path, s)
	}
	return ones
}

var (
	errNotIPv4       = errors.New("not an IPv4 address")
	errNotContiguous = errors.New("not a contiguous mask")
)

// NetmaskBits returns the prefix length of a contiguous dotted IPv4 mask
// (ones then zeros, at least one bit), as the netmask field takes it;
// 0, false for anything else.
func NetmaskBits(s string) (int, bool) {
	ones, err := parseNetmask(s)
	if err != nil {
		return 0, false
	}
	return ones, true
}

// parseNetmask returns the prefix length of a dotted IPv4 mask; on error, 32.
func parseNetmask(s string) (int, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return 32, errNotIPv4
	}
	b := a.As4()
	m := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	ones := bits.LeadingZeros32(^m)
	if ones == 0 || m<<ones != 0 {
		return 32, errNotContiguous
	}
	return ones, nil
}

// mustNetmask returns the prefix length of the field table's default mask.
func mustNetmask(s string) int {
	ones, err := parseNetmask(s)
	if err != nil {
		panic("lbcore: field table: netmask " + s + ": " + err.Error())
	}
	return ones
}

// headerName parses header field f: an HTTP token, not a pseudo-header,
// lower-cased as Envoy stores names; "" when the field's Off value is "".
func (d *decoder) headerName(f fieldID, path string, v gjson.Result) string {
	s, ok := d.str(path, v)
	if !ok || (s == "" && f.spec().Off == "") {
		return ""
	}
	if s == "" || !isToken(s) {
		d.errorf("%s: %q is not a valid header name", path, s)
		return ""
	}
	s = strings.ToLower(s)
	if slices.Contains(managedHeaders, s) {
		d.errorf("%s: %q is a header Envoy manages itself; hashlb would remove the client's copy from every request (choose a header of its own such as x-hashlb-upstream)", path, s)
		return ""
	}
	return s
}

// managedHeaders are headers hashlb may not write: Envoy manages them itself
// (host is HTTP/1's :authority; the rest frame the message or are hop by
// hop), and removing a client's copy before deciding would break the request.
var managedHeaders = []string{"host", "connection", "content-length", "keep-alive", "proxy-connection", "te", "transfer-encoding", "upgrade"}

// ownHeadersUnread refuses a configuration whose decisions read a header
// hashlb writes: the filter removes every client copy of upstreamHeader and
// serviceHeader before deciding, so such an input would always be empty.
func (d *decoder) ownHeadersUnread(c *Config) {
	own := func(in *Inputs) (field, name string) {
		for _, h := range in.Headers {
			switch h {
			case c.UpstreamHeader:
				return "upstreamHeader", h
			case c.ServiceHeader:
				return "serviceHeader", h
			}
		}
		return "", ""
	}
	const why = "which hashlb removes from every request before deciding (%s), so it would always be empty"
	var in Inputs
	if c.methodInputs(&in) {
		c.clientInputs(&in)
	}
	if field, h := own(&in); field != "" {
		if h == "x-forwarded-for" {
			d.errorf("trustedForwardedHops: %d reads header %q, "+why, c.TrustedForwardedHops, h, field)
		} else {
			d.errorf("lbMethod: %s reads header %q, "+why, c.LBMethod, h, field)
		}
	}
	check := func(path string, e *Expr) {
		var in Inputs
		if e.addInputs(&in) {
			c.clientInputs(&in)
		}
		if field, h := own(&in); field != "" {
			d.errorf("%s: %q reads header %q, "+why, path, e.String(), h, field)
		}
	}
	if c.Token != nil {
		check("token", c.Token)
	}
	if p := c.Persistence; p != nil {
		for i, k := range p.Keys {
			check(fmt.Sprintf("persistence.keys[%d]", i), k)
		}
	}
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func (d *decoder) expr(path string, v gjson.Result) *Expr {
	s, ok := d.str(path, v)
	if !ok {
		return nil
	}
	e, err := ParseExpr(s)
	if err != nil {
		d.errorf("%s: %v", path, err)
		return nil
	}
	return e
}

// duration parses duration field f, "90s", "10m", "36h", "7d" (also
// "500ms"), within its range.
func (d *decoder) duration(f fieldID, path string, v gjson.Result) time.Duration {
	lo, hi := f.durationRange()
	s, ok := d.str(path, v)
	if !ok {
		return lo
	}
	t, err := ParseDuration(s)
	if err != nil {
		d.errorf("%s: %q is not a duration such as 90s, 10m, 36h or 7d", path, s)
		return lo
	}
	if t < lo || t > hi {
		d.errorf("%s: %q is out of range [%s, %s]", path, s, FormatDuration(lo), FormatDuration(hi))
		return lo
	}
	return t
}

// ParseDuration parses a whole number followed by one unit: ms, s, m, h or d.
func ParseDuration(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if i == 0 || err != nil {
		return 0, fmt.Errorf("duration %q: no number", s)
	}
	var unit time.Duration
	switch s[i:] {
	case "ms":
		unit = time.Millisecond
	case "s":
		unit = time.Second
	case "m":
		unit = time.Minute
	case "h":
		unit = time.Hour
	case "d":
		unit = 24 * time.Hour
	default:
		return 0, fmt.Errorf("duration %q: unit must be ms, s, m, h or d", s)
	}
	if n > int64(1<<62)/int64(unit) {
		return 0, fmt.Errorf("duration %q: too long", s)
	}
	return time.Duration(n) * unit, nil
}

// FormatDuration writes d in the largest unit that divides it: 7d, 10m, 500ms.
func FormatDuration(d time.Duration) string {
	var buf [24]byte
	return string(AppendDuration(buf[:0], d))
}

// AppendDuration appends d as FormatDuration writes it to dst.
func AppendDuration(dst []byte, d time.Duration) []byte {
	for _, u := range [...]struct {
		unit time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d >= u.unit && d%u.unit == 0 {
			return append(strconv.AppendInt(dst, int64(d/u.unit), 10), u.name...)
		}
	}
	return append(strconv.AppendInt(dst, d.Milliseconds(), 10), "ms"...)
}

// statuses parses "200-399,404" with codes in [100, 599].
func (d *decoder) statuses(path string, v gjson.Result) StatusSet {
	s, ok := d.str(path, v)
	if !ok {
		return StatusSet{}
	}
	set, err := ParseStatusSet(s)
	if err != nil {
		d.errorf("%s: %v", path, err)
	}
	return set
}

// ParseStatusSet parses a comma-separated list of codes and ranges, such as
// "200-399,404", each code in [100, 599].
func ParseStatusSet(s string) (StatusSet, error) {
	set := StatusSet{src: s}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		if !isRange {
			hi = lo
		}
		a, ok1 := statusCode(lo)
		b, ok2 := statusCode(hi)
		if !ok1 || !ok2 || a > b {
			return StatusSet{}, fmt.Errorf("%q is not a status list such as 200-399,404 (codes 100-599)", s)
		}
		set.ranges = append(set.ranges, [2]uint16{uint16(a), uint16(b)})
	}
	return set, nil
}

// statusCode parses an HTTP status code of a configuration: three digits in
// [100, 599].
func statusCode(s string) (int, bool) {
	n, ok := ParseStatus(s)
	return n, ok && n >= 100 && n <= 599
}

// ParseStatus reads an HTTP status code as three digits, no sign or spaces
// (strconv.Atoi alone would take "+500"); the filters read a response's
// :status with it.
func ParseStatus(s string) (int, bool) {
	if len(s) != 3 {
		return 0, false
	}
	n := 0
	for i := 0; i < 3; i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// serviceID is a service's rendezvous hash and persistence identity.
func serviceID(s *Service) uint64 {
	if s.HashID != "" {
		return xxhash.Sum64String(s.HashID)
	}
	return xxhash.Sum64String(s.Address)
}
