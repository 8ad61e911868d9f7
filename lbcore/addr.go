package lbcore

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// AddrPortError says why s is not an address hashlb takes: "ip:port" or
// "[v6]:port", written canonically, with a port in [1, 65535]. It returns
// nil for one it takes.
func AddrPortError(s string) error {
	if _, ok := parseServiceAddr(s); ok {
		return nil
	}
	return errors.New(addrReason(s))
}

// addrReason explains why parseServiceAddr refuses s.
func addrReason(s string) string {
	if s == "" {
		return "empty"
	}
	host, port, bracketed := s, "", false
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "a '[' without its ']'"
		}
		host, bracketed = s[1:end], true
		rest := s[end+1:]
		if !strings.HasPrefix(rest, ":") {
			return "no port after the brackets: write [v6]:port"
		}
		port = rest[1:]
	} else {
		i := strings.LastIndex(s, ":")
		if i < 0 {
			return "no port: write ip:port"
		}
		host, port = s[:i], s[i+1:]
		if strings.Contains(host, ":") {
			return "an IPv6 address needs brackets: write [" + host + "]:" + port
		}
	}
	ip, err := netip.ParseAddr(host)
	switch {
	case err != nil && !bracketed && strings.Trim(host, "0123456789.") != "":
		return fmt.Sprintf("%q is a host name, not an IP address: hashlb needs each service's ip:port (resolve it)", host)
	case err != nil && strings.Contains(err.Error(), "leading zero"):
		return fmt.Sprintf("%q has a field with a leading zero, which is not an IPv4 address hashlb reads (write it without)", host)
	case err != nil:
		return fmt.Sprintf("%q is not an IP address", host)
	case bracketed && ip.Is4():
		return "an IPv4 address in brackets: write ip:port"
	case ip.Zone() != "":
		return "an IPv6 zone (%" + ip.Zone() + ") is not allowed"
	}
	n, err := strconv.Atoi(port)
	switch {
	case err != nil:
		return fmt.Sprintf("port %q is not a number", port)
	case n < 1 || n > 65535:
		return fmt.Sprintf("port %d is out of range [1, 65535]", n)
	}
	if c := netip.AddrPortFrom(ip, uint16(n)).String(); c != s {
		return "not written canonically: write " + c
	}
	return "not ip:port or [v6]:port"
}
