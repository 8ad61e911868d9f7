package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/hashlb/hashlb/tools/ocipack"
)

func main() {
	in := flag.String("in", "dist/hashlb.wasm", "the Wasm module")
	out := flag.String("out", "dist/oci", "directory of the OCI image layout to write")
	tag := flag.String("tag", "latest", "tag of the manifest in the layout")
	flag.Parse()
	if err := run(*in, *out, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "hashlb-oci:", err)
		os.Exit(1)
	}
}

func run(in, out, tag string) error {
	module, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var created time.Time
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %v", s, err)
		}
		created = time.Unix(sec, 0)
	}
	r, err := ocipack.Write(context.Background(), out, module, ocipack.Options{Tag: tag, Created: created})
	if err != nil {
		return err
	}
	fmt.Printf("module   sha256:%s  %s (%d bytes)\n", r.ModuleSHA256, in, len(module))
	fmt.Printf("manifest %s  %s:%s\n", r.Manifest.Digest, out, tag)
	fmt.Printf("WasmPlugin sha256: %s for oci:// URLs, %s for http(s):// URLs\n", r.Manifest.Digest.Encoded(), r.ModuleSHA256)
	fmt.Printf("push: oras copy --from-oci-layout %s:%s REGISTRY/REPOSITORY:TAG\n", out, tag)
	return nil
}
