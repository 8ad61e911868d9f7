package hostsim

import (
	"bytes"
	"testing"
)

func TestWASIProfileSizes(t *testing.T) {
	for _, tc := range []struct {
		profile string
		want    int
	}{{ProfileEnvoy133, 18}, {ProfileEnvoy139, 45}} {
		p, err := newProfile(tc.profile)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(wasiFuncs(p)); got != tc.want {
			t.Errorf("%s: %d WASI functions, want %d", tc.profile, got, tc.want)
		}
	}
}

// TestWASIReturnCodes calls the WASI host functions as the module would and
// checks cpp-host's return codes.
func TestWASIReturnCodes(t *testing.T) {
	for _, prof := range Profiles() {
		h := newHost(t, "basic", Config{Profile: prof})
		v := h.vms[0]
		v.mu.Lock()
		buf := uint64(v.allocate(64))
		byName := map[string]hostFunc{}
		for _, f := range wasiFuncs(h.prof) {
			byName[f.name] = f
		}
		poll := uint64(errnoNosys)
		if prof == ProfileEnvoy139 {
			poll = errnoSuccess
		}
		tests := []struct {
			fn   string
			args []uint64
			want uint64
		}{
			{"fd_fdstat_get", []uint64{1, buf}, errnoSuccess},
			{"fd_fdstat_get", []uint64{0, buf}, errnoBadf},
			{"fd_fdstat_get", []uint64{3, buf}, errnoBadf},
			{"fd_fdstat_set_flags", []uint64{1, 4}, errnoNosys},
			{"poll_oneoff", []uint64{buf, buf, 1, buf + 60}, poll},
			{"fd_prestat_get", []uint64{3, buf}, errnoBadf},
			{"fd_prestat_dir_name", []uint64{3, buf, 1}, errnoNosys},
			{"clock_time_get", []uint64{2, 0, buf}, errnoNotsup},
			{"random_get", []uint64{buf, 64*1024 + 1}, errnoInval},
			{"fd_write", []uint64{3, buf, 0, buf}, errnoBadf},
			{"fd_read", []uint64{0, buf, 0, buf}, errnoNosys},
			{"sched_yield", nil, errnoSuccess},
			{"path_open", make([]uint64, 9), errnoNoent},
		}
		for _, tc := range tests {
			if got := byName[tc.fn].fn(v, tc.args); got != tc.want {
				t.Errorf("%s: %s%v = %d, want %d", prof, tc.fn, tc.args, got, tc.want)
			}
		}
		byName["fd_fdstat_get"].fn(v, []uint64{2, buf})
		got, _ := v.mem(buf, 24)
		want := make([]byte, 24)
		want[8] = 64
		if !bytes.Equal(got, want) {
			t.Errorf("%s: fdstat = %v, want filetype 0, flags 0, rights_base 64", prof, got)
		}
		v.mu.Unlock()
	}
}
