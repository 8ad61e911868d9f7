package lbcore

import (
	"encoding/binary"
	"net/netip"
)

// ipMask keeps the leading bits of an address: v4 bits of an IPv4 address
// (Citrix netmask), v6 bits of an IPv6 address (Citrix v6NetmaskLength).
type ipMask struct{ v4, v6 int }

// appendIP appends a family tag and the masked address bytes to dst. The tag
// keeps 0.0.0.0/8 and ::/8 apart; IPv4-mapped IPv6 addresses were unmapped
// by the request view, so one client has one key whichever way it arrives.
func (m ipMask) appendIP(dst []byte, a netip.Addr) []byte {
	if a.Is4() {
		// The prefix by hand: netip's Prefix validates and builds a Prefix,
		// several calls in Go's Wasm code. Config keeps v4 within 0..32.
		b := a.As4()
		v := binary.BigEndian.Uint32(b[:]) & uint32(^uint64(0)<<(32-m.v4))
		return binary.BigEndian.AppendUint32(append(dst, 4), v)
	}
	a = a.WithZone("")
	p, _ := a.Prefix(m.v6)
	b := p.Addr().As16()
	return append(append(dst, 6), b[:]...)
}
