package controller

// Gateway API session persistence: an HTTPRoute rule with sessionPersistence
// whose backendRefs name a plugin's Service becomes that plugin's
// pluginConfig.session block. docs/controller.md has the mapping and what is
// not honoured.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/hashlb/hashlb/lbcore"
)

// AnnotationSessionFrom is written by the controller beside the session
// block it writes: the HTTPRoute rules the block comes from. Its presence is
// what makes the block the controller's: a session block without it is the
// operator's and is never changed or removed.
const AnnotationSessionFrom = "hashlb.io/session-from"

// Event reasons of the session block.
const (
	ReasonSessionUpdated  = "SessionUpdated"
	ReasonSessionRemoved  = "SessionRemoved"
	ReasonSessionRejected = "SessionRejected"
)

// The kinds read for session persistence. HTTPRoute v1 is served by every
// Gateway API release since v1.0, standard and experimental channel alike;
// sessionPersistence is only in the experimental channel's schema (the
// standard channel's CRD prunes it, so such a route reads as having none).
// ReferenceGrant is read at v1beta1, served by every release (v1 only from
// v1.6).
var (
	HTTPRouteGVK      = gwv1.SchemeGroupVersion.WithKind("HTTPRoute")
	ReferenceGrantGVK = gwv1beta1.SchemeGroupVersion.WithKind("ReferenceGrant")
)

// indexRouteBackend indexes HTTPRoutes by the Services their backendRefs
// name, as "namespace/name".
const indexRouteBackend = "hashlb.io/route-backend-services"

// routeIndexed holds the managers whose cache has the HTTPRoute index.
var routeIndexed sync.Map

// sessionKeyEnv is the VM environment variable the filter reads its session
// key from; without it a plugin with a session block refuses to start.
const sessionKeyEnv = lbcore.SessionKeyEnv

// gatewayKinds says which of the Gateway API kinds the API server serves.
type gatewayKinds struct{ routes, grants bool }

// addGatewayScheme registers the Gateway API types the controller reads.
func addGatewayScheme(s *runtime.Scheme) error {
	if err := gwv1.Install(s); err != nil {
		return err
	}
	return gwv1beta1.Install(s)
}

// servedGatewayKinds asks the API server whether HTTPRoutes and
// ReferenceGrants are served. A kind whose CRD is not installed is not
// watched (its informer would never sync); the controller needs a restart to
// notice a CRD installed later.
func servedGatewayKinds(mgr manager.Manager) (gatewayKinds, error) {
	served := func(gvk schema.GroupVersionKind) (bool, error) {
		_, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		switch {
		case err == nil:
			return true, nil
		case meta.IsNoMatchError(err):
			mgr.GetLogger().Info("kind not served by the API server (its CRD is not installed); not watched until the controller restarts",
				"kind", gvk.String())
			return false, nil
		}
		return false, fmt.Errorf("%s: %w", gvk, err)
	}
	var k gatewayKinds
	var err error
	if k.routes, err = served(HTTPRouteGVK); err != nil || !k.routes {
		return k, err
	}
	k.grants, err = served(ReferenceGrantGVK)
	return k, err
}

// isServiceRef reports whether ref names a core Service (group "" and kind
// Service, the defaults).
func isServiceRef(ref gwv1.BackendObjectReference) bool {
	return (ref.Group == nil || *ref.Group == "") && (ref.Kind == nil || *ref.Kind == "Service")
}

// refKey is the "namespace/name" of the Service ref names, from a route in ns.
func refKey(ns string, ref gwv1.BackendObjectReference) string {
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	return ns + "/" + string(ref.Name)
}

// routeBackends is the index value of a route: every Service its rules'
// backendRefs name.
func routeBackends(o client.Object) []string {
	rt, ok := o.(*gwv1.HTTPRoute)
	if !ok {
		return nil
	}
	var out []string
	for _, rule := range rt.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			if isServiceRef(ref.BackendObjectReference) {
				if k := refKey(rt.Namespace, ref.BackendObjectReference); !slices.Contains(out, k) {
					out = append(out, k)
				}
			}
		}
	}
	return out
}

// setupSessions indexes HTTPRoutes by backend Service and adds the watches
// of HTTPRoutes and ReferenceGrants to b; byService lists the plugins
// annotated with a Service. Without the Gateway API CRDs it adds nothing.
func setupSessions(mgr manager.Manager, r *Reconciler, b *builder.Builder,
	byService func(ctx context.Context, namespace, service string) []reconcile.Request,
	newList func() *unstructured.UnstructuredList) error {
	kinds, err := servedGatewayKinds(mgr)
	if err != nil {
		return err
	}
	r.gateway = kinds
	if !kinds.routes {
		return nil
	}
	// One index per manager, however many controllers it runs.
	if _, done := routeIndexed.LoadOrStore(mgr, true); !done {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &gwv1.HTTPRoute{}, indexRouteBackend, routeBackends); err != nil {
			return fmt.Errorf("index HTTPRoutes by backend Service: %w", err)
		}
	}
	// An update maps both the old and the new route, so a plugin whose
	// Service a route stops naming is reconciled too.
	b.Watches(&gwv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var out []reconcile.Request
		for _, k := range routeBackends(o) {
			ns, name, _ := strings.Cut(k, "/")
			out = append(out, byService(ctx, ns, name)...)
		}
		return out
	}))
	if kinds.grants {
		// A grant in a Service's namespace decides whether routes of other
		// namespaces count: every plugin of that namespace is looked at again.
		b.Watches(&gwv1beta1.ReferenceGrant{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			list := newList()
			if err := mgr.GetClient().List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
				mgr.GetLogger().Error(err, "list plugins", "namespace", o.GetNamespace())
				return nil
			}
			var out []reconcile.Request
			for i := range list.Items {
				if serviceIndexKey(list.Items[i].GetAnnotations()) != nil {
					out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				}
			}
			return out
		}))
	}
	return nil
}

// sessionPlan is what the HTTPRoutes ask of one plugin's session block, and
// what of it is out of date.
type sessionPlan struct {
	configPath []string       // the object's pluginConfig
	current    any            // the session block in the object (nil: none)
	want       map[string]any // the block the routes ask for; nil: none
	from       string         // the routes' rules want comes from
	problem    string         // what cannot be honoured ("": none); the block is then left as it is
	write      bool           // the block is to be set to want (removed when want is nil)
	fromStale  bool           // hashlb.io/session-from is not from
}

// stale reports whether the plan changes the object.
func (p *sessionPlan) stale() bool { return p != nil && (p.write || p.fromStale) }

// routeRule is one rule asking for session persistence of the plugin's
// Service, with its block.
type routeRule struct {
	name  string // "HTTPRoute ns/name rule N" (or the rule's name)
	block map[string]any
}

// planSession reads the HTTPRoutes naming the plugin's Service and works out
// its session block. configPath is the pluginConfig's path in wp. The error
// is the API server's; what the routes ask that cannot be honoured is
// p.problem.
func (r *Reconciler) planSession(ctx context.Context, wp *unstructured.Unstructured, service string, configPath []string) (*sessionPlan, error) {
	p := &sessionPlan{configPath: configPath}
	p.current, _, _ = unstructured.NestedFieldNoCopy(wp.Object, append(slices.Clone(configPath), "session")...)
	owned := wp.GetAnnotations()[AnnotationSessionFrom] != ""
	var rules []routeRule
	var problems []string
	if r.gateway.routes {
		var err error
		if rules, problems, err = r.sessionRules(ctx, wp.GetNamespace(), service); err != nil {
			return nil, err
		}
	}
	for _, rr := range rules {
		if !sameValue(rr.block, rules[0].block) {
			problems = append(problems, fmt.Sprintf("%s and %s ask for different sessionPersistence (%s, %s), and one plugin has one session block",
				rules[0].name, rr.name, compact(rules[0].block), compact(rr.block)))
			break
		}
	}
	if len(rules) > 0 && len(problems) == 0 {
		if p.current != nil && !owned {
			problems = append(problems, fmt.Sprintf("%s is the operator's (no %s annotation), so the sessionPersistence of %s is not applied: remove one of them",
				strings.Join(append(slices.Clone(configPath), "session"), "."), AnnotationSessionFrom, rules[0].name))
		} else if !namesEnv(wp, configPath, sessionKeyEnv) {
			problems = append(problems, fmt.Sprintf("%s asks for sessionPersistence, but the plugin's vmConfig.env does not name %s, without which hashlb refuses a session block: add it (valueFrom: HOST)",
				rules[0].name, sessionKeyEnv))
		}
	}
	if len(problems) > 0 {
		p.problem = "session not updated: " + strings.Join(problems, "; ")
		return p, nil
	}
	if len(rules) > 0 {
		names := make([]string, len(rules))
		for i, rr := range rules {
			names[i] = rr.name
		}
		p.want, p.from = rules[0].block, strings.Join(names, ", ")
		p.write = p.current == nil || !sameValue(p.current, p.want)
		p.fromStale = wp.GetAnnotations()[AnnotationSessionFrom] != p.from
		return p, nil
	}
	if owned { // the routes dropped it
		p.write, p.fromStale = p.current != nil, true
	}
	return p, nil
}

// sessionRules lists the rules, over every HTTPRoute that names Service
// ns/service, with sessionPersistence for it, sorted by route; problems are
// those rules that cannot be honoured. A route of another namespace counts
// only when a ReferenceGrant in ns allows it, as Gateway API requires;
// otherwise it is ignored.
func (r *Reconciler) sessionRules(ctx context.Context, ns, service string) (rules []routeRule, problems []string, err error) {
	key := ns + "/" + service
	var routes gwv1.HTTPRouteList
	if err := r.Client.List(ctx, &routes, client.MatchingFields{indexRouteBackend: key}); err != nil {
		return nil, nil, err
	}
	slices.SortFunc(routes.Items, func(a, b gwv1.HTTPRoute) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for i := range routes.Items {
		rt := &routes.Items[i]
		if rt.DeletionTimestamp != nil {
			continue
		}
		if rt.Namespace != ns {
			ok, err := r.granted(ctx, rt.Namespace, ns, service)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				continue
			}
		}
		for j, rule := range rt.Spec.Rules {
			if rule.SessionPersistence == nil {
				continue
			}
			names, others := false, false
			for _, ref := range rule.BackendRefs {
				if isServiceRef(ref.BackendObjectReference) && refKey(rt.Namespace, ref.BackendObjectReference) == key {
					names = true
				} else {
					others = true
				}
			}
			if !names {
				continue
			}
			name := fmt.Sprintf("HTTPRoute %s/%s rule %d", rt.Namespace, rt.Name, j)
			ruleID := strconv.Itoa(j)
			if rule.Name != nil && *rule.Name != "" {
				name = fmt.Sprintf("HTTPRoute %s/%s rule %q", rt.Namespace, rt.Name, *rule.Name)
				ruleID = string(*rule.Name)
			}
			if others {
				problems = append(problems, fmt.Sprintf("%s has sessionPersistence and backendRefs other than Service %s, and a hashlb session names a pod of one Service", name, key))
				continue
			}
			block, err := sessionBlock(rule.SessionPersistence, ruleSessionName(rt.Namespace, rt.Name, ruleID))
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			rules = append(rules, routeRule{name: name, block: block})
		}
	}
	return rules, problems, nil
}

// granted reports whether a ReferenceGrant in namespace to lets HTTPRoutes
// of namespace from refer to Service service.
func (r *Reconciler) granted(ctx context.Context, from, to, service string) (bool, error) {
	if !r.gateway.grants {
		return false, nil
	}
	var grants gwv1beta1.ReferenceGrantList
	if err := r.Client.List(ctx, &grants, client.InNamespace(to)); err != nil {
		return false, err
	}
	for _, g := range grants.Items {
		fromOK := slices.ContainsFunc(g.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return f.Group == gwv1.GroupName && f.Kind == "HTTPRoute" && string(f.Namespace) == from
		})
		toOK := slices.ContainsFunc(g.Spec.To, func(t gwv1.ReferenceGrantTo) bool {
			return t.Group == "" && t.Kind == "Service" && (t.Name == nil || *t.Name == "" || string(*t.Name) == service)
		})
		if fromOK && toOK {
			return true, nil
		}
	}
	return false, nil
}

// ruleSessionName is the session name of an HTTPRoute rule without
// sessionName: hashlb_<namespace>_<route>_<rule> (the rule's name, else its
// index). A session is signed for its name, so two rules never honour each
// other's sessions, as Gateway API requires, even over services of the same
// identity ('_' is in no Kubernetes name, so no two rules share one). A name
// over 128 bytes is cut and ends with a hash of the whole.
func ruleSessionName(ns, route, rule string) string {
	n := "hashlb_" + ns + "_" + route + "_" + rule
	if len(n) <= 128 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:128-17] + "_" + hex.EncodeToString(sum[:8])
}

// sessionBlock is hashlb's session block for a Gateway API sessionPersistence;
// name is the session name when sessionName is absent (ruleSessionName).
// Other fields Gateway API leaves out stay out, so hashlb's defaults apply.
func sessionBlock(sp *gwv1.SessionPersistence, name string) (map[string]any, error) {
	b := map[string]any{}
	switch {
	case sp.Type == nil || *sp.Type == gwv1.CookieBasedSessionPersistence:
		b["type"] = lbcore.SessionCookie
	case *sp.Type == gwv1.HeaderBasedSessionPersistence:
		b["type"] = lbcore.SessionHeader
	default:
		return nil, fmt.Errorf("sessionPersistence.type %q is neither Cookie nor Header", *sp.Type)
	}
	b["name"] = name
	if sp.SessionName != nil && *sp.SessionName != "" {
		b["name"] = *sp.SessionName
	}
	if sp.AbsoluteTimeout != nil {
		d, err := time.ParseDuration(string(*sp.AbsoluteTimeout))
		if err != nil {
			return nil, fmt.Errorf("sessionPersistence.absoluteTimeout %q is not a duration", *sp.AbsoluteTimeout)
		}
		b["absoluteTimeout"] = lbcore.FormatDuration(d)
	}
	if cc := sp.CookieConfig; cc != nil && cc.LifetimeType != nil {
		switch *cc.LifetimeType {
		case gwv1.PermanentCookieLifetimeType:
			b["lifetime"] = lbcore.LifetimePermanent
		case gwv1.SessionCookieLifetimeType:
			b["lifetime"] = lbcore.LifetimeSession
		default:
			return nil, fmt.Errorf("sessionPersistence.cookieConfig.lifetimeType %q is neither Permanent nor Session", *cc.LifetimeType)
		}
	}
	return b, nil
}

// namesEnv reports whether the plugin's vmConfig.env (beside its
// pluginConfig) has an entry named name.
func namesEnv(wp *unstructured.Unstructured, configPath []string, name string) bool {
	path := append(slices.Clone(configPath[:len(configPath)-1]), "vmConfig", "env")
	env, _, _ := unstructured.NestedSlice(wp.Object, path...)
	return slices.ContainsFunc(env, func(e any) bool {
		m, _ := e.(map[string]any)
		return m != nil && m["name"] == name
	})
}

// sameValue reports whether a and b are the same JSON value (unstructured
// holds int64 and float64 where JSON has numbers).
func sameValue(a, b any) bool {
	norm := func(v any) (any, bool) {
		data, err := json.Marshal(v)
		if err != nil {
			return nil, false
		}
		var out any
		return out, json.Unmarshal(data, &out) == nil
	}
	x, ok1 := norm(a)
	y, ok2 := norm(b)
	return ok1 && ok2 && reflect.DeepEqual(x, y)
}

func compact(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

// config is the plugin configuration with list as its services and the
// session block as the plan has it, checked by lbcore. When lbcore refuses
// the routes' block but accepts the configuration with the block as it is,
// the block is left alone and the refusal becomes p.problem.
func (p *sessionPlan) config(wp *unstructured.Unstructured, list []any) (map[string]any, error) {
	if p == nil || !p.write {
		return newConfigJSON(wp, list)
	}
	kept, err := newConfigJSON(wp, list) // the block as it is
	cfg := map[string]any{}
	if pc, _, _ := unstructured.NestedMap(wp.Object, p.configPath...); pc != nil {
		cfg = pc
	}
	if list == nil {
		list = []any{}
	}
	cfg["services"] = list
	if p.want == nil {
		delete(cfg, "session")
	} else {
		cfg["session"] = runtime.DeepCopyJSONValue(p.want)
	}
	data, jerr := json.Marshal(cfg)
	if jerr != nil {
		return nil, badf("%s: %v", strings.Join(p.configPath, "."), jerr)
	}
	_, perr := lbcore.ParseConfig(data)
	switch {
	case perr == nil:
		return cfg, nil
	case err != nil:
		return nil, err // refused either way: the services' error
	}
	p.problem = fmt.Sprintf("session not updated: lbcore refuses the session block %s from the sessionPersistence of %s: %s",
		compact(p.want), p.from, strings.ReplaceAll(perr.Error(), "\n", "; "))
	p.write, p.fromStale = false, false
	return kept, nil
}

// patchInto adds the plan's changes to a JSON merge patch body: the session
// block (each key the old block has and the new one lacks set to null, since
// a merge patch merges objects) and hashlb.io/session-from.
func (p *sessionPlan) patchInto(body map[string]any) {
	if p == nil {
		return
	}
	if p.write {
		var v any // nil removes the block
		if p.want != nil {
			m := runtime.DeepCopyJSONValue(p.want).(map[string]any)
			if old, ok := p.current.(map[string]any); ok {
				for k := range old {
					if _, ok := m[k]; !ok {
						m[k] = nil
					}
				}
			}
			v = m
		}
		at := body
		for _, k := range p.configPath {
			next, _ := at[k].(map[string]any)
			if next == nil {
				next = map[string]any{}
				at[k] = next
			}
			at = next
		}
		at["session"] = v
	}
	if p.fromStale {
		var from any
		if p.want != nil {
			from = p.from
		}
		meta, _ := body["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			body["metadata"] = meta
		}
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
			meta["annotations"] = ann
		}
		ann[AnnotationSessionFrom] = from
	}
}

// record records the plan's change as an event about wp; reported is
// whether the object's hashlb.io/error changes with this write (so a problem
// is recorded once per distinct reason).
func (p *sessionPlan) record(r *Reconciler, wp *unstructured.Unstructured, reported bool) {
	if p == nil {
		return
	}
	if p.problem != "" && reported {
		r.Recorder.Eventf(wp, nil, corev1.EventTypeWarning, ReasonSessionRejected, "UpdateSession",
			"%s", clip(p.problem+"; keeping the session block as it is"))
	}
	if !p.write {
		return
	}
	if p.want == nil {
		r.Recorder.Eventf(wp, nil, corev1.EventTypeNormal, ReasonSessionRemoved, "UpdateSession",
			"session block removed: no HTTPRoute rule asks for sessionPersistence any more")
		return
	}
	r.Recorder.Eventf(wp, nil, corev1.EventTypeNormal, ReasonSessionUpdated, "UpdateSession",
		"%s", clip(fmt.Sprintf("session %s from %s", compact(p.want), p.from)))
}

// joinNotes joins two hashlb.io/error reasons.
func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
