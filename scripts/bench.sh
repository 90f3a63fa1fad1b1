#!/usr/bin/env bash
# Whole-process and mount-level benchmarks (issue 7). Every figure is run
# side by side with its baseline in the same invocation.
#
#   scripts/bench.sh [DATA_DIR]
#
# DATA_DIR (default: a temporary directory, removed at the end) receives
# the generated sessions and works as an agent directory:
#   sessions/--bench--/       1k, 10k and 100k entries (the 100k file ≈ 58 MB)
#   sessions/--bench-many--/  10,000 small sessions
# Environment: RUNS (hyperfine runs, default 10), OUT (report directory,
# default DATA_DIR/results).
#
# Needs hyperfine (installed with apt-get when running as root) and GNU time
# (/usr/bin/time). The mount rows need `sessionfs mount` and root; they are
# skipped, with a note, when the subcommand does not exist.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-10}

say() { printf '\n== %s\n' "$*"; }
die() { echo "bench.sh: $*" >&2; exit 1; }

# --- tools ------------------------------------------------------------------
if ! command -v hyperfine >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing hyperfine…"
        apt-get install -y hyperfine >/dev/null 2>&1 ||
            { apt-get update >/dev/null 2>&1 && apt-get install -y hyperfine >/dev/null 2>&1; } ||
            die "could not install hyperfine; install it (apt-get install hyperfine or cargo install hyperfine)"
    else
        die "hyperfine is missing: apt-get install hyperfine (or cargo install hyperfine)"
    fi
fi
[ -x /usr/bin/time ] || die "GNU time is missing: apt-get install time"

# --- build and data -----------------------------------------------------------
say "building (release)"
(cd "$ROOT" && cargo build --release --bin sessionfs --example gen_sessions 2>&1 | tail -1)
BIN=$ROOT/target/release/sessionfs
GEN=$ROOT/target/release/examples/gen_sessions

CLEAN_DATA=
if [ $# -ge 1 ]; then
    DATA=$1
    mkdir -p "$DATA"
else
    DATA=$(mktemp -d /tmp/sessionfs-bench.XXXXXX)
    CLEAN_DATA=$DATA
fi
DATA=$(cd "$DATA" && pwd)
OUT=${OUT:-$DATA/results}
mkdir -p "$OUT"

MNT=
MOUNT_PID=
SHM=
cleanup() {
    if [ -n "$MNT" ]; then
        if grep -q " $MNT " /proc/self/mountinfo 2>/dev/null; then
            umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
        fi
        [ -n "$MOUNT_PID" ] && wait "$MOUNT_PID" 2>/dev/null || true
        rmdir "$MNT" 2>/dev/null || true
    fi
    [ -n "$SHM" ] && rm -rf "$SHM"
    [ -n "$CLEAN_DATA" ] && rm -rf "$CLEAN_DATA"
    return 0
}
trap cleanup EXIT INT TERM

say "generating sessions into $DATA"
rm -rf "$DATA/sessions/--bench--" "$DATA/sessions/--bench-many--"
F1K=$("$GEN" --entries 1000 --out "$DATA" --seed 1)
F10K=$("$GEN" --entries 10000 --out "$DATA" --seed 2)
F100K=$("$GEN" --entries 100000 --out "$DATA" --seed 3)
"$GEN" --entries 20 --sessions 10000 --out "$DATA" --seed 4 --project --bench-many-- >/dev/null
SIZE100K=$(stat -c %s "$F100K")
echo "1k:   $F1K ($(stat -c %s "$F1K") bytes)"
echo "10k:  $F10K ($(stat -c %s "$F10K") bytes)"
echo "100k: $F100K ($SIZE100K bytes)"
echo "many: $DATA/sessions/--bench-many-- ($(ls "$DATA/sessions/--bench-many--" | wc -l) files)"

echo
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "commit:  $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# hyperfine NAME BASELINE_CMD CMD [extra hyperfine args…]: mean seconds of
# both into $OUT/NAME.json, a summary line on stdout.
mean_of() { # json index
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]["mean"])' "$1" "$2"
}
side_by_side() {
    local name=$1 base=$2 cmd=$3
    shift 3
    hyperfine -N --warmup 2 --runs "$RUNS" --output=null --style basic \
        --export-json "$OUT/$name.json" --export-markdown "$OUT/$name.md" \
        "$@" "$base" "$cmd"
    local b c
    b=$(mean_of "$OUT/$name.json" 0)
    c=$(mean_of "$OUT/$name.json" 1)
    printf 'RESULT %-28s %10.2f ms  baseline %9.2f ms  ratio %s×\n' \
        "$name" "$(awk -v x="$c" 'BEGIN{print x*1000}')" "$(awk -v x="$b" 'BEGIN{print x*1000}')" "$(ratio "$c" "$b")"
}

# --- whole process -------------------------------------------------------------
say "sessionfs context on the 100k file vs cat (target ≤ 5×)"
# The persistent index lives in a private cache directory (docs/engine.md,
# "Persistent index"); the first-time rows turn it off.
export XDG_CACHE_HOME=$DATA/xdg-cache
rm -rf "$XDG_CACHE_HOME"
side_by_side context_100k "cat $F100K" "$BIN context --no-index $F100K"

say "sessionfs context, file unchanged since indexed (target ≤ 5 ms)"
"$BIN" context "$F100K" >/dev/null # writes the index and the stored rendering
side_by_side context_100k_indexed "cat $F100K" "$BIN context $F100K"
side_by_side leaf_100k_indexed "$BIN leaf --no-index $F100K" "$BIN leaf $F100K"
/usr/bin/time -v "$BIN" context "$F100K" >/dev/null 2>"$OUT/rss_context_indexed.txt"
RSS_IDX=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$OUT/rss_context_indexed.txt")
printf 'RESULT %-28s %10d KiB  file %9d KiB  ratio %s×\n' \
    rss_context_100k_indexed "$RSS_IDX" $((SIZE100K / 1024)) "$(ratio "$RSS_IDX" $((SIZE100K / 1024)))"

if [ -n "${REF_CACHE:-}" ]; then
    say "the reference in-process (bun + SessionManager), for scale"
    BUN=${BUN:-$REF_CACHE/node_modules/.bin/bun}
    "$BUN" "$ROOT/scripts/reference/context_bench.ts" "$REF_CACHE" "$F100K" 5 | tail -1
else
    say "reference row skipped: set REF_CACHE to the directory holding node_modules/@oh-my-pi"
fi

say "peak RSS of sessionfs context on the 100k file vs file size (target ≤ 0.5×)"
/usr/bin/time -v cat "$F100K" >/dev/null 2>"$OUT/rss_cat.txt"
/usr/bin/time -v "$BIN" context --no-index "$F100K" >/dev/null 2>"$OUT/rss_context.txt"
RSS_CAT=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$OUT/rss_cat.txt")
RSS_CTX=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$OUT/rss_context.txt")
printf 'RESULT %-28s %10d KiB  file %9d KiB  ratio %s×  (cat: %d KiB)\n' \
    rss_context_100k "$RSS_CTX" $((SIZE100K / 1024)) "$(ratio "$RSS_CTX" $((SIZE100K / 1024)))" "$RSS_CAT"

say "smaller files (no target; for scale)"
side_by_side context_10k "cat $F10K" "$BIN context $F10K"

# --- mount ---------------------------------------------------------------------
if ! "$BIN" mount --help >/dev/null 2>&1; then
    say "mount rows skipped: this build has no 'sessionfs mount' subcommand"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    say "mount rows skipped: they mount as root (run the script as root)"
    exit 0
fi

MNT=$(mktemp -d /tmp/sessionfs-mnt.XXXXXX)
is_mounted() { grep -q " $MNT " /proc/self/mountinfo; }
mount_fs() {
    "$BIN" mount -f --agent-dir "$DATA" "$MNT" >"$OUT/mount.log" 2>&1 &
    MOUNT_PID=$!
    for _ in $(seq 1 200); do
        # mounted, and answering (the kernel's INIT is done)
        is_mounted && ls "$MNT" >/dev/null 2>&1 && return 0
        kill -0 "$MOUNT_PID" 2>/dev/null || die "sessionfs mount exited: $(tail -3 "$OUT/mount.log")"
        sleep 0.05
    done
    die "the mount did not appear in /proc/self/mountinfo"
}
unmount_fs() {
    if is_mounted; then umount "$MNT" || umount -l "$MNT"; fi
    [ -n "$MOUNT_PID" ] && wait "$MOUNT_PID" 2>/dev/null || true
    # also mount processes the remount helper started
    for _ in $(seq 1 500); do
        pgrep -f "mount -f --agent-dir $DATA $MNT" >/dev/null || break
        sleep 0.02
    done
    MOUNT_PID=
}
# A helper for hyperfine --prepare: a fresh (cold) mount.
REMOUNT=$OUT/remount.sh
cat >"$REMOUNT" <<EOF
#!/usr/bin/env bash
set -e
# Unmount every mount stacked on MNT (a dead one would fail the next ls).
for _ in \$(seq 1 100); do
    grep -q " $MNT " /proc/self/mountinfo || break
    umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
    sleep 0.02
done
# Wait for the previous mount process to be gone before mounting again.
for _ in \$(seq 1 500); do
    pgrep -f "mount -f --agent-dir $DATA $MNT" >/dev/null || break
    sleep 0.02
done
setsid "$BIN" mount -f --agent-dir "$DATA" "$MNT" >>"$OUT/mount.log" 2>&1 </dev/null &
for _ in \$(seq 1 1000); do
    # mounted, and answering (the kernel's INIT is done)
    grep -q " $MNT " /proc/self/mountinfo && stat "$MNT" >/dev/null 2>&1 && exit 0
    sleep 0.02
done
echo "mount did not appear" >&2; exit 1
EOF
chmod +x "$REMOUNT"

stem() { basename "$1" .jsonl; }
S100K=$MNT/--bench--/$(stem "$F100K")
S10K=$MNT/--bench--/$(stem "$F10K")
S1K=$MNT/--bench--/$(stem "$F1K")

say "first cat of context.json on a fresh mount vs the CLI (target ≤ 2×)"
hyperfine -N --runs 5 --output=null --style basic \
    --export-json "$OUT/first_context.json" \
    --prepare "$REMOUNT" --prepare "true" \
    "cat $S100K/context.json" "$BIN context $F100K"
FIRST=$(mean_of "$OUT/first_context.json" 0)
CLI=$(mean_of "$OUT/first_context.json" 1)
printf 'RESULT %-28s %10.2f ms  baseline %9.2f ms  ratio %s×\n' first_context_100k \
    "$(awk -v x="$FIRST" 'BEGIN{print x*1000}')" "$(awk -v x="$CLI" 'BEGIN{print x*1000}')" "$(ratio "$FIRST" "$CLI")"
# the remount helper started its own mount process: find it again
unmount_fs
mount_fs

say "warm cat through the mount vs the same bytes from a regular file (target ≤ 3×)"
cat "$S100K/context.json" >"$OUT/context.json.copy"
LEAF100K=$(cat "$S100K/leaf")
cat "$S100K/entries/$LEAF100K/entry.json" >"$OUT/entry.json.copy"
side_by_side warm_context_100k "cat $OUT/context.json.copy" "cat $S100K/context.json"
side_by_side warm_entry_100k "cat $OUT/entry.json.copy" "cat $S100K/entries/$LEAF100K/entry.json"

say "ls of a project with 10,000 sessions, cold mount (target ≤ 5×)"
hyperfine -N --runs "$RUNS" --output=null --style basic \
    --export-json "$OUT/ls_many.json" \
    --prepare "true" --prepare "$REMOUNT" \
    "ls $DATA/sessions/--bench-many--" "ls $MNT/--bench-many--"
printf 'RESULT %-28s %10.2f ms  baseline %9.2f ms  ratio %s×\n' ls_10000_sessions \
    "$(awk -v x="$(mean_of "$OUT/ls_many.json" 1)" 'BEGIN{print x*1000}')" \
    "$(awk -v x="$(mean_of "$OUT/ls_many.json" 0)" 'BEGIN{print x*1000}')" \
    "$(ratio "$(mean_of "$OUT/ls_many.json" 1)" "$(mean_of "$OUT/ls_many.json" 0)")"
unmount_fs
mount_fs

say "find over entries/ of the 10k session, cold, vs the same tree on tmpfs (target ≤ 5×)"
SHM=$(mktemp -d /dev/shm/sessionfs-entries.XXXXXX)
# Names only: copying every context.json of a session without compactions
# would take tens of GB (each holds the whole path).
mkdir -p "$SHM/entries"
(cd "$S10K/entries" && find . -mindepth 1 -type d) | (cd "$SHM/entries" && xargs mkdir -p)
(cd "$S10K/entries" && find . -mindepth 1 -type f) | (cd "$SHM/entries" && xargs touch)
hyperfine -N --runs "$RUNS" --output=null --style basic \
    --export-json "$OUT/find_entries.json" \
    --prepare "true" --prepare "$REMOUNT" \
    "find $SHM/entries" "find $S10K/entries"
printf 'RESULT %-28s %10.2f ms  baseline %9.2f ms  ratio %s×\n' find_entries_10k \
    "$(awk -v x="$(mean_of "$OUT/find_entries.json" 1)" 'BEGIN{print x*1000}')" \
    "$(awk -v x="$(mean_of "$OUT/find_entries.json" 0)" 'BEGIN{print x*1000}')" \
    "$(ratio "$(mean_of "$OUT/find_entries.json" 1)" "$(mean_of "$OUT/find_entries.json" 0)")"
unmount_fs
mount_fs

say "appends through the mount: one open file, 100k small entries (target ≥ 20,000/s)"
python3 - "$OUT/appends.jsonl" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(100000):
        f.write('{"type":"custom","customType":"bench","data":{"i":%d}}\n' % i)
EOF
T0=$(date +%s%N)
cat "$OUT/appends.jsonl" >"$S1K/append"
T1=$(date +%s%N)
awk -v ns=$((T1 - T0)) 'BEGIN { printf "RESULT %-28s %10.0f entries/s  (100000 in %.2f s)\n", "appends_through_mount", 100000 / (ns / 1e9), ns / 1e9 }'

say "one outside append to the 100k session, then cat leaf (target ≤ 5 ms, only new bytes read)"
APPEND_ONE=$OUT/append_one.sh
cat >"$APPEND_ONE" <<EOF
#!/usr/bin/env bash
set -e
parent=\$(cat "$S100K/leaf")
id=\$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '{"type":"custom","id":"%s","parentId":"%s","timestamp":"%s","customType":"bench"}\n' \
    "\$id" "\$parent" "\$(date -u +%Y-%m-%dT%H:%M:%S.000Z)" >>"$F100K"
EOF
chmod +x "$APPEND_ONE"
hyperfine -N --runs 20 --output=null --style basic \
    --export-json "$OUT/outside_append.json" \
    --prepare "$APPEND_ONE" "cat $S100K/leaf"
MEAN=$(mean_of "$OUT/outside_append.json" 0)
RCHAR0=$(awk '/^rchar/ {print $2}' "/proc/$MOUNT_PID/io")
"$APPEND_ONE"
LINE_BYTES=$(tail -1 "$F100K" | wc -c)
cat "$S100K/leaf" >/dev/null
RCHAR1=$(awk '/^rchar/ {print $2}' "/proc/$MOUNT_PID/io")
# rchar also counts the FUSE requests the mount reads from /dev/fuse: an
# upper bound of what it read from the session file.
printf 'RESULT %-28s %10.2f ms  (mount read %d bytes, FUSE requests included, for a %d-byte line)\n' outside_append_cat_leaf \
    "$(awk -v x="$MEAN" 'BEGIN{print x*1000}')" $((RCHAR1 - RCHAR0)) "$LINE_BYTES"

say "mount RSS after touching every entry of the 100k session (target ≤ 1× file size)"
touch_all() {
    find "$S100K/entries" -name entry.json -print0 | xargs -0 cat >/dev/null
    RSS=$(awk '/^VmRSS/ {print $2}' "/proc/$MOUNT_PID/status")
    HWM=$(awk '/^VmHWM/ {print $2}' "/proc/$MOUNT_PID/status")
    printf 'RESULT %-28s %10d KiB  (peak %d KiB)  file %d KiB  ratio %s×\n' "$1" \
        "$RSS" "$HWM" $((SIZE100K / 1024)) "$(ratio "$HWM" $((SIZE100K / 1024)))"
}
# In the mount that ran the rows above (it also holds the 1k session grown
# by 100,000 appends, the 10k session and the 10,000-session listing)…
touch_all mount_rss_100k_after_all
# …and in a fresh mount: the figure of the target.
unmount_fs
mount_fs
touch_all mount_rss_100k
unmount_fs
