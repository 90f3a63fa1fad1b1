#!/usr/bin/env bash
# Two or more builds of `sessionfs context --no-index FILE`, run in turn
# (A, B, A, B, ...) so that what else the machine does falls on all of
# them alike: for each, the wall time and the CPU time (`perf stat -e
# task-clock`; min and median) over N runs.
#
#   scripts/bench_interleaved.sh FILE N BIN...
#
# Used for the comparisons of docs/benchmarks.md ("Eighth session: the
# lean path on two cores"). Needs perf.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 FILE N BIN..." >&2; exit 1; }
FILE=$1 N=$2
shift 2
command -v perf >/dev/null || { echo "bench_interleaved.sh: perf is missing" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for _ in $(seq "$N"); do
    k=0
    for bin in "$@"; do
        k=$((k + 1))
        perf stat -e task-clock -o "$OUT/perf" "$bin" context --no-index "$FILE" >/dev/null
        awk '/task-clock/ { print $1 }' "$OUT/perf" >> "$OUT/cpu.$k"
        awk '/seconds time elapsed/ { print $1 * 1000 }' "$OUT/perf" >> "$OUT/wall.$k"
    done
done
stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { printf "min %.1f ms, median %.1f ms", v[1], v[int((NR + 1) / 2)] }'; }
k=0
for bin in "$@"; do
    k=$((k + 1))
    echo "$bin: wall $(stats "$OUT/wall.$k"); CPU $(stats "$OUT/cpu.$k")"
done
