// Package ocipack writes a Wasm module as an OCI image layout in the format
// Istio's WasmPlugin pulls, using oras-go (oras.land/oras-go/v2) for the
// layout, blobs and manifest.
//
// The format is the "oci" variant of the Wasm image specification
// (solo-io/wasm, spec/spec.md): a runtime-config layer of media type
// application/vnd.module.wasm.config.v1+json and the module itself, raw and
// uncompressed, as a layer of media type
// application/vnd.module.wasm.content.layer.v1+wasm. Istio's fetcher
// (istio/istio pkg/wasm/imagefetcher.go, extractOCIArtifactImage) requires
// exactly these two layers and reads the one with the wasm media type; the
// runtime config is also the manifest's config blob.
//
// Istio verifies a WasmPlugin's sha256 against the manifest digest for
// oci:// URLs (pkg/wasm/cache.go) and against the module's sha256 for
// http(s):// URLs, so Result carries both.
//
// Store (the blobs, the manifest and its tag in a layout) and Command (the
// packer's flags, its input and SOURCE_DATE_EPOCH) are what
// tools/ctrlimage's controller image shares with it.
//
// Its parts, by file: the Wasm image's media types, its runtime config and
// Write (ocipack.go); Store and the Layout it writes, and FetchJSON that reads its blobs back (layout.go); and Command
// (command.go).
package ocipack
