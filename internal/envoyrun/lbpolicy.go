package envoyrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// LBPolicyName is the name the load-balancing policy's bootstraps load the
// module by (dynamic_module_config.name): Envoy opens lib<name>.so in
// ENVOY_DYNAMIC_MODULES_SEARCH_PATH.
const LBPolicyName = "hashlb_lbpolicy"

// The module's variables a test build sets (-ldflags "-X NAME=value"): the
// ABI version its program init returns (internal/lbpolicy/abi's abi.go),
// and the test switches, which exist only in a build with the tag
// hashlb_testhooks: every choice panics (choose) or is the Go floor (floor),
// cmd/hashlb-lbpolicy/testhooks.go; the workers' yields off (off),
// internal/lbpolicy/abi/testhooks.go.
const (
	LBPolicyABIVersion = "github.com/hashlb/hashlb/internal/lbpolicy/abi.abiVersion"
	LBPolicyTestPanic  = "main.testPanic"
	LBPolicyTestYield  = "github.com/hashlb/hashlb/internal/lbpolicy/abi.testYield"
)

// BuildLBPolicy builds ./cmd/hashlb-lbpolicy as build.sh lbpolicy does (cgo,
// -buildmode=c-shared), once per process and ldflags, into a directory of
// its own as lib<LBPolicyName>.so, and returns the directory: what
// ENVOY_DYNAMIC_MODULES_SEARCH_PATH names. ldflags "" is the module as
// shipped; a test builds variants with others (-X LBPolicyABIVersion=...;
// one that sets a test switch, LBPolicyTestPanic or LBPolicyTestYield, is
// built with the tag hashlb_testhooks that compiles them in). The tests
// build the module from the source they test; a failed build is an error.
func BuildLBPolicy(ldflags string) (string, error) {
	args := []string{"-trimpath", "-buildmode=c-shared"}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	if strings.Contains(ldflags, LBPolicyTestPanic) || strings.Contains(ldflags, LBPolicyTestYield) {
		// The test switches exist only in a build with this tag.
		args = append(args, "-tags", "hashlb_testhooks")
	}
	so, err := goBuild(buildKey{lbPolicy, ldflags}, "hashlb-envoyrun-lbpolicy-", "lib"+LBPolicyName+".so",
		[]string{"CGO_ENABLED=1"}, nil, append(args, "./cmd/hashlb-lbpolicy")...)
	if err != nil {
		return "", fmt.Errorf("building ./cmd/hashlb-lbpolicy (needs cgo and a C compiler): %v", err)
	}
	return filepath.Dir(so), nil
}

// RemoveLBPolicies deletes what BuildLBPolicy built (a TestMain calls it).
func RemoveLBPolicies() { removeBuilds(lbPolicy) }

// LBPolicyEnvoysEnv names the Envoys installed for the load-balancing
// policy's tests alone (space-separated paths; ./build.sh test sets it to
// 1.38.3 and 1.39.3): the Wasm tests do not run in them.
const LBPolicyEnvoysEnv = "HASHLB_LBPOLICY_ENVOY_BINS"

var (
	polOnce sync.Once
	polBins []Binary
	polErr  error
)

// findPolicyOnly returns the Envoys of LBPolicyEnvoysEnv, else every version
// cached in CacheDir()/lbpolicy (where build.sh installs them); none when
// $HASHLB_ENVOY names the one Envoy to test.
func findPolicyOnly() ([]Binary, error) {
	polOnce.Do(func() {
		var paths []string
		switch {
		case os.Getenv("HASHLB_ENVOY") != "":
		case os.Getenv(LBPolicyEnvoysEnv) != "":
			paths = strings.Fields(os.Getenv(LBPolicyEnvoysEnv))
		default:
			paths, _ = filepath.Glob(filepath.Join(CacheDir(), "lbpolicy", "envoy-*", "envoy", "_bin", "envoy"))
		}
		polBins, polErr = Probe(paths)
	})
	return polBins, polErr
}

// LBPolicyBinaries returns the Envoys that can load the load-balancing
// policy, oldest first: those of Binaries that are 1.38 or later
// (envoy.load_balancing_policies.dynamic_modules with the ABI the module
// follows) and the policy's own (LBPolicyEnvoysEnv). None: fails under
// CI=true and skips elsewhere, as Binaries does.
func LBPolicyBinaries(t testing.TB) []Binary {
	t.Helper()
	extra, err := findPolicyOnly()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	var out, old []Binary
	seen := map[string]bool{}
	for _, b := range append(Binaries(t), extra...) {
		switch {
		case seen[b.Version]:
		case b.AtLeast(1, 38):
			out = append(out, b)
		default:
			old = append(old, b)
		}
		seen[b.Version] = true
	}
	if len(out) == 0 {
		var names []string
		for _, b := range old {
			names = append(names, b.Version)
		}
		err := errors.New("no Envoy 1.38 or later for the load-balancing policy (found " + strings.Join(names, ", ") + "): ./build.sh test installs 1.38.3, 1.39.3 and 1.40.0")
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	sort.Slice(out, func(i, j int) bool { return versionLess(out[i].Version, out[j].Version) })
	if os.Getenv("CI") == "true" && os.Getenv("HASHLB_ENVOY") == "" {
		// CI tests every supported release line: a missing one fails.
		for _, minor := range policyMinors {
			if !slices.ContainsFunc(out, func(b Binary) bool { return b.AtLeast(1, minor) && !b.AtLeast(1, minor+1) }) {
				t.Fatalf("no Envoy 1.%d for the load-balancing policy's tests under CI: ./build.sh test installs 1.38.3, 1.39.3 and 1.40.0", minor)
			}
		}
	}
	return out
}

// policyMinors are the Envoy release lines (1.x) the load-balancing
// policy supports and CI tests.
var policyMinors = []int{38, 39, 40}
