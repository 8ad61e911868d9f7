package ocipack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// Media types of the Wasm image specification's "oci" variant.
const (
	ConfigMediaType = "application/vnd.module.wasm.config.v1+json"
	LayerMediaType  = "application/vnd.module.wasm.content.layer.v1+wasm"
)

// runtimeConfig is the config blob: the spec's envoy_proxy runtime and the
// proxy-wasm ABI the module exports (proxy_abi_version_0_2_1).
const runtimeConfig = `{"type":"envoy_proxy","abiVersions":["v0.2.1"],"config":{}}`

// Options control Write.
type Options struct {
	// Tag names the manifest in the layout's index (default "latest").
	Tag string
	// Created is the manifest's org.opencontainers.image.created annotation.
	// The zero time writes 1970-01-01T00:00:00Z so that the same module always
	// gives the same manifest digest (a reproducible image).
	Created time.Time
}

// Result describes what Write stored.
type Result struct {
	// ModuleSHA256 is the hex sha256 of the module: the layer digest, and the
	// WasmPlugin sha256 for http(s):// URLs.
	ModuleSHA256 string
	// Layer is the module's layer descriptor.
	Layer ocispec.Descriptor
	// Manifest is the manifest descriptor; its digest is the WasmPlugin
	// sha256 for oci:// URLs.
	Manifest ocispec.Descriptor
}

// Write stores module as an OCI image layout in dir (created if needed) and
// tags the manifest. It refuses bytes that do not start with the Wasm magic
// number, as Istio's fetcher would.
func Write(ctx context.Context, dir string, module []byte, opts Options) (Result, error) {
	if len(module) < 8 || string(module[:4]) != "\x00asm" {
		return Result{}, errors.New("ocipack: module is not a WebAssembly binary (no \\0asm header)")
	}
	if opts.Tag == "" {
		opts.Tag = "latest"
	}
	cfg := content.NewDescriptorFromBytes(ConfigMediaType, []byte(runtimeConfig))
	cfgLayer := cfg
	cfgLayer.Annotations = map[string]string{ocispec.AnnotationTitle: "runtime-config.json"}
	layer := content.NewDescriptorFromBytes(LayerMediaType, module)
	layer.Annotations = map[string]string{ocispec.AnnotationTitle: "plugin.wasm"}
	created := opts.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	manifest, err := Store(ctx, dir, Layout{
		Blobs:   []Blob{{cfg, []byte(runtimeConfig)}, {layer, module}},
		Config:  cfg,
		Layers:  []ocispec.Descriptor{cfgLayer, layer},
		Title:   "hashlb",
		Created: created,
		Tag:     opts.Tag,
	})
	if err != nil {
		return Result{}, fmt.Errorf("ocipack: %w", err)
	}
	sum := sha256.Sum256(module)
	return Result{ModuleSHA256: hex.EncodeToString(sum[:]), Layer: layer, Manifest: manifest}, nil
}
