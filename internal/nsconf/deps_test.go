package nsconf

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces nsconf's import rule: Go's standard library and
// lbcore only (imports, not lbcore's own dependencies).
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") && imp != "github.com/hashlb/hashlb/lbcore" {
			t.Errorf("nsconf imports %s: only the standard library and lbcore are allowed", imp)
		}
	}
}
