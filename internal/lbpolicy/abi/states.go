package abi

/*
#include "hashlb_abi.h"
#include "cache.h"
*/
import "C"

import (
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"
)

// What Envoy holds: each configuration by a cgo.Handle in C memory, each
// load balancer by a slot of states.

// config is one configuration as Envoy holds it: the Module's, with the
// binding's own counters.
type config struct {
	mod    Config
	panics Counter
	cached Counter
	logged atomic.Int32 // panics logged so far
}

// handleOf stores a Go handle in C memory: what Envoy keeps for a
// configuration (valueOf reads it, freeHandle frees it).
func handleOf(v any) unsafe.Pointer {
	p := C.malloc(C.size_t(unsafe.Sizeof(uintptr(0))))
	*(*cgo.Handle)(p) = cgo.NewHandle(v)
	return p
}

func valueOf(p unsafe.Pointer) any { return (*(*cgo.Handle)(p)).Value() }

func freeHandle(p unsafe.Pointer) {
	(*(*cgo.Handle)(p)).Delete()
	C.free(p)
}

// lbState is one load balancer as Envoy holds it. Envoy keeps it as a slot
// of states (not a cgo.Handle, whose lookup is a map lookup with interface
// hashing on every choice).
type lbState struct {
	cfg     *config
	lb      LB
	ctx     Context // the request of the choice under way
	entries entries // when the thread entered Go and yielded (goruntime.go)
	cache   *Cache  // nil when choices cannot be remembered
}

// states are the load balancers Envoy holds, by slot. Envoy keeps, for each,
// a C cell (cache.h's hl_lb) holding the slot's number and the state's
// choice cache; a choice reads its state with one atomic load and an index.
// Slots are taken and given back on Envoy's threads (on_lb_new,
// on_lb_destroy) under mu, copy on write, so a choice never locks; a freed
// slot is reused.
var states struct {
	mu   sync.Mutex
	all  atomic.Pointer[[]*lbState]
	free []uintptr
}

// keepState gives st a slot and returns the cell Envoy keeps.
func keepState(st *lbState) unsafe.Pointer {
	states.mu.Lock()
	defer states.mu.Unlock()
	var all []*lbState
	if p := states.all.Load(); p != nil {
		all = *p
	}
	next := append([]*lbState(nil), all...)
	var slot uintptr
	if n := len(states.free); n > 0 {
		slot = states.free[n-1]
		states.free = states.free[:n-1]
		next[slot] = st
	} else {
		slot = uintptr(len(next))
		next = append(next, st)
	}
	states.all.Store(&next)
	cell := C.hl_lb_new(C.uintptr_t(slot), st.cache.cell())
	if cell == nil {
		panic("hashlb: out of C memory for a load balancer")
	}
	return unsafe.Pointer(cell)
}

// stateOf is the state of a cell keepState returned.
func stateOf(cell unsafe.Pointer) *lbState {
	return (*states.all.Load())[(*C.hl_lb)(cell).slot]
}

// dropState frees a cell and its slot.
func dropState(cell unsafe.Pointer) {
	l := (*C.hl_lb)(cell)
	slot := uintptr(l.slot)
	C.hl_lb_free(l) // and the cache
	states.mu.Lock()
	defer states.mu.Unlock()
	next := append([]*lbState(nil), *states.all.Load()...)
	next[slot] = nil
	states.all.Store(&next)
	states.free = append(states.free, slot)
}
