package nsconf

import (
	"fmt"
	"slices"
	"strings"
)

// A vserver's health: what its configuration writes for the monitors of its
// services. hashlb has one healthCheck and one passiveHealth per
// configuration, covering every service alike, where NetScaler monitors
// each service by its own bindings:
//
//   - a service bound to no monitor has the appliance's default: "The
//     tcp-default monitor is bound to all TCP services. The ping-default
//     monitor is bound to all non-TCP services." (docs.netscaler.com,
//     load-balancing-builtin-monitors/monitor-tcp.html);
//   - a service bound to several monitors is DOWN when any of them is: "By
//     default, the monitor threshold is set to 0 and monitor weights are set
//     to 1 ... a service can go DOWN when any one of the monitors goes DOWN"
//     (docs.citrix.com, load-balancing-advanced-settings/set-monitor-threshold.html);
//   - -healthMonitor NO on a service or service group: "Do not send probes
//     to check the health of the service. With the NO option, the appliance
//     shows the service as UP at all times." (the NITRO service and
//     servicegroup resources, healthmonitor).

// Default monitor settings: a monitor's -retries and -downTime when not
// given (the lb monitor page of the command reference), which tcp-default
// and ping-default keep.
const (
	defaultRetries  = 3
	defaultDownTime = "30s"
)

// svcHealth is how NetScaler monitors one written service.
type svcHealth struct {
	m        member
	optOut   bool       // -healthMonitor NO
	monitors []*monitor // bound, in bind order
}

// monCand is a monitor bound to services of the vserver.
type monCand struct {
	mon      *monitor
	services []string
	binds    []*Entry
	first    int // the line of its first binding
}

// outPassive is a written passiveHealth.
type outPassive struct {
	consecutiveFailures int
}

func (p *outPassive) json() string {
	return fmt.Sprintf(`{"consecutiveFailures": %d}`, p.consecutiveFailures)
}

// healthCheck gives cfg what stands for the monitors of v's services: the
// healthCheck of a translatable monitor, or, when none is bound and a
// service has no monitor, the passiveHealth that stands for tcp-default;
// every difference is a warning. It returns the lines the configuration
// uses.
func (t *translator) healthCheck(v *vserver, members []member, cfg *outConfig, warnAt func(int, string, ...any)) []*Entry {
	svcs, cands := t.vserverMonitors(v, members)
	best, h, warns := pickMonitor(cands)
	if best == nil {
		t.defaultMonitor(v, svcs, cfg, warnAt)
		return nil
	}
	m := best.mon
	cfg.health, cfg.monitor = &h, m
	t.monitorWarnings(v, m, warns, warnAt)
	t.mixedMonitors(v, svcs, best, cands, warnAt)
	optOutWarnings(svcs, func(line int, names, it string) {
		warnAt(line, "-healthMonitor NO: NetScaler sends %s no probes and shows %s UP; hashlb's healthCheck probes every service of a configuration, "+
			"so lb vserver %s's probe (lb monitor %s) can mark %s DOWN: remove healthCheck from %s's configuration to keep %s UP", names, it, v.name, m.name, it, v.name, it)
	})
	used := append([]*Entry{}, best.binds...)
	if m.e != nil {
		used = append(used, m.e)
	}
	return append(used, m.setLines...)
}

// vserverMonitors returns, per written service, how NetScaler monitors it,
// and the monitors bound to the probed ones, in bind order. The bindings
// of a -healthMonitor NO service send no probe: each is reported so.
func (t *translator) vserverMonitors(v *vserver, members []member) ([]svcHealth, []*monCand) {
	var svcs []svcHealth
	var cands []*monCand
	byMon := map[*monitor]*monCand{}
	for _, mb := range members {
		s := svcHealth{m: mb, optOut: mb.noHealth()}
		for _, bd := range t.monBinds[mb.b.target()] {
			if s.optOut {
				if _, seen := t.unused[bd.e]; !seen {
					t.unused[bd.e] = unusedWhy{NotTranslated, fmt.Sprintf("%s has -healthMonitor NO: NetScaler sends it no probes, whatever monitors are bound", mb.b.target())}
				}
				continue
			}
			c := byMon[bd.mon]
			if c == nil {
				c = &monCand{mon: bd.mon, first: bd.e.Line}
				byMon[bd.mon] = c
				cands = append(cands, c)
			}
			if len(c.services) == 0 || c.services[len(c.services)-1] != mb.name {
				c.services = append(c.services, mb.name)
			}
			if !slicesContains(c.binds, bd.e) {
				c.binds = append(c.binds, bd.e)
			}
			s.monitors = append(s.monitors, bd.mon)
		}
		svcs = append(svcs, s)
	}
	return svcs, cands
}

// pickMonitor returns the translatable monitor bound to most services, the
// first bound on a tie, with its healthCheck and warnings.
func pickMonitor(cands []*monCand) (best *monCand, h outHealth, warns []string) {
	for _, c := range cands {
		if c.mon.e != nil && c.mon.e.Status != Translated {
			continue
		}
		hc, why, w := c.mon.health()
		if why != "" || (best != nil && len(c.services) <= len(best.services)) {
			continue
		}
		best, h, warns = c, hc, w
	}
	return best, h, warns
}

// monitorWarnings puts the monitor's translation warnings on its line (a
// customised built-in's: its last set line), once; a built-in monitor's on
// the vserver's.
func (t *translator) monitorWarnings(v *vserver, m *monitor, warns []string, warnAt func(int, string, ...any)) {
	switch {
	case t.monWarned[m]:
	case m.e != nil:
		t.monWarned[m] = true
		m.e.Warnings = append(m.e.Warnings, warns...)
	case len(m.setLines) > 0:
		t.monWarned[m] = true
		last := m.setLines[len(m.setLines)-1]
		last.Warnings = append(last.Warnings, warns...)
	case len(warns) > 0:
		warnAt(v.e.Line, "the built-in monitor %s: %s", m.name, strings.Join(warns, "; "))
	}
}

// mixedMonitors warns of every probed service whose monitors are not just
// the written one, and says on the other monitors' lines why they are not.
func (t *translator) mixedMonitors(v *vserver, svcs []svcHealth, best *monCand, cands []*monCand, warnAt func(int, string, ...any)) {
	m := best.mon
	probed := 0
	var others []string
	for _, s := range svcs {
		if s.optOut {
			continue
		}
		probed++
		var names []string
		bound := false
		for _, o := range s.monitors {
			if o == m {
				bound = true
			} else {
				names = append(names, fmt.Sprintf("%s (%s)", o.name, o.typ))
			}
		}
		switch {
		case len(s.monitors) == 0:
			others = append(others, fmt.Sprintf("%s: no monitor, so NetScaler's %s (a connection check), probed with %s's check instead", s.m.name, defaultMonitorOf(s.m), m.name))
		case !bound:
			others = append(others, fmt.Sprintf("%s: bound to %s, probed with %s's check instead", s.m.name, strings.Join(names, ", "), m.name))
		case len(names) > 0:
			others = append(others, fmt.Sprintf("%s: also bound to %s: NetScaler marks it DOWN when any of its monitors fails, hashlb checks %s's only", s.m.name, strings.Join(names, ", "), m.name))
		}
	}
	why := t.whyPicked(best, cands)
	if len(others) > 0 {
		of := "services"
		if probed < len(svcs) {
			of = "probed services"
		}
		warnAt(v.e.Line, "healthCheck from lb monitor %s, bound to %d of its %d %s%s; hashlb probes every service of a configuration with one check: %s",
			m.name, len(best.services), probed, of, why, strings.Join(others, "; "))
	}
	for _, c := range cands {
		if c == best {
			continue
		}
		reason := fmt.Sprintf("lb vserver %s's healthCheck is lb monitor %s's%s: hashlb has one check per configuration", v.name, m.name, why)
		for _, e := range c.binds {
			if _, seen := t.unused[e]; !seen {
				t.unused[e] = unusedWhy{NotTranslated, reason}
			}
		}
		if c.mon.e != nil {
			if _, seen := t.unused[c.mon.e]; !seen {
				t.unused[c.mon.e] = unusedWhy{NotTranslated, reason}
			}
		}
	}
}

// whyPicked says why best was chosen over the other translatable
// candidates ("" when there is none).
func (t *translator) whyPicked(best *monCand, cands []*monCand) string {
	var tied, fewer []string
	for _, c := range cands {
		if c == best || (c.mon.e != nil && c.mon.e.Status != Translated) {
			continue
		}
		if _, why, _ := c.mon.health(); why != "" {
			continue
		}
		if len(c.services) == len(best.services) {
			tied = append(tied, c.mon.name)
		} else {
			fewer = append(fewer, c.mon.name)
		}
	}
	switch {
	case len(tied) > 0:
		return fmt.Sprintf(" (bound to as many of its services as %s, and bound first, at %s)", strings.Join(tied, ", "), t.at(best.first))
	case len(fewer) > 0:
		return fmt.Sprintf(" (bound to more of its services than %s)", strings.Join(fewer, ", "))
	}
	return ""
}

// defaultMonitor: no translatable monitor is bound. The services bound to
// none have NetScaler's tcp-default (ping-default), a connection check;
// passiveHealth is what stands for it: a failed connection counts.
func (t *translator) defaultMonitor(v *vserver, svcs []svcHealth, cfg *outConfig, warnAt func(int, string, ...any)) {
	var none, untranslated, optOut []string
	defaults := map[string]bool{}
	for _, s := range svcs {
		switch {
		case s.optOut:
			optOut = append(optOut, s.m.name)
		case len(s.monitors) == 0:
			none = append(none, s.m.name)
			defaults[defaultMonitorOf(s.m)] = true
		default:
			untranslated = append(untranslated, s.m.name)
		}
	}
	if len(none) == 0 {
		return
	}
	lo, hi := intRange("passiveHealth.consecutiveFailures")
	cfg.passive = &outPassive{consecutiveFailures: min(max(defaultRetries, lo), hi)}
	var checks []string
	names := ""
	for _, d := range []struct{ name, what string }{{"tcp-default", "a TCP connection"}, {"ping-default", "an ICMP echo"}} {
		if defaults[d.name] {
			checks = append(checks, d.name+" ("+d.what+" every 5s, DOWN after "+fmt.Sprint(defaultRetries)+" failures)")
			names += map[bool]string{true: "", false: " and "}[names == ""] + d.name
		}
	}
	n := cfg.passive.consecutiveFailures
	msg := fmt.Sprintf("no monitor is bound to %s, so NetScaler checks %s with %s: "+
		"written as passiveHealth, consecutiveFailures %d: a service is ejected for %s after %d failed connections in a row; unlike %s it also counts "+
		"responses with a failureStatuses status (502-504) and checks no service that gets no requests (add an HTTP healthCheck to probe)",
		strings.Join(none, ", "), map[bool]string{true: "it", false: "them"}[len(none) == 1], strings.Join(checks, " and "), n, defaultDownTime, n, names)
	if len(untranslated) > 0 {
		msg += fmt.Sprintf("; %s, bound to monitors hashlb does not translate, get the same passiveHealth", strings.Join(untranslated, ", "))
	}
	warnAt(v.e.Line, "%s", msg)
	optOutWarnings(svcs, func(line int, names, it string) {
		warnAt(line, "-healthMonitor NO: NetScaler sends %s no probes and shows %s UP; hashlb's passiveHealth covers every service of a configuration, "+
			"so lb vserver %s's can eject %s after failed connections: remove passiveHealth from %s's configuration to keep %s UP", names, it, v.name, it, v.name, it)
	})
}

// optOutWarnings calls warn once per line that set -healthMonitor NO, with
// the written services it covers.
func optOutWarnings(svcs []svcHealth, warn func(line int, names, it string)) {
	var lines []int
	byLine := map[int][]string{}
	for _, s := range svcs {
		if !s.optOut {
			continue
		}
		l := s.m.optLine()
		if byLine[l] == nil {
			lines = append(lines, l)
		}
		byLine[l] = append(byLine[l], s.m.name)
	}
	for _, l := range lines {
		warn(l, strings.Join(byLine[l], ", "), map[bool]string{true: "it", false: "them"}[len(byLine[l]) == 1])
	}
}

// nonTCPTypes are the service types NetScaler gives ping-default rather
// than tcp-default.
var nonTCPTypes = []string{"UDP", "DNS", "SIP_UDP", "RADIUS", "SYSLOGUDP", "SNMP", "DHCPRA", "NTP"}

// defaultMonitorOf is the monitor NetScaler binds to mb's service when
// none is.
func defaultMonitorOf(mb member) string {
	if slices.Contains(nonTCPTypes, strings.ToUpper(mb.b.serviceType())) {
		return "ping-default"
	}
	return "tcp-default"
}

func slicesContains(es []*Entry, e *Entry) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}
