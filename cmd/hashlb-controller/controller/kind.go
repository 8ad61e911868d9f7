package controller

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is one of Istio's kinds that carry a Wasm plugin configuration,
// which the controller keeps in step the same way. It handles both as
// unstructured data, so it needs no Istio client library.
type Kind struct {
	// GVK is the kind's group, version and kind.
	GVK schema.GroupVersionKind
	// Resource is its plural resource name (what RBAC rules name).
	Resource string
	// Wasm is the path to the object holding the Wasm fields (url,
	// pluginConfig, pluginName, type, vmConfig).
	Wasm []string
	// Controller names the kind's controller (its metrics and logs).
	Controller string
}

// The kinds, from istio.io/api v1.32.0 (extensions/v1alpha1/wasm.proto and
// traffic_extension.proto): a WasmPlugin has the Wasm fields in its spec; a
// TrafficExtension (Istio 1.30 and later, one API for Wasm and Lua) under
// spec.wasm.
var (
	WasmPlugin = &Kind{
		GVK:      schema.GroupVersionKind{Group: "extensions.istio.io", Version: "v1alpha1", Kind: "WasmPlugin"},
		Resource: "wasmplugins", Wasm: []string{"spec"}, Controller: Name,
	}
	TrafficExtension = &Kind{
		GVK:      schema.GroupVersionKind{Group: "extensions.istio.io", Version: "v1alpha1", Kind: "TrafficExtension"},
		Resource: "trafficextensions", Wasm: []string{"spec", "wasm"}, Controller: Name + "-trafficextension",
	}
	// Kinds is every kind the controller knows, in the order it starts them.
	Kinds = []*Kind{WasmPlugin, TrafficExtension}
)

// WasmPluginGVK is Istio's WasmPlugin kind.
var WasmPluginGVK = WasmPlugin.GVK

// New returns an empty unstructured object of the kind.
func (k *Kind) New() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.GVK)
	return u
}

// NewList returns an empty unstructured list of the kind.
func (k *Kind) NewList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(k.GVK.GroupVersion().WithKind(k.GVK.Kind + "List"))
	return l
}

// Path is the path of a Wasm field of the kind (Path("pluginConfig",
// "services") is spec.pluginConfig.services for a WasmPlugin).
func (k *Kind) Path(field ...string) []string {
	return append(append([]string(nil), k.Wasm...), field...)
}

// Field is Path written with dots, for messages.
func (k *Kind) Field(field ...string) string { return strings.Join(k.Path(field...), ".") }

// kindOf is the kind of an object the controller handles (WasmPlugin for
// anything else, as a default that reads spec).
func kindOf(u *unstructured.Unstructured) *Kind {
	if u.GroupVersionKind().Kind == TrafficExtension.GVK.Kind {
		return TrafficExtension
	}
	return WasmPlugin
}

// NewWasmPlugin returns an empty unstructured WasmPlugin.
func NewWasmPlugin() *unstructured.Unstructured { return WasmPlugin.New() }
