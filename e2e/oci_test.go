package e2e

// The OCI image layout hashlb-oci writes (tools/ocipack), read back with the
// same library (oras-go): one manifest with the two layers Istio's fetcher
// expects, the module layer's digest equal to the module's sha256, and the
// same bytes out as in.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/hashlb/hashlb/tools/ocipack"
)

func TestOCILayout(t *testing.T) {
	ctx := context.Background()
	// A tiny but well-formed module header: magic and version 1, then junk.
	module := append([]byte("\x00asm\x01\x00\x00\x00"), []byte("not really a module")...)
	sum := sha256.Sum256(module)
	wantHex := hex.EncodeToString(sum[:])

	dir := t.TempDir()
	res, err := ocipack.Write(ctx, dir, module, ocipack.Options{Tag: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ModuleSHA256 != wantHex || res.Layer.Digest.Encoded() != wantHex {
		t.Errorf("Write: module sha256 %s, layer digest %s, want both %s", res.ModuleSHA256, res.Layer.Digest, wantHex)
	}

	store, err := oci.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := store.Resolve(ctx, "v1")
	if err != nil {
		t.Fatalf("Resolve(v1): %v", err)
	}
	if desc.Digest != res.Manifest.Digest || desc.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("Resolve(v1) = %s %s, want %s %s", desc.MediaType, desc.Digest, ocispec.MediaTypeImageManifest, res.Manifest.Digest)
	}
	var m ocispec.Manifest
	if err := ocipack.FetchJSON(ctx, store, desc, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != ocipack.ConfigMediaType {
		t.Errorf("config media type = %q, want %q", m.Config.MediaType, ocipack.ConfigMediaType)
	}
	// Istio's extractOCIArtifactImage wants exactly two layers, one of them
	// the raw module.
	if len(m.Layers) != 2 {
		t.Fatalf("%d layers, want 2 (runtime config and module)", len(m.Layers))
	}
	var wasm *ocispec.Descriptor
	for i, l := range m.Layers {
		switch l.MediaType {
		case ocipack.LayerMediaType:
			wasm = &m.Layers[i]
		case ocipack.ConfigMediaType:
		default:
			t.Errorf("layer %d media type %q is neither the wasm nor the config type", i, l.MediaType)
		}
	}
	if wasm == nil {
		t.Fatalf("no layer of media type %s", ocipack.LayerMediaType)
	}
	if wasm.Digest.Encoded() != wantHex || wasm.Size != int64(len(module)) {
		t.Errorf("wasm layer = %s (%d bytes), want sha256:%s (%d bytes)", wasm.Digest, wasm.Size, wantHex, len(module))
	}
	got, err := content.FetchAll(ctx, store, *wasm)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, module) {
		t.Error("the wasm layer's bytes differ from the module")
	}
	cfg, err := content.FetchAll(ctx, store, m.Config)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(cfg) {
		t.Errorf("config blob %q is not JSON", cfg)
	}

	// Reproducible: the same module in another layout gives the same manifest.
	again, err := ocipack.Write(ctx, t.TempDir(), module, ocipack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Manifest.Digest != res.Manifest.Digest {
		t.Errorf("second Write: manifest %s, want %s (the same module must give the same image)", again.Manifest.Digest, res.Manifest.Digest)
	}
}

func TestOCIRefusesNonWasm(t *testing.T) {
	if _, err := ocipack.Write(context.Background(), t.TempDir(), []byte("#!/bin/sh\necho hi\n"), ocipack.Options{}); err == nil {
		t.Error("Write(shell script) = nil error, want a refusal")
	}
}
