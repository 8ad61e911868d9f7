package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hashlb/hashlb/tools/ocipack"
)

func main() {
	ocipack.Command{
		Name: "hashlb-oci",
		In:   "dist/hashlb.wasm", InUsage: "the Wasm module",
		Out: "dist/oci",
		Tag: "latest", TagUsage: "tag of the manifest in the layout",
		Pack: pack,
	}.Main()
}

func pack(ctx context.Context, module []byte, in, out, tag string, created time.Time) error {
	r, err := ocipack.Write(ctx, out, module, ocipack.Options{Tag: tag, Created: created})
	if err != nil {
		return err
	}
	fmt.Printf("module   sha256:%s  %s (%d bytes)\n", r.ModuleSHA256, in, len(module))
	fmt.Printf("manifest %s  %s:%s\n", r.Manifest.Digest, out, tag)
	fmt.Printf("WasmPlugin sha256: %s for oci:// URLs, %s for http(s):// URLs\n", r.Manifest.Digest.Encoded(), r.ModuleSHA256)
	fmt.Printf("push: oras copy --from-oci-layout %s:%s REGISTRY/REPOSITORY:TAG\n", out, tag)
	return nil
}
