package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hashlb/hashlb/tools/ctrlimage"
	"github.com/hashlb/hashlb/tools/ocipack"
)

func main() {
	ocipack.Command{
		Name: "hashlb-controller-image",
		In:   "dist/hashlb-controller-linux-amd64", InUsage: "the static hashlb-controller binary (CGO_ENABLED=0)",
		Out: "dist/controller-oci",
		Tag: ctrlimage.Tag, TagUsage: "tag of the image in the layout",
		Pack: pack,
	}.Main()
}

func pack(ctx context.Context, binary []byte, _, out, tag string, created time.Time) error {
	r, err := ctrlimage.Write(ctx, out, binary, ctrlimage.Options{Tag: tag, Created: created})
	if err != nil {
		return err
	}
	fmt.Printf("image %s  %s:%s (linux/%s, user %s, entrypoint %s, layer %d bytes)\n", r.Manifest.Digest, out, tag,
		r.Image.Architecture, r.Image.Config.User, r.Image.Config.Entrypoint[0], r.Layer.Size)
	fmt.Printf("push: oras copy --from-oci-layout %s:%s REGISTRY/hashlb-controller:%s (or skopeo copy oci:%s:%s docker://…)\n",
		out, tag, tag, out, tag)
	return nil
}
