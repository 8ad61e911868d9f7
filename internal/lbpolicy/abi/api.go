package abi

import "time"

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
