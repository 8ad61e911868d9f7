package e2e

// Helpers shared by the deployment checks (deploy_envoy_test.go, deploy_istio_test.go,
// deploy_configs_test.go): reading repository files, YAML to JSON, strict protojson,
// and validation of the messages packed in google.protobuf.Any fields.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

// wasmPath is where build.sh writes the module:
// GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o dist/hashlb.wasm ./filter
const wasmPath = "dist/hashlb.wasm"

// repoRoot is the module's top directory (this file lives in e2e/).
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the repository")
	}
	return filepath.Dir(filepath.Dir(file))
}

func readRepoFile(t testing.TB, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// yamlDocs converts every document of a YAML stream to JSON.
func yamlDocs(data []byte) ([][]byte, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var out [][]byte
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("yaml: %w", err)
		}
		if v == nil {
			continue
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("yaml to json: %w", err)
		}
		out = append(out, j)
	}
}

// yamlToJSON converts a single-document YAML file to JSON.
func yamlToJSON(data []byte) ([]byte, error) {
	docs, err := yamlDocs(data)
	if err != nil {
		return nil, err
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("yaml: %d documents, want 1", len(docs))
	}
	return docs[0], nil
}

// strictUnmarshal is protojson with unknown fields refused; Any fields
// resolve through the global registry, so every type a file names must be
// linked into the test binary.
func strictUnmarshal(data []byte, m proto.Message) error {
	return protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(data, m)
}

// validator is the method protoc-gen-validate generates.
type validator interface{ ValidateAll() error }

// validateAll runs m's ValidateAll and then does the same for every message
// packed in an Any below it: protoc-gen-validate checks an Any's type URL at
// most, never its contents, so typed_config would otherwise go unchecked.
func validateAll(m proto.Message) error {
	var errs []error
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err))
		}
	}
	walkAnys(m.ProtoReflect(), &errs)
	return errors.Join(errs...)
}

func walkAnys(m protoreflect.Message, errs *[]error) {
	visit := func(v protoreflect.Message) {
		a, ok := v.Interface().(*anypb.Any)
		if !ok {
			walkAnys(v, errs)
			return
		}
		inner, err := a.UnmarshalNew()
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
			return
		}
		if err := validateAll(inner); err != nil {
			*errs = append(*errs, err)
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i, l := 0, v.List(); i < l.Len(); i++ {
				visit(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			visit(v.Message())
		}
		return true
	})
}

// mustReplace returns s with old replaced by new exactly once, so a broken
// copy cannot silently stay intact when the original file changes.
func mustReplace(t testing.TB, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("broken copy: %q occurs %d times, want 1", old, n)
	}
	return strings.Replace(s, old, new, 1)
}

// wantErr fails unless err is non-nil and mentions every part of want.
func wantErr(t testing.TB, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("error = nil, want one mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error = %v\nwant it to mention %q", err, w)
		}
	}
}
