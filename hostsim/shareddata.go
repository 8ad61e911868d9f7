package hostsim

import (
	"sort"
	"sync"
)

// SharedDataEntryOverhead is the bytes cpp-host spends per shared-data key
// beyond the key and value bytes, counted for a 64-bit libstdc++ build of
// src/shared_data.h's std::unordered_map<std::string, std::pair<std::string,
// uint32_t>>: a hash node holding the next pointer (8), two std::string
// headers (32 + 32), the CAS (4, padded to 8) and the cached hash (8) = 88,
// plus the allocator's chunk header (8) and one bucket pointer at load factor
// 1 (8). Strings longer than 15 bytes also have their own heap block, which
// the key and value bytes stand for.
const SharedDataEntryOverhead = 104

// SharedData is the key-value store every VM of one host shares, with the
// semantics of cpp-host's SharedData (src/shared_data.cc): one mutex, a
// global CAS counter that skips 0, no deletion and no size limit.
type SharedData struct {
	mu   sync.Mutex
	cas  uint32
	data map[string]sharedEntry
	vals int // total key + value bytes
}

type sharedEntry struct {
	value []byte
	cas   uint32
}

// NewSharedData returns an empty store.
func NewSharedData() *SharedData { return &SharedData{cas: 1, data: map[string]sharedEntry{}} }

func (d *SharedData) nextCAS() uint32 {
	c := d.cas
	d.cas++
	if d.cas == 0 { // 0 is not a valid CAS value
		d.cas++
	}
	return c
}

// Get returns a copy of key's value and its CAS, or ok=false (NOT_FOUND).
func (d *SharedData) Get(key string) (value []byte, cas uint32, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.data[key]
	if !ok {
		return nil, 0, false
	}
	return append([]byte(nil), e.value...), e.cas, true
}

// Set stores value under key and returns the ABI status: 0 OK, or 8
// CAS_MISMATCH when the key exists and cas is neither 0 nor its current CAS.
// A missing key is written whatever cas is: CAS cannot guard an insert.
func (d *SharedData) Set(key string, value []byte, cas uint32) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.data[key]
	if ok {
		if cas != 0 && cas != e.cas {
			return statusCasMismatch
		}
		d.vals -= len(e.value)
	} else {
		d.vals += len(key)
	}
	d.vals += len(value)
	d.data[key] = sharedEntry{append([]byte(nil), value...), d.nextCAS()}
	return statusOK
}

// Len returns the number of keys.
func (d *SharedData) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.data)
}

// Bytes returns the store's memory as cpp-host would hold it: key and value
// bytes plus SharedDataEntryOverhead per key.
func (d *SharedData) Bytes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.vals + SharedDataEntryOverhead*len(d.data)
}

// Keys returns the keys in sorted order.
func (d *SharedData) Keys() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.data))
	for k := range d.data {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var sharedDataFuncs = []hostFunc{
	{"proxy_get_shared_data", "iiiii", "i", hostGetSharedData},
	{"proxy_set_shared_data", "iiiii", "i", hostSetSharedData},
	{"proxy_register_shared_queue", "iii", "i", ret(statusUnimplemented)},
	{"proxy_resolve_shared_queue", "iiiii", "i", ret(statusNotFound)},
	{"proxy_dequeue_shared_queue", "iii", "i", ret(statusNotFound)},
	{"proxy_enqueue_shared_queue", "iii", "i", ret(statusNotFound)},
}

// hostGetSharedData implements proxy_get_shared_data(key_data, key_size,
// value_ptr_ptr, value_size_ptr, cas_ptr): NotFound for a missing key.
func hostGetSharedData(v *vm, p []uint64) uint64 {
	key, ok := v.mem(p[0], p[1])
	if !ok {
		return statusInvalidMemoryAccess
	}
	val, cas, found := v.h.shared.Get(string(key))
	if !found {
		return statusNotFound
	}
	if st := v.copyOut(val, p[2], p[3]); st != statusOK {
		return st
	}
	if !v.putU32(p[4], cas) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// hostSetSharedData implements proxy_set_shared_data(key_data, key_size,
// value_data, value_size, cas) with SharedData.Set's semantics.
func hostSetSharedData(v *vm, p []uint64) uint64 {
	key, val, ok := v.memPair(p)
	if !ok {
		return statusInvalidMemoryAccess
	}
	return uint64(v.h.shared.Set(string(key), val, uint32(p[4])))
}
