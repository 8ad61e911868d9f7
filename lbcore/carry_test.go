package lbcore

import (
	"slices"
	"testing"
)

func svcs(specs ...[2]string) []Service {
	out := make([]Service, len(specs))
	for i, s := range specs {
		out[i] = Service{Name: s[0], Address: s[0], HashID: s[1]}
		out[i].ID = serviceID(&out[i])
	}
	return out
}

func TestCarryOver(t *testing.T) {
	a, b, c := [2]string{"10.0.0.1:80", ""}, [2]string{"10.0.0.2:80", ""}, [2]string{"10.0.0.3:80", ""}
	podOld, podNew := [2]string{"10.0.0.7:80", "web-0"}, [2]string{"10.0.0.9:80", "web-0"}
	tests := []struct {
		name        string
		prev, next  []Service
		wantFrom    []int
		wantRemoved []int
		wantAdded   []int
	}{
		{name: "unchanged", prev: svcs(a, b), next: svcs(a, b), wantFrom: []int{0, 1}},
		{name: "reordered", prev: svcs(a, b, c), next: svcs(c, a, b), wantFrom: []int{2, 0, 1}},
		{name: "one leaves", prev: svcs(a, b, c), next: svcs(a, c), wantFrom: []int{0, 2}, wantRemoved: []int{1}},
		{name: "one joins", prev: svcs(a, c), next: svcs(a, b, c), wantFrom: []int{0, -1, 1}, wantAdded: []int{1}},
		{name: "pod rescheduled with a new IP keeps its identity", prev: svcs(a, podOld), next: svcs(a, podNew), wantFrom: []int{0, 1}},
		{name: "address change without hashId is a new service", prev: svcs(a, [2]string{"10.0.0.7:80", ""}), next: svcs(a, [2]string{"10.0.0.9:80", ""}),
			wantFrom: []int{0, -1}, wantRemoved: []int{1}, wantAdded: []int{1}},
		{name: "all replaced", prev: svcs(a), next: svcs(b, c), wantFrom: []int{-1, -1}, wantRemoved: []int{0}, wantAdded: []int{0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := carryOver(tc.prev, tc.next)
			if !slices.Equal(c.From, tc.wantFrom) || !slices.Equal(c.Removed, tc.wantRemoved) || !slices.Equal(c.Added(), tc.wantAdded) {
				t.Errorf("CarryOver = From %v, Removed %v, Added %v; want %v, %v, %v", c.From, c.Removed, c.Added(), tc.wantFrom, tc.wantRemoved, tc.wantAdded)
			}
			prev := make([]int, len(tc.prev))
			for i := range prev {
				prev[i] = 100 + i
			}
			got := CarryValues(&c, prev)
			for i, j := range c.From {
				want := 0
				if j >= 0 {
					want = 100 + j
				}
				if got[i] != want {
					t.Errorf("CarryValues[%d] = %d, want %d", i, got[i], want)
				}
			}
		})
	}
}
