package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/services"
	"github.com/hashlb/hashlb/lbcore"
)

// AnnotationError is set on a WasmPlugin to the reason its services could
// not be updated, and removed once they are again.
const AnnotationError = "hashlb.io/error"

// Event reasons.
const (
	ReasonUpdated  = "ServicesUpdated"
	ReasonRejected = "ServicesRejected"
	// ReasonDisabled: the Service has no endpoints left, every listed
	// service was disabled.
	ReasonDisabled = "ServicesDisabled"
)

// maxMessage bounds the error annotation and event note (an Event's note
// is limited to 1 kB).
const maxMessage = 1000

// Reconciler keeps one WasmPlugin's services equal to its Service's
// endpoints.
type Reconciler struct {
	Client client.Client
	// Kind is the kind of object reconciled (WasmPlugin when nil).
	Kind *Kind
	// Reader reads an object again, from the API server, after a patch
	// conflict (the manager's API reader; Client when nil).
	Reader   client.Reader
	Recorder events.EventRecorder
	// Debounce: see Options.Debounce.
	Debounce time.Duration
	// ECDS, when not nil, also writes each plugin's Envoy ECDS file.
	ECDS *ECDS

	gateway gatewayKinds // the Gateway API kinds served (session.go)

	now   func() time.Time // time.Now when nil (tests set a fake clock)
	mu    sync.Mutex
	state map[types.NamespacedName]*writeState
}

func (r *Reconciler) kind() *Kind {
	if r.Kind != nil {
		return r.Kind
	}
	return WasmPlugin
}

// nested is the JSON merge patch body that sets the field at path to v.
func nested(path []string, v any) map[string]any {
	var out any = v
	for i := len(path) - 1; i >= 0; i-- {
		out = map[string]any{path[i]: out}
	}
	return out.(map[string]any)
}

func (r *Reconciler) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// writeState is the debounce state of one WasmPlugin.
type writeState struct {
	lastWrite    time.Time // when its services were last written
	pendingSince time.Time // when a difference was first seen; zero when none
}

// maxConflicts is how many times one reconcile re-reads the object after
// its patch met a newer resourceVersion; past it the request is retried with
// the controller's backoff.
const maxConflicts = 5

// Reconcile brings one WasmPlugin up to date.
//
// Every patch is conditional on the resourceVersion of the object it was
// computed from (the API server answers 409 Conflict when the object changed
// since), so a configuration is only ever written onto the object lbcore
// validated it with. After a conflict the object is read again from the API
// server, not the cache (which may not have seen the change yet), and
// everything is computed and validated again on that fresh object.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	wp := r.kind().New()
	if err := r.Client.Get(ctx, req.NamespacedName, wp); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	for conflicts := 0; ; conflicts++ {
		res, err := r.reconcile(ctx, req, wp)
		if !apierrors.IsConflict(err) || conflicts == maxConflicts {
			return res, err
		}
		logf.FromContext(ctx).Info("the object changed while it was being updated; reading it again",
			"resourceVersion", wp.GetResourceVersion())
		wp = r.kind().New()
		reader := r.Reader
		if reader == nil {
			reader = r.Client
		}
		if err := reader.Get(ctx, req.NamespacedName, wp); err != nil {
			if apierrors.IsNotFound(err) {
				return ctrl.Result{}, r.forget(req.NamespacedName)
			}
			return ctrl.Result{}, err
		}
	}
}

// reconcile brings wp, as read, up to date.
func (r *Reconciler) reconcile(ctx context.Context, req ctrl.Request, wp *unstructured.Unstructured) (ctrl.Result, error) {
	sel, ok, err := services.ParseAnnotations(wp.GetAnnotations())
	if !ok {
		return ctrl.Result{}, r.forget(req.NamespacedName)
	}
	if err != nil {
		err = &badInput{err}
	}
	var list []services.Service
	if err == nil {
		list, err = r.endpoints(ctx, wp.GetNamespace(), sel)
	}
	current, _, _ := unstructured.NestedFieldNoCopy(wp.Object, kindOf(wp).Path("pluginConfig", "services")...)
	u := update{wp: wp, sel: sel}
	var none *noEndpoints
	switch {
	case errors.As(err, &none):
		// Scaled to zero: the pods listed are gone or going, so none may
		// receive a request. Every listed service is disabled (the filter
		// then answers 503 "no healthy service"), and the annotation says why.
		if u.services, u.total = disabled(current); u.total == 0 {
			break // nothing listed to disable: the error below
		}
		u.note = fmt.Sprintf("%s: every service in %s disabled", none.Error(), kindOf(wp).Field("pluginConfig", "services"))
		err = nil
	case err == nil:
		u.services, u.total, u.enabled = generic(list)
	}
	if err == nil { // the session block the HTTPRoutes ask for (session.go)
		u.session, err = r.planSession(ctx, wp, sel.Service, kindOf(wp).Path("pluginConfig"))
	}
	var cfg map[string]any
	if err == nil {
		cfg, err = u.session.config(wp, u.services)
		u.note = clip(joinNotes(u.note, u.session.problem))
	}
	if err != nil {
		var bad *badInput
		if errors.As(err, &bad) || errors.As(err, &none) {
			return ctrl.Result{}, r.reject(ctx, wp, err)
		}
		return ctrl.Result{}, err // the API server failed: retried with backoff
	}

	u.changed = !sameValue(current, u.services)
	u.annotationStale = wp.GetAnnotations()[AnnotationError] != u.note
	if r.ECDS != nil {
		if u.ecdsFile, err = r.ECDS.Resource(wp, cfg); err != nil {
			return ctrl.Result{}, r.reject(ctx, wp, err)
		}
		u.ecdsStale = r.ECDS.Stale(wp, u.ecdsFile)
	}
	if !u.changed && !u.annotationStale && !u.ecdsStale && !u.session.stale() {
		r.settled(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if wait := r.wait(req.NamespacedName); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := r.apply(ctx, u); err != nil {
		return ctrl.Result{}, err
	}
	r.wrote(req.NamespacedName)
	return ctrl.Result{}, nil
}

// update is what one reconcile found out of date.
type update struct {
	wp              *unstructured.Unstructured
	sel             services.Selection
	services        []any  // the new services, as JSON values
	total, enabled  int    // how many services, and how many enabled
	note            string // the hashlb.io/error the object should carry ("" none)
	changed         bool   // the services differ from the object's
	annotationStale bool   // hashlb.io/error is not note
	ecdsFile        []byte // the ECDS file's content; nil without -ecds-dir
	ecdsStale       bool   // the file on disk differs from ecdsFile
	session         *sessionPlan
}

// apply writes the services and hashlb.io/error and the ECDS file, as u
// says, and records the change.
func (r *Reconciler) apply(ctx context.Context, u update) error {
	if u.changed || u.annotationStale || u.session.stale() {
		body := nested(kindOf(u.wp).Path("pluginConfig", "services"), u.services)
		if u.annotationStale {
			var note any // nil removes the annotation
			if u.note != "" {
				note = u.note
			}
			body["metadata"] = map[string]any{"annotations": map[string]any{AnnotationError: note}}
		}
		u.session.patchInto(body)
		if err := r.patch(ctx, u.wp, body); err != nil {
			return err
		}
	}
	if u.ecdsStale {
		if err := r.ECDS.Write(u.wp, u.ecdsFile); err != nil {
			return err
		}
	}
	u.session.record(r, u.wp, u.annotationStale)
	switch {
	case u.changed && u.note != "":
		r.Recorder.Eventf(u.wp, nil, corev1.EventTypeWarning, ReasonDisabled, "UpdateServices",
			"%s; requests get 503 until an endpoint is ready", u.note)
	case u.changed:
		r.Recorder.Eventf(u.wp, nil, corev1.EventTypeNormal, ReasonUpdated, "UpdateServices",
			"%d services (%d enabled) from Service %s", u.total, u.enabled, u.sel.Service)
	}
	logf.FromContext(ctx).Info("services written", "service", u.sel.Service, "services", u.total,
		"enabled", u.enabled, "patched", u.changed || u.annotationStale, "ecdsFileWritten", u.ecdsStale)
	return nil
}

// generic is list as JSON values, with its length and enabled count.
func generic(list []services.Service) (out []any, total, enabled int) {
	_ = json.Unmarshal(services.JSON(list), &out) // services.JSON is always an array
	for _, s := range list {
		if s.Enabled {
			enabled++
		}
	}
	return out, len(list), enabled
}

// disabled is a copy of the object's services with every entry's enabled
// false and every other field as it is; total is 0 when there are none.
func disabled(current any) (out []any, total int) {
	list, _ := current.([]any)
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, 0 // not a services list lbcore would take: leave it to the error
		}
		c := make(map[string]any, len(m)+1)
		for k, v := range m {
			c[k] = v
		}
		c["enabled"] = false
		out = append(out, c)
	}
	return out, len(out)
}

// endpoints reads the Service and its EndpointSlices. It returns a
// *noEndpoints error when the Service has none of the port and family.
func (r *Reconciler) endpoints(ctx context.Context, ns string, sel services.Selection) ([]services.Service, error) {
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: sel.Service}, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, badf("%s: Service %s/%s not found", services.AnnotationService, ns, sel.Service)
		}
		return nil, err
	}
	port, err := services.ResolvePort(svc, sel.Port)
	if err != nil {
		return nil, &badInput{err}
	}
	var slices discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: sel.Service}); err != nil {
		return nil, err
	}
	list := services.FromSlices(slices.Items, port, sel.AddressType)
	if len(list) == 0 {
		if port == "" {
			return nil, &noEndpoints{fmt.Sprintf("Service %s/%s has no %s endpoints", ns, sel.Service, sel.AddressType)}
		}
		return nil, &noEndpoints{fmt.Sprintf("Service %s/%s has no %s endpoints for port %q", ns, sel.Service, sel.AddressType, port)}
	}
	return list, nil
}

// noEndpoints: the Service has no endpoints of the selected port and family
// (scaled to zero, or every pod gone).
type noEndpoints struct{ msg string }

func (n *noEndpoints) Error() string { return n.msg }

// badInput is an error in what the operator wrote or in the endpoints found:
// reported on the WasmPlugin, not retried.
type badInput struct{ error }

func (b *badInput) Unwrap() error { return b.error }

func badf(format string, args ...any) error { return &badInput{fmt.Errorf(format, args...)} }

// newConfig is the WasmPlugin's pluginConfig with list as its services,
// checked by lbcore as the filter will check it.
func newConfig(wp *unstructured.Unstructured, list []services.Service) (map[string]any, error) {
	g, _, _ := generic(list)
	return newConfigJSON(wp, g)
}

// newConfigJSON is newConfig with the services as JSON values.
func newConfigJSON(wp *unstructured.Unstructured, list []any) (map[string]any, error) {
	kind := kindOf(wp)
	cfg, found, err := unstructured.NestedMap(wp.Object, kind.Path("pluginConfig")...)
	if err != nil {
		return nil, badf("%s: %v", kind.Field("pluginConfig"), err)
	}
	if !found {
		cfg = map[string]any{}
	}
	if list == nil {
		list = []any{}
	}
	cfg["services"] = list
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, badf("%s: %v", kind.Field("pluginConfig"), err)
	}
	if _, err := lbcore.ParseConfig(data); err != nil {
		return nil, badf("lbcore refuses the configuration with the %d services found: %s",
			len(list), strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return cfg, nil
}

// reject reports why the services were not updated: the hashlb.io/error
// annotation and a Warning event, once per distinct reason. The services
// stay as they are.
func (r *Reconciler) reject(ctx context.Context, wp *unstructured.Unstructured, cause error) error {
	msg := clip(cause.Error())
	if wp.GetAnnotations()[AnnotationError] == msg {
		return nil
	}
	kept := 0
	if cur, ok, _ := unstructured.NestedSlice(wp.Object, kindOf(wp).Path("pluginConfig", "services")...); ok {
		kept = len(cur)
	}
	if err := r.patch(ctx, wp, map[string]any{"metadata": map[string]any{"annotations": map[string]any{AnnotationError: msg}}}); err != nil {
		return err
	}
	r.Recorder.Eventf(wp, nil, corev1.EventTypeWarning, ReasonRejected, "UpdateServices",
		"%s; keeping the %d services already in %s", msg, kept, kindOf(wp).Field("pluginConfig", "services"))
	logf.FromContext(ctx).Info("services not updated", "reason", msg, "kept", kept)
	return nil
}

// clip bounds msg to maxMessage bytes.
func clip(msg string) string {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}
	return msg
}

// patch applies a JSON merge patch: only the keys in body change. The patch
// carries wp's resourceVersion, which the API server takes as a
// precondition: it refuses the patch with 409 Conflict when the object has
// changed since wp was read.
func (r *Reconciler) patch(ctx context.Context, wp *unstructured.Unstructured, body map[string]any) error {
	meta, _ := body["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		body["metadata"] = meta
	}
	meta["resourceVersion"] = wp.GetResourceVersion()
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return r.Client.Patch(ctx, wp, client.RawPatch(types.MergePatchType, data))
}

// wait returns how long the debounce still holds back a write of key.
func (r *Reconciler) wait(key types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.stateOf(key)
	now := r.clock()
	if st.pendingSince.IsZero() {
		st.pendingSince = now
	}
	due := st.pendingSince.Add(r.Debounce / 5)
	if next := st.lastWrite.Add(r.Debounce); next.After(due) {
		due = next
	}
	return due.Sub(now)
}

func (r *Reconciler) wrote(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.stateOf(key)
	st.lastWrite, st.pendingSince = r.clock(), time.Time{}
}

func (r *Reconciler) settled(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.state[key]; st != nil {
		st.pendingSince = time.Time{}
	}
}

func (r *Reconciler) stateOf(key types.NamespacedName) *writeState {
	if r.state == nil {
		r.state = map[types.NamespacedName]*writeState{}
	}
	st := r.state[key]
	if st == nil {
		st = &writeState{}
		r.state[key] = st
	}
	return st
}

// forget drops a WasmPlugin that is gone or no longer annotated, with its
// ECDS file.
func (r *Reconciler) forget(key types.NamespacedName) error {
	r.mu.Lock()
	delete(r.state, key)
	r.mu.Unlock()
	if r.ECDS != nil {
		return r.ECDS.Remove(r.kind(), key)
	}
	return nil
}
