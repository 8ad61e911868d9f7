package istio

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/corpus"
)

// testRefusedConfig gives the shipped WasmPlugin a pluginConfig hashlb
// refuses (an lbMethod it does not have) through istiod: Envoy rejects the
// ECDS update (its update_rejected counter; hashlb's reason in its log), and
// every request still reaches the choice of the last good configuration.
// The shipped file then serves again.
func testRefusedConfig(t *testing.T, cl *cluster, sc *sidecar, wasmplugin, pluginConfig []byte) {
	bad := bytes.Replace(wasmplugin, []byte("lbMethod: SOURCEIPHASH"), []byte("lbMethod: NOSUCHMETHOD"), 1)
	if bytes.Equal(bad, wasmplugin) {
		t.Fatal("wasmplugin.yaml has no lbMethod: SOURCEIPHASH to change")
	}
	rejected := "extension_config_discovery.http_filter.extensions.istio.io/trafficextension/demo.hashlb~istio-translated-wasmplugin.update_rejected"
	before := sc.Stat(t, rejected)
	if err := cl.Apply("wasmplugin.yaml", bad); err != nil {
		t.Fatal(err)
	}
	// istiod pushes it (ECDS); Envoy starts the plugin with it, which fails
	// hashlb's validation, and rejects the update.
	deadline := time.Now().Add(3 * time.Minute)
	for sc.Stat(t, rejected) == before {
		if time.Now().After(deadline) {
			t.Fatalf("after 3 min Envoy has not rejected the refused configuration (%s = %d)", rejected, before)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("Envoy: %s = %d (was %d)", rejected, sc.Stat(t, rejected), before)
	// What the user sees: hashlb's reason in Envoy's log, the rejection
	// (an ACK ERROR of ECDS) in istiod's.
	for _, w := range []struct {
		who, substr string
		log         func() string
	}{
		{"Envoy", `lbMethod: "NOSUCHMETHOD" is not one of`, sc.Log},
		{"istiod", "ADS:ECDS: ACK ERROR", cl.Istiod.Log.String},
	} {
		var line string
		for end := time.Now().Add(time.Minute); line == "" && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			for _, l := range strings.Split(w.log(), "\n") {
				if strings.Contains(l, w.substr) {
					line = l
				}
			}
		}
		if line == "" {
			t.Errorf("no %q in %s's log", w.substr, w.who)
		} else {
			t.Logf("%s's log: %s", w.who, line)
		}
	}
	o, err := newOracle(pluginConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The last good configuration keeps serving: every request reaches its
	// choice.
	reqs := keyless(corpus.Requests(60))
	for i, cr := range reqs {
		if _, err := o.send(cr); err != nil {
			t.Fatalf("request %d after the refused configuration: %v", i, err)
		}
	}
	t.Logf("%d requests after the refused configuration on the last good configuration's choice", len(reqs))
	if err := cl.Apply("wasmplugin.yaml", wasmplugin); err != nil {
		t.Fatal(err)
	}
	ok := func(err error) bool { return err == nil }
	if err := waitFor(sc, sidecarChecks(env.Module, "wasmplugin.yaml", pluginConfig), 3*time.Minute, ok); err != nil {
		t.Fatalf("the shipped wasmplugin.yaml applied again, after 3 min: %v", err)
	}
}

// keyless are the requests without a persistence key (x-client-id): their
// choice does not depend on a table's state.
func keyless(reqs []corpus.Request) []corpus.Request {
	var out []corpus.Request
	for _, r := range reqs {
		if len(corpus.HeaderValues(r.Headers, "x-client-id")) == 0 {
			out = append(out, r)
		}
	}
	return out
}
