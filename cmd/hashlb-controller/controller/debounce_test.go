package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestDebounce pins the write schedule of one WasmPlugin on a fake clock:
// the first change after a quiet period waits Debounce/5, and two writes are
// at least Debounce apart.
func TestDebounce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "demo", Name: "hashlb"}
	type step struct {
		at   time.Duration // since t0
		op   string        // "change" (a difference seen), "write", "settled"
		want time.Duration // for "change": how long the write still waits
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first change ever waits a fifth", []step{
			{at: 0, op: "change", want: 200 * time.Millisecond},
			{at: 150 * time.Millisecond, op: "change", want: 50 * time.Millisecond},
			{at: 200 * time.Millisecond, op: "change", want: 0},
		}},
		{"a change right after a write waits the rest of the interval", []step{
			{at: 0, op: "write"},
			{at: 300 * time.Millisecond, op: "change", want: 700 * time.Millisecond},
			{at: 900 * time.Millisecond, op: "change", want: 100 * time.Millisecond},
		}},
		{"a change long after a write waits only the settle time", []step{
			{at: 0, op: "write"},
			{at: 5 * time.Second, op: "change", want: 200 * time.Millisecond},
		}},
		{"a difference that went away starts the settle time again", []step{
			{at: 0, op: "change", want: 200 * time.Millisecond},
			{at: 100 * time.Millisecond, op: "settled"},
			{at: 3 * time.Second, op: "change", want: 200 * time.Millisecond},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now time.Time
			r := &Reconciler{Debounce: time.Second, now: func() time.Time { return now }}
			for i, s := range tt.steps {
				now = t0.Add(s.at)
				switch s.op {
				case "write":
					r.wrote(key)
				case "settled":
					r.settled(key)
				case "change":
					if got := r.wait(key); got != s.want {
						t.Errorf("step %d at %v: wait() = %v, want %v", i, s.at, got, s.want)
					}
				}
			}
		})
	}
}
