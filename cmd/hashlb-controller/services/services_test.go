package services

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hashlb/hashlb/lbcore"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json from the current output")

func ptr[T any](v T) *T { return &v }

// pod is a ready endpoint of pod name at ip.
func pod(name, ip string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: name},
	}
}

func notReady(ep discoveryv1.Endpoint) discoveryv1.Endpoint {
	ep.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	return ep
}

func terminating(ep discoveryv1.Endpoint) discoveryv1.Endpoint {
	ep.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	return ep
}

func slice(name string, family discoveryv1.AddressType, ports map[string]int32, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
	es := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: family,
		Endpoints:   eps,
	}
	for n, p := range ports {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr(n), Port: ptr(p)})
	}
	return es
}

var http8080 = map[string]int32{"http": 8080}

func TestFromSlicesGolden(t *testing.T) {
	tests := []struct {
		name   string
		slices []discoveryv1.EndpointSlice
		port   string
		family discoveryv1.AddressType
		valid  bool // lbcore accepts the result
	}{
		{name: "conditions", port: "http", family: discoveryv1.AddressTypeIPv4, valid: true, slices: []discoveryv1.EndpointSlice{
			slice("web-a", discoveryv1.AddressTypeIPv4, http8080,
				pod("web-2", "10.0.0.12"), pod("web-0", "10.0.0.10"), notReady(pod("web-3", "10.0.0.13")),
				terminating(pod("web-1", "10.0.0.11")),
				discoveryv1.Endpoint{Addresses: []string{"10.0.0.14"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-4"}}),
		}},
		{name: "without-pods", port: "", family: discoveryv1.AddressTypeIPv4, valid: true, slices: []discoveryv1.EndpointSlice{
			slice("ext", discoveryv1.AddressTypeIPv4, map[string]int32{"": 80},
				discoveryv1.Endpoint{Addresses: []string{"192.0.2.7"}, Hostname: ptr("cache-a")},
				discoveryv1.Endpoint{Addresses: []string{"192.0.2.8"}}),
		}},
		{name: "second-port", port: "grpc", family: discoveryv1.AddressTypeIPv4, valid: true, slices: []discoveryv1.EndpointSlice{
			slice("web-a", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8080, "grpc": 9090},
				pod("web-0", "10.0.0.10"), pod("web-1", "10.0.0.11")),
		}},
		{name: "ipv6", port: "http", family: discoveryv1.AddressTypeIPv6, valid: true, slices: []discoveryv1.EndpointSlice{
			slice("web-v4", discoveryv1.AddressTypeIPv4, http8080, pod("web-0", "10.0.0.10")),
			slice("web-v6", discoveryv1.AddressTypeIPv6, http8080, pod("web-0", "fd00::a"), pod("web-1", "FD00:0:0::b"),
				discoveryv1.Endpoint{Addresses: []string{"fd00::c"}}),
		}},
		{name: "copies-merged", port: "http", family: discoveryv1.AddressTypeIPv4, valid: true, slices: []discoveryv1.EndpointSlice{
			slice("web-a", discoveryv1.AddressTypeIPv4, http8080, pod("web-0", "10.0.0.10"), notReady(pod("web-1", "10.0.0.11"))),
			slice("web-b", discoveryv1.AddressTypeIPv4, http8080, notReady(pod("web-0", "10.0.0.10")), pod("web-2", "10.0.0.12")),
		}},
		{name: "one-pod-two-ips", port: "http", family: discoveryv1.AddressTypeIPv4, valid: false, slices: []discoveryv1.EndpointSlice{
			slice("web-a", discoveryv1.AddressTypeIPv4, http8080, pod("web-0", "10.0.0.10")),
			slice("web-b", discoveryv1.AddressTypeIPv4, http8080, pod("web-0", "10.0.0.20")),
		}},
		{name: "other-port-and-family-ignored", port: "http", family: discoveryv1.AddressTypeIPv4, valid: false, slices: []discoveryv1.EndpointSlice{
			slice("web-a", discoveryv1.AddressTypeIPv4, map[string]int32{"metrics": 9100}, pod("web-0", "10.0.0.10")),
			slice("web-f", discoveryv1.AddressTypeFQDN, http8080, discoveryv1.Endpoint{Addresses: []string{"web.example.com"}}),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := JSON(FromSlices(tt.slices, tt.port, tt.family))
			file := filepath.Join("testdata", tt.name+".json")
			if *update {
				if err := os.WriteFile(file, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(append(got, '\n'), want) {
				t.Errorf("FromSlices(%s) =\n%s\nwant (%s)\n%s", tt.name, got, file, want)
			}
			_, err = lbcore.ParseConfig([]byte(`{"services":` + string(got) + `}`))
			if (err == nil) != tt.valid {
				t.Errorf("lbcore.ParseConfig(services %s) error = %v, want valid %v", got, err, tt.valid)
			}
		})
	}
}

// TestFromSlicesOrderFree: the same endpoints in any order, in any split
// across slices, give byte-identical JSON.
func TestFromSlicesOrderFree(t *testing.T) {
	var eps []discoveryv1.Endpoint
	for i := range 40 {
		ep := pod("web-"+string(rune('a'+i%26))+strings.Repeat("x", i/26), "10.1.0."+strconv.Itoa(i+1))
		if i%7 == 0 {
			ep = notReady(ep)
		}
		eps = append(eps, ep)
	}
	want := JSON(FromSlices([]discoveryv1.EndpointSlice{slice("s", discoveryv1.AddressTypeIPv4, http8080, eps...)}, "http", discoveryv1.AddressTypeIPv4))
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		shuffled := append([]discoveryv1.Endpoint(nil), eps...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		cut := r.IntN(len(shuffled))
		in := []discoveryv1.EndpointSlice{
			slice("s2", discoveryv1.AddressTypeIPv4, http8080, shuffled[cut:]...),
			slice("s1", discoveryv1.AddressTypeIPv4, http8080, shuffled[:cut]...),
		}
		if got := JSON(FromSlices(in, "http", discoveryv1.AddressTypeIPv4)); !bytes.Equal(got, want) {
			t.Fatalf("round %d: FromSlices(shuffled) =\n%s\nwant\n%s", round, got, want)
		}
	}
}

func TestJSONEmpty(t *testing.T) {
	if got := string(JSON(nil)); got != "[]" {
		t.Errorf("JSON(nil) = %s, want []", got)
	}
}

func TestResolvePort(t *testing.T) {
	svc := func(ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}, Spec: corev1.ServiceSpec{Ports: ports}}
	}
	two := svc(corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "grpc", Port: 9090})
	tests := []struct {
		name, want, wantPort, wantErr string
		svc                           *corev1.Service
	}{
		{name: "only port, no annotation", svc: svc(corev1.ServicePort{Port: 80}), wantPort: ""},
		{name: "only named port", svc: svc(corev1.ServicePort{Name: "http", Port: 80}), wantPort: "http"},
		{name: "by name", svc: two, want: "grpc", wantPort: "grpc"},
		{name: "by number", svc: two, want: "80", wantPort: "http"},
		{name: "two ports, no annotation", svc: two, wantErr: `Service demo/web has 2 ports (http=80, grpc=9090): set hashlb.io/port to one of them`},
		{name: "unknown port", svc: two, want: "8443", wantErr: `hashlb.io/port: Service demo/web has no port "8443" (ports: http=80, grpc=9090)`},
		{name: "no ports", svc: svc(), wantErr: `Service demo/web has no ports`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolvePort(tt.svc, tt.want)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ResolvePort(%q) error = %v, want %s", tt.want, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.wantPort {
				t.Errorf("ResolvePort(%q) = %q, %v, want %q", tt.want, got, err, tt.wantPort)
			}
		})
	}
}

func TestParseAnnotations(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		want    Selection
		ok      bool
		wantErr string
	}{
		{name: "none", ann: map[string]string{"other": "x"}},
		{name: "service only", ann: map[string]string{AnnotationService: "web"}, ok: true,
			want: Selection{Service: "web", AddressType: discoveryv1.AddressTypeIPv4}},
		{name: "all three", ann: map[string]string{AnnotationService: "web", AnnotationPort: "grpc", AnnotationAddressType: "IPv6"}, ok: true,
			want: Selection{Service: "web", Port: "grpc", AddressType: discoveryv1.AddressTypeIPv6}},
		{name: "bad family", ann: map[string]string{AnnotationService: "web", AnnotationAddressType: "FQDN"}, ok: true,
			wantErr: `hashlb.io/address-type: "FQDN" is not IPv4 or IPv6`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ParseAnnotations(tt.ann)
			if ok != tt.ok {
				t.Fatalf("ParseAnnotations(%v) ok = %v, want %v", tt.ann, ok, tt.ok)
			}
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseAnnotations(%v) error = %v, want %s", tt.ann, err, tt.wantErr)
				}
				return
			}
			if err != nil || (ok && got != tt.want) {
				t.Errorf("ParseAnnotations(%v) = %+v, %v, want %+v", tt.ann, got, err, tt.want)
			}
		})
	}
}
