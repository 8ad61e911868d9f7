package nsconf

import (
	"net/netip"
	"strings"
)

// The appliance's own objects. A full "save ns config" holds, besides what
// an administrator added, the services of the appliance's daemons and the
// settings of its built-in monitors (builtinMonitors). They have no "add"
// line an operator could edit and balance nothing of theirs, so their lines
// are reported as "ignored (built-in)", counted apart in the summary.
//
// The internal services are named ns<daemon>-<address>-<port> (the address
// 127.0.0.1, or ::1 written "::1l"), e.g. nshttpd-gui-127.0.0.1-80 (the GUI),
// nshttpd-vpn-127.0.0.1-81, nshttps-127.0.0.1-443, nsrpcs-127.0.0.1-3008,
// nskrpcs-127.0.0.1-3009 and nsrnatsip-127.0.0.1-5061, with "set ssl service"
// lines giving them the ns_default_ssl_profile_internal_frontend_service
// profile; the VPN's database service is vpndbssvc_<number>. (Names as a
// NetScaler 13.1 export lists them, e.g. the citrixadc Terraform resources
// of a converted configuration.)
var internalServicePrefixes = []string{"nshttpd-", "nshttps-", "nskrpcs-", "nsrpcs-", "nsrnatsip-", "vpndbssvc_"}

// isInternalService reports whether name is one of the appliance's own
// services: a known daemon prefix, or the ns<daemon>-<loopback>-<port> shape.
func isInternalService(name string) bool {
	low := strings.ToLower(name)
	for _, p := range internalServicePrefixes {
		if strings.HasPrefix(low, p) {
			return true
		}
	}
	if !strings.HasPrefix(low, "ns") {
		return false
	}
	i, j := strings.IndexByte(low, '-'), strings.LastIndexByte(low, '-')
	if i < 0 || j <= i {
		return false
	}
	addr := strings.TrimSuffix(low[i+1:j], "l")
	if k := strings.LastIndexByte(addr, '-'); k >= 0 { // nshttpd-gui-127.0.0.1-80
		addr = addr[k+1:]
	}
	ip, err := netip.ParseAddr(addr)
	return err == nil && ip.IsLoopback()
}

// builtinLine reports whether a command is about the appliance's own
// objects, and what.
func builtinLine(words []word) (what, why string, ok bool) {
	if len(words) < 3 || words[0].quoted {
		return "", "", false
	}
	verb := strings.ToLower(words[0].text)
	switch verb {
	case "add", "set", "unset", "bind", "unbind", "enable", "disable", "rm":
	default:
		return "", "", false
	}
	obj := strings.ToLower(words[1].text)
	switch {
	case obj == "service" && isInternalService(words[2].text):
		return leadingWords(words, 3), "a service of the appliance's own daemons", true
	case obj == "ssl" && len(words) > 3 && strings.EqualFold(words[2].text, "service") && isInternalService(words[3].text):
		return leadingWords(words, 4), "the TLS settings of a service of the appliance's own daemons", true
	case obj == "lb" && len(words) > 3 && strings.EqualFold(words[2].text, "monitor") && verb != "bind" && verb != "unbind":
		name := strings.ToLower(words[3].text)
		if verb == "set" && customisable(name) {
			return "", "", false // read by setMonitor: it changes what a bound service is probed with
		}
		if verb == "set" && (name == "tcp-default" || name == "ping-default") {
			return leadingWords(words, 4), "a default monitor of the appliance, which cannot be changed: its settings are not read", true
		}
		if _, b := builtinMonitors[name]; b {
			return leadingWords(words, 4), "a monitor built into the appliance", true
		}
	}
	return "", "", false
}
