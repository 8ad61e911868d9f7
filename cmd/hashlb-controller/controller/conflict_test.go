package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/services"
	"github.com/hashlb/hashlb/lbcore"
)

// TestConcurrentOperatorEdit: the operator edits the WasmPlugin between the
// controller's read and its patch (the test makes the edit from inside the
// controller's client, just before the patch is sent). The patch, conditional
// on the resourceVersion the controller validated, is refused; the
// controller reads the object again, validates again on what the operator
// wrote, and never writes services onto a configuration lbcore refuses nor
// onto a WasmPlugin that no longer asks for them.
func TestConcurrentOperatorEdit(t *testing.T) {
	t.Parallel()
	k := newKube(t)
	w, _ := k.controller(Options{})
	p := k.webPods(3)

	// edits: what the operator changes in each WasmPlugin, once, just
	// before the controller's first patch of its services.
	edits := map[string]func(*unstructured.Unstructured){
		"other-key": func(wp *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(wp.Object, "ROUNDROBIN", "spec", "pluginConfig", "lbMethod")
		},
		"refused": func(wp *unstructured.Unstructured) { // TOKEN without a token: lbcore refuses it
			_ = unstructured.SetNestedField(wp.Object, "TOKEN", "spec", "pluginConfig", "lbMethod")
		},
		"opted-out": func(wp *unstructured.Unstructured) { // the operator takes the services back
			ann := wp.GetAnnotations()
			delete(ann, services.AnnotationService)
			wp.SetAnnotations(ann)
			_ = unstructured.SetNestedSlice(wp.Object, []any{map[string]any{"name": "mine", "address": "192.0.2.9:80"}},
				"spec", "pluginConfig", "services")
		},
	}
	var mu sync.Mutex
	edited := map[string]bool{}
	var bad []string
	w.hooks(func(obj client.Object, body []byte) {
		edit := edits[obj.GetName()]
		mu.Lock()
		first := !edited[obj.GetName()]
		edited[obj.GetName()] = true
		mu.Unlock()
		if edit == nil || !first || !bytes.Contains(body, []byte(`"services"`)) {
			return
		}
		wp := NewWasmPlugin()
		ctx := context.Background()
		if err := k.c.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: obj.GetName()}, wp); err != nil {
			t.Errorf("operator's read: %v", err)
			return
		}
		edit(wp)
		if err := k.c.Update(ctx, wp); err != nil {
			t.Errorf("operator's edit: %v", err)
		}
	}, func(obj client.Object, body []byte) {
		if !bytes.Contains(body, []byte(`"services"`)) {
			return
		}
		u := obj.(*unstructured.Unstructured)
		cfg, _, _ := unstructured.NestedMap(u.Object, "spec", "pluginConfig")
		data, _ := json.Marshal(cfg)
		_, err := lbcore.ParseConfig(data)
		_, asked := u.GetAnnotations()[services.AnnotationService]
		if err != nil || !asked {
			mu.Lock()
			bad = append(bad, u.GetName()+": "+string(data))
			mu.Unlock()
		}
	})
	for name := range edits {
		k.wasmPlugin(name, annotated("web"), basicConfig())
	}

	good := want(8080, p...)
	k.waitServices("other-key", good, settle)
	if got, _, _ := unstructured.NestedString(k.get("other-key").Object, "spec", "pluginConfig", "lbMethod"); got != "ROUNDROBIN" {
		t.Errorf("other-key: lbMethod = %q, want the operator's concurrent ROUNDROBIN kept", got)
	}
	k.waitError("refused", "lbcore refuses the configuration", settle)
	static := `[{"address":"192.0.2.1:80","name":"static"}]`
	if got := servicesOf(k.get("refused")); got != static {
		t.Errorf("refused: services = %s, want %s (nothing written onto a configuration lbcore refuses)", got, static)
	}
	// Every edited plugin's stale patch has been answered once the
	// conflicts are counted.
	for deadline := time.Now().Add(settle); w.conflicts.Load() < int64(len(edits)); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("patches refused with a conflict = %d after %v, want at least %d (one per concurrent edit)",
				w.conflicts.Load(), settle, len(edits))
		}
	}
	time.Sleep(500 * time.Millisecond) // what the controller does after its re-read
	if got, mine := servicesOf(k.get("opted-out")), `[{"address":"192.0.2.9:80","name":"mine"}]`; got != mine {
		t.Errorf("opted-out: services = %s, want the operator's own %s", got, mine)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Errorf("the controller wrote services into a configuration lbcore refuses or a WasmPlugin without %s: %s", services.AnnotationService, b)
	}
	t.Logf("patches %d, conflicts %d", w.patches.Load(), w.conflicts.Load())
}
