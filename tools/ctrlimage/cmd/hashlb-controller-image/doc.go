// Command hashlb-controller-image writes a static hashlb-controller binary
// as a container image in an OCI image layout, with no container daemon
// (./build.sh controller-image builds the binary and runs it):
//
//	hashlb-controller-image -in dist/hashlb-controller-linux-amd64 -out dist/controller-oci -tag v0.1.0
//	oras copy --from-oci-layout dist/controller-oci:v0.1.0 registry.example.com/hashlb/hashlb-controller:v0.1.0
//
// Set SOURCE_DATE_EPOCH to stamp the image's creation time; without it the
// time is the Unix epoch, so the same binary always gives the same image.
//
// The command is main.go, over tools/ocipack's Command.
package main
