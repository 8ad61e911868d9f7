package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Manifests decodes every YAML document of files strictly into client-go's
// types (an unknown field is an error); empty documents are skipped.
func Manifests(files ...string) ([]runtime.Object, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []runtime.Object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			obj, _, err := dec.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s document %d: %w", f, i, err)
			}
			out = append(out, obj)
		}
	}
	return out, nil
}

// ApplyRBAC creates through c what kubectl apply -f of dir
// (configs/istio/controller) gives the controller to run as: the namespace
// hashlb-system, and the ServiceAccount and its RBAC (serviceaccount.yaml,
// rbac.yaml). An object that exists already is kept.
func ApplyRBAC(ctx context.Context, c client.Client, dir string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hashlb-system"}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	objs, err := Manifests(filepath.Join(dir, "serviceaccount.yaml"), filepath.Join(dir, "rbac.yaml"))
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj.(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T: %w", obj, err)
		}
	}
	return nil
}
