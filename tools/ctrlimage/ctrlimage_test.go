package ctrlimage

// The image ./build.sh controller-image writes, read back with oras-go as a
// registry client would: the manifest and config media types, the
// entrypoint and the non-root user, the layer's diff ID, the binary in the
// layer statically linked and running -h, and the Deployment in
// configs/istio/controller naming the image's tag and user.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"gopkg.in/yaml.v3"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/content/oci"

	"github.com/hashlb/hashlb/tools/ocipack"
)

// controllerBinary builds cmd/hashlb-controller as build.sh controller-image
// does (CGO_ENABLED=0, -trimpath).
func controllerBinary(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "hashlb-controller")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = filepath.Join("..", "..", "cmd", "hashlb-controller")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/hashlb-controller: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestControllerImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is a Linux image; its binary runs only on Linux") // the repository's tests run on Linux
	}
	ctx := context.Background()
	binary := controllerBinary(t)
	dir := t.TempDir()
	res, err := Write(ctx, dir, binary, Options{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Write(ctx, t.TempDir(), binary, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Manifest.Digest != res.Manifest.Digest {
		t.Errorf("the same binary gave manifests %s and %s, want one (a reproducible image)", res.Manifest.Digest, again.Manifest.Digest)
	}

	store, err := oci.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := store.Resolve(ctx, Tag)
	if err != nil {
		t.Fatalf("Resolve(%s): %v", Tag, err)
	}
	if desc.MediaType != ocispec.MediaTypeImageManifest || desc.Digest != res.Manifest.Digest {
		t.Errorf("Resolve(%s) = %s %s, want an image manifest %s", Tag, desc.MediaType, desc.Digest, res.Manifest.Digest)
	}
	// The whole graph copies out, every blob checked against its digest:
	// what oras copy does to a registry, here into memory.
	if _, err := oras.Copy(ctx, store, Tag, memory.New(), Tag, oras.DefaultCopyOptions); err != nil {
		t.Fatalf("oras.Copy of the layout: %v", err)
	}
	var m ocispec.Manifest
	if err := ocipack.FetchJSON(ctx, store, desc, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != ocispec.MediaTypeImageConfig || len(m.Layers) != 1 || m.Layers[0].MediaType != ocispec.MediaTypeImageLayerGzip {
		t.Fatalf("manifest config %s, layers %+v, want an image config and one tar+gzip layer", m.Config.MediaType, m.Layers)
	}
	var img ocispec.Image
	if err := ocipack.FetchJSON(ctx, store, m.Config, &img); err != nil {
		t.Fatal(err)
	}
	if img.OS != "linux" || img.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", img.OS, img.Architecture, runtime.GOARCH)
	}
	if got := strings.Join(img.Config.Entrypoint, " "); got != Entrypoint || len(img.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want %q and no cmd (the Deployment's args are the flags)", got, img.Config.Cmd, Entrypoint)
	}
	if img.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (numeric, not root)", img.Config.User)
	}

	gzLayer, err := content.FetchAll(ctx, store, m.Layers[0])
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gzLayer))
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(tarball)
	if len(img.RootFS.DiffIDs) != 1 || img.RootFS.DiffIDs[0].String() != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("rootfs diff_ids %v, want the uncompressed layer's sha256:%x", img.RootFS.DiffIDs, sum)
	}
	files := map[string][]byte{}
	modes := map[string]int64{}
	tr := tar.NewReader(bytes.NewReader(tarball))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files["/"+strings.TrimSuffix(h.Name, "/")], modes["/"+h.Name] = data, h.Mode
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want root (the user 65532 cannot change the image's files)", h.Name, h.Uid, h.Gid)
		}
	}
	bin := files[Entrypoint]
	if bin == nil || modes[Entrypoint]&0o111 == 0 || modes[Entrypoint]&0o222 != 0 {
		t.Fatalf("layer: %s missing or not an executable read-only file (mode %o); files %v", Entrypoint, modes[Entrypoint], keys(files))
	}
	if !strings.Contains(string(files["/etc/passwd"]), ":65532:65532:") {
		t.Errorf("/etc/passwd %q has no user 65532", files["/etc/passwd"])
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary in the layer is dynamically linked (PT_INTERP); the image has no C library")
		}
	}
	exe := filepath.Join(t.TempDir(), "hashlb-controller")
	if err := os.WriteFile(exe, bin, 0o555); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-kubeconfig") || !strings.Contains(string(out), "-leader-elect") {
		t.Errorf("%s -h (the binary from the layer): %v\n%s", Entrypoint, err, out)
	}

	// A binary that needs a dynamic loader is refused.
	if _, err := Write(ctx, t.TempDir(), dynamicELF(t), Options{}); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("Write of a dynamically linked binary: %v, want it refused", err)
	}
}

// dynamicELF returns a dynamically linked executable of this machine
// (/bin/sh's target), or skips the refusal check when there is none.
func dynamicELF(t *testing.T) []byte {
	for _, p := range []string{"/bin/sh", "/usr/bin/env"} {
		if data, err := os.ReadFile(p); err == nil {
			if f, err := elf.NewFile(bytes.NewReader(data)); err == nil {
				for _, pr := range f.Progs {
					if pr.Type == elf.PT_INTERP {
						return data
					}
				}
			}
		}
	}
	t.Fatal("no dynamically linked executable found on this machine to check the refusal with")
	return nil
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestDeploymentNamesImage: configs/istio/controller's Deployment names the
// image this package writes (its repository hashlb-controller and its tag),
// runs it with the image's own entrypoint, as the image's user, non-root,
// on a read-only root filesystem.
func TestDeploymentNamesImage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "configs", "istio", "controller", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type securityContext struct {
		RunAsNonRoot           *bool  `yaml:"runAsNonRoot"`
		RunAsUser              *int64 `yaml:"runAsUser"`
		RunAsGroup             *int64 `yaml:"runAsGroup"`
		ReadOnlyRootFilesystem *bool  `yaml:"readOnlyRootFilesystem"`
	}
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext securityContext `yaml:"securityContext"`
					Containers      []struct {
						Image           string          `yaml:"image"`
						Command         []string        `yaml:"command"`
						SecurityContext securityContext `yaml:"securityContext"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(data, &dep); err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("containers: %d, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !strings.HasSuffix(c.Image, "/hashlb-controller:"+Tag) {
		t.Errorf("image %q, want REGISTRY/…/hashlb-controller:%s, the image ./build.sh controller-image tags", c.Image, Tag)
	}
	if len(c.Command) != 0 {
		t.Errorf("command %q, want none (the image's entrypoint %s)", c.Command, Entrypoint)
	}
	sc := pod.SecurityContext
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != UID || sc.RunAsGroup == nil || *sc.RunAsGroup != GID {
		t.Errorf("pod securityContext runAsNonRoot %v runAsUser %v runAsGroup %v, want true, %d, %d (the image's user)",
			deref(sc.RunAsNonRoot), deref(sc.RunAsUser), deref(sc.RunAsGroup), UID, GID)
	}
	if r := c.SecurityContext.ReadOnlyRootFilesystem; r == nil || !*r {
		t.Errorf("container readOnlyRootFilesystem %v, want true", deref(r))
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
