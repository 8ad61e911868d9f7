package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/hashlb/hashlb/tools/ctrlimage"
)

func main() {
	in := flag.String("in", "dist/hashlb-controller-linux-amd64", "the static hashlb-controller binary (CGO_ENABLED=0)")
	out := flag.String("out", "dist/controller-oci", "directory of the OCI image layout to write")
	tag := flag.String("tag", ctrlimage.Tag, "tag of the image in the layout")
	flag.Parse()
	if err := run(*in, *out, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "hashlb-controller-image:", err)
		os.Exit(1)
	}
}

func run(in, out, tag string) error {
	binary, err := os.ReadFile(in)
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
	r, err := ctrlimage.Write(context.Background(), out, binary, ctrlimage.Options{Tag: tag, Created: created})
	if err != nil {
		return err
	}
	fmt.Printf("image %s  %s:%s (linux/%s, user %s, entrypoint %s, layer %d bytes)\n", r.Manifest.Digest, out, tag,
		r.Image.Architecture, r.Image.Config.User, r.Image.Config.Entrypoint[0], r.Layer.Size)
	fmt.Printf("push: oras copy --from-oci-layout %s:%s REGISTRY/hashlb-controller:%s (or skopeo copy oci:%s:%s docker://…)\n",
		out, tag, tag, out, tag)
	return nil
}
