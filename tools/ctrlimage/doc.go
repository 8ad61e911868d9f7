// Package ctrlimage writes hashlb-controller's container image as an OCI
// image layout, without a container daemon, with tools/ocipack's Store
// (oras-go), as the Wasm module's image is written: one image manifest
// (application/vnd.oci.image.manifest.v1+json), an image config
// (application/vnd.oci.image.config.v1+json) and one gzip-compressed tar
// layer holding the static binary and a passwd/group entry for its user.
// The image runs the binary as its entrypoint, as the numeric non-root user
// 65532, and writes nothing to its root filesystem, so a pod can mount it
// read-only. The same binary always gives the same image (every time in the
// layer and config is the Unix epoch unless Options.Created says otherwise).
//
// The image is written by ctrlimage.go.
package ctrlimage
