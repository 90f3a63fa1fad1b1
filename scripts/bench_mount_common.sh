# Sourced by scripts/bench_mount_first.sh and bench_mount_append.sh, not
# run alone. With NAME (the script's name), ROOT (the repository) and
# NEEDS (the tools it needs) set and the script's arguments in "$@"
# (DATA_DIR, optional): checks for the tools, builds the generator and, unless BIN is set, sessionfs; makes DATA (a
# temporary directory without DATA_DIR, removed at the end), MNT, CACHE
# and PID; unmounts on exit; generates the 100k-entry session of
# scripts/bench.sh: F (its file), S (its stem), C (its context.json in
# the mount). Defines die and median.

die() { echo "$NAME: $*" >&2; exit 1; }
for tool in $NEEDS; do
    command -v "$tool" >/dev/null || die "$tool is missing"
done

(cd "$ROOT" && cargo build --release --example gen_sessions 2>&1 | tail -1)
GEN=$ROOT/target/release/examples/gen_sessions
if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release --bin sessionfs 2>&1 | tail -1)
    BIN=$ROOT/target/release/sessionfs
fi

CLEAN=
if [ $# -ge 1 ]; then
    DATA=$1
    mkdir -p "$DATA"
else
    DATA=$(mktemp -d "/tmp/sessionfs-${NAME%.sh}.XXXXXX")
    CLEAN=$DATA
fi
DATA=$(cd "$DATA" && pwd)
MNT=$DATA/mnt
CACHE=$DATA/cache
PID=$DATA/mount.pid
mkdir -p "$MNT"

cleanup() {
    if grep -q " $MNT " /proc/self/mountinfo 2>/dev/null; then
        "$BIN" umount "$MNT" >/dev/null 2>&1 || umount -l "$MNT" 2>/dev/null || true
    fi
    [ -n "$CLEAN" ] && rm -rf "$CLEAN"
    return 0
}
trap cleanup EXIT INT TERM

rm -rf "$DATA/sessions/--bench--"
F=$("$GEN" --entries 100000 --out "$DATA" --seed 3)
S=$(basename "$F" .jsonl)
C=$MNT/--bench--/$S/context.json

median() { sort -n | awk '{a[NR]=$1} END {if (NR) printf "%.2f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
