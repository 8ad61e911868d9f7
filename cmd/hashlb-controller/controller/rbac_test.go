package controller

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/internal/testenv"
)

const manifestDir = "../../../configs/istio/controller"

// TestRBAC applies configs/istio/controller's ServiceAccount and RBAC to the
// API server (which authorizes with RBAC) and runs the controller as that
// ServiceAccount, watching every namespace with leader election: it can do
// all its work with those rules. Not parallel: it watches all namespaces.
func TestRBAC(t *testing.T) {
	k := newKube(t)
	ctx := context.Background()
	if err := testenv.ApplyRBAC(ctx, k.c, manifestDir); err != nil {
		t.Fatal(err)
	}
	admin := k.cfg
	k.cfg = rest.CopyConfig(admin)
	k.cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:hashlb-system:hashlb-controller",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:hashlb-system", "system:authenticated"},
	}
	k.controller(Options{Namespace: allNamespaces, LeaderElection: true, LeaderElectionNamespace: "hashlb-system",
		LeaseDuration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: 500 * time.Millisecond})

	p := k.webPods(2)
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
