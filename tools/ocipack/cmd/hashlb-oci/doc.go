// Command hashlb-oci writes dist/hashlb.wasm as an OCI image layout that
// Istio's WasmPlugin can pull once it is pushed to a registry:
//
//	go run ./tools/ocipack/cmd/hashlb-oci -in dist/hashlb.wasm -out dist/oci -tag latest
//	oras copy --from-oci-layout dist/oci:latest registry.example.com/hashlb/hashlb:v0.1.0
//
// It prints the module's sha256 (the WasmPlugin sha256 for http(s):// URLs)
// and the manifest digest (the WasmPlugin sha256 for oci:// URLs). Set
// SOURCE_DATE_EPOCH to stamp the manifest's creation time; without it the
// time is the Unix epoch, so the same module always gives the same image.
//
// The command is main.go, over tools/ocipack's Command.
package main
