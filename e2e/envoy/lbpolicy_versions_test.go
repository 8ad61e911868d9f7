package envoy

import (
	"debug/elf"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

// TestLBPolicyCallbacksInEveryEnvoy: every Envoy symbol the built module
// references is one each Envoy that loads the policy exports, and the
// module exports the program init and the six hooks Envoy resolves. Envoy
// 1.40 opens a module with RTLD_NOW, so a callback missing from the binary
// fails the load there; 1.38 and 1.39 open it lazily and would fail at the
// first call instead. A callback added from a newer abi.h than 1.38's fails
// this test, naming it and the Envoy that lacks it.
func TestLBPolicyCallbacksInEveryEnvoy(t *testing.T) {
	bins := envoyrun.LBPolicyBinaries(t)
	dir := buildPolicy(t, "")
	mod, err := elf.Open(dir + "/lib" + envoyrun.LBPolicyName + ".so")
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	imported, err := mod.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, s := range imported {
		if strings.HasPrefix(s.Name, "envoy_") {
			calls = append(calls, s.Name)
		}
	}
	if len(calls) == 0 {
		t.Fatal("the module references no Envoy callback: the symbol table was not read")
	}
	exported := defined(t, mod)
	for _, h := range []string{"envoy_dynamic_module_on_program_init",
		"envoy_dynamic_module_on_lb_config_new", "envoy_dynamic_module_on_lb_config_destroy",
		"envoy_dynamic_module_on_lb_new", "envoy_dynamic_module_on_lb_choose_host",
		"envoy_dynamic_module_on_lb_on_host_membership_update", "envoy_dynamic_module_on_lb_destroy"} {
		if !exported[h] {
			t.Errorf("the module does not export %s, which Envoy resolves when it loads the policy", h)
		}
	}
	for _, bin := range bins {
		f, err := elf.Open(bin.Path)
		if err != nil {
			t.Fatal(err)
		}
		has := defined(t, f)
		f.Close()
		missing := 0
		for _, c := range calls {
			if !has[c] {
				t.Errorf("Envoy %s does not export %s, which the module calls: it cannot load the module", bin.Version, c)
				missing++
			}
		}
		if missing == 0 {
			t.Logf("Envoy %s exports the %d callbacks the module calls", bin.Version, len(calls))
		}
	}
}

// defined is the set of f's dynamic symbols that f defines.
func defined(t *testing.T, f *elf.File) map[string]bool {
	t.Helper()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			m[s.Name] = true
		}
	}
	return m
}
