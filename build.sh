#!/usr/bin/env bash
# build.sh holds hashlb's commands. Usage: ./build.sh wasm|test|run|check|bench|oci|controller [args]
#   wasm   build dist/hashlb.wasm (Go's own toolchain, GOOS=wasip1, -buildmode=c-shared)
#   test   build the module, then run every test (the README's quick start; CI runs it);
#          installs Debian's etcd-server (etcd 3.4) if missing, for the fleet tests (HASHLB_ETCD_BIN)
#   run    build the module and start hashlb-proxy with three demo backends on loopback
#   check  gofmt, go vet (native and wasip1), go mod tidy must change nothing
#   bench  every performance ratio of docs/performance.md, 5 rounds, one table (installs wrk and valgrind if missing);
#          bench REGEX: the Go benchmarks matching REGEX, with -benchmem
#   oci    pack dist/hashlb.wasm as an OCI image layout in dist/oci (Istio's WasmPlugin format)
#   controller  build dist/hashlb-controller (its own Go module, cmd/hashlb-controller) and run it
#          with the given flags (docs/controller.md); `test` also runs its tests, which build and
#          cache a kube-apiserver from k8s.io/kubernetes on their first run
set -euo pipefail
cd "$(dirname "$0")"

wasm() {
	mkdir -p dist
	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o dist/hashlb.wasm ./filter
	echo "built dist/hashlb.wasm ($(wc -c <dist/hashlb.wasm) bytes)"
}

check() {
	local bad
	bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './dist/*'))
	if [ -n "$bad" ]; then echo "gofmt would change: $bad" >&2; exit 1; fi
	go vet ./...
	GOOS=wasip1 GOARCH=wasm go vet ./lbcore ./filter
	if ! go mod tidy -diff; then
		echo "go mod tidy would change go.mod/go.sum (diff above)" >&2
		exit 1
	fi
	(cd cmd/hashlb-controller && go vet ./... && go mod tidy -diff) ||
		{ echo "check: cmd/hashlb-controller: go vet or go mod tidy failed (above)" >&2; exit 1; }
	echo "check: ok"
}

# apt_install PKG installs a Debian package (as root, or through sudo).
apt_install() {
	if [ "$(id -u)" = 0 ]; then apt-get install -y "$1" >/dev/null || { apt-get update >/dev/null && apt-get install -y "$1" >/dev/null; }
	else sudo apt-get install -y "$1" >/dev/null || { sudo apt-get update >/dev/null && sudo apt-get install -y "$1" >/dev/null; }; fi
}

# etcd_bin points HASHLB_ETCD_BIN at Debian's etcd 3.4 (installing etcd-server when
# missing): the fleet tests run against it as well as against the embedded etcd.
etcd_bin() {
	if [ -n "${HASHLB_ETCD_BIN:-}" ]; then return; fi
	if [ ! -x /usr/bin/etcd ]; then
		echo "test: installing etcd-server (Debian's etcd 3.4) for the fleet tests" >&2
		DEBIAN_FRONTEND=noninteractive apt_install etcd-server
	fi
	export HASHLB_ETCD_BIN=/usr/bin/etcd
}

usage() {
	sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"
}

cmd=${1:-}
shift || true
case "$cmd" in
"" | -h | --help | help) usage ;;
wasm) wasm ;;
test)
	etcd_bin
	wasm
	check
	# -count=1: the .wasm half of the tests reads dist/, which go test's cache does not see.
	go test -count=1 -timeout 15m "$@" ./...
	# Shared data is hit by several VMs at once: run those packages under the race detector too.
	go test -count=1 -race -timeout 10m -run 'Shared|CAS|Concurrent|Race' ./lbcore ./hostsim
	# The controller's module, against a real kube-apiserver and etcd (the first run builds
	# kube-apiserver from k8s.io/kubernetes and caches it; see docs/controller.md).
	(cd cmd/hashlb-controller && go test -count=1 -timeout 45m ./...)
	;;
run)
	wasm
	exec go run ./hostsim/cmd/hashlb-proxy "$@"
	;;
check) check ;;
bench)
	wasm
	if [ $# -gt 0 ]; then
		go test -run '^$' -bench "$1" -benchmem ./...
		exit
	fi
	if ! command -v wrk >/dev/null; then
		echo "bench: installing wrk (Debian's) for R7" >&2
		apt_install wrk
	fi
	if ! command -v valgrind >/dev/null; then
		echo "bench: installing valgrind (Debian's) for R1's instruction counts" >&2
		apt_install valgrind
	fi
	mkdir -p dist
	go test ./e2e -run '^$' -bench '^BenchmarkRatios$' -benchtime 1x -timeout 30m -ratios.out="$PWD/dist/performance.md" -ratios.chart="$PWD/dist/cost-vs-services.png"
	echo "table also written to dist/performance.md, chart to dist/cost-vs-services.png"
	;;
oci)
	wasm
	go run ./tools/ocipack/cmd/hashlb-oci -in dist/hashlb.wasm -out dist/oci -tag latest "$@"
	;;
controller)
	mkdir -p dist
	(cd cmd/hashlb-controller && go build -o ../../dist/hashlb-controller .)
	exec dist/hashlb-controller "$@"
	;;
*)
	usage >&2
	exit 2
	;;
esac
