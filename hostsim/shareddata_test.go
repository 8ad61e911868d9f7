package hostsim

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func shared(t *testing.T, h *Host, worker int, op string) string {
	t.Helper()
	s := h.Stream(worker)
	defer s.Finish()
	res := s.RequestHeaders(req("/shared/"+op), nil)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	got, _ := res.Header("x-shared")
	return got
}

func TestSharedDataCAS(t *testing.T) {
	h := newHost(t, "basic", Config{Workers: 2})
	steps := []struct {
		worker   int
		op, want string
	}{
		{0, "get/k", "1:0:"},    // missing → NOT_FOUND
		{0, "set/k/a/999", "0"}, // insert is not guarded by CAS
		{1, "get/k", "0:1:a"},   // other worker sees it, cas 1
		{1, "set/k/b/7", "8"},   // stale cas → CAS_MISMATCH
		{1, "set/k/b/1", "0"},   // matching cas
		{0, "set/k/c/1", "8"},   // now stale
		{0, "set/k/c/0", "0"},   // cas 0 always writes
		{1, "get/k", "0:3:c"},
	}
	for i, st := range steps {
		if got := shared(t, h, st.worker, st.op); got != st.want {
			t.Fatalf("step %d: worker %d %s = %q, want %q", i, st.worker, st.op, got, st.want)
		}
	}
	if got, want := h.SharedData().Bytes(), 2+SharedDataEntryOverhead; got != want {
		t.Fatalf("Bytes() = %d, want %d", got, want)
	}
}

// TestSharedDataConcurrentVMs runs read-modify-write increments with CAS
// retries on 4 VMs at once (run with -race): no update is lost.
func TestSharedDataConcurrentVMs(t *testing.T) {
	const workers, per = 4, 25
	h := newHost(t, "basic", Config{Workers: workers})
	shared(t, h, 0, "set/n/0/0")
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				for {
					parts := strings.SplitN(shared(t, h, w, "get/n"), ":", 3)
					var n int
					fmt.Sscan(parts[2], &n)
					if shared(t, h, w, fmt.Sprintf("set/n/%d/%s", n+1, parts[1])) == "0" {
						break
					}
				}
			}
		}(w)
	}
	wg.Wait()
	if v, _, _ := h.SharedData().Get("n"); string(v) != fmt.Sprint(workers*per) {
		t.Fatalf("n = %s, want %d", v, workers*per)
	}
}

func TestSharedDataSetOnMissingKeyIgnoresCAS(t *testing.T) {
	d := NewSharedData()
	tests := []struct {
		name  string
		cas   uint32
		want  uint32
		value string
	}{
		{"insert with any cas", 12345, 0, "a"},
		{"stale", 12345, 8, "a"},
		{"current", 1, 0, "b"},
		{"zero", 0, 0, "c"},
	}
	for _, tc := range tests {
		if got := d.Set("k", []byte(tc.name), tc.cas); got != tc.want {
			t.Errorf("%s: Set(cas=%d) = %d, want %d", tc.name, tc.cas, got, tc.want)
		}
	}
}
