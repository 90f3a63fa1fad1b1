#!/usr/bin/env bash
# The mount's first `cat context.json` after mounting (issue 18's two mount
# targets: ≤ 30 ms without an index, ≤ 5 ms with it), on the 100k-entry
# session of scripts/bench.sh. A fresh mount before every run, in three
# forms:
#   no-index    `sessionfs mount --no-index`: the lean first-time path
#   first-ever  the index on, its cache emptied before each mount: the lean
#               path, which also stores the rendering
#   index       the index on, the rendering stored by an earlier mount
#   grown       as index, with one user message appended under the leaf
#               while unmounted before each mount (the stored rendering
#               grows by the lines appended since it was stored)
# For each: the `cat`'s wall time (hyperfine, `--prepare` mounting afresh;
# `cat` of the session file itself in the same invocation as the yardstick)
# and the mount process's CPU during the `cat` (`perf stat -e task-clock
# -p`, which counts the threads the mount starts meanwhile; skipped without
# perf). Every text is compared with `sessionfs context --no-index`.
#
#   scripts/bench_mount_first.sh [DATA_DIR]
#
# DATA_DIR (default: a temporary directory, removed at the end) receives
# the generated session, the mount point and the index cache.
# Environment: RUNS (hyperfine runs per form, default 20), CPU_RUNS (perf
# runs per form, default 10), BIN (a sessionfs binary; default: build
# target/release/sessionfs), FORMS (default "no-index first-ever index").
# Needs FUSE (fuse3), hyperfine and jq; perf is optional.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-20}
CPU_RUNS=${CPU_RUNS:-10}
FORMS=${FORMS:-no-index first-ever index grown}

NAME=bench_mount_first.sh
NEEDS="hyperfine jq"
. "$ROOT/scripts/bench_mount_common.sh"
WANT=$DATA/want.json
"$BIN" context --no-index "$F" > "$WANT"
echo "session: $F ($(stat -c %s "$F") bytes), context.json $(stat -c %s "$WANT") bytes"

# A fresh mount for each run (hyperfine's --prepare runs it without a shell).
REMOUNT=$DATA/remount.sh
cat > "$REMOUNT" <<EOF
#!/bin/sh
# remount.sh FORM: unmount if mounted, then mount afresh in that form.
export XDG_CACHE_HOME='$CACHE'
grep -q " $MNT " /proc/self/mountinfo && '$BIN' umount '$MNT'
case "\$1" in
    no-index) set -- --no-index ;;
    first-ever) rm -rf '$CACHE'; set -- ;;
    grown)
        last=\$(tail -n 1 '$F' | sed -n 's/^{"type":"[a-z_]*","id":"\([^"]*\)".*/\1/p')
        n=\$(wc -l < '$F')
        printf '{"type":"message","id":"g%07d","parentId":"%s","timestamp":"2026-01-03T00:00:00.000Z","message":{"role":"user","content":"appended while unmounted"}}\n' "\$n" "\$last" >> '$F'
        set -- ;;
    *) set -- ;;
esac
exec '$BIN' mount --agent-dir '$DATA' --pid-file '$PID' "\$@" '$MNT' >/dev/null 2>&1
EOF
chmod +x "$REMOUNT"

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A WALL CPU
for form in $FORMS; do
    # The index and grown forms read what an earlier mount stored.
    if [ "$form" = index ] || [ "$form" = grown ]; then
        "$REMOUNT" first-ever
        cmp -s "$C" "$WANT" || die "index: priming mount: the text differs"
        "$BIN" umount "$MNT"
    fi
    json=$DATA/$form.json
    hyperfine -N -r "$RUNS" --output=null --export-json "$json" \
        --prepare "$REMOUNT $form" -n "first cat ($form)" "cat $C" \
        --prepare true -n "cat of the session file" "cat $F" > /dev/null
    "$BIN" umount "$MNT" >/dev/null 2>&1 || true
    WALL[$form]=$(jq -r '.results[] | "\(.command): min \(.min*1000*100|round/100) ms, median \(.median*1000*100|round/100) ms, mean \(.mean*1000*100|round/100) ms"' "$json" | paste -sd';' -)
    if command -v perf >/dev/null; then
        cpus=()
        for _ in $(seq "$CPU_RUNS"); do
            "$REMOUNT" "$form"
            # A grown file has a context of its own.
            [ "$form" = grown ] && "$BIN" context --no-index "$F" > "$WANT"
            pid=$(cat "$PID")
            perf stat -x, -e task-clock -o "$DATA/perf.txt" -p "$pid" -- cat "$C" > "$DATA/out.json"
            cmp -s "$DATA/out.json" "$WANT" || die "$form: the text differs from sessionfs context --no-index"
            cpus+=("$(grep task-clock "$DATA/perf.txt" | cut -d, -f1)")
            "$BIN" umount "$MNT"
        done
        sorted=$(printf '%s\n' "${cpus[@]}" | sort -n)
        CPU[$form]="min $(head -1 <<<"$sorted") ms, median $(median <<<"$sorted") ms, max $(tail -1 <<<"$sorted") ms ($CPU_RUNS runs)"
    else
        CPU[$form]="(perf not installed)"
    fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| form | cat wall ($RUNS runs) | mount CPU during the cat |"
echo "|---|---|---|"
for form in $FORMS; do
    echo "| $form | ${WALL[$form]//;/<br>} | ${CPU[$form]} |"
done
