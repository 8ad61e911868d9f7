package fleet

import (
	"strconv"
	"strings"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// Fleet-wide persistence (docs/persistence.md#fleet-wide-persistence-through-etcd).
//
// One etcd key per persistence key: lbcore.Fleet.Prefix, then the key's xxhash64 in
// 16 hex digits (the local table's fingerprint: fixed size, and no client data
// in etcd). Its value is a Record, "<stamp> <service>": the Unix second
// of its last refresh and the service's identity (hashId, else address), so
// that etcdctl shows which service a key went to.
//
// Time is cut into slots of Slot(expire). An entry is alive while
// now − stamp ≤ expire + slot; a proxy that uses a key in a slot later than
// its previous use refreshes the stamp (once per slot and proxy), so after
// its last use anywhere an entry lives at least expire and at most
// expire + slot. etcd forgets it later still, through a lease per slot
// (LeaseTTL): the lease is etcd's garbage collector, the stamp the
// rule, so expiry follows the proxies' clocks (and a test's virtual one).

// Prefix is the start of every etcd key of a table: f.Prefix, or
// "/hashlb/<rootID>/" when it is not set.
func Prefix(f *lbcore.Fleet, rootID string) string {
	if f.Prefix != "" {
		return f.Prefix
	}
	return "/hashlb/" + rootID + "/"
}

// Slot is the refresh slot for entries that expire after expire.
func Slot(expire time.Duration) time.Duration { return max(expire/8, time.Second) }

// Key is the etcd key of persistence key key under prefix.
func Key(prefix string, key []byte) string {
	return string(AppendKey(nil, prefix, lbcore.PersistKeyHash(key)))
}

// AppendKey appends the etcd key under prefix of the persistence key
// whose lbcore.PersistKeyHash is h (the load-balancing policy's fleet
// member writes its keys with it).
func AppendKey(dst []byte, prefix string, h uint64) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, prefix...)
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(h>>shift)&15])
	}
	return dst
}

// KeyHash is the lbcore.PersistKeyHash of the persistence key whose etcd
// key is etcdKey under prefix: AppendKey's inverse; false for a key of
// another shape (a second choice's, AltSuffix, among them).
func KeyHash(prefix, etcdKey string) (uint64, bool) {
	hex, ok := strings.CutPrefix(etcdKey, prefix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	var h uint64
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		switch {
		case c >= '0' && c <= '9':
			h = h<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			h = h<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return h, true
}

// AltSuffix ends the etcd key of a key's second choice: the service that
// the proxies which cannot use the key's recorded service (not selectable
// there, or not in their configuration) agree on, first writer wins, while
// the key's own record stays for the proxies that can (Client.divert).
const AltSuffix = ".alt"

// Record is the value of a fleet entry.
type Record struct {
	// Stamp is the Unix second of the entry's creation or last refresh.
	Stamp int64
	// Service is the service's identity: its hashId, or else its address.
	Service string
}

// String encodes the record as stored in etcd.
func (r Record) String() string { return string(appendRecord(nil, r.Stamp, r.Service)) }

func appendRecord(dst []byte, stamp int64, service string) []byte {
	return append(append(strconv.AppendInt(dst, stamp, 10), ' '), service...)
}

// ParseRecord decodes a stored record; ok is false for any other shape
// (which the caller treats as an entry to replace).
func ParseRecord(v string) (r Record, ok bool) {
	stamp, svc, found := strings.Cut(v, " ")
	n, ok := parseStamp(stamp)
	if !found || !ok || svc == "" {
		return Record{}, false
	}
	return Record{Stamp: n, Service: svc}, true
}

// parseStamp reads a non-negative decimal of at most 18 digits (strconv's
// errors allocate, and a record is read on every answer).
func parseStamp(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

// Alive reports whether the record still holds at now for entries that
// expire after expire.
func (r Record) Alive(now time.Time, expire time.Duration) bool {
	return now.Unix()-r.Stamp <= int64((expire+Slot(expire))/time.Second)
}

// SlotOf numbers the slot of Unix second t.
func SlotOf(t int64, expire time.Duration) int64 {
	return t / int64(Slot(expire)/time.Second)
}

// LeaseTTL is the TTL, in seconds, of the lease that entries written
// during slot k are attached to, granted at Unix second granted (in slot k or
// before it): it outlives every stamp of slot k by expire + slot, plus a
// minute for clocks that disagree.
func LeaseTTL(k, granted int64, expire time.Duration) int64 {
	s := int64(Slot(expire) / time.Second)
	end := (k + 1) * s
	return end - granted + int64(expire/time.Second) + s + 60
}
