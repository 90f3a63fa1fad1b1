#!/usr/bin/env bash
# Benchmarks of the reading views and of recursive tools over the mount
# (issue 15). Figures go to docs/benchmarks.md ("Views and recursive tools").
#
#   scripts/bench_views.sh [DATA_DIR]
#
# DATA_DIR (default: a temporary directory, removed at the end) receives
# two generated sessions (examples/gen_sessions.rs) in sessions/--views--/:
# 3,000 entries (seed 5) and 100,000 entries (seed 3, ≈ 58 MB), and works as
# the agent directory of a mount. Environment: RUNS (hyperfine runs,
# default 5), OUT (report directory, default DATA_DIR/results), WALK_TIMEOUT
# (seconds per recursive walk of the 100k session, default 600).
#
# Needs root (it mounts), hyperfine and GNU time; rg and rsync rows are
# skipped when those tools are missing. SESSIONFS_BIN and GEN_SESSIONS_BIN
# use prebuilt binaries instead of a release build.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-5}
WALK_TIMEOUT=${WALK_TIMEOUT:-600}

say() { printf '\n== %s\n' "$*"; }
die() { echo "bench_views.sh: $*" >&2; exit 1; }

command -v hyperfine >/dev/null 2>&1 || die "hyperfine is missing: apt-get install hyperfine"
[ -x /usr/bin/time ] || die "GNU time is missing: apt-get install time"
[ "$(id -u)" = 0 ] || die "run as root (the script mounts)"

# SESSIONFS_BIN and GEN_SESSIONS_BIN select prebuilt binaries (no build).
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
MOUNT_PID=

is_mounted() { grep -q " $MNT " /proc/self/mountinfo; }
unmount_fs() {
    if is_mounted; then umount "$MNT" 2>/dev/null || umount -l "$MNT"; fi
    [ -n "$MOUNT_PID" ] && wait "$MOUNT_PID" 2>/dev/null || true
    MOUNT_PID=
}
mount_fs() {
    "$BIN" mount -f --agent-dir "$DATA" "$MNT" >>"$OUT/mount.log" 2>&1 &
    MOUNT_PID=$!
    for _ in $(seq 1 200); do
        is_mounted && ls "$MNT" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    die "the mount did not appear"
}
cleanup() {
    unmount_fs || true
    rmdir "$MNT" 2>/dev/null || true
    [ -n "$CLEAN_DATA" ] && rm -rf "$CLEAN_DATA"
    return 0
}
trap cleanup EXIT INT TERM

say "generating sessions into $DATA"
rm -rf "$DATA/sessions/--views--"
F3K=$("$GEN" --entries 3000 --out "$DATA" --seed 5 --project --views--)
F100K=$("$GEN" --entries 100000 --out "$DATA" --seed 3 --project --views--)
S3K=$MNT/--views--/$(basename "$F3K" .jsonl)
S100K=$MNT/--views--/$(basename "$F100K" .jsonl)
echo "3k:   $F3K ($(stat -c %s "$F3K") bytes)"
echo "100k: $F100K ($(stat -c %s "$F100K") bytes)"
NEEDLE=function

# One timed command: wall seconds and the output's last line.
timed() {
    local label=$1; shift
    local start end status=0
    start=$(date +%s.%N)
    out=$(timeout "$WALK_TIMEOUT" bash -c "$*" 2>"$OUT/stderr.txt") || status=$?
    end=$(date +%s.%N)
    printf '%-44s %8.2f s  exit %s  %s\n' "$label" "$(awk "BEGIN {print $end - $start}")" "$status" \
        "$(echo "$out" | tail -1)"
    [ -s "$OUT/stderr.txt" ] && echo "    stderr: $(head -c 300 "$OUT/stderr.txt")"
    return 0
}

mount_fs
say "3,000-entry session: recursive tools against the JSONL"
hyperfine -N --warmup 1 --runs "$RUNS" --export-markdown "$OUT/grep3k.md" \
    -n "grep on the JSONL" "grep -c $NEEDLE $F3K" \
    -n "grep -r over the session (warm)" "grep -rl $NEEDLE $S3K"
echo "grep -r hits (files): $(grep -rl $NEEDLE "$S3K" | wc -l), JSONL lines: $(grep -c $NEEDLE "$F3K")"
echo "du -sb (apparent) of the session: $(du -sb --apparent-size "$S3K" | cut -f1) bytes; JSONL: $(stat -c %s "$F3K") bytes"
echo "du -sh of the session: $(du -sh "$S3K" | cut -f1)"
timed "tar cf - (3k session) | wc -c" "tar cf - -C '$S3K' . | wc -c"
timed "cp -r (3k session)" "rm -rf '$DATA/copy3k' && cp -r '$S3K' '$DATA/copy3k' && du -sb '$DATA/copy3k' | cut -f1"
if command -v rsync >/dev/null 2>&1; then
    timed "rsync -a (3k session)" "rm -rf '$DATA/rsync3k' && rsync -a '$S3K/' '$DATA/rsync3k/' && echo ok"
fi
if command -v rg >/dev/null 2>&1; then
    timed "rg -l (3k session)" "rg -l $NEEDLE '$S3K' | wc -l"
fi
rm -rf "$DATA/copy3k" "$DATA/rsync3k"

say "100,000-entry session: views (cold = first read after a fresh mount)"
unmount_fs; mount_fs
timed "cat stats.json (cold)" "cat '$S100K/stats.json' | wc -c"
unmount_fs; mount_fs
timed "cat context.md (cold)" "cat '$S100K/context.md' | wc -c"
timed "cat tree.svg (first)" "cat '$S100K/tree.svg' | wc -c"
timed "ls branches/ (first)" "ls '$S100K/branches' | wc -l"
hyperfine -N --warmup 1 --runs "$RUNS" --export-markdown "$OUT/views100k.md" \
    -n "ls branches/ (warm)" "ls $S100K/branches" \
    -n "cat stats.json (warm)" "cat $S100K/stats.json" \
    -n "cat context.md (warm)" "cat $S100K/context.md" \
    -n "cat branch.md (warm)" "cat $S100K/branch.md" \
    -n "cat tree.svg (warm)" "cat $S100K/tree.svg"

say "100,000-entry session: recursive walks (fresh mount each)"
for walk in "find . | wc -l" "du -sb --apparent-size . | cut -f1" "grep -rl $NEEDLE . | wc -l" \
    "tar cf - . | wc -c" "find entries -name stats.json -exec cat {} + | wc -c"; do
    unmount_fs; mount_fs
    timed "$walk" "cd '$S100K' && $walk"
done
echo "JSONL: $(stat -c %s "$F100K") bytes"
unmount_fs
echo "reports in $OUT"
