#!/usr/bin/env bash
# The mount's `cat context.json` after the first outside append that
# follows a lean first read (issue 18: ≤ 1.5 ms, O(new entries)), on the
# 100k-entry session of scripts/bench.sh. Every run restores the session
# file, mounts afresh, reads `context.json` once (the lean first-time
# path), appends one user message with `>>` (no lock), and measures the
# mount process's CPU (`perf stat -e task-clock -p`) in three modes:
#   after     the `cat` 0.3 s after the append (the watch worker has
#             grown the text and invalidated the stale pages)
#   together  append and `cat` in one command (`sh -c "echo L >> F; exec
#             cat C"`): the worker's work and the `cat`, whichever first
#   window    the whole window: append, 0.3 s, `cat` in one command (the
#             worker's growth of the text and invalidation, and the `cat`)
#   branch    as `window`, the message appended under an older entry (not
#             under the leaf): the session is loaded, as every first
#             append was before the text could grow
# in three forms: `no-index` (`--no-index`), `first-ever` (the index on,
# its cache emptied before each mount) and `index` (the index on, the
# rendering and its growth file stored by an earlier mount: the first
# read serves the stored rendering, which the append grows). Every text
# is compared with `sessionfs context --no-index` of the grown file.
#
#   scripts/bench_mount_append.sh [DATA_DIR]
#
# Environment: RUNS (runs per form and mode, default 10), BIN (a sessionfs
# binary; default: build target/release/sessionfs), FORMS (default
# "no-index first-ever index"), MODES (default "after together window
# branch").
# Needs FUSE (fuse3), jq and perf.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-10}
FORMS=${FORMS:-no-index first-ever index}
MODES=${MODES:-after together window branch}

NAME=bench_mount_append.sh
NEEDS="perf jq"
. "$ROOT/scripts/bench_mount_common.sh"
PRISTINE=$DATA/pristine.jsonl
cp "$F" "$PRISTINE"
LEAF=$(tail -n 1 "$F" | jq -r .id)
OLDER=$(sed -n '1000p' "$F" | jq -r .id)
[ "$LEAF" != null ] && [ "$OLDER" != null ] || die "no ids in $F"
line() {
    printf '{"type":"message","id":"bench-%s","parentId":"%s","timestamp":"2026-12-03T00:00:00.000Z","message":{"role":"user","content":"one more question"}}' "$RANDOM$RANDOM" "$1"
}
echo "session: $F ($(stat -c %s "$F") bytes), leaf $LEAF"

# The cache of a mount that read the pristine file's context.json (the
# `index` form starts from a copy of it; `cp -p` keeps the file's mtime,
# which the stored rendering is checked against).
PRIMED=$DATA/primed-cache
mount_fresh() {
    grep -q " $MNT " /proc/self/mountinfo && "$BIN" umount "$MNT"
    cp -p "$PRISTINE" "$F"
    local args=()
    case "$1" in
        no-index) args=(--no-index) ;;
        first-ever) rm -rf "$CACHE" ;;
        index)
            if [ ! -d "$PRIMED" ]; then
                XDG_CACHE_HOME=$PRIMED "$BIN" mount --agent-dir "$DATA" --pid-file "$PID" "$MNT" >/dev/null 2>&1
                cat "$C" > /dev/null
                "$BIN" umount "$MNT"
                ls "$PRIMED"/sessionfs/index/*.grow >/dev/null 2>&1 || die "index: no growth file stored"
            fi
            rm -rf "$CACHE"
            cp -a "$PRIMED" "$CACHE"
            ;;
    esac
    XDG_CACHE_HOME=$CACHE "$BIN" mount --agent-dir "$DATA" --pid-file "$PID" "${args[@]}" "$MNT" >/dev/null 2>&1
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A CPU
for form in $FORMS; do
    for mode in $MODES; do
        cpus=()
        for _ in $(seq "$RUNS"); do
            mount_fresh "$form"
            pid=$(cat "$PID")
            cat "$C" > /dev/null
            sleep 0.3
            parent=$LEAF
            [ "$mode" = branch ] && parent=$OLDER
            L=$(line "$parent")
            case "$mode" in
                together)
                    perf stat -x, -e task-clock -o "$DATA/perf.txt" -p "$pid" -- \
                        sh -c "printf '%s\n' '$L' >> '$F'; exec cat '$C'" > "$DATA/out.json"
                    ;;
                window | branch)
                    perf stat -x, -e task-clock -o "$DATA/perf.txt" -p "$pid" -- \
                        sh -c "printf '%s\n' '$L' >> '$F'; sleep 0.3; exec cat '$C'" > "$DATA/out.json"
                    ;;
                *)
                    printf '%s\n' "$L" >> "$F"
                    sleep 0.3
                    perf stat -x, -e task-clock -o "$DATA/perf.txt" -p "$pid" -- cat "$C" > "$DATA/out.json"
                    ;;
            esac
            "$BIN" context --no-index "$F" > "$DATA/want.json"
            cmp -s "$DATA/out.json" "$DATA/want.json" || die "$form/$mode: the text differs from sessionfs context --no-index"
            cpus+=("$(grep task-clock "$DATA/perf.txt" | cut -d, -f1)")
        done
        sorted=$(printf '%s\n' "${cpus[@]}" | sort -n)
        CPU[$form/$mode]="min $(head -1 <<<"$sorted") ms, median $(median <<<"$sorted") ms, max $(tail -1 <<<"$sorted") ms"
    done
done
"$BIN" umount "$MNT" >/dev/null 2>&1 || true
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| form | mode | mount CPU ($RUNS runs) |"
echo "|---|---|---|"
for form in $FORMS; do
    for mode in $MODES; do
        echo "| $form | $mode | ${CPU[$form/$mode]} |"
    done
done
