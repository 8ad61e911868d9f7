package hostsim

import "time"

// timerFuncs are the time functions of the env module.
var timerFuncs = []hostFunc{
	{"proxy_set_tick_period_milliseconds", "i", "i", hostSetTickPeriod},
	{"proxy_get_current_time_nanoseconds", "i", "i", hostGetCurrentTime},
}

// hostSetTickPeriod implements proxy_set_tick_period_milliseconds (spec
// 0.2.1; cpp-host exports.cc set_tick_period_milliseconds): the period of the
// calling context's root context; 0 stops the ticks. The first tick is due one
// period after the call.
func hostSetTickPeriod(v *vm, p []uint64) uint64 {
	r := v.rootOf(v.context())
	if r == nil {
		return statusBadArgument
	}
	r.period = time.Duration(uint32(p[0])) * time.Millisecond
	r.nextTick = v.now.Add(r.period)
	return statusOK
}

// hostGetCurrentTime implements proxy_get_current_time_nanoseconds: the
// virtual clock's wall time, fixed for the duration of the running call.
func hostGetCurrentTime(v *vm, p []uint64) uint64 {
	if !v.putU64(p[0], uint64(v.now.UnixNano())) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// rootOf returns the root context of context id (itself for a root context).
func (v *vm) rootOf(id uint32) *rootCtx {
	if r, ok := v.roots[id]; ok {
		return r
	}
	if s, ok := v.streams[id]; ok {
		return v.roots[s.root]
	}
	return nil
}

// Tick calls proxy_on_tick on every root context whose tick is due at the
// current clock time. A timer that fell behind fires once and is re-armed one
// period after now, as Envoy's event-loop timers do after a stall; to see N
// ticks, Advance N times by the period.
func (h *Host) Tick() {
	for _, v := range h.vms {
		v.tick(h.Now())
	}
}

func (v *vm) tick(now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, r := range v.roots {
		if v.dead != nil {
			return
		}
		if r.period <= 0 || now.Before(r.nextTick) {
			continue
		}
		r.nextTick = now.Add(r.period)
		v.call("proxy_on_tick", uint64(r.id))
	}
}
