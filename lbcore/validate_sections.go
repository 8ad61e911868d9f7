package lbcore

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/tidwall/gjson"
)

// services parses the services array: names unique, addresses ip:port and
// unique, identities (hashId or address) unique.
//
// A plugin configuration may hold up to 10^4 services and is parsed again
// on every worker at every change, so the common case, a valid array, is
// decoded by fastServices: no JSON path, string map or closure per service
// (what the general decoder needs for its error texts), and the uniqueness
// checks on one table of 64-bit hashes, which holds no pointers for the
// garbage collector to scan. Anything it does not accept (a problem, or two
// hashes that meet) is decoded again by servicesSlow, which says exactly
// what is wrong; for a valid array both give the same services.
func (d *decoder) services(path string, v gjson.Result) []Service {
	if !v.IsArray() {
		d.errorf("%s: %s is not an array", path, clip(v.Raw))
		return nil
	}
	if out, ok := fastServices(v); ok {
		return out
	}
	return d.servicesSlow(path, v)
}

// Tags that keep the three uniqueness checks of fastServices apart in one
// table.
const (
	tagName uint64 = 0x6e616d65 << 32
	tagAddr uint64 = 0x61646472 << 32
	tagID   uint64 = 0x69640000 << 32
)

// fastServices decodes a services array with no problem; false when there
// is one, or may be one (servicesSlow then decodes it).
func fastServices(v gjson.Result) ([]Service, bool) {
	lo, hi := fServices.intRange()
	// Room for every service: each is an object, so it has a '{'.
	out := make([]Service, 0, min(strings.Count(v.Raw, "{"), hi))
	// Open addressing, at most half full; 0 is an empty slot. (What a
	// reconfiguration allocates is what its garbage collection costs in
	// V8: docs/performance.md#reconfiguration-in-real-envoy.)
	size := 4
	for size < 2*3*cap(out) {
		size <<= 1
	}
	table := make([]uint64, size)
	mask := uint64(size - 1)
	seen := func(h uint64) bool {
		h = mix(h) | 1
		for i := h & mask; ; i = (i + 1) & mask {
			switch table[i] {
			case 0:
				table[i] = h
				return false
			case h:
				return true
			}
		}
	}
	ok := true
	v.ForEach(func(_, item gjson.Result) bool {
		if len(out) == cap(out) || len(out) >= hi {
			ok = false
			return false
		}
		var s Service
		if s, ok = fastService(item); !ok {
			return false
		}
		s.ID = serviceID(&s)
		ok = !seen(xxhash.Sum64String(s.Name)^tagName) && !seen(xxhash.Sum64String(s.Address)^tagAddr) && !seen(s.ID^tagID)
		out = append(out, s)
		return ok
	})
	return out, ok && len(out) >= lo
}

// fastService decodes a service object whose fields are all known, each
// once, with valid values, as servicesSlow would; for anything else it
// returns false.
func fastService(item gjson.Result) (Service, bool) {
	s := Service{Weight: fServiceWeight.defaultInt(), Enabled: fServiceEnabled.defaultBool()}
	if !item.IsObject() {
		return s, false
	}
	const (
		seenName = 1 << iota
		seenAddr
		seenWeight
		seenEnabled
		seenHashID
	)
	seen, ok := 0, true
	item.ForEach(func(k, v gjson.Result) bool {
		bit := 0
		switch k.Str {
		case "name":
			bit = seenName
			ok = v.Type == gjson.String && v.Str != "" && isToken(v.Str)
			s.Name = v.Str
		case "address":
			bit = seenAddr
			ok = v.Type == gjson.String
			if ok {
				s.Address = v.Str
				s.Addr, ok = parseServiceAddr(s.Address)
				ok = ok && !s.Addr.Addr().Is4In6()
			}
		case "weight":
			bit = seenWeight
			lo, hi := fServiceWeight.intRange()
			_, hasOff := fServiceWeight.spec().Off.(int)
			ok = v.Type == gjson.Number && !hasOff
			if ok {
				n, err := strconv.ParseInt(v.Raw, 10, 64)
				ok = err == nil && n >= int64(lo) && n <= int64(hi)
				s.Weight = int(n)
			}
		case "enabled":
			bit = seenEnabled
			ok = v.Type == gjson.True || v.Type == gjson.False
			s.Enabled = v.Type == gjson.True
		case "hashId":
			bit = seenHashID
			ok = v.Type == gjson.String && v.Str != ""
			s.HashID = v.Str
		default:
			ok = false
		}
		ok = ok && seen&bit == 0
		seen |= bit
		return ok
	})
	return s, ok && seen&(seenName|seenAddr) == seenName|seenAddr
}

// servicesSlow is the general decoder of the services array v: every
// problem, each once, in document order.
func (d *decoder) servicesSlow(path string, v gjson.Result) []Service {
	items := v.Array()
	if !d.count(fServices, path, len(items), "services") && len(items) > 0 {
		return nil // too many to check one by one
	}
	out := make([]Service, 0, len(items))
	names := map[string]int{}
	addrs := map[string]int{}
	ids := map[uint64]int{}
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		s := Service{Weight: fServiceWeight.defaultInt(), Enabled: fServiceEnabled.defaultBool()}
		hasName, hasAddr := false, false
		if !d.object(p, item, func(name string, v gjson.Result) bool {
			fp := p + "." + name
			switch name {
			case "name":
				s.Name, hasName = d.str(fp, v)
				if hasName && (s.Name == "" || !isToken(s.Name)) {
					d.errorf("%s: %q is not a valid name (letters, digits, - . _ ~ and the like, no spaces)", fp, s.Name)
				}
			case "address":
				var ok bool
				if s.Address, ok = d.str(fp, v); ok {
					hasAddr = true
					s.Addr, ok = parseServiceAddr(s.Address)
					switch {
					case !ok:
						d.errorf("%s: %q is not ip:port or [v6]:port with a port in [1, 65535]: %s", fp, s.Address, addrReason(s.Address))
					case s.Addr.Addr().Is4In6():
						// One endpoint, two spellings, two hashes: refuse it.
						d.errorf("%s: %q is an IPv4-mapped IPv6 address; write it as %s", fp, s.Address,
							netip.AddrPortFrom(s.Addr.Addr().Unmap(), s.Addr.Port()))
					}
				}
			case "weight":
				s.Weight = d.intField(fServiceWeight, fp, v)
			case "enabled":
				s.Enabled = d.boolean(fp, v)
			case "hashId":
				if s.HashID, _ = d.str(fp, v); s.HashID == "" {
					d.errorf("%s: must not be empty (leave it out to hash the address)", fp)
				}
			default:
				return false
			}
			return true
		}) {
			continue
		}
		if !hasName {
			d.errorf("%s.name: is required", p)
		} else if j, dup := names[s.Name]; dup {
			d.errorf("%s.name: %q is already used by %s[%d]", p, s.Name, path, j)
		} else {
			names[s.Name] = i
		}
		dupAddr := false
		if !hasAddr {
			d.errorf("%s.address: is required", p)
		} else if j, dup := addrs[s.Address]; dup {
			d.errorf("%s.address: %q is already used by %s[%d]", p, s.Address, path, j)
			dupAddr = true
		} else {
			addrs[s.Address] = i
		}
		s.ID = serviceID(&s)
		if j, dup := ids[s.ID]; dup && hasAddr && !dupAddr {
			d.errorf("%s: hashes to the same identity as %s[%d] (same hashId or address)", p, path, j)
		}
		ids[s.ID] = i
		out = append(out, s)
	}
	return out
}

// parseServiceAddr accepts "ip:port" and "[v6]:port" with a non-zero port.
// The address must be written canonically so that it matches what Envoy
// reports for the endpoint (and so one address has one hash).
func parseServiceAddr(s string) (netip.AddrPort, bool) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
		return netip.AddrPort{}, false
	}
	// Canonical: it prints back as written (compared without allocating).
	var buf [64]byte
	if string(ap.AppendTo(buf[:0])) != s {
		return netip.AddrPort{}, false
	}
	return ap, true
}

func (d *decoder) persistence(path string, v gjson.Result) *Persistence {
	p := &Persistence{TableSize: fPersistenceTableSize.defaultInt(), Expire: fPersistenceExpire.defaultDuration(),
		EmptyKey: fPersistenceEmptyKey.defaultString()}
	hasKeys := false
	d.object(path, v, func(name string, v gjson.Result) bool {
		fp := path + "." + name
		switch name {
		case "keys":
			hasKeys = true
			p.Keys = d.keys(fp, v)
		case "tableSize":
			p.TableSize = d.intField(fPersistenceTableSize, fp, v)
		case "expire":
			p.Expire = d.duration(fPersistenceExpire, fp, v)
		case "emptyKey":
			d.setEnum(&p.EmptyKey, fPersistenceEmptyKey, fp, v)
		case "fleet":
			p.Fleet = d.fleet(fp, v)
		default:
			return false
		}
		return true
	})
	if !hasKeys && v.IsObject() {
		d.errorf("%s.keys: is required", path)
	}
	return p
}

func (d *decoder) fleet(path string, v gjson.Result) *Fleet {
	f := &Fleet{Timeout: fFleetTimeout.defaultDuration(), CreatesPerSecond: fFleetCreatesPerSecond.defaultInt()}
	if !d.object(path, v, func(name string, v gjson.Result) bool {
		fp := path + "." + name
		switch name {
		case "cluster":
			f.Cluster = d.visible(fp, v, "an Envoy cluster name")
		case "endpoints":
			f.Endpoints = d.endpoints(fp, v)
		case "authority":
			f.Authority = d.visible(fp, v, "an HTTP :authority")
		case "prefix":
			f.Prefix = d.visible(fp, v, "this prefix (write it as printable ASCII)")
		case "timeout":
			f.Timeout = d.duration(fFleetTimeout, fp, v)
		case "createsPerSecond":
			f.CreatesPerSecond = d.intField(fFleetCreatesPerSecond, fp, v)
		default:
			return false
		}
		return true
	}) {
		return nil
	}
	if !v.Get("cluster").Exists() && !v.Get("endpoints").Exists() {
		d.errorf("%s.cluster: is required", path) // endpoints instead: the policy
	}
	return f
}

// endpoints decodes persistence.fleet.endpoints: distinct host:port
// strings, a port from 1 to 65535 after a host name or address ("[v6]"
// for IPv6).
func (d *decoder) endpoints(path string, v gjson.Result) []string {
	if !v.IsArray() {
		d.errorf("%s: %s is not an array", path, clip(v.Raw))
		return nil
	}
	items := v.Array()
	d.count(fFleetEndpoints, path, len(items), "endpoints")
	var out []string
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		s := d.visible(p, item, "an etcd endpoint")
		if s == "" {
			continue
		}
		if !isEndpoint(s) {
			d.errorf("%s: %q is not host:port (a host name or address, then a port from 1 to 65535; [v6]:port for IPv6)", p, s)
			continue
		}
		if j := slices.Index(out, s); j >= 0 {
			d.errorf("%s: %q duplicates %s[%d]", p, s, path, j)
			continue
		}
		out = append(out, s)
	}
	return out
}

// isEndpoint reports whether s is host:port with a port from 1 to 65535.
func isEndpoint(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return false
	}
	host, port := s[:i], s[i+1:]
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || port[0] == '0' || port[0] == '+' {
		return false
	}
	if host[0] == '[' {
		a, err := netip.ParseAddr(strings.TrimSuffix(host[1:], "]"))
		return err == nil && a.Is6() && strings.HasSuffix(host, "]")
	}
	return !strings.ContainsAny(host, "[]:/")
}

// visible decodes a string that must be non-empty printable ASCII without
// spaces; what says what the value is, for the error.
func (d *decoder) visible(path string, v gjson.Result, what string) string {
	var s string
	d.setChecked(&s, path, v, isVisibleASCII, invisible(what))
	return s
}

// invisible is the error format (path, value) for a string that is not
// printable ASCII without spaces; what says what the value is.
func invisible(what string) string {
	return "%s: %q has a space, control character or non-ASCII byte, which " + strings.ReplaceAll(what, "%", "%%") + " cannot"
}

// setChecked sets *dst to string field v when it is a string, and reports
// one that is empty, or that valid refuses with the format bad (given the
// path and the value); *dst keeps its value when v is no string.
func (d *decoder) setChecked(dst *string, path string, v gjson.Result, valid func(string) bool, bad string) {
	s, ok := d.str(path, v)
	if !ok {
		return
	}
	switch {
	case s == "":
		d.errorf("%s: must not be empty", path)
	case !valid(s):
		d.errorf(bad, path, s)
	}
	*dst = s
}

func (d *decoder) keys(path string, v gjson.Result) []*Expr {
	if !v.IsArray() {
		d.errorf("%s: %s is not an array", path, clip(v.Raw))
		return nil
	}
	items := v.Array()
	d.count(fPersistenceKeys, path, len(items), "keys")
	seen := map[string]int{}
	var out []*Expr
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		e := d.expr(p, item)
		if e == nil {
			continue
		}
		src := e.canonical()
		if j, dup := seen[src]; dup {
			d.errorf("%s: %q duplicates %s[%d]", p, e.String(), path, j)
			continue
		}
		seen[src] = i
		out = append(out, e)
	}
	return out
}

func (d *decoder) healthCheck(path string, v gjson.Result) *HealthCheck {
	h := &HealthCheck{Path: fHealthPath.defaultString(), Interval: fHealthInterval.defaultDuration(),
		Timeout: fHealthTimeout.defaultDuration(), HealthyThreshold: fHealthyThreshold.defaultInt(),
		UnhealthyThreshold: fUnhealthyThreshold.defaultInt(), Cluster: fHealthCluster.defaultString(),
		Method: fHealthMethod.defaultString()}
	h.ExpectedStatuses, _ = ParseStatusSet(fExpectedStatuses.defaultString())
	timeoutSet := false
	d.object(path, v, func(name string, v gjson.Result) bool {
		fp := path + "." + name
		switch name {
		case "path":
			if s, ok := d.str(fp, v); ok {
				switch {
				case !strings.HasPrefix(s, "/"):
					d.errorf("%s: %q is not an absolute path such as /healthz", fp, s)
				case !isVisibleASCII(s):
					d.errorf("%s: %q has a space, control character or non-ASCII byte (percent-encode it)", fp, s)
				}
				h.Path = s
			}
		case "method":
			d.setEnum(&h.Method, fHealthMethod, fp, v)
		case "port":
			h.Port = d.intField(fHealthPort, fp, v)
		case "host":
			d.setChecked(&h.Host, fp, v, isAuthority, "%s: %q is not a host[:port] (letters, digits and - . _ ~ : [ ], no space, / or @)")
		case "expectBody":
			if s, ok := d.str(fp, v); ok {
				switch {
				case s == "":
					d.errorf("%s: must not be empty", fp)
				case len(s) > MaxExpectBodyBytes:
					d.errorf("%s: %d bytes, at most %d", fp, len(s), MaxExpectBodyBytes)
				}
				h.ExpectBody = s
			}
		case "interval":
			h.Interval = d.duration(fHealthInterval, fp, v)
		case "timeout":
			timeoutSet = true
			h.Timeout = d.duration(fHealthTimeout, fp, v)
		case "healthyThreshold":
			h.HealthyThreshold = d.intField(fHealthyThreshold, fp, v)
		case "unhealthyThreshold":
			h.UnhealthyThreshold = d.intField(fUnhealthyThreshold, fp, v)
		case "expectedStatuses":
			h.ExpectedStatuses = d.statuses(fp, v)
		case "cluster":
			d.setChecked(&h.Cluster, fp, v, isVisibleASCII, invisible("an Envoy cluster name"))
		default:
			return false
		}
		return true
	})
	if h.Method == "HEAD" && h.ExpectBody != "" {
		d.errorf("%s.expectBody: a HEAD probe's response has no body (use method GET)", path)
	}
	if h.Timeout > h.Interval {
		if timeoutSet {
			d.errorf("%s.timeout: %q is longer than interval %q", path, FormatDuration(h.Timeout), FormatDuration(h.Interval))
		} else {
			h.Timeout = h.Interval
		}
	}
	return h
}

// isAuthority reports whether s can be a request's :authority: a host name,
// an IPv4 address or a bracketed IPv6 address, with an optional :port.
func isAuthority(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c|0x20 && c|0x20 <= 'z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == ':', c == '[', c == ']':
		default:
			return false
		}
	}
	return true
}

func (d *decoder) passiveHealth(path string, v gjson.Result) *PassiveHealth {
	p := &PassiveHealth{ConsecutiveFailures: fConsecutiveFailures.defaultInt(), EjectionTime: fEjectionTime.defaultDuration()}
	p.FailureStatuses, _ = ParseStatusSet(fFailureStatuses.defaultString())
	d.object(path, v, func(name string, v gjson.Result) bool {
		fp := path + "." + name
		switch name {
		case "consecutiveFailures":
			p.ConsecutiveFailures = d.intField(fConsecutiveFailures, fp, v)
		case "ejectionTime":
			p.EjectionTime = d.duration(fEjectionTime, fp, v)
		case "failureStatuses":
			p.FailureStatuses = d.statuses(fp, v)
		default:
			return false
		}
		return true
	})
	return p
}

func (d *decoder) slowStart(path string, v gjson.Result) *SlowStart {
	s := &SlowStart{MinWeightPercent: fSlowStartMinWeightPercent.defaultInt()}
	if !d.object(path, v, func(name string, v gjson.Result) bool {
		fp := path + "." + name
		switch name {
		case "window":
			s.Window = d.duration(fSlowStartWindow, fp, v)
		case "minWeightPercent":
			s.MinWeightPercent = d.intField(fSlowStartMinWeightPercent, fp, v)
		case "step":
			s.Step = d.duration(fSlowStartStep, fp, v)
		default:
			return false
		}
		return true
	}) {
		return nil
	}
	switch {
	case !v.Get("window").Exists():
		d.errorf("%s.window: is required", path)
	case s.Step > s.Window:
		d.errorf("%s.step: %q is longer than window %q", path, FormatDuration(s.Step), FormatDuration(s.Window))
	}
	return s
}

// isVisibleASCII reports whether s holds only printable ASCII other than
// space: what may go into a probe's :path header or name an Envoy cluster
// without being refused, or worse, read differently by the host.
func isVisibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
