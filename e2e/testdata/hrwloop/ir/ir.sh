#!/bin/sh
# ir.sh [N...]: R1 as instructions per decision (valgrind's cachegrind), V8 and native, for the
# same loop; each figure is the difference between 1020000 and 20000 decisions ÷ 10^6, so setup
# and V8's compilation cancel out. Node's start varies by a few million instructions from run to
# run, so the difference must be large: with 10^5 decisions runs of one build read ±6 %, with
# 10^6 about ±1 %. About a minute per size.
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
		a=$(v8 "$n1" 20000); b=$(v8 "$n1" 1020000)
		c=$(ir "$dir/native" "$n1" 20000); d=$(ir "$dir/native" "$n1" 1020000)
		awk -v n="$n1" -v a="$a" -v b="$b" -v c="$c" -v d="$d" 'BEGIN {
			v = (b - a) / 1000000; x = (d - c) / 1000000
			printf "%d services: V8 %.0f, native %.0f instructions per decision, ratio %.2f\n", n, v, x, v / x }'
	done
done
