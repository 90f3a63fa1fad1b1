#!/usr/bin/env bash
# Listings and lookups at scale through the mount (fifteenth session):
# figures in docs/benchmarks.md ("Listings and lookups at scale").
#
#   SESSIONFS_BIN=path/to/sessionfs scripts/bench_scale_listings.sh
#
# One run of each, with the wall time of the tool (`/usr/bin/time`):
#   1. `ls` of an entry with 100,000 children, and of a session directory
#      with 100,000 roots (each readdir request found every entry again);
#   2. `ls -l` of that session's `entries/` (100,000 names), and the
#      `getxattr` requests the mount received for two of them (`--debug`);
#   3. `ls -l by-id` and `ls -l by-cwd/work` over 2,000 projects of one
#      session each (each lookup listed every project).
# SESSIONFS_BIN defaults to target/release/sessionfs of this checkout.
# Needs root or FUSE access, python3; the data (≈ 30 MB) goes to a
# temporary directory, removed at the end.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SESSIONFS_BIN:-$ROOT/target/release/sessionfs}
[ -x "$BIN" ] || { echo "bench_scale_listings.sh: no $BIN (cargo build --release)" >&2; exit 1; }
T=$(mktemp -d)
M=$T/m
cleanup() {
    cd /
    if grep -q " $M " /proc/self/mountinfo; then "$BIN" umount "$M" >/dev/null || umount -l "$M"; fi
    rm -rf "$T"
}
trap cleanup EXIT
mkdir -p "$M" "$T/agent/sessions"
export XDG_CACHE_HOME=$T/cache HOME=$T/home

python3 - "$T/agent/sessions" <<'PY'
import json, os, random, sys
root = sys.argv[1]; random.seed(5)
def write(path, lines):
    with open(path, "w") as f:
        for l in lines:
            f.write(json.dumps(l, separators=(",", ":")) + "\n")
def msg(i, parent, ts):
    return {"type": "message", "id": "c%d" % i, "parentId": parent, "timestamp": ts,
            "message": {"role": "user", "content": "child %d" % i, "timestamp": i}}
def ts():
    return "2026-06-01T%02d:%02d:%02d.%03dZ" % (random.randint(0, 23), random.randint(0, 59),
                                                random.randint(0, 59), random.randint(0, 999))
os.makedirs(f"{root}/--star--")
for kind, n in (("hub", 1), ("roots", 2)):
    sid = "01a40000-0000-7000-8000-%012d" % n
    lines = [{"type": "session", "version": 3, "id": sid,
              "timestamp": "2026-06-01T00:00:00.000Z", "cwd": "/star"}]
    if kind == "hub":
        lines.append({"type": "message", "id": "hub", "parentId": None,
                      "timestamp": "2026-06-01T00:00:00.000Z",
                      "message": {"role": "user", "content": "hub", "timestamp": 0}})
    lines += [msg(i, "hub" if kind == "hub" else None, ts()) for i in range(100000)]
    write(f"{root}/--star--/2026-06-01T00-00-00-000Z_{sid}.jsonl", lines)
for p in range(2000):
    d = f"{root}/--work-p{p}--"; os.makedirs(d)
    sid = "%08x-0000-7000-8000-000000000000" % p
    write(f"{d}/2026-01-01T00-00-00-000Z_{sid}.jsonl",
          [{"type": "session", "version": 3, "id": sid,
            "timestamp": "2026-01-01T00:00:00.000Z", "cwd": f"/work/p{p}"}])
PY

"$BIN" mount --debug --log-file "$T/log" --agent-dir "$T/agent" "$M" >/dev/null
cd "$M"
hub=$(ls -d -- ./--star--/*000000001)
roots=$(ls -d -- ./--star--/*000000002)
cat "$hub/leaf" "$roots/leaf" >/dev/null   # loaded
ls by-id >/dev/null; ls by-cwd/work >/dev/null
t() { local what=$1; shift; /usr/bin/time -f "$what: %e s" sh -c "$*" >/dev/null; }
t "ls hub/ (100,000 children)" "ls $hub/hub"
t "ls SESSION/ (100,000 roots)" "ls $roots"
t "find entries/ -maxdepth 1, stat only" "find $roots/entries -maxdepth 1 -printf '%s %m\n'"
before=$(grep -c ': getxattr ' "$T/log" || true)
t "ls -l entries/ (100,000 names)" "ls -l $roots/entries"
t "ls -l entries/ again" "ls -l $roots/entries"
after=$(grep -c ': getxattr ' "$T/log" || true)
echo "getxattr requests for the two ls -l: $((after - before))"
t "ls -l by-id (2,000 projects)" "ls -l by-id"
t "ls -l by-cwd/work (2,000 projects)" "ls -l by-cwd/work"
