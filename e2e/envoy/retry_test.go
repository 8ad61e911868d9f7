package envoy

import (
	"testing"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

// TestEnvoyRetryWalksTheRanking: envoy.yaml as shipped (URLHASH,
// upstreamCount 3, retry_policy num_retries 2, override_host). hashlb has no
// health check there, so a backend that dies after its last answer is still
// ranked first by the decision; the connect to it is refused, and the
// router's retry goes to the header's next address: the request is answered
// by lbcore's 2nd ranked service, and with the 2nd dead too by the 3rd, never
// with a client error. It stays so once Envoy's outlier detection
// (consecutive_5xx 5: connect failures count) ejects the dead host.
func TestEnvoyRetryWalksTheRanking(t *testing.T) {
	t.Parallel()
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		dr := newDataRequests()
		r := startRig(t, bin, "", dr.install, nil)
		const victim = 0 // b1
		vName := r.bs[victim].Name
		paths := r.pathsTo(vName, 8)
		// Each path reaches the victim while it lives (and Envoy has
		// connected to it: the kill must break a known host, not a new one).
		for _, p := range paths[:2] {
			if code, got, _ := r.get(t, p); code != 200 || got != vName {
				t.Fatalf("GET %s: %d from %q, want 200 from %s", p, code, got, vName)
			}
		}
		r.bs[victim].Stop()
		for _, p := range paths {
			rank := r.rank(p)
			if code, got, body := r.get(t, p); code != 200 || got != rank[1] {
				t.Errorf("%s dead: GET %s: %d from %q, want 200 from %s (lbcore's 2nd of %v): %s", vName, p, code, got, rank[1], rank, body)
			}
		}
		retries := r.e.Stat(t, "cluster.hashlb_upstream.upstream_rq_retry")
		if retries < int64(len(paths)) {
			t.Errorf("upstream_rq_retry = %d, want ≥ %d (one per request to the dead backend)", retries, len(paths))
		}
		t.Logf("upstream_rq_retry %d, upstream_cx_connect_fail %d, outlier ejections_active %d",
			retries, r.e.Stat(t, "cluster.hashlb_upstream.upstream_cx_connect_fail"), r.e.Stat(t, "cluster.hashlb_upstream.outlier_detection.ejections_active"))

		// The 2nd ranked dies too: the 3rd answers.
		p := paths[0]
		rank := r.rank(p)
		r.bs[r.index(rank[1])].Stop()
		if code, got, body := r.get(t, p); code != 200 || got != rank[2] {
			t.Errorf("%s and %s dead: GET %s: %d from %q, want 200 from %s: %s", rank[0], rank[1], p, code, got, rank[2], body)
		}
	})
}
