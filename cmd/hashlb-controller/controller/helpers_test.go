package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/internal/testenv"
	"github.com/hashlb/hashlb/cmd/hashlb-controller/services"
)

// The control plane is started by the first test that needs it and shared
// by all; TestMain stops it.
var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
)

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard()) // envtest's own client; each replica logs to its test
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}
	os.Exit(code)
}

// cluster returns the shared API server's configuration; it fails the test
// (never skips it) when the control plane cannot run.
func cluster(t *testing.T) *rest.Config {
	t.Helper()
	envOnce.Do(func() { env, envErr = testenv.Start() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return rest.CopyConfig(env.Config)
}

var nsSeq atomic.Int64

// kube is a test's direct (uncached) client and its own namespace.
type kube struct {
	t    *testing.T
	c    client.Client
	cfg  *rest.Config
	ns   string
	kind *Kind // of the objects k.wasmPlugin creates and k.get reads
}

// forKinds runs f as a parallel subtest for each kind the controller keeps
// in step: the same case for a WasmPlugin and for a TrafficExtension.
func forKinds(t *testing.T, f func(t *testing.T, k *kube)) {
	t.Parallel()
	for _, kind := range Kinds {
		t.Run(kind.GVK.Kind, func(t *testing.T) {
			t.Parallel()
			k := newKube(t)
			k.kind = kind
			f(t, k)
		})
	}
}

func newKube(t *testing.T) *kube {
	t.Helper()
	cfg := cluster(t)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ToLower(fmt.Sprintf("t%d-%s", nsSeq.Add(1), strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.TrimRight(name, "-")
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return &kube{t: t, c: c, cfg: cfg, ns: name, kind: WasmPlugin}
}

// writes counts the controller's patches of WasmPlugins and TrafficExtensions.
type writes struct {
	client.Client
	patches   atomic.Int64 // patches that succeeded
	conflicts atomic.Int64 // patches refused with 409 Conflict

	mu sync.Mutex
	// before, when set, runs before each patch is sent, with its body.
	before func(obj client.Object, body []byte)
	// after, when set, runs after each patch that succeeded, with its body
	// and the object as the API server returned it.
	after func(obj client.Object, body []byte)
}

func (w *writes) hooks(before, after func(obj client.Object, body []byte)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.before, w.after = before, after
}

func (w *writes) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if obj.GetObjectKind().GroupVersionKind().Group != WasmPlugin.GVK.Group {
		return w.Client.Patch(ctx, obj, patch, opts...)
	}
	body, err := patch.Data(obj)
	if err != nil {
		return err
	}
	w.mu.Lock()
	before, after := w.before, w.after
	w.mu.Unlock()
	if before != nil {
		before(obj, body)
	}
	err = w.Client.Patch(ctx, obj, patch, opts...)
	switch {
	case apierrors.IsConflict(err):
		w.conflicts.Add(1)
	case err == nil:
		w.patches.Add(1)
		if after != nil {
			after(obj, body)
		}
	}
	return err
}

// allNamespaces as Options.Namespace makes a test's replica watch every namespace.
const allNamespaces = "*"

// controller runs one replica against the test's namespace until the test
// ends (or stop is called) and returns its write counter.
func (k *kube) controller(o Options) (w *writes, stop func()) {
	k.t.Helper()
	w = &writes{}
	switch o.Namespace {
	case "":
		o.Namespace = k.ns
	case allNamespaces:
		o.Namespace = ""
	}
	o.MetricsAddr, o.ProbeAddr = "0", "0"
	o.several = true
	tl := &testLog{t: k.t}
	k.t.Cleanup(tl.end) // registered first, so it runs after stop
	o.Logger = funcr.New(tl.log, funcr.Options{})
	o.WrapClient = func(c client.Client) client.Client { w.Client = c; return w }
	mgr, err := NewManager(k.cfg, o)
	if err != nil {
		k.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				k.t.Errorf("manager: %v", err)
			}
		})
	}
	k.t.Cleanup(stop)
	return w, stop
}

// testLog sends a replica's logs to its test until the test ends; the
// replica's event broadcaster may still log after its manager stopped.
type testLog struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (l *testLog) log(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(prefix, args)
	}
}

func (l *testLog) end() {
	l.mu.Lock()
	l.done = true
	l.mu.Unlock()
}

func ptr[T any](v T) *T { return &v }

// service creates a ClusterIP Service with the given name=port:targetPort ports.
func (k *kube) service(name string, ports ...corev1.ServicePort) {
	k.t.Helper()
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: name}, Spec: corev1.ServiceSpec{Ports: ports}}
	if err := k.c.Create(context.Background(), svc); err != nil {
		k.t.Fatal(err)
	}
}

// ep is an endpoint of pod name at ip; ready false makes it not ready,
// terminating marks it as going away.
type ep struct {
	pod, ip     string
	notReady    bool
	terminating bool
}

func (e ep) endpoint() discoveryv1.Endpoint {
	ready := !e.notReady && !e.terminating
	return discoveryv1.Endpoint{
		Addresses:  []string{e.ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(!e.notReady), Terminating: ptr(e.terminating)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "", Name: e.pod},
	}
}

// slice creates or replaces EndpointSlice name of Service svc, as the
// EndpointSlice controller would (envtest runs no controller manager).
func (k *kube) slice(svc, name string, family discoveryv1.AddressType, ports map[string]int32, eps ...ep) {
	k.t.Helper()
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: k.ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
	}
	for n, p := range ports {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr(n), Port: ptr(p), Protocol: ptr(corev1.ProtocolTCP)})
	}
	for _, e := range eps {
		es.Endpoints = append(es.Endpoints, e.endpoint())
	}
	ctx := context.Background()
	old := &discoveryv1.EndpointSlice{}
	switch err := k.c.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: name}, old); {
	case apierrors.IsNotFound(err):
		if err := k.c.Create(ctx, es); err != nil {
			k.t.Fatal(err)
		}
	case err != nil:
		k.t.Fatal(err)
	default:
		es.ResourceVersion = old.ResourceVersion
		if err := k.c.Update(ctx, es); err != nil {
			k.t.Fatal(err)
		}
	}
}

var httpPort = map[string]int32{"http": 8080}

// webPods creates Service web and its EndpointSlice web-a of n ready pods
// (pods("web", 1, n)) on the http port, and returns the pods.
func (k *kube) webPods(n int) []ep {
	k.t.Helper()
	k.service("web")
	p := pods("web", 1, n)
	k.slice("web", "web-a", v4, httpPort, p...)
	return p
}

// pods returns n ready endpoints prefix-0 … at 10.<net>.0.1 ….
func pods(prefix string, net, n int) []ep {
	out := make([]ep, n)
	for i := range out {
		out[i] = ep{pod: fmt.Sprintf("%s-%d", prefix, i), ip: fmt.Sprintf("10.%d.%d.%d", net, i/250, i%250+1)}
	}
	return out
}

// wasmPlugin creates a WasmPlugin (a TrafficExtension when k.kind says so)
// with the given annotations and pluginConfig.
func (k *kube) wasmPlugin(name string, ann map[string]string, pluginConfig map[string]any) *unstructured.Unstructured {
	k.t.Helper()
	wasm := map[string]any{
		"url":          "oci://registry.example.com/hashlb/hashlb:v0.1.0",
		"failStrategy": "FAIL_CLOSE",
		"pluginConfig": pluginConfig,
	}
	spec := map[string]any{
		"phase":    "STATS",
		"selector": map[string]any{"matchLabels": map[string]any{"app": "frontend"}},
	}
	return k.createPlugin(name, ann, spec, wasm)
}

// createPlugin creates the object of kind k.kind with the given annotations
// and spec, wasm (url, pluginConfig, …) placed where the kind holds it: in
// a TrafficExtension's spec.wasm, at the top of a WasmPlugin's spec.
func (k *kube) createPlugin(name string, ann map[string]string, spec, wasm map[string]any) *unstructured.Unstructured {
	k.t.Helper()
	wp := k.kind.New()
	wp.SetNamespace(k.ns)
	wp.SetName(name)
	wp.SetAnnotations(ann)
	if k.kind == TrafficExtension {
		spec["wasm"] = wasm
	} else {
		maps.Copy(spec, wasm)
	}
	wp.Object["spec"] = spec
	if err := k.c.Create(context.Background(), wp); err != nil {
		k.t.Fatal(err)
	}
	return wp
}

func (k *kube) get(name string) *unstructured.Unstructured {
	k.t.Helper()
	wp := k.kind.New()
	if err := k.c.Get(context.Background(), types.NamespacedName{Namespace: k.ns, Name: name}, wp); err != nil {
		k.t.Fatal(err)
	}
	return wp
}

// servicesOf is the object's pluginConfig.services as compact JSON.
func servicesOf(wp *unstructured.Unstructured) string { return pluginConfigOf(wp, "services") }

// pluginConfigOf is the object's pluginConfig field as compact JSON, or
// "<none>".
func pluginConfigOf(wp *unstructured.Unstructured, field string) string {
	v, found, _ := unstructured.NestedFieldNoCopy(wp.Object, kindOf(wp).Path("pluginConfig", field)...)
	if !found {
		return "<none>"
	}
	data, _ := json.Marshal(v)
	return string(data)
}

// want is the services JSON the controller should write for eps on port
// (in the order the controller sorts them: by name).
func want(port int, eps ...ep) string {
	var list []services.Service
	for _, e := range eps {
		addr := fmt.Sprintf("%s:%d", e.ip, port)
		if strings.Contains(e.ip, ":") {
			addr = fmt.Sprintf("[%s]:%d", e.ip, port)
		}
		list = append(list, services.Service{Name: e.pod, Address: addr, HashID: e.pod, Enabled: !e.notReady && !e.terminating})
	}
	sortServices(list)
	var generic any
	_ = json.Unmarshal(services.JSON(list), &generic)
	data, _ := json.Marshal(generic) // the key order servicesOf uses
	return string(data)
}

func sortServices(l []services.Service) {
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j].Name < l[j-1].Name; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
}

// waitFor polls the WasmPlugin until cond holds, failing after timeout with
// the last state it saw; it returns how long it took.
func (k *kube) waitFor(name string, timeout time.Duration, what string, cond func(*unstructured.Unstructured) bool) time.Duration {
	k.t.Helper()
	start := time.Now()
	var wp *unstructured.Unstructured
	for {
		wp = k.get(name)
		if cond(wp) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			k.t.Fatalf("after %v, %s %s/%s: want %s; services = %s, annotations = %v",
				timeout, k.kind.GVK.Kind, k.ns, name, what, servicesOf(wp), wp.GetAnnotations())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitServices waits until the WasmPlugin's services are want.
func (k *kube) waitServices(name, want string, timeout time.Duration) time.Duration {
	k.t.Helper()
	return k.waitFor(name, timeout, "services "+want, func(wp *unstructured.Unstructured) bool { return servicesOf(wp) == want })
}

// waitError waits until the WasmPlugin's hashlb.io/error contains sub ("" : is absent).
func (k *kube) waitError(name, sub string, timeout time.Duration) string {
	k.t.Helper()
	var msg string
	k.waitFor(name, timeout, fmt.Sprintf("%s containing %q", AnnotationError, sub), func(wp *unstructured.Unstructured) bool {
		v, ok := wp.GetAnnotations()[AnnotationError]
		msg = v
		if sub == "" {
			return !ok
		}
		return ok && strings.Contains(v, sub)
	})
	return msg
}

// events lists the events.k8s.io events about a WasmPlugin with reason.
func (k *kube) events(name, reason string) []eventsv1.Event {
	k.t.Helper()
	var list eventsv1.EventList
	if err := k.c.List(context.Background(), &list, client.InNamespace(k.ns)); err != nil {
		k.t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == k.kind.GVK.Kind && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits for an event about name with reason whose note contains sub.
func (k *kube) waitEvent(name, reason, sub string, timeout time.Duration) eventsv1.Event {
	k.t.Helper()
	start := time.Now()
	for {
		for _, e := range k.events(name, reason) {
			if strings.Contains(e.Note, sub) {
				return e
			}
		}
		if time.Since(start) > timeout {
			k.t.Fatalf("after %v: no %s event about %s %s/%s with a note containing %q (got %v)",
				timeout, reason, k.kind.GVK.Kind, k.ns, name, sub, notes(k.events(name, reason)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func notes(evs []eventsv1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Note)
	}
	return out
}

// without returns a deep copy of the object's spec with pluginConfig.services removed.
func specWithoutServices(wp *unstructured.Unstructured) map[string]any {
	obj := wp.DeepCopy()
	unstructured.RemoveNestedField(obj.Object, kindOf(wp).Path("pluginConfig", "services")...)
	spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
	return spec
}

func sameSpec(a, b map[string]any) bool { return reflect.DeepEqual(a, b) }
