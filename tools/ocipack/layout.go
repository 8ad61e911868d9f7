package ocipack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"
)

// Blob is a blob Store pushes: its descriptor and its bytes.
type Blob struct {
	Desc ocispec.Descriptor
	Data []byte
}

// Layout is what Store writes into an OCI image layout: the blobs, and the
// manifest that names them.
type Layout struct {
	// Blobs are pushed in order; one already in the layout is kept.
	Blobs []Blob
	// Config and Layers are the manifest's; a layer may be the config
	// blob again under another descriptor (Write's runtime config).
	Config ocispec.Descriptor
	Layers []ocispec.Descriptor
	// Title and Created (in UTC, RFC 3339) are the manifest's annotations.
	Title   string
	Created time.Time
	// Tag names the manifest in the layout's index.
	Tag string
}

// Store writes l into the OCI image layout dir (created if needed): its
// blobs, then an image manifest (image spec 1.1), tagged. It is the part
// Write and tools/ctrlimage's image share; its errors name the step, and
// the caller adds its own name before them.
func Store(ctx context.Context, dir string, l Layout) (ocispec.Descriptor, error) {
	store, err := oci.NewWithContext(ctx, dir)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("open layout %s: %w", dir, err)
	}
	for _, b := range l.Blobs {
		err := store.Push(ctx, b.Desc, bytes.NewReader(b.Data))
		if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", b.Desc.MediaType, err)
		}
	}
	manifest, err := oras.PackManifest(ctx, store, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{
		ConfigDescriptor: &l.Config,
		Layers:           l.Layers,
		ManifestAnnotations: map[string]string{
			ocispec.AnnotationCreated: l.Created.UTC().Format(time.RFC3339),
			ocispec.AnnotationTitle:   l.Title,
		},
	})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("pack manifest: %w", err)
	}
	if err := store.Tag(ctx, manifest, l.Tag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("tag %s: %w", l.Tag, err)
	}
	return manifest, nil
}

// FetchJSON reads the blob desc of a layout or registry (a manifest, an
// image config) and decodes it into v, for a reader of what Store wrote;
// the blob is checked against its digest.
func FetchJSON(ctx context.Context, store content.Fetcher, desc ocispec.Descriptor, v any) error {
	raw, err := content.FetchAll(ctx, store, desc)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}
