package istio

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/tidwall/gjson"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hashlb/hashlb/e2e/istio/internal/istioenv"
	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// TestPilotAgent delivers hashlb's module the two ways only Istio's proxy
// agent can: for an http(s):// or oci:// URL istiod sends Envoy the URL
// itself, and pilot-agent, between Envoy and istiod, downloads the module,
// checks its sha256 and hands Envoy a local file instead. The release's
// Envoy runs under the release's pilot-agent as a frontend pod's sidecar,
// the shipped sidecar files applied, the WasmPlugin's url and sha256 set as
// its comments tell a user to:
//   - http:// from a server on loopback serving dist/hashlb.wasm, sha256
//     the module's: corpus requests reach lbcore's choice;
//   - oci:// from a registry on loopback holding ./build.sh oci's image
//     (copied as the file's oras line does), sha256 the manifest digest
//     hashlb-oci printed: the same;
//   - the placeholder sha256 left in: pilot-agent refuses the module, and
//     with failStrategy FAIL_CLOSE puts a deny-all RBAC filter in hashlb's
//     place, so every request is answered 403 and none reaches a backend;
//     the right sha256 again serves again.
func TestPilotAgent(t *testing.T) {
	eachRelease(t, func(t *testing.T, r releaseSetup) {
		if r.Agent == "" {
			t.Fatalf("Istio %s's pilot-agent was not prepared", r.Name)
		}
		module, err := os.ReadFile(env.Module)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(module)
		moduleSHA := hex.EncodeToString(sum[:])
		if moduleSHA != env.OCIModuleSHA256 {
			t.Fatalf("hashlb-oci printed module sha256 %s, the module's is %s", env.OCIModuleSHA256, moduleSHA)
		}
		web := startModuleServer(t, module)
		reg := startRegistry(t, env.OCILayout, "hashlb/hashlb:v0.1.0")

		cl := startCluster(t, r)
		bs := startServiceBackends(t)
		files := applyShipped(t, cl, sidecarFiles)
		pluginConfig := pluginConfigJSON(t, files["wasmplugin.yaml"])
		httpPlugin := withModuleURL(t, files["wasmplugin.yaml"], "http://"+web.addr+"/hashlb.wasm", moduleSHA)
		if err := cl.Apply("wasmplugin.yaml", httpPlugin); err != nil {
			t.Fatal(err)
		}
		a := startAgent(t, cl, r, "frontend-0", map[string]string{"app": "frontend"})

		t.Run("http", func(t *testing.T) {
			waitApplied(t, a, sidecarShape.checksOf(a.cached(moduleSHA, module), "wasmplugin.yaml", pluginConfig))
			if web.requests.Load() == 0 {
				t.Fatalf("Envoy runs the module but nothing fetched it from %s", web.addr)
			}
			checkCorpus(t, sidecarShape, pluginConfig, corpus.Requests(corpusRequests/2), len(bs))
		})

		t.Run("oci", func(t *testing.T) {
			digest := strings.TrimPrefix(env.OCIManifest, "sha256:")
			ociPlugin := withModuleURL(t, files["wasmplugin.yaml"], "oci://"+reg.addr+"/hashlb/hashlb:v0.1.0", digest)
			if err := cl.Apply("wasmplugin.yaml", ociPlugin); err != nil {
				t.Fatal(err)
			}
			waitApplied(t, a, sidecarShape.checksOf(a.cached(digest, module), "wasmplugin.yaml", pluginConfig))
			if reg.manifests.Load() == 0 {
				t.Fatalf("Envoy runs the module but nothing fetched its manifest from the registry %s", reg.addr)
			}
			// The VM may keep the http:// plugin's persistence table: only
			// requests without a persistence key.
			checkCorpus(t, sidecarShape, pluginConfig, keyless(corpus.Requests(corpusRequests/2)), len(bs))
		})

		t.Run("wrong sha256", func(t *testing.T) {
			testWrongChecksum(t, cl, a, bs, files["wasmplugin.yaml"], httpPlugin, web.addr, moduleSHA, pluginConfig)
		})
	})
}

// testWrongChecksum applies the WasmPlugin with the shipped placeholder
// sha256 left in (url set): pilot-agent downloads the module, finds its
// sha256 is not the file's, says so in its log, and sends Envoy a deny-all
// RBAC filter in hashlb's place (failStrategy FAIL_CLOSE; FAIL_OPEN would
// get an allow-all one); Envoy accepts it, so istiod sees no rejection.
// Every request is answered 403 and none reaches a backend. The file with
// the right sha256 (good) serves again.
func testWrongChecksum(t *testing.T, cl *cluster, a *agent, bs []*envoyrun.Backend, wasmplugin, good []byte, webAddr, moduleSHA string, pluginConfig []byte) {
	placeholder := shaLine.FindSubmatch(wasmplugin)
	if placeholder == nil {
		t.Fatal("wasmplugin.yaml has no sha256 line")
	}
	// The url of the http:// case, the sha256 as shipped: pilot-agent
	// downloads the module again, for this url and checksum.
	bad := urlLine.ReplaceAll(wasmplugin, []byte("${1}url: http://"+webAddr+"/hashlb.wasm"))
	if err := cl.Apply("wasmplugin.yaml", bad); err != nil {
		t.Fatal(err)
	}
	const name = "extensions.istio.io/trafficextension/demo.hashlb~istio-translated-wasmplugin"
	deadline := time.Now().Add(3 * time.Minute)
	for {
		dump, err := a.configDump()
		if err == nil {
			f := section(dump, "EcdsConfigDump").Get(`ecds_filters.#(ecds_filter.name==` + quote(name) + `).ecds_filter.typed_config`)
			if f.Get("@type").String() == "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC" {
				t.Logf("Envoy's filter %s is now %s", name, f.Raw)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 min Envoy's filter %s is not pilot-agent's RBAC fallback (last error %v)\npilot-agent's log:\n%s", name, err, a.tail(40))
		}
		time.Sleep(500 * time.Millisecond)
	}
	// What the operator reads: pilot-agent's log names the mismatch.
	var line string
	for _, l := range strings.Split(a.log.String(), "\n") {
		if strings.Contains(l, "applying deny RBAC filter") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, moduleSHA) || !strings.Contains(line, string(placeholder[2])) {
		t.Errorf("pilot-agent's log has no line naming both checksums and the deny filter (last: %q)", line)
	} else {
		t.Logf("pilot-agent's log: %s", line)
	}
	// Envoy accepted the RBAC filter: istiod hears of no rejection.
	if strings.Contains(cl.Istiod.Log.String(), "ADS:ECDS: ACK ERROR") {
		t.Errorf("istiod's log has an ECDS rejection; pilot-agent's fallback should be accepted")
	}
	var served int64
	for _, b := range bs {
		served += b.Requests()
	}
	for i, cr := range corpus.Requests(20) {
		c := fromCorpus(cr)
		a, err := c.send(outboundAddr)
		// send's error quotes the body of an answer that is not a backend's.
		if err == nil || a.status != http.StatusForbidden || !strings.Contains(err.Error(), "RBAC: access denied") {
			t.Fatalf("request %d with the module refused: %d from %q (%v), want Envoy's 403 RBAC: access denied", i, a.status, a.backend, err)
		}
	}
	var after int64
	for _, b := range bs {
		after += b.Requests()
	}
	if after != served {
		t.Fatalf("with the module refused, %d requests reached a backend", after-served)
	}
	t.Log("with the module refused every request is answered 403 (RBAC: access denied) and none reaches a backend")
	if err := cl.Apply("wasmplugin.yaml", good); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, a, sidecarShape.checksOf(a.cached(moduleSHA, nil), "wasmplugin.yaml", pluginConfig))
	o, err := newOracle(pluginConfig)
	if err != nil {
		t.Fatal(err)
	}
	for i, cr := range keyless(corpus.Requests(20)) {
		if _, err := o.send(cr); err != nil {
			t.Fatalf("request %d with the right sha256 again: %v", i, err)
		}
	}
}

var shaLine = regexp.MustCompile(`(?m)^([ \t]*)sha256: "?([0-9a-f]*)"?[ \t]*$`)

// withModuleURL is a WasmPlugin file with its url and sha256 set, as its
// comments tell a user to.
func withModuleURL(t *testing.T, file []byte, url, sha string) []byte {
	t.Helper()
	if !shaLine.Match(file) {
		t.Fatal("wasmplugin.yaml has no sha256 line")
	}
	out := urlLine.ReplaceAll(file, []byte("${1}url: "+url))
	return shaLine.ReplaceAll(out, []byte(`${1}sha256: "`+sha+`"`))
}

// moduleServer serves the module over HTTP on loopback, as an artifact
// server would, and counts the requests.
type moduleServer struct {
	addr     string
	requests atomic.Int64
}

func startModuleServer(t *testing.T, module []byte) *moduleServer {
	t.Helper()
	s := &moduleServer{}
	s.addr = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if r.URL.Path != "/hashlb.wasm" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/wasm")
		w.Write(module)
	}))
	return s
}

// ociRegistry is an in-memory OCI registry on loopback.
type ociRegistry struct {
	addr      string
	manifests atomic.Int64 // manifest requests
}

// startRegistry starts a registry holding the image tagged "latest" in the
// OCI layout at dir, copied to ref (repository:tag) as oras copy
// --from-oci-layout copies it: the same manifest, so the same digest.
func startRegistry(t *testing.T, dir, ref string) *ociRegistry {
	t.Helper()
	reg := &ociRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg.addr = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") {
			reg.manifests.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("the OCI layout of ./build.sh oci: %v", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] != "latest" {
			continue
		}
		img, err := p.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		r, err := name.ParseReference(reg.addr + "/" + ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(r, img); err != nil {
			t.Fatalf("pushing ./build.sh oci's image to %s: %v", r, err)
		}
		if d.Digest.String() != env.OCIManifest {
			t.Fatalf("the layout's manifest is %s, hashlb-oci printed %s", d.Digest, env.OCIManifest)
		}
		return reg
	}
	t.Fatalf("the OCI layout %s has no manifest tagged latest", dir)
	return nil
}

// serve serves h on a free port of 127.0.0.1 until the test ends.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// Where pilot-agent and its Envoy listen in the test's network namespace:
// Envoy's admin, the agent's status port (every interface, which is why it
// runs in the test's own namespace).
const (
	agentAdminPort  = 15000
	agentStatusPort = 15020
)

// agentDataDir is where pilot-agent keeps downloaded modules, a path fixed
// in its code (constants.IstioDataDir); the agent runs in a mount namespace
// of its own where the test's directory is mounted on /var/lib.
const agentDataDir = "/var/lib/istio/data"

// agent is pilot-agent running the release's Envoy as a sidecar.
type agent struct {
	cmd  *exec.Cmd
	log  *envoyrun.SyncBuffer // pilot-agent's output and Envoy's
	done chan struct{}
	lib  string // the test's directory mounted on /var/lib for the agent
}

// agentTemplate is the bootstrap template pilot-agent fills in for Envoy
// (its Go template variables: the node's id, cluster and metadata, the
// proxy configuration): Istio's own template less what only istio-proxy
// has or this test does not use (stats sinks, tracing, the Prometheus and
// health listeners): ADS to the agent's xDS proxy on its Unix socket,
// admin on 127.0.0.1.
const agentTemplate = `{
  "node": {"id": "{{ .nodeID }}", "cluster": "{{ .cluster }}", "metadata": {{ .meta_json_str }}},
  "dynamic_resources": {
    "ads_config": {"api_type": "GRPC", "transport_api_version": "V3",
      "grpc_services": [{"envoy_grpc": {"cluster_name": "xds-grpc"}}]},
    "cds_config": {"ads": {}, "resource_api_version": "V3"},
    "lds_config": {"ads": {}, "resource_api_version": "V3"}
  },
  "static_resources": {"clusters": [{
    "name": "xds-grpc", "type": "STATIC", "connect_timeout": "5s",
    "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
      "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
      "explicit_http_config": {"http2_protocol_options": {}}}},
    "load_assignment": {"cluster_name": "xds-grpc", "endpoints": [{"lb_endpoints": [
      {"endpoint": {"address": {"pipe": {"path": "{{ .config.ConfigPath }}/XDS"}}}}]}]}
  }]},
  "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": {{ .config.ProxyAdminPort }}}}}
}
`

// startAgent runs r's pilot-agent as the sidecar of pod in namespace demo
// with labels, Envoy being the release's Wasm Envoy, and waits until the
// agent reports it ready (its status port's /healthz/ready). The agent
// works in a directory of the test's own: its bootstrap and xDS socket
// (configPath), the pod's service-account token (one kube-apiserver
// issued, for istiod's CA, which this mesh without mTLS never calls), and
// /var/lib mounted from it.
func startAgent(t *testing.T, cl *cluster, r releaseSetup, pod string, labels map[string]string) *agent {
	t.Helper()
	dir := t.TempDir()
	a := &agent{log: &envoyrun.SyncBuffer{}, done: make(chan struct{}), lib: filepath.Join(dir, "lib")}
	for _, d := range []string{filepath.Join(a.lib, "istio", "data"), filepath.Join(dir, "etc", "istio", "proxy"), filepath.Join(dir, "var", "run", "secrets", "tokens")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	token := serviceAccountToken(t, cl, "demo", "frontend")
	if err := os.WriteFile(filepath.Join(dir, "var", "run", "secrets", "tokens", "istio-token"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(dir, "bootstrap.tmpl.json")
	if err := os.WriteFile(tmpl, []byte(agentTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	proxyConfig := fmt.Sprintf(`binaryPath: %s
configPath: %s
discoveryAddress: %s
controlPlaneAuthPolicy: NONE
proxyAdminPort: %d
statusPort: %d
concurrency: 2
drainDuration: 1s
terminationDrainDuration: 1s
proxyBootstrapTemplatePath: %s
`, r.WasmEnvoy, filepath.Join(dir, "etc", "istio", "proxy"), istioenv.XDSAddr, agentAdminPort, agentStatusPort, tmpl)
	var ls []string
	for k, v := range labels {
		ls = append(ls, fmt.Sprintf("%q:%q", k, v))
	}
	// unshare --mount: /var/lib is the test's directory for the agent only.
	a.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$0" /var/lib && exec "$@"`, a.lib,
		r.Agent, "proxy", "sidecar", "--proxyLogLevel", "warning,wasm:info", "--log_output_level", "default:info")
	a.cmd.Dir = dir
	a.cmd.Env = append(os.Environ(),
		"PROXY_CONFIG="+proxyConfig,
		"POD_NAME="+pod, "POD_NAMESPACE=demo", "INSTANCE_IP=127.0.0.1", "SERVICE_ACCOUNT=frontend",
		"ISTIO_METAJSON_LABELS={"+strings.Join(ls, ",")+"}",
		"ISTIO_META_INTERCEPTION_MODE=NONE", "ISTIO_META_CLUSTER_ID=Kubernetes", "ISTIO_META_MESH_ID=cluster.local",
		// istiod's CA on its plaintext port: pilot-agent then needs no root
		// certificate file to start.
		"CA_ADDR="+istioenv.XDSAddr,
	)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		istioenv.StopGroup(a.cmd.Process.Pid, a.done, 20*time.Second)
		if t.Failed() {
			t.Logf("pilot-agent's and Envoy's log (tail):\n%s", a.tail(60))
		}
	})
	deadline := time.Now().Add(5 * time.Minute)
	for {
		select {
		case <-a.done:
			t.Fatalf("pilot-agent exited before it was ready (%v):\n%s", a.cmd.ProcessState, a.tail(60))
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz/ready", agentStatusPort))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pilot-agent not ready after 5 min (last: %v):\n%s", err, a.tail(60))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("pilot-agent %s with Envoy %s connected to istiod as a sidecar and ready in %s", r.Name, r.WasmEnvoy, time.Since(start).Round(100*time.Millisecond))
	return a
}

// serviceAccountToken creates service account sa in ns and returns a token
// kube-apiserver issues for it with istiod's CA as the audience, as a
// pod's projected istio-token volume holds.
func serviceAccountToken(t *testing.T, cl *cluster, ns, sa string) string {
	t.Helper()
	ctx := context.Background()
	acct := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}
	if err := cl.Client.Create(ctx, acct); err != nil {
		t.Fatalf("service account %s/%s: %v", ns, sa, err)
	}
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{Audiences: []string{"istio-ca"}}}
	if err := cl.Client.SubResource("token").Create(ctx, acct, tr); err != nil {
		t.Fatalf("a token for %s/%s: %v", ns, sa, err)
	}
	return tr.Status.Token
}

func (a *agent) configDump() (gjson.Result, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/config_dump?include_eds", agentAdminPort))
	if err != nil {
		return gjson.Result{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return gjson.Result{}, err
	}
	if resp.StatusCode != 200 {
		return gjson.Result{}, fmt.Errorf("/config_dump: %d %s", resp.StatusCode, body)
	}
	return gjson.ParseBytes(body), nil
}

// cached wants the plugin's module loaded from pilot-agent's download of
// it: a file in its data directory named after checksum (the WasmPlugin's
// sha256), holding module (when not nil).
func (a *agent) cached(checksum string, module []byte) func(filename string) error {
	return func(f string) error {
		rel, ok := strings.CutPrefix(f, agentDataDir+"/")
		if !ok || filepath.Base(f) != checksum+".wasm" {
			return fmt.Errorf("loads %q, want pilot-agent's download %s/…/%s.wasm", f, agentDataDir, checksum)
		}
		if module == nil {
			return nil
		}
		got, err := os.ReadFile(filepath.Join(a.lib, "istio", "data", rel))
		if err != nil {
			return fmt.Errorf("loads %q: %v", f, err)
		}
		if !bytes.Equal(got, module) {
			return fmt.Errorf("loads %q, which is not the module (%d bytes, want %d)", f, len(got), len(module))
		}
		return nil
	}
}

// tail is the last n lines of the agent's and Envoy's log.
func (a *agent) tail(n int) string {
	lines := strings.Split(strings.TrimRight(a.log.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
