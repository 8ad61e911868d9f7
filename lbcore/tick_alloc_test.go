package lbcore

import (
	"testing"
	"time"
)

// reuseStore is a Store that allocates nothing once its keys exist: Get
// returns the stored bytes, Set copies into them. It stands for the filter's
// host store, whose tick reads land in a buffer the module reuses.
type reuseStore struct {
	m   map[string]*memValue
	cas uint32
}

func (s *reuseStore) Get(key string) ([]byte, uint32, error) {
	v, ok := s.m[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return v.value, v.cas, nil
}

func (s *reuseStore) Set(key string, value []byte, cas uint32) error {
	v, ok := s.m[key]
	if ok && cas != 0 && cas != v.cas {
		return ErrCASMismatch
	}
	if !ok {
		v = &memValue{}
		s.m[key] = v
	}
	s.cas++
	v.value, v.cas = append(v.value[:0], value...), s.cas
	return nil
}

// TestTickWorkAllocatesNothing: what a worker does on every tick (publish
// and read the shared active counts, read every health record, take the
// probe lease, judge a probe's answer and record it, end an ejection) allocates nothing
// once the keys exist: a tick a second that made garbage would end in a GC
// cycle, 0.1 s of CPU in V8.
func TestTickWorkAllocatesNothing(t *testing.T) {
	c := mustConfig(t, pool("URLHASH", 3, `"healthCheck":{"cluster":"probe","expectBody":"status: running, every check passed"}`))
	st := &reuseStore{m: map[string]*memValue{}}
	loads := []*LoadBoard{NewLoadBoard(st, "ns", c.Services, 2), NewLoadBoard(st, "ns", c.Services, 4)}
	health := NewHealthBoard(st, "ns", c.Services, 2)
	hc := c.HealthCheck
	body := []byte("uptime 3d\nstatus: running, every check passed\n")
	own := []int64{1, 2, 3}
	now := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name string
		f    func()
	}{
		{"LoadBoard.Publish", func() { loads[0].Publish(now, own); loads[1].Publish(now, own) }},
		{"LoadBoard.Others", func() { loads[0].Others(now) }},
		{"HealthBoard.Read", func() { health.Read(1) }},
		{"HealthBoard.TakeLease", func() { health.TakeLease(now, time.Second) }},
		{"HealthBoard.Update with a probe's result", func() {
			ok := hc.Healthy(200, body)
			health.Update(1, func(s *ServiceHealth) bool { return hc.Probe(s, ok) })
		}},
		{"HealthBoard.EndEjection", func() {
			health.Update(2, func(s *ServiceHealth) bool { s.EjectedUntil = now.UnixMilli() - 1; return true })
			health.EndEjection(2, now)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f() // creates the keys
			if n := testing.AllocsPerRun(100, tt.f); n != 0 {
				t.Errorf("%s allocated %.1f times per call once its keys exist, want 0", tt.name, n)
			}
		})
	}
}
