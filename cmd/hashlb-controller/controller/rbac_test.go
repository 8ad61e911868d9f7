package controller

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const manifestDir = "../../../configs/istio/controller"

// TestRBAC applies configs/istio/controller's ServiceAccount and RBAC to the
// API server (which authorizes with RBAC) and runs the controller as that
// ServiceAccount, watching every namespace with leader election: it can do
// all its work with those rules. Not parallel: it watches all namespaces.
func TestRBAC(t *testing.T) {
	k := newKube(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	if err := k.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hashlb-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, f := range []string{"serviceaccount.yaml", "rbac.yaml"} {
		data, err := os.ReadFile(filepath.Join(manifestDir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---\n")) {
			obj, _, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := k.c.Create(ctx, obj.(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("%s: create %T: %v", f, obj, err)
			}
		}
	}
	admin := k.cfg
	k.cfg = rest.CopyConfig(admin)
	k.cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:hashlb-system:hashlb-controller",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:hashlb-system", "system:authenticated"},
	}
	k.controller(Options{Namespace: allNamespaces, LeaderElection: true, LeaderElectionNamespace: "hashlb-system",
		LeaseDuration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: 500 * time.Millisecond})

	k.service("web")
	p := pods("web", 1, 2)
	k.slice("web", "web-a", v4, httpPort, p...)
	k.wasmPlugin("hashlb", annotated("web"), basicConfig())
	k.wasmPlugin("missing", annotated("nope"), basicConfig())
	k.waitServices("hashlb", want(8080, p...), 30*time.Second)
	k.waitEvent("hashlb", ReasonUpdated, "2 services", settle)
	k.waitError("missing", "not found", settle)
	k.waitEvent("missing", ReasonRejected, "not found", settle)
	// And a TrafficExtension, with the same rules.
	k.kind = TrafficExtension
	k.wasmPlugin("hashlb", annotated("web"), basicConfig())
	k.waitServices("hashlb", want(8080, p...), settle)
	k.waitEvent("hashlb", ReasonUpdated, "2 services", settle)
}
