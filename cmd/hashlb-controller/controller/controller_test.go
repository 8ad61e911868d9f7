package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/services"
	"github.com/hashlb/hashlb/lbcore"
)

// Every test runs against the real kube-apiserver and etcd (package
// testenv), in its own namespace, with its own controller replica watching
// only that namespace; the tests write EndpointSlices themselves, as
// Kubernetes' EndpointSlice controller would.

const settle = 10 * time.Second // how long a test waits for a write it expects

var v4 = discoveryv1.AddressTypeIPv4

func annotated(svc string) map[string]string {
	return map[string]string{services.AnnotationService: svc}
}

// basicConfig is a valid plugin configuration whose static services the
// controller replaces.
func basicConfig() map[string]any {
	return map[string]any{
		"lbMethod": "URLHASH",
		"services": []any{map[string]any{"name": "static", "address": "192.0.2.1:80"}},
	}
}

func TestCreateScaleUpScaleDown(t *testing.T) {
	forKinds(t, func(t *testing.T, k *kube) {
		k.controller(Options{})
		k.service("web")
		all := pods("web", 1, 6)
		k.slice("web", "web-a", v4, httpPort, all[:3]...)
		k.wasmPlugin("hashlb", annotated("web"), basicConfig())

		k.waitServices("hashlb", want(8080, all[:3]...), settle)
		k.waitEvent("hashlb", ReasonUpdated, "3 services (3 enabled) from Service web", settle)

		// Scale up: three more pods, one of them in a second slice.
		k.slice("web", "web-a", v4, httpPort, all[:5]...)
		k.slice("web", "web-b", v4, httpPort, all[5])
		k.waitServices("hashlb", want(8080, all...), settle)

		// Scale down to two.
		k.slice("web", "web-b", v4, httpPort)
		k.slice("web", "web-a", v4, httpPort, all[:2]...)
		k.waitServices("hashlb", want(8080, all[:2]...), settle)
	})
}

// TestUnchangedWritesNothing: an EndpointSlice update that changes nothing
// hashlb reads causes no patch and no new resourceVersion.
func TestUnchangedWritesNothing(t *testing.T) {
	t.Parallel()
	k := newKube(t)
	w, _ := k.controller(Options{})
	p := k.webPods(3)
	k.wasmPlugin("hashlb", annotated("web"), basicConfig())
	k.waitServices("hashlb", want(8080, p...), settle)
	time.Sleep(2 * time.Second) // let the write's own watch event pass
	before, rv := w.patches.Load(), k.get("hashlb").GetResourceVersion()

	// The same endpoints in another order, and a second slice with no
	// endpoints: the list hashlb computes is the same.
	k.slice("web", "web-a", v4, httpPort, p[2], p[0], p[1])
	k.slice("web", "web-b", v4, httpPort)
	time.Sleep(3 * time.Second)
	if got := w.patches.Load(); got != before {
		t.Errorf("patches after an update that changes no service = %d, want %d", got, before)
	}
	if got := k.get("hashlb").GetResourceVersion(); got != rv {
		t.Errorf("resourceVersion after an update that changes no service = %s, want %s (unchanged)", got, rv)
	}
	if n := len(k.events("hashlb", ReasonUpdated)); n != 1 {
		t.Errorf("%s events = %d, want 1 (only the first write)", ReasonUpdated, n)
	}
}

// TestReadinessFlip: a pod that stops being ready is disabled, and enabled
// again, each within 2 s.
func TestReadinessFlip(t *testing.T) {
	forKinds(t, func(t *testing.T, k *kube) {
		k.controller(Options{})
		p := k.webPods(3)
		k.wasmPlugin("hashlb", annotated("web"), basicConfig())
		k.waitServices("hashlb", want(8080, p...), settle)
		time.Sleep(1500 * time.Millisecond) // past the debounce of the first write

		flipped := append([]ep(nil), p...)
		flipped[1].notReady = true
		k.slice("web", "web-a", v4, httpPort, flipped...)
		took := k.waitServices("hashlb", want(8080, flipped...), settle)
		t.Logf("web-1 not ready: disabled after %v", took)
		if took > 2*time.Second {
			t.Errorf("web-1 not ready: enabled became false after %v, want within 2s", took)
		}
		time.Sleep(1500 * time.Millisecond)

		flipped[1].notReady, flipped[2].terminating = false, true
		k.slice("web", "web-a", v4, httpPort, flipped...)
		took = k.waitServices("hashlb", want(8080, flipped...), settle)
		t.Logf("web-1 ready, web-2 terminating: followed after %v", took)
		if took > 2*time.Second {
			t.Errorf("web-1 ready, web-2 terminating: services followed after %v, want within 2s", took)
		}
	})
}

// TestRollingUpdate: 20 pods replaced one by one, each going through
// not-ready, ready, and the old one terminating then gone (81 slice
// updates in about 4 s), cause a few patches, not one per update.
func TestRollingUpdate(t *testing.T) {
	forKinds(t, func(t *testing.T, k *kube) {
		w, _ := k.controller(Options{})
		k.service("web")
		old, next := pods("web-old", 1, 20), pods("web-new", 2, 20)
		k.slice("web", "web-a", v4, httpPort, old...)
		k.wasmPlugin("hashlb", annotated("web"), basicConfig())
		k.waitServices("hashlb", want(8080, old...), settle)
		time.Sleep(2 * time.Second)
		before := w.patches.Load()

		start := time.Now()
		current := append([]ep(nil), old...)
		for i := range 20 {
			step := func(mutate func()) {
				mutate()
				k.slice("web", "web-a", v4, httpPort, current...)
				time.Sleep(50 * time.Millisecond)
			}
			n := next[i]
			n.notReady = true
			step(func() { current = append(current, n) })
			step(func() { current[len(current)-1].notReady = false })
			step(func() {
				for j := range current {
					if current[j].pod == old[i].pod {
						current[j].terminating = true
					}
				}
			})
			step(func() {
				for j := range current {
					if current[j].pod == old[i].pod {
						current = append(current[:j], current[j+1:]...)
						break
					}
				}
			})
		}
		took := time.Since(start)
		k.waitServices("hashlb", want(8080, next...), settle)
		patches := w.patches.Load() - before
		// One write per debounce interval during the update, plus the last.
		limit := int64(took/time.Second) + 2
		t.Logf("rolling update of 20 pods: 80 slice updates in %v, %d patches", took.Round(time.Millisecond), patches)
		if patches > limit || patches >= 20 {
			t.Errorf("rolling update of 20 pods over %v: %d patches, want at most %d", took.Round(time.Millisecond), patches, limit)
		}
	})
}

func TestPortAnnotation(t *testing.T) {
	t.Parallel()
	k := newKube(t)
	k.controller(Options{})
	k.service("web",
		corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
		corev1.ServicePort{Name: "grpc", Port: 9000, TargetPort: intstr.FromString("grpc")})
	p := pods("web", 1, 2)
	k.slice("web", "web-a", v4, map[string]int32{"http": 8080, "grpc": 9090}, p...)

	k.wasmPlugin("no-port", annotated("web"), basicConfig())
	msg := k.waitError("no-port", "has 2 ports", settle)
	if want := fmt.Sprintf("Service %s/web has 2 ports (http=80, grpc=9000): set hashlb.io/port to one of them", k.ns); msg != want {
		t.Errorf("%s = %q, want %q", AnnotationError, msg, want)
	}
	if got := servicesOf(k.get("no-port")); got != `[{"address":"192.0.2.1:80","name":"static"}]` {
		t.Errorf("services without a port annotation = %s, want the static list kept", got)
	}

	tests := []struct {
		name, port string
		target     int
	}{
		{"by-name", "grpc", 9090},
		{"by-number", "80", 8080},
	}
	for _, tt := range tests {
		ann := annotated("web")
		ann[services.AnnotationPort] = tt.port
		k.wasmPlugin(tt.name, ann, basicConfig())
		k.waitServices(tt.name, want(tt.target, p...), settle)
	}

	// Naming the port afterwards clears the error.
	wp := k.get("no-port")
	ann := wp.GetAnnotations()
	ann[services.AnnotationPort] = "grpc"
	wp.SetAnnotations(ann)
	if err := k.c.Update(context.Background(), wp); err != nil {
		t.Fatal(err)
	}
	k.waitServices("no-port", want(9090, p...), settle)
	k.waitError("no-port", "", settle)
}

func TestAddressFamilies(t *testing.T) {
	t.Parallel()
	k := newKube(t)
	k.controller(Options{})
	k.service("web")
	p4 := pods("web", 1, 2)
	p6 := []ep{{pod: "web-0", ip: "fd00::10"}, {pod: "web-1", ip: "fd00::11", notReady: true}}
	k.slice("web", "web-v4", v4, httpPort, p4...)
	k.slice("web", "web-v6", discoveryv1.AddressTypeIPv6, httpPort, p6...)

	k.wasmPlugin("default", annotated("web"), basicConfig())
	ann := annotated("web")
	ann[services.AnnotationAddressType] = "IPv6"
	k.wasmPlugin("ipv6", ann, basicConfig())
	ann = annotated("web")
	ann[services.AnnotationAddressType] = "IPv7"
	k.wasmPlugin("bad", ann, basicConfig())

	k.waitServices("default", want(8080, p4...), settle)
	k.waitServices("ipv6", want(8080, p6...), settle)
	k.waitError("bad", `hashlb.io/address-type: "IPv7" is not IPv4 or IPv6`, settle)
}

// TestMissingService: a WasmPlugin naming a Service that does not exist
// keeps its services and says why; once the Service appears it follows it.
func TestMissingService(t *testing.T) {
	t.Parallel()
	k := newKube(t)
	k.controller(Options{})
	k.wasmPlugin("hashlb", annotated("nope"), basicConfig())
	k.waitError("hashlb", fmt.Sprintf("hashlb.io/service: Service %s/nope not found", k.ns), settle)
	k.waitEvent("hashlb", ReasonRejected, "keeping the 1 services already in spec.pluginConfig.services", settle)
	if got := servicesOf(k.get("hashlb")); got != `[{"address":"192.0.2.1:80","name":"static"}]` {
		t.Errorf("services with a missing Service = %s, want the static list kept", got)
	}

	k.service("nope")
	p := pods("nope", 1, 2)
	k.slice("nope", "nope-a", v4, httpPort, p...)
	k.waitServices("hashlb", want(8080, p...), settle)
	k.waitError("hashlb", "", settle)
}

// TestInvalidResultKeptOut: endpoints that lbcore would refuse (one pod
// name at two addresses) never replace the last good list.
func TestInvalidResultKeptOut(t *testing.T) {
	forKinds(t, func(t *testing.T, k *kube) {
		k.controller(Options{})
		p := k.webPods(3)
		k.wasmPlugin("hashlb", annotated("web"), basicConfig())
		good := want(8080, p...)
		k.waitServices("hashlb", good, settle)

		k.slice("web", "web-b", v4, httpPort, ep{pod: "web-0", ip: "10.9.0.1"})
		msg := k.waitError("hashlb", "lbcore refuses the configuration with the 4 services found", settle)
		t.Logf("%s: %s", AnnotationError, msg)
		k.waitEvent("hashlb", ReasonRejected, "keeping the 3 services", settle)
		if got := servicesOf(k.get("hashlb")); got != good {
			t.Errorf("services after a duplicate = %s, want the last good %s", got, good)
		}

		k.slice("web", "web-b", v4, httpPort)
		k.slice("web", "web-a", v4, httpPort, p[:2]...)
		k.waitServices("hashlb", want(8080, p[:2]...), settle)
		k.waitError("hashlb", "", settle)
	})
}

// TestOtherFieldsUntouched: the controller changes spec.pluginConfig.services
// and nothing else of the object.
func TestOtherFieldsUntouched(t *testing.T) {
	forKinds(t, func(t *testing.T, k *kube) {
		k.controller(Options{})
		p := k.webPods(2)
		cfg := map[string]any{
			"lbMethod":       "SOURCEIPHASH",
			"netmask":        "255.255.255.0",
			"upstreamCount":  int64(2),
			"upstreamHeader": "x-envoy-original-dst-host",
			"passiveHealth":  map[string]any{"consecutiveFailures": int64(5), "ejectionTime": "30s"},
			"persistence":    map[string]any{"keys": []any{"${request.header.x-client-id}"}, "expire": "1d"},
			"services":       []any{map[string]any{"name": "static", "address": "192.0.2.1:80", "weight": int64(3)}},
		}
		ann := annotated("web")
		ann["example.com/owner"] = "team-a"
		k.wasmPlugin("hashlb", ann, cfg)
		wp := k.get("hashlb")
		wp.SetLabels(map[string]string{"app": "hashlb"})
		if err := k.c.Update(context.Background(), wp); err != nil {
			t.Fatal(err)
		}
		before := k.get("hashlb")

		k.waitServices("hashlb", want(8080, p...), settle)
		after := k.get("hashlb")
		if a, b := specWithoutServices(after), specWithoutServices(before); !sameSpec(a, b) {
			t.Errorf("spec apart from services changed:\n got %v\nwant %v", a, b)
		}
		for _, f := range []struct {
			name      string
			got, want any
		}{
			{"annotations", after.GetAnnotations(), before.GetAnnotations()},
			{"labels", after.GetLabels(), before.GetLabels()},
		} {
			if fmt.Sprint(f.got) != fmt.Sprint(f.want) {
				t.Errorf("%s = %v, want %v (untouched)", f.name, f.got, f.want)
			}
		}
		// The operator edits another key: kept, and the services stay.
		if err := unstructured.SetNestedField(after.Object, "ROUNDROBIN", k.kind.Path("pluginConfig", "lbMethod")...); err != nil {
			t.Fatal(err)
		}
		if err := k.c.Update(context.Background(), after); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		final := k.get("hashlb")
		if got, _, _ := unstructured.NestedString(final.Object, k.kind.Path("pluginConfig", "lbMethod")...); got != "ROUNDROBIN" {
			t.Errorf("lbMethod after the operator's edit = %q, want ROUNDROBIN", got)
		}
		if got := servicesOf(final); got != want(8080, p...) {
			t.Errorf("services after the operator's edit = %s, want %s", got, want(8080, p...))
		}
	})
}

// TestLeaderElection: of two replicas only the leader writes; when it
// stops, the other takes over.
func TestLeaderElection(t *testing.T) {
	t.Parallel()
	k := newKube(t)
	o := Options{
		LeaderElection: true, LeaderElectionNamespace: k.ns,
		LeaseDuration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}
	a, stopA := k.controller(o)
	b, stopB := k.controller(o)
	k.service("web")
	p := pods("web", 1, 4)
	k.slice("web", "web-a", v4, httpPort, p[:2]...)
	k.wasmPlugin("hashlb", annotated("web"), basicConfig())
	k.waitServices("hashlb", want(8080, p[:2]...), 20*time.Second)
	k.slice("web", "web-a", v4, httpPort, p[:3]...)
	k.waitServices("hashlb", want(8080, p[:3]...), settle)

	leader, follower, stopLeader := a, b, stopA
	if a.patches.Load() == 0 {
		leader, follower, stopLeader = b, a, stopB
	}
	if leader.patches.Load() == 0 || follower.patches.Load() != 0 {
		t.Fatalf("patches by replica = %d and %d, want one replica writing and the other none",
			a.patches.Load(), b.patches.Load())
	}

	stopLeader() // releases the lease
	k.slice("web", "web-a", v4, httpPort, p...)
	k.waitServices("hashlb", want(8080, p...), 20*time.Second)
	// The object can be read before the follower's Patch call has returned
	// and counted it.
	for deadline := time.Now().Add(2 * time.Second); follower.patches.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if follower.patches.Load() == 0 {
		t.Errorf("the second replica wrote nothing after the leader stopped")
	}
}

// TestAnnotationWithWhitespace: a hashlb.io/service value with surrounding
// whitespace ("web\n", as a YAML block scalar writes it, or "web ") selects
// Service web, and later Service and EndpointSlice changes still reach the
// WasmPlugin (not only the first write, which the WasmPlugin's own event
// causes).
func TestAnnotationWithWhitespace(t *testing.T) {
	t.Parallel()
	k := newKube(t)
	k.controller(Options{})
	k.service("web")
	p := pods("web", 1, 4)
	k.slice("web", "web-a", v4, httpPort, p[:2]...)
	names := map[string]string{"block-scalar": "web\n", "trailing-space": "web ", "leading-tab": "\tweb"}
	for name, svc := range names {
		k.wasmPlugin(name, annotated(svc), basicConfig())
	}
	for name := range names {
		k.waitServices(name, want(8080, p[:2]...), settle)
	}
	// An EndpointSlice event: scale up.
	k.slice("web", "web-a", v4, httpPort, p...)
	for name := range names {
		k.waitServices(name, want(8080, p...), settle)
	}
	// A Service event: the Service is deleted.
	if err := k.c.Delete(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	for name := range names {
		k.waitError(name, fmt.Sprintf("Service %s/web not found", k.ns), settle)
	}
}

// TestScaleToZeroAndBack: a Service scaled to zero leaves no pod that may
// take a request, so every listed service is disabled (the filter answers
// 503 "no healthy service") rather than kept enabled on pods that are gone;
// hashlb.io/error and a Warning event say why. Scaled back up, the pods are
// listed and enabled again and the annotation goes.
func TestScaleToZeroAndBack(t *testing.T) {
	forKinds(t, func(t *testing.T, k *kube) {
		k.controller(Options{})
		k.service("web")
		p := pods("web", 1, 3)
		k.slice("web", "web-a", v4, httpPort, p[:2]...)
		k.slice("web", "web-b", v4, httpPort, p[2])
		k.wasmPlugin("hashlb", annotated("web"), basicConfig())
		k.waitServices("hashlb", want(8080, p...), settle)

		// To zero: one slice emptied, the other deleted (both happen).
		k.slice("web", "web-a", v4, httpPort)
		if err := k.c.Delete(context.Background(), &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "web-b"}}); err != nil {
			t.Fatal(err)
		}
		off := make([]ep, len(p))
		for i := range p {
			off[i] = p[i]
			off[i].notReady = true
		}
		k.waitServices("hashlb", want(8080, off...), settle)
		reason := fmt.Sprintf("Service %s/web has no IPv4 endpoints for port \"http\": every service in %s disabled", k.ns, k.kind.Field("pluginConfig", "services"))
		if got := k.waitError("hashlb", "every service", settle); got != reason {
			t.Errorf("%s = %q, want %q", AnnotationError, got, reason)
		}
		k.waitEvent("hashlb", ReasonDisabled, "requests get 503 until an endpoint is ready", settle)
		cfg, _, _ := unstructured.NestedMap(k.get("hashlb").Object, k.kind.Path("pluginConfig")...)
		data, _ := json.Marshal(cfg)
		parsed, err := lbcore.ParseConfig(data)
		if err != nil {
			t.Fatalf("configuration after scaling to zero: lbcore refuses it: %v", err)
		}
		for _, s := range parsed.Services {
			if s.Enabled {
				t.Errorf("after scaling to zero, service %s is enabled", s.Name)
			}
		}

		// Back up: two pods, one of them a returning name (a StatefulSet's).
		back := []ep{p[0], {pod: "web-9", ip: "10.1.0.9"}}
		k.slice("web", "web-a", v4, httpPort, back...)
		k.waitServices("hashlb", want(8080, back...), settle)
		k.waitError("hashlb", "", settle)
		k.waitEvent("hashlb", ReasonUpdated, "2 services (2 enabled) from Service web", settle)
	})
}

// TestKindNotServed: a kind the API server does not serve (TrafficExtension
// on an Istio before 1.30) is an error when asked for by name, and none
// served at all is an error, both before anything starts.
func TestKindNotServed(t *testing.T) {
	t.Parallel()
	cfg := cluster(t)
	absent := &Kind{GVK: WasmPlugin.GVK, Resource: "nopes", Wasm: []string{"spec"}, Controller: "nope"}
	absent.GVK.Kind = "Nope"
	_, err := NewManager(cfg, Options{Kinds: []*Kind{absent}, MetricsAddr: "0", ProbeAddr: "0", several: true})
	if err == nil || !strings.Contains(err.Error(), "extensions.istio.io/v1alpha1, Kind=Nope") {
		t.Errorf("NewManager for a kind not served: error %v, want one naming the kind", err)
	}
	if _, err := NewManager(cfg, Options{MetricsAddr: "0", ProbeAddr: "0", several: true}); err != nil {
		t.Errorf("NewManager with both kinds served: %v", err)
	}
}
