package envoy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// TestEnvoyYAMLAnswersAsTheReadme starts envoy.yaml as shipped (only its
// ports moved to free ones) in front of three echo backends and sends the
// README's three requests: /some/path reaches the service lbcore ranks first
// twice, and a client's forged x-envoy-original-dst-host neither chooses the
// upstream nor reaches it.
func TestEnvoyYAMLAnswersAsTheReadme(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 3)
		yaml := envoyrun.Ports(t, envoyrun.ReadRepoFile(t, "envoy.yaml"), map[int]int{
			9901: 0, 10000: 0, 18081: bs[0].Port(), 18082: bs[1].Port(), 18083: bs[2].Port(),
		})
		dir := envoyrun.WorkDir(t)
		if err := envoyrun.Validate(bin, dir, yaml); err != nil {
			t.Fatal(err)
		}
		cfg := pluginConfigs(t, yaml)[0]
		e := envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir})
		url := "http://" + e.MustListener(t, "hashlb_listener")
		for _, c := range []struct {
			path, forged, want string
		}{
			{"/some/path", "", ""},
			{"/some/path", "", ""},
			{"/x", "203.0.113.9:80", ""},
		} {
			// The backends' ports are not the README's, so neither are the
			// hashes: lbcore says where each request must go.
			c.want = oracle(cfg, lbcore.Request{Target: c.path, Authority: "x", Method: "GET"})[0]
			req, _ := http.NewRequest("GET", url+c.path, nil)
			if c.forged != "" {
				req.Header.Set("x-envoy-original-dst-host", c.forged)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != c.want {
				t.Errorf("GET %s (forged %q): %d from %q, want 200 from %s: %s", c.path, c.forged, resp.StatusCode, resp.Header.Get("X-Backend"), c.want, body)
			}
			if c.forged != "" && strings.Contains(string(body), c.forged) {
				t.Errorf("GET %s: the backend received the forged header: %s", c.path, body)
			}
		}
	})
}
