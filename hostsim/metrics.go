package hostsim

import "sync"

// MetricType is a proxy-wasm metric type (spec: proxy_define_metric).
type MetricType uint32

// Metric types, numbered as in the ABI.
const (
	Counter MetricType = iota
	Gauge
	Histogram
)

// Metric is a snapshot of one metric defined by the module.
type Metric struct {
	Name    string
	Type    MetricType
	Value   int64    // counter or gauge value; for a histogram, the number of samples
	Samples []uint64 // histogram samples, in recording order
}

type metric struct {
	Metric
}

// metrics are shared by all VMs of a host, as Envoy's stats are per plugin
// scope, not per worker.
type metrics struct {
	mu     sync.Mutex
	byName map[string]uint32
	byID   map[uint32]*metric
}

func newMetrics() *metrics {
	return &metrics{byName: map[string]uint32{}, byID: map[uint32]*metric{}}
}

// Metric returns the metric the module defined under name.
func (h *Host) Metric(name string) (Metric, bool) {
	h.metrics.mu.Lock()
	defer h.metrics.mu.Unlock()
	id, ok := h.metrics.byName[name]
	if !ok {
		return Metric{}, false
	}
	m := h.metrics.byID[id].Metric
	m.Samples = append([]uint64(nil), m.Samples...)
	return m, true
}

// Metrics returns every defined metric by name.
func (h *Host) Metrics() map[string]Metric {
	out := map[string]Metric{}
	h.metrics.mu.Lock()
	names := make([]string, 0, len(h.metrics.byName))
	for n := range h.metrics.byName {
		names = append(names, n)
	}
	h.metrics.mu.Unlock()
	for _, n := range names {
		out[n], _ = h.Metric(n)
	}
	return out
}

var metricFuncs = []hostFunc{
	{"proxy_define_metric", "iiii", "i", hostDefineMetric},
	{"proxy_increment_metric", "iI", "i", hostIncrementMetric},
	{"proxy_record_metric", "iI", "i", hostRecordMetric},
	{"proxy_get_metric", "ii", "i", hostGetMetric},
}

// hostDefineMetric implements proxy_define_metric(type, name_data, name_size,
// metric_id_ptr). Defining a name again returns the same id; the id carries
// the type in its low two bits, like Envoy's.
func hostDefineMetric(v *vm, p []uint64) uint64 {
	t := MetricType(p[0])
	if t > Histogram {
		return statusBadArgument
	}
	name, ok := v.mem(p[1], p[2])
	if !ok {
		return statusInvalidMemoryAccess
	}
	ms := v.h.metrics
	ms.mu.Lock()
	id, ok := ms.byName[string(name)]
	if !ok {
		id = uint32(len(ms.byID)+1)<<2 | uint32(t)
		ms.byName[string(name)] = id
		ms.byID[id] = &metric{Metric{Name: string(name), Type: t}}
	}
	ms.mu.Unlock()
	if !v.putU32(p[3], id) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

func (ms *metrics) with(id uint32, f func(m *metric) uint64) uint64 {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.byID[id]
	if !ok {
		return statusNotFound
	}
	return f(m)
}

// hostIncrementMetric implements proxy_increment_metric(id, offset): counters
// take positive offsets only (else BadArgument), gauges any, histograms none.
func hostIncrementMetric(v *vm, p []uint64) uint64 {
	off := int64(p[1])
	return v.h.metrics.with(uint32(p[0]), func(m *metric) uint64 {
		switch {
		case m.Type == Counter && off > 0, m.Type == Gauge:
			m.Value += off
			return statusOK
		}
		return statusBadArgument
	})
}

// hostRecordMetric implements proxy_record_metric(id, value): a counter adds
// value, a gauge is set to it, a histogram records a sample.
func hostRecordMetric(v *vm, p []uint64) uint64 {
	return v.h.metrics.with(uint32(p[0]), func(m *metric) uint64 {
		switch m.Type {
		case Counter:
			m.Value += int64(p[1])
		case Gauge:
			m.Value = int64(p[1])
		case Histogram:
			m.Samples = append(m.Samples, p[1])
			m.Value++
		}
		return statusOK
	})
}

// hostGetMetric implements proxy_get_metric(id, result_ptr); histograms cannot
// be read (BadArgument), as in Envoy.
func hostGetMetric(v *vm, p []uint64) uint64 {
	var val int64
	st := v.h.metrics.with(uint32(p[0]), func(m *metric) uint64 {
		if m.Type == Histogram {
			return statusBadArgument
		}
		val = m.Value
		return statusOK
	})
	if st != statusOK {
		return st
	}
	if !v.putU64(p[1], uint64(val)) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}
