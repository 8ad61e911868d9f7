package lbcore

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/tidwall/gjson"
)

// services parses the services array: names unique, addresses ip:port and
// unique, identities (hashId or address) unique.
func (d *decoder) services(path string, v gjson.Result) []Service {
	if !v.IsArray() {
		d.errorf("%s: %s is not an array", path, clip(v.Raw))
		return nil
	}
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
						d.errorf("%s: %q is not ip:port or [v6]:port with a port in [1, 65535]", fp, s.Address)
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
	if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" || ap.String() != s {
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
			if s, ok := d.enum(fPersistenceEmptyKey, fp, v); ok {
				p.EmptyKey = s
			}
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
	f := &Fleet{Timeout: fFleetTimeout.defaultDuration()}
	if !d.object(path, v, func(name string, v gjson.Result) bool {
		fp := path + "." + name
		switch name {
		case "cluster":
			f.Cluster = d.visible(fp, v, "an Envoy cluster name")
		case "authority":
			f.Authority = d.visible(fp, v, "an HTTP :authority")
		case "prefix":
			f.Prefix = d.visible(fp, v, "this prefix (write it as printable ASCII)")
		case "timeout":
			f.Timeout = d.duration(fFleetTimeout, fp, v)
		default:
			return false
		}
		return true
	}) {
		return nil
	}
	if !v.Get("cluster").Exists() {
		d.errorf("%s.cluster: is required", path)
	}
	return f
}

// visible decodes a string that must be non-empty printable ASCII without
// spaces; what says what the value is, for the error.
func (d *decoder) visible(path string, v gjson.Result, what string) string {
	s, ok := d.str(path, v)
	switch {
	case !ok:
	case s == "":
		d.errorf("%s: must not be empty", path)
	case !isVisibleASCII(s):
		d.errorf("%s: %q has a space, control character or non-ASCII byte, which %s cannot", path, s, what)
	}
	return s
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
			if m, ok := d.enum(fHealthMethod, fp, v); ok {
				h.Method = m
			}
		case "port":
			h.Port = d.intField(fHealthPort, fp, v)
		case "host":
			if s, ok := d.str(fp, v); ok {
				switch {
				case s == "":
					d.errorf("%s: must not be empty", fp)
				case !isAuthority(s):
					d.errorf("%s: %q is not a host[:port] (letters, digits and - . _ ~ : [ ], no space, / or @)", fp, s)
				}
				h.Host = s
			}
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
			if s, ok := d.str(fp, v); ok {
				if s == "" {
					d.errorf("%s: must not be empty", fp)
				} else if !isVisibleASCII(s) {
					d.errorf("%s: %q has a space, control character or non-ASCII byte, which an Envoy cluster name cannot", fp, s)
				}
				h.Cluster = s
			}
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
