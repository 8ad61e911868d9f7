package istio

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/hashlb/hashlb/internal/bincache"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// cluster is a kube-apiserver with Istio's CRDs and an istiod watching it.
type cluster struct {
	Config     *rest.Config
	Client     client.Client
	KubeConfig string // a kubeconfig file for the API server
	istiod     *istiod
}

// istiod ports in the test's network namespace: the defaults for xDS
// (plaintext 15010, TLS 15012), monitoring and webhooks; its HTTP debug
// port moves off 8080, the shipped ServiceEntry's port, which the sidecar
// binds on 127.0.0.1.
const (
	xdsAddr   = "127.0.0.1:15010"
	debugAddr = "127.0.0.1:15080"
)

// startCluster starts kube-apiserver and etcd (envtest), installs the
// release's CRDs, creates istio-system, and starts istiod; all stop when
// the test ends.
func startCluster(t *testing.T, r releaseSetup) *cluster {
	t.Helper()
	te := &envtest.Environment{
		CRDDirectoryPaths:        []string{r.CRDs},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 3 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	api := te.ControlPlane.GetAPIServer()
	api.Path = env.KubeAPIServer
	// The namespace has no default route, from which kube-apiserver
	// otherwise takes the address it advertises, and a loopback address
	// is refused: a documentation address (RFC 5737), which no endpoint
	// of the kubernetes Service is written for.
	api.Configure().Set("advertise-address", "192.0.2.1").Set("endpoint-reconciler-type", "none")
	te.ControlPlane.Etcd = &envtest.Etcd{Path: env.Etcd}
	start := time.Now()
	cfg, err := te.Start()
	if err != nil {
		t.Fatalf("kube-apiserver %s with Istio %s's CRDs: %v", bincache.KubeVersion, r.Name, err)
	}
	t.Cleanup(func() {
		if err := te.Stop(); err != nil {
			t.Logf("stopping the control plane: %v", err)
		}
	})
	t.Logf("kube-apiserver with Istio %s's CRDs up in %s", r.Name, time.Since(start).Round(100*time.Millisecond))
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{Config: cfg, Client: c}
	for _, ns := range []string{"istio-system", "demo"} {
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, te.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cl.KubeConfig = kubeconfig
	cl.istiod = startIstiod(t, r, kubeconfig)
	return cl
}

// meshConfig is the mesh configuration istiod runs with: no Prometheus
// metrics provider (it would add istio-proxy's istio.stats filter), no
// automatic mTLS (its certificates come only from pilot-agent's SDS), no
// tracing (no tracing backend here).
const meshConfig = `enableAutoMtls: false
enableTracing: false
rootNamespace: istio-system
trustDomain: cluster.local
defaultProviders:
  metrics: []
`

// istiod is a running pilot-discovery.
type istiod struct {
	cmd  *exec.Cmd
	log  *envoyrun.SyncBuffer
	done chan struct{}
}

func startIstiod(t *testing.T, r releaseSetup, kubeconfig string) *istiod {
	t.Helper()
	dir := t.TempDir()
	mesh := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(mesh, []byte(meshConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(r.Istiod, "discovery",
		"--kubeconfig", kubeconfig, "--meshConfig", mesh, "--networksConfig", filepath.Join(dir, "no-mesh-networks"),
		"--httpAddr", debugAddr, "--grpcAddr", xdsAddr, "--secureGRPCAddr", "127.0.0.1:15012",
		"--httpsAddr", "127.0.0.1:15017", "--monitoringAddr", "127.0.0.1:15014",
		"--domain", "cluster.local", "--log_output_level", "default:info")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"POD_NAMESPACE=istio-system", "POD_NAME=istiod-0", "REVISION=default", "CLUSTER_ID=Kubernetes",
		// istio-proxy's own extensions, which upstream Envoy does not have.
		"PILOT_ENABLE_METADATA_EXCHANGE=false", "PILOT_ENABLE_ALPN_FILTER=false",
		// No webhooks: nothing here calls them.
		"INJECTION_WEBHOOK_CONFIG_NAME=", "VALIDATION_WEBHOOK_CONFIG_NAME=",
	)
	ist := &istiod{cmd: cmd, log: &envoyrun.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = ist.log, ist.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(ist.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-ist.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-ist.done
		}
		if t.Failed() {
			t.Logf("istiod %s log (tail):\n%s", r.Name, ist.tail(60))
		}
	})
	// Ready when its caches have synced (/ready, its readiness probe). On a
	// busy 2-core machine that can take a minute.
	deadline := time.Now().Add(4 * time.Minute)
	for {
		select {
		case <-ist.done:
			t.Fatalf("istiod %s exited before it was ready (%v):\n%s", r.Name, cmd.ProcessState, ist.tail(60))
		default:
		}
		resp, err := http.Get("http://" + debugAddr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("istiod %s not ready after 4 min (last: %v):\n%s", r.Name, err, ist.tail(60))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("istiod %s ready in %s", r.Name, time.Since(start).Round(100*time.Millisecond))
	return ist
}

// tail is the last n lines of istiod's log.
func (i *istiod) tail(n int) string {
	lines := strings.Split(strings.TrimRight(i.log.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
