package istioenv

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/hashlb/hashlb/internal/bincache"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// istiod's addresses: the default ports for xDS (plaintext 15010, TLS
// 15012), monitoring and webhooks, on 127.0.0.1; its HTTP debug port moves
// off 8080, the shipped ServiceEntry's port, which a sidecar binds on
// 127.0.0.1.
const (
	XDSAddr   = "127.0.0.1:15010"
	DebugAddr = "127.0.0.1:15080"
)

// IstiodAddrs are every address istiod listens on.
var IstiodAddrs = []string{XDSAddr, DebugAddr, "127.0.0.1:15012", "127.0.0.1:15017", "127.0.0.1:15014"}

// Options says what StartCluster starts.
type Options struct {
	Release       ReleaseSetup
	KubeAPIServer string // the kube-apiserver binary (bincache.KubeAPIServer)
	Etcd          string // the etcd binary (bincache.Etcd)
	Dir           string // a directory of the cluster's own files (kubeconfig, mesh config)
	Namespaces    []string
	Logf          func(format string, args ...any) // progress; nil for none
}

// Cluster is a kube-apiserver with Istio's CRDs and an istiod watching it.
type Cluster struct {
	Config     *rest.Config
	Client     client.Client
	KubeConfig string // a kubeconfig file for the API server
	Istiod     *Istiod
	te         *envtest.Environment
}

// StartCluster starts kube-apiserver and etcd (envtest), installs the
// release's CRDs, creates the namespaces, and starts istiod and waits
// until it is ready. On an error, what it started is stopped.
func StartCluster(o Options) (cl *Cluster, err error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	// controller-runtime's own log says nothing a user of the cluster
	// needs; unset, it prints a stack trace when the API server is slow.
	ctrllog.SetLogger(logr.Discard())
	r := o.Release
	te := &envtest.Environment{
		CRDDirectoryPaths:        []string{r.CRDs},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 3 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	api := te.ControlPlane.GetAPIServer()
	api.Path = o.KubeAPIServer
	// Without a default route kube-apiserver finds no address to
	// advertise, and it refuses a loopback one: a documentation address
	// (RFC 5737), which no endpoint of the kubernetes Service is written
	// for.
	api.Configure().Set("advertise-address", "192.0.2.1").Set("endpoint-reconciler-type", "none")
	te.ControlPlane.Etcd = &envtest.Etcd{Path: o.Etcd}
	start := time.Now()
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver %s with Istio %s's CRDs: %v", bincache.KubeVersion, r.Name, err)
	}
	cl = &Cluster{Config: cfg, te: te}
	defer func() {
		if err != nil {
			cl.Stop()
			cl = nil
		}
	}()
	logf("kube-apiserver with Istio %s's CRDs up in %s", r.Name, time.Since(start).Round(100*time.Millisecond))
	if cl.Client, err = client.New(cfg, client.Options{}); err != nil {
		return cl, err
	}
	for _, ns := range o.Namespaces {
		if err := cl.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return cl, fmt.Errorf("namespace %s: %v", ns, err)
		}
	}
	cl.KubeConfig = filepath.Join(o.Dir, "kubeconfig")
	if err := os.WriteFile(cl.KubeConfig, te.KubeConfig, 0o600); err != nil {
		return cl, err
	}
	cl.Istiod, err = startIstiod(r, o.Dir, cl.KubeConfig, logf)
	return cl, err
}

// Stop stops istiod, kube-apiserver and etcd.
func (cl *Cluster) Stop() error {
	if cl.Istiod != nil {
		cl.Istiod.Stop()
	}
	return cl.te.Stop()
}

// MeshConfig is the mesh configuration istiod runs with: no Prometheus
// metrics provider (it would add istio-proxy's istio.stats filter), no
// automatic mTLS (its certificates come only from pilot-agent's SDS), no
// tracing (no tracing backend here).
const MeshConfig = `enableAutoMtls: false
enableTracing: false
rootNamespace: istio-system
trustDomain: cluster.local
defaultProviders:
  metrics: []
`

// Istiod is a running pilot-discovery.
type Istiod struct {
	cmd  *exec.Cmd
	Log  *envoyrun.SyncBuffer // its output
	done chan struct{}
}

func startIstiod(r ReleaseSetup, dir, kubeconfig string, logf func(string, ...any)) (*Istiod, error) {
	mesh := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(mesh, []byte(MeshConfig), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(r.Istiod, "discovery",
		"--kubeconfig", kubeconfig, "--meshConfig", mesh, "--networksConfig", filepath.Join(dir, "no-mesh-networks"),
		"--httpAddr", DebugAddr, "--grpcAddr", XDSAddr, "--secureGRPCAddr", IstiodAddrs[2],
		"--httpsAddr", IstiodAddrs[3], "--monitoringAddr", IstiodAddrs[4],
		"--domain", "cluster.local", "--log_output_level", "default:info")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"POD_NAMESPACE=istio-system", "POD_NAME=istiod-0", "REVISION=default", "CLUSTER_ID=Kubernetes",
		// istio-proxy's own extensions, which upstream Envoy does not have.
		"PILOT_ENABLE_METADATA_EXCHANGE=false", "PILOT_ENABLE_ALPN_FILTER=false",
		// No webhooks: nothing here calls them.
		"INJECTION_WEBHOOK_CONFIG_NAME=", "VALIDATION_WEBHOOK_CONFIG_NAME=",
	)
	ist := &Istiod{cmd: cmd, Log: &envoyrun.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = ist.Log, ist.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { cmd.Wait(); close(ist.done) }()
	// Ready when its caches have synced (/ready, its readiness probe). On a
	// busy 2-core machine that can take a minute.
	deadline := time.Now().Add(4 * time.Minute)
	for {
		select {
		case <-ist.done:
			return nil, fmt.Errorf("istiod %s exited before it was ready (%v):\n%s", r.Name, cmd.ProcessState, ist.Tail(60))
		default:
		}
		resp, err := http.Get("http://" + DebugAddr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			ist.Stop()
			return nil, fmt.Errorf("istiod %s not ready after 4 min (last: %v):\n%s", r.Name, err, ist.Tail(60))
		}
		time.Sleep(200 * time.Millisecond)
	}
	logf("istiod %s ready in %s", r.Name, time.Since(start).Round(100*time.Millisecond))
	return ist, nil
}

// Exited is closed when istiod has ended.
func (i *Istiod) Exited() <-chan struct{} { return i.done }

// Stop ends istiod (SIGTERM, SIGKILL after 20 s) and waits for it.
func (i *Istiod) Stop() { StopGroup(i.cmd.Process.Pid, i.done, 20*time.Second) }

// StopGroup ends the process group of the process pid, which leads it:
// SIGTERM, then SIGKILL when done is not closed (the process has not been
// waited for) within grace; it returns once done is closed.
func StopGroup(pid int, done <-chan struct{}, grace time.Duration) {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
}

// Tail is the last n lines of istiod's log.
func (i *Istiod) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(i.Log.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Apply creates or replaces every object of a YAML file; an error names
// the file, as a user's kubectl apply would report it.
func (cl *Cluster) Apply(name string, data []byte) error {
	ctx := context.Background()
	return eachObject(name, data, func(u *unstructured.Unstructured) error {
		var old unstructured.Unstructured
		old.SetGroupVersionKind(u.GroupVersionKind())
		err := cl.Client.Get(ctx, client.ObjectKeyFromObject(u), &old)
		switch {
		case apierrors.IsNotFound(err):
			err = cl.Client.Create(ctx, u)
		case err == nil:
			u.SetResourceVersion(old.GetResourceVersion())
			err = cl.Client.Update(ctx, u)
		}
		return err
	})
}

// Delete deletes every object of a YAML file.
func (cl *Cluster) Delete(name string, data []byte) error {
	return eachObject(name, data, func(u *unstructured.Unstructured) error {
		return cl.Client.Delete(context.Background(), u)
	})
}

// Docs are the documents of a YAML file (separated by "---" lines).
func Docs(data []byte) [][]byte { return bytes.Split(data, []byte("\n---")) }

// eachObject calls f on each object of a YAML file; an error names the
// file and the object.
func eachObject(name string, data []byte, f func(*unstructured.Unstructured) error) error {
	for i, doc := range Docs(data) {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return fmt.Errorf("%s: document %d: %v", name, i, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := f(&u); err != nil {
			return fmt.Errorf("%s: %s %s: %v", name, u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}
