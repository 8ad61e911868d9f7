package nsconf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashlb/hashlb/lbcore"
)

// FuzzTranslate feeds arbitrary ns.conf text to Translate, seeded with the
// corpus of cmd/hashlb/testdata/nsconf: it never panics, every configuration
// it writes is one lbcore accepts, every non-blank line has an entry, and
// the same input translates to the same bytes.
func FuzzTranslate(f *testing.F) {
	files, _ := filepath.Glob("../../cmd/hashlb/testdata/nsconf/*/ns.conf")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("add lb vserver \"v\\\" x\" HTTP -lbMethod TOKEN -rule \"HTTP.REQ.HEADER(\\\"a\\\").TO_LOWER ALT\"\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		r := Translate("ns.conf", src, "")
		for _, o := range r.Outputs {
			if _, err := lbcore.ParseConfig(o.JSON); err != nil {
				t.Fatalf("written %s is refused by lbcore: %v\n%s", o.File, err, o.JSON)
			}
		}
		again := Translate("ns.conf", src, "")
		if len(again.Outputs) != len(r.Outputs) || len(again.Entries) != len(r.Entries) {
			t.Fatalf("two translations differ: %d/%d outputs, %d/%d entries", len(r.Outputs), len(again.Outputs), len(r.Entries), len(again.Entries))
		}
		for i := range r.Outputs {
			if !bytes.Equal(r.Outputs[i].JSON, again.Outputs[i].JSON) {
				t.Fatalf("output %d differs between two translations", i)
			}
		}
	})
}
