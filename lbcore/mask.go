package lbcore

import "net/netip"

// ipMask keeps the leading bits of an address: v4 bits of an IPv4 address
// (Citrix netmask), v6 bits of an IPv6 address (Citrix v6NetmaskLength).
type ipMask struct{ v4, v6 int }

// appendIP appends a family tag and the masked address bytes to dst. The tag
// keeps 0.0.0.0/8 and ::/8 apart; IPv4-mapped IPv6 addresses were unmapped
// by the request view, so one client has one key whichever way it arrives.
func (m ipMask) appendIP(dst []byte, a netip.Addr) []byte {
	a = a.WithZone("")
	if a.Is4() {
		p, _ := a.Prefix(m.v4)
		b := p.Addr().As4()
		return append(append(dst, 4), b[:]...)
	}
	p, _ := a.Prefix(m.v6)
	b := p.Addr().As16()
	return append(append(dst, 6), b[:]...)
}
