package benchdoc

import (
	"strings"
	"testing"
)

func TestSpliceThenVerify(t *testing.T) {
	doc := "# Doc\n\nmethod\n\n" + Begin + "\nold text\n" + EndPrefix + "0 -->\n\nafter\n"
	if err := Verify(doc); err == nil {
		t.Fatal("Verify accepts an end marker whose digest is not the text's")
	}
	sec := Section(Machine{Cores: 2, Load: []float64{1, 3}, Go: "go1.26.8", Envoys: []string{"1.40.0"}},
		[]Part{{"Ratios", "| a | b |\n|---|---|\n| 1 | 2 |\n"}, {"Peers", "### Envoy 1.40.0\n\nx\n"}})
	got, err := Splice(doc, sec)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(got); err != nil {
		t.Fatalf("Verify(Splice(…)): %v\n%s", err, got)
	}
	if !strings.HasPrefix(got, "# Doc\n\nmethod\n\n"+Begin+"\n"+Header+"\n") || !strings.HasSuffix(got, " -->\n\nafter\n") || strings.Contains(got, "old text") {
		t.Fatalf("Splice kept the wrong text:\n%s", got)
	}
	if !strings.Contains(got, "Machine: 2 cores; 1-minute load average during the run 1.0–3.0 (mean 2.0 over 2 samples") {
		t.Errorf("no machine line:\n%s", got)
	}
	if !strings.Contains(got, "\n### Peers\n\n#### Envoy 1.40.0\n") {
		t.Errorf("a part's heading is not a level below the part's title:\n%s", got)
	}
	edited := strings.Replace(got, "| 1 | 2 |", "| 1 | 3 |", 1)
	if err := Verify(edited); err == nil || !strings.Contains(err.Error(), "by hand") {
		t.Errorf("Verify of a hand-edited table: %v", err)
	}
	if again, _ := Splice(edited, sec); again != got {
		t.Errorf("Splice over a hand edit does not give the generated text back")
	}
	for _, bad := range []string{"no markers\n", Begin + "\nno end\n", "x\n" + Begin + "\n" + EndPrefix + "0 -->\n" + Begin + "\n"} {
		if _, err := Splice(bad, sec); err == nil {
			t.Errorf("Splice(%q) gives no error", bad)
		}
	}
}

func TestGoBenchTable(t *testing.T) {
	out := "goos: linux\nBenchmarkSelect/URLHASH/3-2   \t18234567\t        65.1 ns/op\t       0 B/op\t       0 allocs/op\n" +
		"BenchmarkEnvoyReconfigure/envoy-1.40.0-2 1 0 ns/op 19.8 worker-cpu-ms-per-change\n" +
		"BenchmarkEnvoyPeers-2 1 312345678901 ns/op\nBenchmarkEnvoyLBPolicyGoRuntime/x-2 1 9876543 ns/op 0.31 runtime-%\n--- FAIL: BenchmarkEnvoyReconfigure/1.36.4 (9.1s)\nPASS\nok x 1.2s\n"
	want := "| benchmark | figures |\n|---|---|\n| BenchmarkSelect/URLHASH/3 | 65.1 ns/op, 0 B/op, 0 allocs/op |\n| BenchmarkEnvoyReconfigure/envoy-1.40.0 | 19.8 worker-cpu-ms-per-change |\n| BenchmarkEnvoyLBPolicyGoRuntime/x | 0.31 runtime-% |\n| BenchmarkEnvoyReconfigure/1.36.4 | **failed** (the bench's output says why) |\n"
	if got := GoBenchTable(out); got != want {
		t.Errorf("GoBenchTable:\n%s\nwant\n%s", got, want)
	}
	if GoBenchTable("PASS\n") != "" {
		t.Error("a table from no result line")
	}
}
