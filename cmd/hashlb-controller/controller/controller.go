// Package controller keeps the services of every annotated Istio WasmPlugin
// and TrafficExtension equal to its Service's endpoints: it watches them,
// Services and EndpointSlices, computes the list with package services,
// checks the whole plugin configuration with lbcore, and patches the
// pluginConfig's services (spec.pluginConfig.services of a WasmPlugin,
// spec.wasm.pluginConfig.services of a TrafficExtension), optionally also
// writing an Envoy ECDS file. docs/controller.md explains
// it for operators.
//
// Its parts, by file: the options, the manager and its watches and indexes
// (controller.go); the two Istio kinds, WasmPlugin and TrafficExtension, as
// unstructured data (kind.go); the Reconciler that patches a plugin's
// services and reports what it could not do (reconcile.go); Gateway API
// session persistence made a plugin's session block (session.go); and the
// ECDS files (ecds.go).
package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/services"
)

// Name is the controller's name: its events' reporting controller and the
// default leader-election lease.
const Name = "hashlb-controller"

// Options configure the controller; the command's flags set them.
type Options struct {
	// Debounce is the shortest time between two writes of one WasmPlugin's
	// services (default 1s); the first change after a quiet period waits a
	// fifth of it, so the updates of one pod transition land in one patch.
	Debounce time.Duration
	// Namespace restricts the watches to one namespace ("" watches all).
	Namespace string
	// ECDSDir, when set, receives one Envoy ECDS file per annotated WasmPlugin.
	ECDSDir string
	// ECDSModule is the Wasm file the ECDS files load when the WasmPlugin's
	// url is not file:// (default dist/hashlb.wasm).
	ECDSModule string
	// MetricsAddr and ProbeAddr are the metrics and health-probe listen
	// addresses ("0" turns one off).
	MetricsAddr, ProbeAddr string
	// LeaderElection makes only the holder of a Lease reconcile.
	LeaderElection bool
	// LeaderElectionID names the Lease (default hashlb-controller), in
	// LeaderElectionNamespace (default: the pod's own namespace).
	LeaderElectionID, LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election
	// (controller-runtime's defaults 15s, 10s, 2s when zero).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Logger receives the controller's structured logs.
	Logger logr.Logger
	// Kinds are the kinds kept in step (default: every kind the API server
	// serves of WasmPlugin and TrafficExtension).
	Kinds []*Kind
	// WrapClient, when set, wraps the client the controller writes with
	// (tests count the writes of each replica).
	WrapClient func(client.Client) client.Client

	// several lets one process run more than one replica (tests).
	several bool
}

// indexService indexes WasmPlugins by their hashlb.io/service annotation.
const indexService = "metadata.annotations." + services.AnnotationService

// serviceIndexKey is the index value of an object with annotations ann: the
// Service name exactly as the reconciler reads it (services.ParseAnnotations
// trims it), so that a value written as a YAML block scalar ("web\n") or with
// a stray space still matches the Service's and EndpointSlices' events.
func serviceIndexKey(ann map[string]string) []string {
	if sel, ok, _ := services.ParseAnnotations(ann); ok {
		return []string{sel.Service}
	}
	return nil
}

// NewManager returns a manager running the controller against cfg.
func NewManager(cfg *rest.Config, o Options) (manager.Manager, error) {
	if o.Debounce <= 0 {
		o.Debounce = time.Second
	}
	if o.ECDSModule == "" {
		o.ECDSModule = "dist/hashlb.wasm"
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = Name
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := addGatewayScheme(scheme); err != nil {
		return nil, err
	}
	mo := manager.Options{
		Scheme:                        scheme,
		Logger:                        o.Logger,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Reads of WasmPlugins come from the informer's cache like the
		// typed ones; the field index needs that.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	}
	if o.several {
		mo.Controller.SkipNameValidation = &o.several
	}
	if o.LeaseDuration > 0 {
		mo.LeaseDuration, mo.RenewDeadline, mo.RetryPeriod = &o.LeaseDuration, &o.RenewDeadline, &o.RetryPeriod
	}
	if o.Namespace != "" {
		mo.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{o.Namespace: {}}}
	}
	if o.WrapClient != nil {
		mo.NewClient = func(c *rest.Config, opts client.Options) (client.Client, error) {
			cl, err := client.New(c, opts)
			if err != nil {
				return nil, err
			}
			return o.WrapClient(cl), nil
		}
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	kinds, err := servedKinds(mgr, o.Kinds)
	if err != nil {
		return nil, err
	}
	var ecds *ECDS
	if o.ECDSDir != "" {
		ecds = &ECDS{Dir: o.ECDSDir, Module: o.ECDSModule}
	}
	for _, k := range kinds {
		r := &Reconciler{
			Kind:     k,
			Client:   mgr.GetClient(),
			Reader:   mgr.GetAPIReader(),
			Recorder: mgr.GetEventRecorder(Name),
			Debounce: o.Debounce,
			ECDS:     ecds,
		}
		if err := Setup(mgr, r); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// servedKinds returns the kinds of want (every kind when empty) that the
// API server serves. A kind whose CRD is not installed (TrafficExtension
// before Istio 1.30) is skipped with a log line when want is empty, and is an
// error when want names it; none served at all is an error.
func servedKinds(mgr manager.Manager, want []*Kind) ([]*Kind, error) {
	all := len(want) == 0
	if all {
		want = Kinds
	}
	log := mgr.GetLogger()
	var out []*Kind
	for _, k := range want {
		_, err := mgr.GetRESTMapper().RESTMapping(k.GVK.GroupKind(), k.GVK.Version)
		switch {
		case err == nil:
			out = append(out, k)
		case meta.IsNoMatchError(err) && all:
			log.Info("kind not served by the API server (its CRD is not installed); not watched until the controller restarts",
				"kind", k.GVK.String())
		default:
			return nil, fmt.Errorf("%s: %w", k.GVK, err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the API server serves none of %s: install Istio's CRDs first", kindNames(want))
	}
	return out, nil
}

func kindNames(ks []*Kind) string {
	var names []string
	for _, k := range ks {
		names = append(names, k.GVK.Kind)
	}
	return strings.Join(names, ", ")
}

// KindByName returns the kind named name (case-insensitive: wasmplugin,
// trafficextension), or nil.
func KindByName(name string) *Kind {
	for _, k := range Kinds {
		if strings.EqualFold(k.GVK.Kind, name) || strings.EqualFold(k.Resource, name) {
			return k
		}
	}
	return nil
}

// Setup registers r's index and watches with mgr.
func Setup(mgr manager.Manager, r *Reconciler) error {
	kind := r.kind()
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), kind.New(), indexService, func(o client.Object) []string {
		return serviceIndexKey(o.GetAnnotations())
	}); err != nil {
		return fmt.Errorf("index %ss by %s: %w", kind.GVK.Kind, services.AnnotationService, err)
	}
	byService := func(ctx context.Context, namespace, service string) []reconcile.Request {
		list := kind.NewList()
		if err := mgr.GetClient().List(ctx, list, client.InNamespace(namespace), client.MatchingFields{indexService: service}); err != nil {
			mgr.GetLogger().Error(err, "list "+kind.Resource, "namespace", namespace, "service", service)
			return nil
		}
		out := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			out[i].Namespace, out[i].Name = list.Items[i].GetNamespace(), list.Items[i].GetName()
		}
		return out
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(kind.Controller).
		For(kind.New()).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return byService(ctx, o.GetNamespace(), o.GetName())
		})).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if s := o.GetLabels()[discoveryv1.LabelServiceName]; s != "" {
				return byService(ctx, o.GetNamespace(), s)
			}
			return nil
		}))
	if err := setupSessions(mgr, r, b, byService, kind.NewList); err != nil {
		return err
	}
	return b.WithOptions(crcontroller.Options{MaxConcurrentReconciles: 1}).Complete(r)
}
