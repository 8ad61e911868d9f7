package lbcore

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"strconv"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// The persistence table (TR7 hash persistence; docs/persistence.md) maps a key's
// fingerprint to the service first chosen for it. The host's shared data
// cannot delete keys and has no size limit, so the table is a fixed set of
// buckets, one shared-data key each ("<namespace>/p/<n>"), every bucket a
// small set-associative LRU of at most Ways entries. A bucket value is
//
//	byte 0          format version (1)
//	then per entry  fingerprint and hot flag uint64 | service uint64 |
//	                last use uint32 (little-endian, EntrySize bytes,
//	                least recent write first)
//
// The fingerprint is the key's xxhash64 without its top bit (0 is never
// stored); the top bit is the hot flag. A value of any other shape reads as
// an empty bucket and is overwritten.
//
// Last use has one-second resolution and a hit writes at most once a second
// per entry, so within a second recency is unknown. The first hit on an
// entry since it was stored marks it hot (one write, even in the second it
// was stored), and a full bucket evicts the entry with the oldest last use,
// then the one not hot, then the earliest written. That second-chance rule
// keeps the table's hit rate within 2 % of an exact LRU of the same size
// even when a bucket sees many requests a second (see TestPersistZipfLRU).
//
// The service identity is stored whole (64 bits), so no two services of a
// pool share one; the caller maps identities back to services, and one it no
// longer knows is simply not selectable.
//
// Memory per entry with all buckets full, as cpp-host keeps shared data (an
// unordered_map from a std::string key to a std::string value and a uint32
// cas), is
//
//	EntrySize + (1 + len(bucket key) + overheadPerKey) / Ways
//
// plus one small marker key per table; BytesPerEntry computes it exactly for
// a given per-key overhead (hostsim counts 104 bytes,
// hostsim.SharedDataEntryOverhead). docs/persistence.md has the figures.
// Each further byte of namespace costs 1/Ways byte per entry.
//
// The bucket of a key depends on tableSize: a table reopened with another
// size under the same namespace finds few of its old entries (they age out
// through LRU), and buckets beyond the new count stay in the host's memory,
// which cannot delete keys.

// Ways is how many entries one bucket holds.
const Ways = 8

// EntrySize is the encoded size of one entry in bytes: key fingerprint (8),
// service identity (8), last use in seconds since the Unix epoch (4).
const EntrySize = 20

const (
	bucketVersion = 1
	bucketHeader  = 1
	// casAttempts bounds the writes one Resolve tries before it serves the
	// request without persisting.
	casAttempts = 8
	// markerSuffix names the key whose cas guards bucket creation.
	markerSuffix = "/p/c"
)

// Outcome says what one Resolve did, for the persistence_* metrics. Hit,
// Miss, Expired and Rechosen describe the first read of the key's bucket;
// if a retry then finds a mapping another worker has just stored, that
// mapping is served and no further flag is set.
// Exported as the type of Decision.Persist.
type Outcome struct {
	// Hit: the key mapped to a live, selectable service (persistence_hit).
	Hit bool
	// Miss: the key had no entry (persistence_miss).
	Miss bool
	// Expired: the key's entry had been idle longer than expire
	// (persistence_expired); the service was chosen again.
	Expired bool
	// Rechosen: the key mapped to a service no longer selectable; the
	// service was chosen again and the entry overwritten.
	Rechosen bool
	// Evicted is how many live entries the stored write evicted
	// (persistence_evicted).
	Evicted int
	// CASRetries is how many writes failed on a CAS conflict
	// (persistence_cas_retry).
	CASRetries int
	// GaveUp: the mapping could not be stored (too many conflicts or a store
	// error); the request was served without persisting (persistence_cas_giveup).
	GaveUp bool
	// PrevUse is, on a hit, the entry's last use before this one (Unix
	// seconds): a fleet level refreshes its stamp when this hit is the
	// first of a new slot (fleet.SlotOf).
	PrevUse uint32
}

// Table is the persistence table of one worker over the shared Store. Each
// worker (Wasm VM) holds its own Table; a Table is not safe for concurrent
// use, the Store is. Create it with NewTable.
// Exported as NewTable's result.
type Table struct {
	store    Store
	key      []byte // namespace + "/p/", then the bucket number; reused
	prefix   int
	marker   string
	nBuckets uint64
	ways     int
	expire   int64 // seconds
	ents     [Ways]entry
	n        int
	buf      []byte
}

type entry struct {
	fp   uint64 // 63 bits, never 0
	svc  uint64
	last uint32
	hot  bool // refreshed by a hit since it was stored; kept in fp's top bit
}

// hotBit is the bit of the stored fingerprint word that holds entry.hot.
const hotBit = 1 << 63

// fingerprint returns key's hash h, which picks its bucket, and the
// fingerprint stored in that bucket: h without its top bit, never 0 (which
// marks an empty slot).
func fingerprint(key []byte) (h, fp uint64) {
	h = PersistKeyHash(key)
	return h, fpOf(h)
}

// fpOf is the fingerprint stored for a key of hash h.
func fpOf(h uint64) uint64 { return max(h&^hotBit, 1) }

// PersistKeyHash is the hash of persistence key key that tables and the
// fleet level know it by: it picks the key's bucket, and names its etcd key.
func PersistKeyHash(key []byte) uint64 {
	if inlineHash && len(key) < 32 {
		return xxhShort(unsafe.String(unsafe.SliceData(key), len(key)))
	}
	return xxhash.Sum64(key)
}

// NewTable returns the table namespace/p/* in s holding at most tableSize
// entries (tableSize / Ways buckets of Ways entries; tables smaller than Ways
// are one bucket) whose entries expire after expire without use (at least
// one second).
//
// The Table passes Store keys that alias a buffer it reuses, so that a
// lookup allocates nothing: a Store must copy a key it keeps beyond the call,
// including one it assigns into a Go map (which stores the key it is given
// even when the key is already present). The host copies; MemStore clones.
func NewTable(s Store, namespace string, tableSize int, expire time.Duration) *Table {
	ways := Ways
	if tableSize < ways {
		ways = max(tableSize, 1)
	}
	key := make([]byte, 0, len(namespace)+len("/p/")+20)
	key = append(append(key, namespace...), "/p/"...)
	return &Table{
		store:    s,
		key:      key,
		prefix:   len(key),
		marker:   namespace + markerSuffix,
		nBuckets: uint64(max(tableSize/ways, 1)),
		ways:     ways,
		expire:   max(int64(expire/time.Second), 1),
		buf:      make([]byte, 0, bucketHeader+Ways*EntrySize),
	}
}

// Capacity returns the most entries the table holds (buckets × ways, at most
// tableSize).
func (t *Table) Capacity() int { return int(t.nBuckets) * t.ways }

// Resolve returns the service for key at time now. On a hit whose service
// passes selectable it refreshes the entry's last use (a write at most once
// a second per entry, and one to mark an entry hot on its first hit) and
// returns that service. On a miss, an expired entry or a service no longer
// selectable it calls choose, stores the mapping (evicting the least recently
// used entry of a full bucket) and returns the chosen service; choose
// reporting ok == false stores nothing and makes Resolve return ok == false.
//
// choose is called at most once. A CAS conflict re-reads the bucket: if
// another worker stored the key meanwhile, its service is served, so workers
// never map one key to two services. After casAttempts conflicts it reads
// the bucket once more, serves the key's mapping if another worker stored
// one, or else its own choice without persisting it (Outcome.GaveUp either
// way). Resolve never blocks.
func (t *Table) Resolve(key []byte, now time.Time, selectable func(svc uint64) bool,
	choose func() (svc uint64, ok bool)) (svc uint64, ok bool, out Outcome) {
	svc, ok = t.resolveInto(&out, nil, PersistKeyHash(key), now, selectable, choose)
	return svc, ok, out
}

// resolveInto is Resolve adding what it did to *out, which the caller has
// zeroed: a decision fills its own Outcome (returning the 48 bytes is a bulk
// copy in Wasm; RATIONALE.md, "Cost per request").
func (t *Table) resolveInto(out *Outcome, fr *firstRead, h uint64, now time.Time, selectable func(svc uint64) bool,
	choose func() (svc uint64, ok bool)) (svc uint64, ok bool) {
	fp := fpOf(h)
	bkey := t.bucketKey(h)
	nowS := unixSeconds(now)
	var chosen uint64
	have, hot, last := false, false, nowS
	for first := true; ; first = false {
		final := out.CASRetries >= casAttempts
		var val []byte
		var cas uint32
		var err error
		if first && fr != nil && fr.done {
			val, cas, err = fr.val, fr.cas, fr.err // quickHit's read, not a hit it could serve
		} else {
			val, cas, err = t.store.Get(bkey)
		}
		missing := err != nil && errors.Is(err, ErrNotFound)
		if err != nil && !missing {
			out.GaveUp = true
			return t.unpersisted(chosen, have, choose)
		}
		if first {
			// The common case, a hit that writes nothing, read in place:
			// no decoding of the whole bucket.
			// Scalars, not an entry: a struct over 16 bytes is copied with a
			// bulk copy in Wasm.
			if svc, last, hot := peek(val, fp); hot && last >= nowS && !t.expiredAt(last, nowS) && selectable(svc) {
				out.Hit, out.PrevUse = true, last
				return svc, true
			}
		}
		t.decode(val)
		i := t.find(fp)
		switch {
		case i < 0:
			out.Miss = out.Miss || first
		case t.expired(t.ents[i], nowS):
			out.Expired = out.Expired || first
		case !selectable(t.ents[i].svc):
			out.Rechosen = out.Rechosen || first
		default:
			e := t.ents[i]
			if first {
				out.Hit, out.PrevUse = true, e.last
			}
			if e.last >= nowS && e.hot {
				return e.svc, true
			}
			if final {
				out.GaveUp = true
				return e.svc, true
			}
			// Refresh: same service, now hot; never move last use back
			// for a worker whose clock lags.
			chosen, have, hot = e.svc, true, true
			last = max(e.last, nowS)
		}
		if !have {
			if chosen, have = choose(); !have {
				return 0, false
			}
		}
		if final {
			out.GaveUp = true
			return chosen, true
		}
		out.Evicted = t.put(i, entry{fp: fp, svc: chosen, last: last, hot: hot}, nowS)
		t.encode()
		if missing {
			err = t.create(bkey)
		} else {
			err = t.store.Set(bkey, t.buf, cas)
		}
		switch {
		case err == nil:
			return chosen, true
		case !errors.Is(err, ErrCASMismatch):
			out.GaveUp = true
			return chosen, true
		}
		out.CASRetries++
	}
}

// Put stores svc for the key whose PersistKeyHash is h at time now,
// replacing what the table holds for it: the fleet level's answer, which
// the local table follows. Like Resolve it never blocks; a mapping it
// cannot store after its CAS retries is left as it was.
func (t *Table) Put(h uint64, now time.Time, svc uint64) {
	var out Outcome
	t.resolveInto(&out, nil, h, now, func(s uint64) bool { return s == svc }, func() (uint64, bool) { return svc, true })
}

// firstRead is quickHit's read of a key's bucket, which resolveInto takes
// as its first read instead of reading the bucket again.
type firstRead struct {
	val  []byte
	cas  uint32
	err  error
	done bool
}

// quickHit reads key's bucket and reports the common case, a hit that
// writes nothing: the entry is hot, live and its last use is this second.
// The caller serves svc if it is selectable; otherwise it calls resolveInto
// with fr, which decides from the same read.
func (t *Table) quickHit(fr *firstRead, key []byte, nowS uint32) (svc uint64, last uint32, ok bool) {
	h, fp := fingerprint(key)
	val, cas, err := t.store.Get(t.bucketKey(h))
	fr.val, fr.cas, fr.err, fr.done = val, cas, err, true
	if err != nil {
		return 0, 0, false
	}
	svc, last, hot := peek(val, fp)
	return svc, last, hot && last >= nowS && !t.expiredAt(last, nowS)
}

// unpersisted serves a request the table could not be read for.
func (t *Table) unpersisted(chosen uint64, have bool, choose func() (uint64, bool)) (uint64, bool) {
	if have {
		return chosen, true
	}
	return choose()
}

// create writes the bucket t.buf under bkey, which a Get found missing, so
// that it succeeds only if the key is still missing (see createKey).
func (t *Table) create(bkey string) error {
	return createKey(t.store, t.marker, bkey, t.buf)
}

// bucketKey returns the Store key of the bucket of hash h. The string
// aliases t.key.
func (t *Table) bucketKey(h uint64) string {
	n, _ := bits.Mul64(h, t.nBuckets) // uniform in [0, nBuckets)
	t.key = strconv.AppendUint(t.key[:t.prefix], n, 10)
	// No copy: the hot path allocates nothing, and Stores copy what they keep.
	return unsafe.String(unsafe.SliceData(t.key), len(t.key))
}

// decode loads a bucket value into t.ents; a value of an unknown shape
// loads as an empty bucket.
func (t *Table) decode(val []byte) {
	t.n = 0
	if len(val) < bucketHeader || val[0] != bucketVersion ||
		(len(val)-bucketHeader)%EntrySize != 0 {
		return
	}
	for p := bucketHeader; p < len(val) && t.n < Ways; p += EntrySize {
		w := binary.LittleEndian.Uint64(val[p:])
		e := entry{
			fp:   w &^ hotBit,
			svc:  binary.LittleEndian.Uint64(val[p+8:]),
			last: binary.LittleEndian.Uint32(val[p+16:]),
			hot:  w&hotBit != 0,
		}
		if e.fp != 0 {
			t.ents[t.n] = e
			t.n++
		}
	}
}

// peek finds fingerprint fp in a bucket value as decode and find would,
// without decoding the other entries: its service, last use and hot flag
// (hot is false when fp is not there).
func peek(val []byte, fp uint64) (svc uint64, last uint32, hot bool) {
	if len(val) < bucketHeader || val[0] != bucketVersion || (len(val)-bucketHeader)%EntrySize != 0 {
		return 0, 0, false
	}
	end := min(len(val), bucketHeader+Ways*EntrySize)
	for p := bucketHeader; p < end; p += EntrySize {
		if w := binary.LittleEndian.Uint64(val[p:]); w&^hotBit == fp {
			return binary.LittleEndian.Uint64(val[p+8:]), binary.LittleEndian.Uint32(val[p+16:]), w&hotBit != 0
		}
	}
	return 0, 0, false
}

// encode writes t.ents into t.buf.
func (t *Table) encode() {
	b := append(t.buf[:0], bucketVersion)
	for _, e := range t.ents[:t.n] {
		w := e.fp
		if e.hot {
			w |= hotBit
		}
		b = binary.LittleEndian.AppendUint64(b, w)
		b = binary.LittleEndian.AppendUint64(b, e.svc)
		b = binary.LittleEndian.AppendUint32(b, e.last)
	}
	t.buf = b
}

func (t *Table) find(fp uint64) int {
	for i, e := range t.ents[:t.n] {
		if e.fp == fp {
			return i
		}
	}
	return -1
}

// older reports whether a ranks before b for eviction: an earlier last use,
// or the same second and a is not hot while b is. Refreshes are written at
// most once a second, so within a second last use says nothing; an entry a
// hit has refreshed is then likelier to be used again than one just stored
// (a one-hit key), and it is kept.
func older(a, b entry) bool {
	return a.last < b.last || a.last == b.last && !a.hot && b.hot
}

func (t *Table) expired(e entry, nowS uint32) bool { return t.expiredAt(e.last, nowS) }

// expiredAt reports whether an entry last used at last has expired at nowS.
func (t *Table) expiredAt(last, nowS uint32) bool {
	return int64(nowS)-int64(last) > t.expire
}

// put replaces entry i (if i >= 0) with e, drops expired entries and, while
// the bucket is full, the least recently used one (the lowest last use; on a
// tie the earliest written). e goes last, so position order follows write
// order and breaks ties within one second. It returns how many live entries
// were evicted.
func (t *Table) put(i int, e entry, nowS uint32) int {
	n := 0
	for k, x := range t.ents[:t.n] {
		if k != i && !t.expired(x, nowS) {
			t.ents[n] = x
			n++
		}
	}
	evicted := 0
	for ; n >= t.ways; n-- {
		v := 0
		for k := 1; k < n; k++ {
			if older(t.ents[k], t.ents[v]) {
				v = k
			}
		}
		copy(t.ents[v:n], t.ents[v+1:n])
		evicted++
	}
	t.ents[n] = e
	t.n = n + 1
	return evicted
}

// unixSeconds returns now in whole seconds since the Unix epoch, clamped to
// uint32 (which lasts until 2106).
func unixSeconds(now time.Time) uint32 {
	return uint32(min(max(now.Unix(), 0), math.MaxUint32))
}

// BytesPerEntry returns the host memory one entry of a full table costs:
// every bucket key's bytes, its full value and overheadPerKey (the host's
// per-key node and allocation cost), plus the creation marker key, divided
// by the table's capacity. It lets a measurement of the host's shared data
// be compared with the design.
func BytesPerEntry(tableSize int, namespace string, overheadPerKey int) float64 {
	t := NewTable(nil, namespace, tableSize, time.Hour)
	perKey := int64(len(namespace) + len("/p/") + bucketHeader + t.ways*EntrySize + overheadPerKey)
	total := int64(t.nBuckets)*perKey + digitSum(t.nBuckets)
	total += int64(len(t.marker) + bucketHeader + overheadPerKey)
	return float64(total) / float64(t.Capacity())
}

// digitSum returns the total count of decimal digits of 0, 1, …, n-1.
func digitSum(n uint64) int64 {
	var sum int64
	lo, d := uint64(0), int64(1)
	for hi := uint64(10); lo < n; lo, hi, d = hi, hi*10, d+1 {
		sum += int64(min(hi, n)-lo) * d
	}
	return sum
}
