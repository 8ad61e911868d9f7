package istio

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// testControllerLoop puts hashlb-controller between Kubernetes and the
// shipped WasmPlugin, annotated as docs/controller.md says: the Service's
// EndpointSlice changes (backend-2's endpoint leaves), the controller
// patches the WasmPlugin, istiod pushes ECDS, Envoy reconfigures hashlb.
// It measures the time from the slice's update to the first request
// decided by the new list, and checks that every request is then on
// lbcore's choice under the new list, that only the keys of the departed
// endpoint moved, and that persistence entries survived the pushes.
func testControllerLoop(t *testing.T, cl *cluster, sc *sidecar, wasmplugin []byte) {
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hashlb-backends", Namespace: "demo"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}
	slice := endpointSlice("backend-1", "backend-2", "backend-3")
	for _, o := range []client.Object{svc, slice} {
		if err := cl.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	annotated := bytes.Replace(wasmplugin, []byte("  namespace: demo\n"),
		[]byte("  namespace: demo\n  annotations:\n    hashlb.io/service: hashlb-backends\n    hashlb.io/port: http\n"), 1)
	if err := cl.Apply("wasmplugin.yaml", annotated); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{slice, svc} {
			_ = cl.Client.Delete(ctx, o)
		}
		if err := cl.Apply("wasmplugin.yaml", wasmplugin); err != nil {
			t.Error(err)
		}
	})
	ctrl := startController(t, cl)

	// The controller's first write gives each service the pod's name as
	// its hashId; Envoy then runs that configuration.
	cfg1 := waitPluginConfig(t, cl, ctrl, func(c string) bool { return strings.Contains(c, `"hashId"`) })
	if err := waitFor(sc, sidecarChecks(env.Module, "wasmplugin.yaml", []byte(cfg1)), 3*time.Minute, func(err error) bool { return err == nil }); err != nil {
		t.Fatalf("the controller's first write, after 3 min: %v", err)
	}
	o1, err := newOracle([]byte(cfg1))
	if err != nil {
		t.Fatal(err)
	}
	reqs := keyless(corpus.Requests(120))
	before := make([]string, len(reqs))
	probe := -1
	for i, cr := range reqs {
		a, err := o1.send(cr)
		if err != nil {
			t.Fatalf("request %d under the controller's first list: %v", i, err)
		}
		before[i] = a.backend
		if probe < 0 && a.backend == "backend-2" {
			probe = i
		}
	}
	if probe < 0 {
		t.Fatal("no request goes to backend-2: the change would show nothing")
	}
	// Clients with a persistence key, each on its entry's backend.
	sticky := map[string]string{}
	for i := range 12 {
		id := fmt.Sprintf("loop-%d", i)
		a, err := clientRequest{srcIP: fmt.Sprintf("127.0.%d.9", i), method: "GET", target: "/", headers: [][2]string{{"x-client-id", id}}}.send(outboundAddr)
		if err != nil {
			t.Fatal(err)
		}
		sticky[id] = a.backend
	}

	// backend-2's endpoint leaves the slice.
	start := time.Now()
	if err := cl.Client.Update(ctx, endpointSlice("backend-1", "backend-3")); err != nil {
		t.Fatal(err)
	}
	pc := fromCorpus(reqs[probe])
	var took time.Duration
	for deadline := start.Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		a, err := pc.send(outboundAddr)
		if err == nil && a.backend != "backend-2" {
			took = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 min after the slice change, the probe still reaches %s (%v)\ncontroller log:\n%s", a.backend, err, ctrl.String())
		}
	}
	t.Logf("slice change to the first request decided without backend-2: %s (the controller's debounce is 1 s)", took.Round(time.Millisecond))

	cfg2 := waitPluginConfig(t, cl, ctrl, func(c string) bool { return !strings.Contains(c, "backend-2") })
	o2, err := newOracle([]byte(cfg2))
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for i, cr := range reqs {
		a, err := o2.send(cr)
		if err != nil {
			t.Errorf("request %d under the new list: %v", i, err)
			continue
		}
		if a.backend != before[i] {
			moved++
			if before[i] != "backend-2" {
				t.Errorf("request %d moved from %s to %s: only backend-2's keys may move", i, before[i], a.backend)
			}
		}
	}
	kept := 0
	for id, was := range sticky {
		a, err := clientRequest{srcIP: "127.2.3.4", method: "GET", target: "/", headers: [][2]string{{"x-client-id", id}}}.send(outboundAddr)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case was == "backend-2" && a.backend == "backend-2":
			t.Errorf("client %s still on the departed backend-2", id)
		case was != "backend-2" && a.backend != was:
			t.Errorf("client %s moved from %s to %s: its persistence entry was lost in the push", id, was, a.backend)
		case was != "backend-2":
			kept++
		}
	}
	t.Logf("%d of %d requests moved, all off backend-2; %d of %d clients kept their persistence entry across the pushes", moved, len(reqs), kept, len(sticky))
}

// endpointSlice is the Service's one EndpointSlice with the named pods,
// pod backend-N at 10.10.0.1N:8080 (serviceentry.yaml's addresses).
func endpointSlice(pods ...string) *discoveryv1.EndpointSlice {
	ready, port, name, proto := true, int32(8080), "http", corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "hashlb-backends-1", Namespace: "demo",
			Labels: map[string]string{discoveryv1.LabelServiceName: "hashlb-backends"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{"10.10.0.1" + strings.TrimPrefix(p, "backend-")},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: p},
		})
	}
	return s
}

// startController runs hashlb-controller against the cluster, for the
// WasmPlugins of namespace demo, until the test ends; its log is returned.
func startController(t *testing.T, cl *cluster) *envoyrun.SyncBuffer {
	t.Helper()
	log := &envoyrun.SyncBuffer{}
	cmd := exec.Command(env.Controller, "-kubeconfig", cl.KubeConfig, "-namespace", "demo", "-kinds", "WasmPlugin",
		"-metrics-bind-address", "0", "-health-probe-bind-address", "0")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("hashlb-controller log:\n%s", log.String())
		}
	})
	return log
}

// waitPluginConfig waits (up to 2 min) until the WasmPlugin's pluginConfig,
// as JSON, satisfies ok, and returns it.
func waitPluginConfig(t *testing.T, cl *cluster, ctrl *envoyrun.SyncBuffer, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var u unstructured.Unstructured
		u.SetAPIVersion("extensions.istio.io/v1alpha1")
		u.SetKind("WasmPlugin")
		if err := cl.Client.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "hashlb"}, &u); err != nil {
			t.Fatal(err)
		}
		pc, _, _ := unstructured.NestedMap(u.Object, "spec", "pluginConfig")
		data, err := json.Marshal(pc)
		if err != nil {
			t.Fatal(err)
		}
		if ok(string(data)) {
			return string(data)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 min the WasmPlugin's pluginConfig is %s\ncontroller log:\n%s", data, ctrl.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
