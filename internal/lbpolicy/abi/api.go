package abi

/*
#include "hashlb_abi.h"
*/
import "C"

import (
	"time"
	"unsafe"
)

// Module is the policy the binding serves: Envoy's configurations of it are
// made with NewConfig.
type Module interface {
	// NewConfig is on_lb_config_new: the configuration named name, data its
	// bytes (a copy the Module may keep). stats defines its counters, during
	// the call only. An error refuses the configuration, and is logged.
	NewConfig(name string, data []byte, stats Stats) (Config, error)
}

// Config is one configuration of the policy, shared by its load balancers
// on every Envoy thread.
type Config interface {
	// CacheKey says whether the choices of its load balancers can be
	// remembered by the request's :path (cache.h): by the :path's first n
	// bytes when prefix, else only for a :path of at most n bytes, whole.
	// n above CacheKeyMax keys on the first CacheKeyMax.
	CacheKey() (n int, prefix, ok bool)
	// NewLB is on_lb_new: the load balancer of one Envoy thread for the
	// cluster named cluster, over its hosts; cache is its choice cache
	// (nil when CacheKey says no), which answers before Choose is called.
	NewLB(cluster string, hosts *Hosts, cache *Cache) LB
}

// LB is the policy on one Envoy thread; Envoy calls it on that thread only.
type LB interface {
	// Choose is on_lb_choose_host, past the choice cache: the chosen host's
	// priority and its index among that priority's healthy hosts; ok false
	// gives the request no host. ctx is valid during the call only; now is
	// when the hook was entered.
	Choose(ctx *Context, now time.Time) (priority, index int, ok bool)
	// Update is on_lb_on_host_membership_update: the host set changed,
	// added and removed as Envoy counts them (both 0 for a health change).
	Update(added, removed int)
	// Destroy is on_lb_destroy: Envoy drops the load balancer.
	Destroy()
}

// module is what Serve registered.
var module Module

// Serve makes m the policy Envoy's hooks serve. The library's main package
// calls it from an init function: a hook entering Go from an Envoy thread
// waits until the library's packages are initialised (runtime/cgocall.go,
// cgocallbackg1), so no hook runs before it.
func Serve(m Module) { module = m }

// Stats defines a configuration's counters in Envoy's stats (valid during
// Module.NewConfig only: Envoy defines counters in on_lb_config_new).
type Stats struct{ config unsafe.Pointer }

// Counter defines the counter called name. One Envoy refused is a Counter
// that counts nothing.
func (s Stats) Counter(name string) Counter {
	c := C.hl_define_counter(s.config, (*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.size_t(len(name)))
	return Counter{config: s.config, id: c.id, ok: c.result == 0}
}

// Counter is one of a configuration's counters; any thread may add to it.
// The zero Counter counts nothing.
type Counter struct {
	config unsafe.Pointer // the configuration's envoy pointer, its owner
	id     C.size_t
	ok     bool // Envoy defined it
}

// Add adds n to the counter.
func (c Counter) Add(n uint64) {
	if c.ok {
		C.hl_increment(c.config, c.id, C.uint64_t(n))
	}
}

// The counters the binding counts itself, defined with every configuration
// after the Module's: panics the barrier recovered (exports.go), and
// choices the cache answered (cache.h; Cache.SetView adds the rest).
const (
	panicCounter  = "panic"
	cachedCounter = "cached"
)
