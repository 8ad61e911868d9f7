package controller

// The controller's output for a churning Service, applied to a running
// hashlb module in hostsim: the EndpointSlices become a pluginConfig by the
// same functions the reconciler uses (services.FromSlices, newConfig), and
// each one is applied to the host (a new root context in the same VMs, as
// Envoy does) while requests flow. No API server is needed.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/services"
	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// hashlbWasm builds the module from this checkout's ./filter as build.sh
// does (GOOS=wasip1 GOARCH=wasm, c-shared) into a temporary directory, so
// the test runs the source it tests; a build failure fails the test.
func hashlbWasm(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "hashlb.wasm")
	cmd := exec.Command("go", "build", "-trimpath", "-buildmode=c-shared", "-o", out, "./filter")
	cmd.Dir = filepath.Join("..", "..", "..") // the repository root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building ./filter for wasip1: %v\n%s", err, b)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// podAt is one pod of the churning Service.
type podAt struct {
	name, ip string
	ready    bool
}

// endpointSlices are the Service's EndpointSlices for pods, split across two
// slices as the EndpointSlice controller may split them.
func endpointSlices(pods []podAt) []discoveryv1.EndpointSlice {
	out := make([]discoveryv1.EndpointSlice, 2)
	for i := range out {
		out[i] = discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: fmt.Sprintf("web-%c", 'a'+i), Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
		}
	}
	for i, p := range pods {
		es := &out[i%2]
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{p.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(p.ready), Serving: ptr(p.ready), Terminating: ptr(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: p.name},
		})
	}
	return out
}

// TestControllerOutputOnHostsim: a Service scales up by one, a pod is
// rescheduled with a new IP and its name, a pod turns unready and ready
// again, and the Service scales down by one. Each state's EndpointSlices
// become the pluginConfig the controller would write, applied to a running
// host while requests flow on every worker. No request fails; every key
// goes where lbcore says for that configuration, at the chosen pod's
// address; a key moves only when its pod left rotation (and then it must) or
// to a pod that joined; the rescheduled pod keeps every key at its new
// address.
func TestControllerOutputOnHostsim(t *testing.T) {
	const workers, keys = 2, 600
	wasm := hashlbWasm(t)

	wp := NewWasmPlugin()
	wp.SetNamespace("demo")
	wp.SetName("web")
	wp.SetAnnotations(map[string]string{services.AnnotationService: "web"})
	if err := unstructured.SetNestedMap(wp.Object, map[string]any{"lbMethod": "URLHASH", "debugHeader": true}, "spec", "pluginConfig"); err != nil {
		t.Fatal(err)
	}
	sel, _, err := services.ParseAnnotations(wp.GetAnnotations())
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	port, err := services.ResolvePort(svc, sel.Port)
	if err != nil {
		t.Fatal(err)
	}
	// pluginConfig is what the controller writes for pods, as the JSON the
	// filter is configured with.
	pluginConfig := func(pods []podAt) ([]byte, []services.Service) {
		t.Helper()
		list := services.FromSlices(endpointSlices(pods), port, sel.AddressType)
		cfg, err := newConfig(wp, list)
		if err != nil {
			t.Fatalf("newConfig: %v", err)
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b, list
	}

	pods := make([]podAt, 6)
	for i := range pods {
		pods[i] = podAt{fmt.Sprintf("web-%d", i), fmt.Sprintf("10.1.0.%d", 10+i), true}
	}
	first, firstList := pluginConfig(pods)
	h, err := hostsim.New(context.Background(), wasm, hostsim.Config{Workers: workers, PluginConfig: first})
	if err != nil {
		t.Fatalf("hostsim.New: %v", err)
	}
	defer h.Close(context.Background())

	// known is every name@address the module may send a request to: the
	// enabled services of every configuration applied so far (a request in
	// flight during a change may still use the old one).
	var mu sync.Mutex
	known := map[string]bool{}
	learn := func(list []services.Service) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range list {
			if s.Enabled {
				known[s.Name+"@"+s.Address] = true
			}
		}
	}
	learn(firstList)

	// The load: on every worker, requests for rotating keys, each held open
	// across the next few requests (so some span a change) before it ends.
	var total, failed int
	var failures []string
	fail := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		failed++
		if len(failures) < 5 {
			failures = append(failures, msg)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var held []*hostsim.Stream
			end := func(s *hostsim.Stream) {
				s.ResponseHeaders([][2]string{{":status", "200"}})
				if err := s.Finish(); err != nil {
					fail(fmt.Sprintf("worker %d: Finish: %v", w, err))
				}
			}
			defer func() {
				for _, s := range held {
					end(s)
				}
			}()
			for k := w; ; k += workers {
				select {
				case <-stop:
					return
				default:
				}
				s := h.Stream(w)
				res := s.RequestHeaders(keyRequest(k%keys), nil)
				name, _ := res.Header("x-hashlb-service")
				up, _ := res.Header("x-envoy-original-dst-host")
				mu.Lock()
				total++
				ok := res.Err == nil && res.LocalReply == nil && known[name+"@"+up]
				mu.Unlock()
				if !ok {
					fail(fmt.Sprintf("worker %d key %d: err %v, local reply %v, sent to %s@%s", w, k%keys, res.Err, res.LocalReply, name, up))
				}
				if held = append(held, s); len(held) > 4 {
					end(held[0])
					held = held[1:]
				}
				time.Sleep(200 * time.Microsecond) // leave CPU for the changes and the sweeps
			}
		}(w)
	}
	requests := func() int {
		mu.Lock()
		defer mu.Unlock()
		return total
	}

	// sweep sends every key once and checks it against lbcore for config.
	sweep := func(step string, config []byte, list []services.Service) []hop {
		t.Helper()
		c, err := lbcore.ParseConfig(config)
		if err != nil {
			t.Fatalf("%s: lbcore.ParseConfig: %v", step, err)
		}
		bal := lbcore.NewBalancer(c, 1)
		addr := map[string]string{}
		for _, s := range list {
			addr[s.Name] = s.Address
		}
		got := make([]hop, keys)
		for k := range got {
			s := h.Stream(k % workers)
			res := s.RequestHeaders(keyRequest(k), nil)
			if res.Err != nil || res.LocalReply != nil {
				t.Fatalf("%s: key %d: err %v, local reply %+v", step, k, res.Err, res.LocalReply)
			}
			got[k].service, _ = res.Header("x-hashlb-service")
			got[k].upstream, _ = res.Header("x-envoy-original-dst-host")
			s.ResponseHeaders([][2]string{{":status", "200"}})
			if err := s.Finish(); err != nil {
				t.Fatalf("%s: key %d: Finish: %v", step, k, err)
			}
			r := lbcore.Request{Target: keyPath(k), Authority: "h", Method: "GET"}
			d := bal.Decide(&r, time.Unix(0, 0))
			want := c.Services[d.At(0)].Name
			if got[k].service != want || got[k].upstream != addr[want] {
				t.Fatalf("%s: key %d went to %s at %s; lbcore chooses %s at %s", step, k, got[k].service, got[k].upstream, want, addr[want])
			}
		}
		return got
	}
	before := sweep("initial", first, firstList)

	set := func(name string, f func(p *podAt)) []podAt {
		out := append([]podAt(nil), pods...)
		for i := range out {
			if out[i].name == name {
				f(&out[i])
			}
		}
		return out
	}
	without := func(name string) []podAt {
		var out []podAt
		for _, p := range pods {
			if p.name != name {
				out = append(out, p)
			}
		}
		return out
	}
	steps := []struct {
		name  string
		pods  func() []podAt
		left  string // the pod that left rotation: all its keys move
		moved bool   // some keys move (to a pod that joined, or off the pod that left)
	}{
		{name: "scale up by one", pods: func() []podAt { return append(append([]podAt(nil), pods...), podAt{"web-6", "10.1.0.16", true}) }, moved: true},
		{name: "web-4 rescheduled with a new IP", pods: func() []podAt { return set("web-4", func(p *podAt) { p.ip = "10.1.9.40" }) }},
		{name: "web-1 turns unready", pods: func() []podAt { return set("web-1", func(p *podAt) { p.ready = false }) }, left: "web-1", moved: true},
		{name: "web-1 ready again", pods: func() []podAt { return set("web-1", func(p *podAt) { p.ready = true }) }, moved: true},
		{name: "scale down by one", pods: func() []podAt { return without("web-2") }, left: "web-2", moved: true},
	}
	var beforeUnready []hop
	for _, st := range steps {
		pods = st.pods()
		config, list := pluginConfig(pods)
		learn(list)
		was := requests()
		if err := h.Configure(config); err != nil {
			t.Fatalf("%s: Configure: %v", st.name, err)
		}
		for requests() < was+50 { // requests flow on the new configuration
			time.Sleep(time.Millisecond)
		}
		after := sweep(st.name, config, list)

		enabled := map[string]bool{}
		for _, s := range list {
			enabled[s.Name] = s.Enabled
		}
		moved := 0
		for k := range after {
			b, a := before[k], after[k]
			if a.service == b.service {
				if a.service == st.left {
					t.Errorf("%s: key %d stayed on %s, which left rotation", st.name, k, st.left)
				}
				continue
			}
			moved++
			switch {
			case b.service == st.left:
			case st.name == "scale up by one" && a.service == "web-6":
			case st.name == "web-1 ready again" && a.service == "web-1":
			default:
				t.Errorf("%s: key %d moved %s → %s; only the keys of a pod that left may move, or keys to a pod that joined", st.name, k, b.service, a.service)
			}
		}
		if st.moved && moved == 0 {
			t.Errorf("%s: no key moved", st.name)
		}
		switch st.name {
		case "web-4 rescheduled with a new IP":
			n := 0
			for k := range after {
				if after[k].service == "web-4" {
					n++
					if after[k].upstream != "10.1.9.40:8080" {
						t.Errorf("%s: key %d is on web-4 at %s, want its new address 10.1.9.40:8080", st.name, k, after[k].upstream)
					}
				}
			}
			if n == 0 {
				t.Errorf("%s: no key on web-4", st.name)
			}
		case "web-1 turns unready":
			beforeUnready = before
		case "web-1 ready again":
			for k := range after {
				if after[k] != beforeUnready[k] {
					t.Errorf("%s: key %d at %+v, want %+v as before web-1 turned unready", st.name, k, after[k], beforeUnready[k])
				}
			}
		}
		t.Logf("%s: %d services (%d enabled), %d of %d keys moved", st.name, len(list), countTrue(enabled), moved, keys)
		before = after
	}

	close(stop)
	wg.Wait()
	if failed != 0 {
		t.Errorf("%d of %d requests under load failed across %d changes: %q", failed, total, len(steps), failures)
	}
	for w := 0; w < workers; w++ {
		if err := h.Err(w); err != nil {
			t.Errorf("worker %d died: %v", w, err)
		}
		if _, draining := h.RootContexts(w); len(draining) != 0 {
			t.Errorf("worker %d: root contexts %v still draining after every stream ended", w, draining)
		}
	}
	t.Logf("%d requests under load, %d changes, %d failed", total, len(steps), failed)
}

// hop is where the module sent one request: the service and its address.
type hop struct{ service, upstream string }

func keyPath(k int) string { return fmt.Sprintf("/obj/%d", k) }

func keyRequest(k int) [][2]string {
	return [][2]string{{":method", "GET"}, {":path", keyPath(k)}, {":authority", "h"}}
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// TestScaledToZeroOnHostsim: the configuration the controller writes when
// a Service has no endpoints left (every listed service disabled) makes
// hashlb answer every request itself with 503 "no healthy service", and
// nothing leaves for a pod that is gone. With persistence, the keys'
// entries stay in the table while nothing is selectable: when the same pods
// come back (a StatefulSet's names), each key returns to its pod.
func TestScaledToZeroOnHostsim(t *testing.T) {
	const keys = 200
	wasm := hashlbWasm(t)
	wp := NewWasmPlugin()
	wp.SetNamespace("demo")
	wp.SetName("web")
	if err := unstructured.SetNestedMap(wp.Object, map[string]any{"lbMethod": "ROUNDROBIN",
		"persistence": map[string]any{"keys": []any{"${request.path}"}, "expire": "1h"}}, "spec", "pluginConfig"); err != nil {
		t.Fatal(err)
	}
	pods := make([]podAt, 4)
	for i := range pods {
		pods[i] = podAt{fmt.Sprintf("web-%d", i), fmt.Sprintf("10.1.0.%d", 10+i), true}
	}
	up, _, _ := generic(services.FromSlices(endpointSlices(pods), "http", discoveryv1.AddressTypeIPv4))
	config := func(list []any) []byte {
		t.Helper()
		cfg, err := newConfigJSON(wp, list)
		if err != nil {
			t.Fatalf("newConfigJSON: %v", err)
		}
		b, _ := json.Marshal(cfg)
		return b
	}
	h, err := hostsim.New(context.Background(), wasm, hostsim.Config{Workers: 1, PluginConfig: config(up)})
	if err != nil {
		t.Fatalf("hostsim.New: %v", err)
	}
	defer h.Close(context.Background())
	send := func(k int) hostsim.Result {
		s := h.Stream(0)
		res := s.RequestHeaders(keyRequest(k), nil)
		if res.LocalReply == nil {
			s.ResponseHeaders([][2]string{{":status", "200"}})
		}
		if err := s.Finish(); err != nil {
			t.Fatalf("key %d: Finish: %v", k, err)
		}
		return res
	}
	first := map[int]string{}
	for k := range keys {
		res := send(k)
		first[k], _ = res.Header("x-hashlb-service")
		if res.LocalReply != nil || first[k] == "" {
			t.Fatalf("key %d with 4 pods: local reply %+v, service %q", k, res.LocalReply, first[k])
		}
	}

	// Scaled to zero: what the reconciler writes (disabled) for the listed services.
	var current any
	_ = json.Unmarshal(config(up), &struct {
		Services *any `json:"services"`
	}{&current})
	off, n := disabled(current)
	if n != len(pods) {
		t.Fatalf("disabled() kept %d services, want %d", n, len(pods))
	}
	if err := h.Configure(config(off)); err != nil {
		t.Fatalf("the scaled-to-zero configuration: %v", err)
	}
	for k := range keys {
		res := send(k)
		if res.LocalReply == nil || res.LocalReply.Status != 503 || string(res.LocalReply.Body) != "no healthy service" {
			t.Fatalf("key %d scaled to zero: local reply %+v, want 503 \"no healthy service\"", k, res.LocalReply)
		}
		if v, ok := res.Header("x-envoy-original-dst-host"); ok {
			t.Fatalf("key %d scaled to zero: the request carries x-envoy-original-dst-host %q", k, v)
		}
	}

	// The same pods back (new addresses, same names and hashIds).
	for i := range pods {
		pods[i].ip = fmt.Sprintf("10.2.0.%d", 10+i)
	}
	back, _, _ := generic(services.FromSlices(endpointSlices(pods), "http", discoveryv1.AddressTypeIPv4))
	if err := h.Configure(config(back)); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for k := range keys {
		if got, _ := send(k).Header("x-hashlb-service"); got != first[k] {
			moved++
		}
	}
	t.Logf("%d keys: 503 while scaled to zero; back on the same pods, %d keys moved", keys, moved)
	if moved != 0 {
		t.Errorf("%d of %d keys moved when the same pods came back, want 0 (their entries stay while nothing is selectable)", moved, keys)
	}
}
