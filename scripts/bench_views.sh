#!/usr/bin/env bash
# Benchmarks of the reading views and of recursive tools over the mount
# (issue 15). Figures go to docs/benchmarks.md ("Views and recursive tools").
#
#   scripts/bench_views.sh [DATA_DIR]
#
# DATA_DIR (default: a temporary directory, removed at the end) receives
# generated sessions (examples/gen_sessions.rs), one project each:
# sessions/--v3000--/ (3,000 entries, seed 5) and --v10000--, --v30000--,
# --v100000-- (seed 3; the 100k file is ≈ 58 MB), and works as the agent
# directory of a mount. Every comparison is one hyperfine invocation, so
# its ratios are taken under the same conditions. "Cold" means a fresh
# mount before each run (hyperfine --prepare): nothing loaded in the
# server, nothing cached in the kernel; the session file itself stays in
# the page cache.
#
# Environment: RUNS (hyperfine runs of quick commands, default 5),
# WALK_RUNS (runs of each cold walk, default 2), OUT (report directory,
# default DATA_DIR/results), SESSIONFS_BIN and GEN_SESSIONS_BIN (prebuilt
# binaries; default: a release build of this checkout).
#
# Needs root (it mounts), hyperfine, rg and rsync.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-5}
WALK_RUNS=${WALK_RUNS:-2}

say() { printf '\n== %s\n' "$*"; }
die() { echo "bench_views.sh: $*" >&2; exit 1; }

for tool in hyperfine rg rsync tar; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (apt-get install $tool; rg is ripgrep)"
done
[ "$(id -u)" = 0 ] || die "run as root (the script mounts)"

if [ -z "${SESSIONFS_BIN:-}" ] || [ -z "${GEN_SESSIONS_BIN:-}" ]; then
    say "building (release)"
    (cd "$ROOT" && cargo build --release --bin sessionfs --example gen_sessions 2>&1 | tail -1)
fi
BIN=${SESSIONFS_BIN:-$ROOT/target/release/sessionfs}
GEN=${GEN_SESSIONS_BIN:-$ROOT/target/release/examples/gen_sessions}

CLEAN_DATA=
if [ $# -ge 1 ]; then
    DATA=$1
    mkdir -p "$DATA"
else
    DATA=$(mktemp -d /tmp/sessionfs-views.XXXXXX)
    CLEAN_DATA=$DATA
fi
DATA=$(cd "$DATA" && pwd)
OUT=${OUT:-$DATA/results}
mkdir -p "$OUT"
MNT=$DATA/mnt
mkdir -p "$MNT"

# The mount runs as a daemon; `sessionfs umount` waits for it to exit.
MOUNT="'$BIN' mount --agent-dir '$DATA' '$MNT' >/dev/null"
UNMOUNT="'$BIN' umount '$MNT' >/dev/null 2>&1 || true"
REMOUNT="$UNMOUNT; $MOUNT"
remount() { bash -c "$REMOUNT"; }
cleanup() {
    bash -c "$UNMOUNT"
    rmdir "$MNT" 2>/dev/null || true
    [ -n "$CLEAN_DATA" ] && rm -rf "$CLEAN_DATA"
    return 0
}
trap cleanup EXIT INT TERM

say "generating sessions into $DATA"
declare -A FILE
for spec in "3000 5" "10000 3" "30000 3" "100000 3"; do
    set -- $spec
    rm -rf "$DATA/sessions/--v$1--"
    FILE[$1]=$("$GEN" --entries "$1" --out "$DATA" --seed "$2" --project "--v$1--")
    echo "$1 entries: ${FILE[$1]} ($(stat -c %s "${FILE[$1]}") bytes)"
done
F3K=${FILE[3000]}
F100K=${FILE[100000]}
S3K=$MNT/--v3000--/$(basename "$F3K" .jsonl)
S100K=$MNT/--v100000--/$(basename "$F100K" .jsonl)
NEEDLE=function

# One command run once: wall seconds, exit status, its output's last line,
# and whatever it printed on stderr.
once() {
    local label=$1; shift
    local start end status=0 out
    start=$(date +%s.%N)
    out=$(bash -c "$*" 2>"$OUT/stderr.txt") || status=$?
    end=$(date +%s.%N)
    printf '%-40s %8.2f s  exit %s  %s\n' "$label" "$(awk "BEGIN {print $end - $start}")" "$status" \
        "$(echo "$out" | tail -1)"
    if [ -s "$OUT/stderr.txt" ]; then echo "    stderr: $(head -c 300 "$OUT/stderr.txt")"; fi
    return 0
}

say "3,000-entry session: grep -r against grep on the JSONL (warm mount)"
remount
hyperfine -N --warmup 1 --runs "$RUNS" --export-markdown "$OUT/grep3k.md" \
    -n "grep on the JSONL" "grep -c $NEEDLE $F3K" \
    -n "grep -r over the session" "grep -rl $NEEDLE $S3K"
echo "grep -r: $(grep -rl $NEEDLE "$S3K" | wc -l) files hold '$NEEDLE'; the JSONL: $(grep -c $NEEDLE "$F3K") lines"
echo "du -sh of the session: $(du -sh "$S3K" | cut -f1); of the JSONL: $(du -sh "$F3K" | cut -f1)"
echo "du -sb --apparent-size of the session: $(du -sb --apparent-size "$S3K" | cut -f1) bytes; JSONL: $(stat -c %s "$F3K") bytes"

say "3,000-entry session: every tool, cold (fresh mount each)"
rm -rf "$DATA/copy"
hyperfine --runs "$WALK_RUNS" --export-markdown "$OUT/tools3k.md" \
    --prepare "$REMOUNT" -n "grep -rl" "grep -rl $NEEDLE '$S3K' >/dev/null" \
    --prepare "$REMOUNT" -n "rg -l" "rg -l $NEEDLE '$S3K' >/dev/null" \
    --prepare "$REMOUNT" -n "find" "find '$S3K' >/dev/null" \
    --prepare "$REMOUNT" -n "du -sh" "du -sh '$S3K' >/dev/null" \
    --prepare "$REMOUNT" -n "tar cf -" "tar cf - -C '$S3K' . >/dev/null"
# Copies write to the local disk as well: once each, cold, with a copy of
# the copy (a plain directory tree of the same files) as the baseline.
remount
once "tar cf - (bytes)" "tar cf - -C '$S3K' . | wc -c"
remount
once "cp -r" "cp -r '$S3K' '$DATA/copy' && echo ok"
once "cp -r of that copy (local disk)" "cp -r '$DATA/copy' '$DATA/copy2' && echo ok"
remount
once "rsync -a" "rsync -a '$S3K/' '$DATA/rsync/' && echo ok"
once "rsync -a of that copy (local disk)" "rsync -a '$DATA/rsync/' '$DATA/rsync2/' && echo ok"
rm -rf "$DATA/copy" "$DATA/copy2" "$DATA/rsync" "$DATA/rsync2"

say "walks over 10k, 30k and 100k entries, cold (time linear in the session?)"
# Wall time is what a user waits, but on a busy machine it mostly measures
# the scheduler; the CPU time spent by the tool (its user and system time:
# the kernel's side of every FUSE request it makes) plus the server's is
# the work the walk costs, and is what must grow linearly.
daemon_cpu() {  # user + system ticks of the mount's server
    local pid
    pid=$(pgrep -f "$BIN mount --agent-dir $DATA $MNT" | head -1)
    awk '{print $14 + $15}' "/proc/$pid/stat"
}
TICK=$(getconf CLK_TCK)
printf '%-28s %8s %10s %10s %10s %10s %12s\n' walk entries "JSONL MB" "wall s" "tool cpu s" "server s" "cpu µs/entry"
for walk in "find ." "du -sb --apparent-size ." "grep -rl $NEEDLE ." "tar cf - ."; do
    for n in 10000 30000 100000; do
        for _ in $(seq 1 "$WALK_RUNS"); do
            remount
            before=$(daemon_cpu)
            /usr/bin/time -f '%e %U %S' -o "$OUT/time.txt" \
                bash -c "cd '$MNT'/--v$n-- && $walk >/dev/null" 2>"$OUT/stderr.txt" ||
                echo "    $walk over $n: exit status $?"
            if [ -s "$OUT/stderr.txt" ]; then echo "    stderr: $(head -c 300 "$OUT/stderr.txt")"; fi
            after=$(daemon_cpu)
            read -r wall user sys <"$OUT/time.txt"
            server=$(awk "BEGIN {print ($after - $before) / $TICK}")
            printf '%-28s %8s %10.1f %10.2f %10.2f %10.2f %12.0f\n' "$walk" "$n" \
                "$(awk "BEGIN {print $(stat -c %s "${FILE[$n]}") / 1e6}")" "$wall" \
                "$(awk "BEGIN {print $user + $sys}")" "$server" \
                "$(awk "BEGIN {print ($user + $sys + $server) * 1e6 / $n}")"
        done
    done
done
remount
for n in 10000 30000 100000; do
    echo "$n entries: find: $(find "$MNT/--v$n--" | wc -l) names; du: $(du -sb --apparent-size "$MNT/--v$n--" | cut -f1) bytes"
done

say "100,000-entry session: views, cold (fresh mount each) and warm"
hyperfine --runs "$RUNS" --prepare "$REMOUNT" --export-markdown "$OUT/views100k-cold.md" \
    -n "ls branches/ (cold)" "ls '$S100K/branches' >/dev/null" \
    -n "cat stats.json (cold)" "cat '$S100K/stats.json' >/dev/null" \
    -n "cat context.md (cold)" "cat '$S100K/context.md' >/dev/null" \
    -n "cat branch.md (cold)" "cat '$S100K/branch.md' >/dev/null" \
    -n "cat tree.svg (cold)" "cat '$S100K/tree.svg' >/dev/null"
remount
hyperfine -N --warmup 1 --runs "$RUNS" --export-markdown "$OUT/views100k-warm.md" \
    -n "ls branches/ (warm)" "ls $S100K/branches" \
    -n "cat stats.json (warm)" "cat $S100K/stats.json" \
    -n "cat context.md (warm)" "cat $S100K/context.md" \
    -n "cat branch.md (warm)" "cat $S100K/branch.md" \
    -n "cat tree.svg (warm)" "cat $S100K/tree.svg"
for f in stats.json context.md branch.md tree.svg; do
    echo "$f: $(stat -c %s "$S100K/$f") bytes"
done
echo "branches/: $(ls "$S100K/branches" | wc -l) tips"

say "100,000-entry session: rg, cold, once"
remount
remount
once "rg -l (100k)" "rg -l $NEEDLE '$S100K' | wc -l"
echo "JSONL: $(stat -c %s "$F100K") bytes"
echo "reports in $OUT"
