package hostsim

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// rootLog returns worker's trace lines about root contexts (the basic
// module logs "root N created|tick|done|deleted|proxy_done S").
func rootLog(h *Host, worker int) []string {
	var out []string
	for _, e := range h.Logs() {
		if e.Worker == worker && e.Level == LogTrace && strings.HasPrefix(e.Message, "root ") {
			out = append(out, e.Message)
		}
	}
	return out
}

func TestReconfigureDrainsOldRoot(t *testing.T) {
	h := newHost(t, "basic", Config{PluginConfig: []byte("tick=1000 one")})
	old := h.Stream(0)
	if res := old.RequestHeaders(req("/"), nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	if err := h.Configure([]byte("tick=1000 two")); err != nil {
		t.Fatal(err)
	}
	cur, draining := h.RootContexts(0)
	if old.Root() == cur || !slices.Equal(draining, []uint32{old.Root()}) {
		t.Fatalf("RootContexts after Configure = %d, %v; want a new current root and %d draining", cur, draining, old.Root())
	}
	if s := h.Stream(0); s.Root() != cur {
		t.Errorf("new stream's Root() = %d, want the new root %d", s.Root(), cur)
	} else {
		s.Finish()
	}
	h.Advance(time.Second)
	h.Tick()
	if err := old.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, draining := h.RootContexts(0); len(draining) != 0 {
		t.Errorf("RootContexts after the old stream finished: draining %v, want none", draining)
	}
	o, n := itoa32(old.Root()), itoa32(cur)
	want := []string{"root " + o + " created", "root " + n + " created"}
	// Both roots tick while the old one drains (in either order), then the
	// old one is done and deleted after its last stream.
	got := rootLog(h, 0)
	if len(got) != 6 || !slices.Equal(got[:2], want) || !slices.Equal(got[4:], []string{"root " + o + " done", "root " + o + " deleted"}) ||
		!slices.Contains(got[2:4], "root "+o+" tick") || !slices.Contains(got[2:4], "root "+n+" tick") {
		t.Errorf("root lifecycle = %q, want %q, both ticks, then done and deleted", got, want)
	}
	// proxy_on_vm_start runs for every new root context (cpp-host ContextBase::onStart).
	if n := strings.Count(strings.Join(h.LogsAt(LogInfo), "\n"), "vm start:"); n != 3 { // worker start, canary, new root
		t.Errorf("proxy_on_vm_start calls = %d, want 3 (start, canary, reconfigure)", n)
	}
}

func TestReconfigureDeferredDone(t *testing.T) {
	h := newHost(t, "basic", Config{PluginConfig: []byte("tick=1000 hold")})
	first, _ := h.RootContexts(0)
	if err := h.Configure([]byte("tick=1000 next")); err != nil {
		t.Fatal(err)
	}
	// No stream held the old root: proxy_on_done ran at once and returned
	// false, so it waits for proxy_done, ticking meanwhile.
	if _, draining := h.RootContexts(0); !slices.Equal(draining, []uint32{first}) {
		t.Fatalf("draining = %v, want [%d] until proxy_done", draining, first)
	}
	h.Advance(time.Second)
	h.Tick()
	if _, draining := h.RootContexts(0); len(draining) != 0 {
		t.Errorf("draining after proxy_done = %v, want none", draining)
	}
	o := itoa32(first)
	got := rootLog(h, 0)
	for _, line := range []string{"root " + o + " done", "root " + o + " proxy_done 0", "root " + o + " deleted"} {
		if !slices.Contains(got, line) {
			t.Errorf("root log %q lacks %q", got, line)
		}
	}
}

func TestReconfigureCanary(t *testing.T) {
	tests := []struct {
		name    string
		configs []string
		wantErr bool
		// configures is how many proxy_on_configure calls the host saw in
		// all, canaries included.
		configures int
	}{
		{name: "new configuration: canary, then every worker", configs: []string{"two"}, configures: 2 + 1 + 2},
		{name: "refused by the canary: no worker sees it", configs: []string{"bad"}, wantErr: true, configures: 2 + 1},
		{name: "refusal is cached", configs: []string{"bad", "bad"}, wantErr: true, configures: 2 + 1},
		{name: "same configuration: nothing runs", configs: []string{"one"}, configures: 2},
		{name: "back to a configuration seen before", configs: []string{"two", "one"}, configures: 2 + 1 + 2 + 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, "basic", Config{Workers: 2, PluginConfig: []byte("one")})
			before, _ := h.RootContexts(0)
			var err error
			for _, c := range tc.configs {
				err = h.Configure([]byte(c))
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("Configure(%q) = %v, want error %v", tc.configs, err, tc.wantErr)
			}
			if n := strings.Count(strings.Join(h.LogsAt(LogInfo), "\n"), "configure: "); n != tc.configures {
				t.Errorf("proxy_on_configure calls = %d, want %d", n, tc.configures)
			}
			if cur, _ := h.RootContexts(0); tc.wantErr && cur != before {
				t.Errorf("a refused configuration changed the current root: %d, want %d", cur, before)
			}
			if h.Err(0) != nil || h.Err(1) != nil {
				t.Errorf("VMs died: %v, %v", h.Err(0), h.Err(1))
			}
		})
	}
}

func itoa32(n uint32) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}
