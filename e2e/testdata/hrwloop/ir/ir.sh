#!/bin/sh
# ir.sh [N...]: R1 as instructions per decision (valgrind's cachegrind), V8 and native, for the
# same loop. Each figure is the difference between 20000 + D and 20000 decisions ÷ D, so setup and
# V8's compilation cancel out, with D = 10^6 up to 10 services and 10^7/N above (10^5 at 100, 10^4
# at 1000): at least 4·10^8 instructions, so that node's start, which varies by a few million
# instructions from run to run, moves a figure by about 1 %. (With 10^5 decisions at 3 services,
# runs of one build read ±6 %.) About a minute per size. ./build.sh bench reports these figures as R1.
#   e2e/testdata/hrwloop/ir/ir.sh 3 10 100 1000      (from the repository root; needs valgrind, node)
set -e
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o "$dir/hrwloop.wasm" ./e2e/testdata/hrwloop
go build -o "$dir/native" ./e2e/testdata/hrwloop/ir
ir() { valgrind --tool=cachegrind --cache-sim=no --smc-check=all-non-file --cachegrind-out-file=/dev/null "$@" 2>&1 |
	sed -n 's/.*I *refs: *//p' | tr -d ,; }
v8() { ir node --no-liftoff --wasm-max-mem-pages=16384 --single-threaded e2e/testdata/hrwloop/ir/run.mjs "$dir/hrwloop.wasm" "$@"; }
for n in "${@:-3 10 100 1000}"; do
	for n1 in $n; do
		D=$((10000000 / (n1 > 10 ? n1 : 10)))
		a=$(v8 "$n1" 20000); b=$(v8 "$n1" $((20000 + D)))
		c=$(ir "$dir/native" "$n1" 20000); d=$(ir "$dir/native" "$n1" $((20000 + D)))
		awk -v n="$n1" -v D="$D" -v a="$a" -v b="$b" -v c="$c" -v d="$d" 'BEGIN {
			v = (b - a) / D; x = (d - c) / D
			printf "%d services: V8 %.0f, native %.0f instructions per decision, ratio %.2f\n", n, v, x, v / x }'
	done
done
