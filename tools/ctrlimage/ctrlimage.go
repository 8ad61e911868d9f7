package ctrlimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/hashlb/hashlb/tools/ocipack"
)

const (
	// Entrypoint is where the binary is in the image, and the image's
	// entrypoint.
	Entrypoint = "/hashlb-controller"
	// UID and GID are the user the image runs as: not root, numeric so that
	// Kubernetes can check runAsNonRoot without reading /etc/passwd (65532
	// is the "nonroot" user of distroless images).
	UID, GID = 65532, 65532
	// Tag is the layout tag ./build.sh controller-image writes, the tag the
	// Deployment in configs/istio/controller names.
	Tag = "v0.1.0"
)

// Options control Write.
type Options struct {
	// Tag names the manifest in the layout's index (default Tag).
	Tag string
	// Created stamps the config, the manifest and the layer's files; the
	// zero time writes the Unix epoch.
	Created time.Time
}

// Result describes what Write stored.
type Result struct {
	Manifest, Config, Layer ocispec.Descriptor
	Image                   ocispec.Image
}

// Write stores binary as the image in the OCI layout dir (created if
// needed) and tags it. binary must be a statically linked Linux ELF
// executable (CGO_ENABLED=0): the image has no C library for a dynamic one.
func Write(ctx context.Context, dir string, binary []byte, opts Options) (Result, error) {
	arch, err := staticELF(binary)
	if err != nil {
		return Result{}, err
	}
	if opts.Tag == "" {
		opts.Tag = Tag
	}
	created := opts.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()
	tarball, err := layerTar(binary, created)
	if err != nil {
		return Result{}, err
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression) // a valid level: no error
	zw.ModTime = created                                    // no name, a fixed time: the same bytes each run
	if _, err := zw.Write(tarball); err != nil {
		return Result{}, err
	}
	if err := zw.Close(); err != nil {
		return Result{}, err
	}
	layer := content.NewDescriptorFromBytes(ocispec.MediaTypeImageLayerGzip, gz.Bytes())
	img := ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{OS: "linux", Architecture: arch},
		Config: ocispec.ImageConfig{
			User:       fmt.Sprintf("%d:%d", UID, GID),
			Entrypoint: []string{Entrypoint},
			WorkingDir: "/",
			Labels: map[string]string{
				ocispec.AnnotationTitle:       "hashlb-controller",
				ocispec.AnnotationDescription: "keeps hashlb's services equal to a Service's endpoints (docs/controller.md)",
			},
		},
		RootFS: ocispec.RootFS{Type: "layers"},
		History: []ocispec.History{{Created: &created, CreatedBy: "tools/ctrlimage: " + Entrypoint +
			" (static), /etc/passwd and /etc/group for uid 65532"}},
	}
	// The diff ID is the digest of the uncompressed tar.
	img.RootFS.DiffIDs = append(img.RootFS.DiffIDs, content.NewDescriptorFromBytes("", tarball).Digest)
	cfgJSON, err := json.Marshal(img)
	if err != nil {
		return Result{}, err
	}
	cfg := content.NewDescriptorFromBytes(ocispec.MediaTypeImageConfig, cfgJSON)

	manifest, err := ocipack.Store(ctx, dir, ocipack.Layout{
		Blobs:   []ocipack.Blob{{Desc: cfg, Data: cfgJSON}, {Desc: layer, Data: gz.Bytes()}},
		Config:  cfg,
		Layers:  []ocispec.Descriptor{layer},
		Title:   "hashlb-controller",
		Created: created,
		Tag:     opts.Tag,
	})
	if err != nil {
		return Result{}, fmt.Errorf("ctrlimage: %w", err)
	}
	return Result{Manifest: manifest, Config: cfg, Layer: layer, Image: img}, nil
}

// staticELF checks that binary is a Linux ELF executable without a dynamic
// loader and returns its OCI architecture.
func staticELF(binary []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return "", fmt.Errorf("ctrlimage: not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errors.New("ctrlimage: the binary is dynamically linked (it names a program interpreter); build it with CGO_ENABLED=0")
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	}
	return "", fmt.Errorf("ctrlimage: ELF machine %v has no OCI architecture here", f.Machine)
}

// layerTar is the layer's tar: /etc/passwd, /etc/group and the binary.
func layerTar(binary []byte, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, GID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", GID)
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)),
			ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := errors.Join(dir("etc/"), file("etc/passwd", 0o644, []byte(passwd)), file("etc/group", 0o644, []byte(group)),
		file(Entrypoint[1:], 0o555, binary), tw.Close()); err != nil {
		return nil, fmt.Errorf("ctrlimage: layer: %w", err)
	}
	return b.Bytes(), nil
}
