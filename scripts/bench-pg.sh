#!/usr/bin/env bash
# PostgreSQL storage benchmark (docs/benchmarks.md, docs/team.md), next to
# the file backend in the same run.
#
#   scripts/bench-pg.sh [SIZES…]      (default: 1000 10000 100000 entries)
#
# Starts a throwaway server (Debian's initdb and pg_ctl in a temp dir,
# listening only on a Unix socket there; as `nobody` when run as root, with
# the server's default durability settings), builds and runs
# examples/pg_bench.rs against it, and stops the server. Environment:
# PG_BIN (the directory of initdb/pg_ctl), APPENDS (appends timed per size;
# default 200, at most 2,000,000 / entries).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -x "$BIN/initdb" ] || { echo "bench-pg.sh: no initdb (apt-get install postgresql, or set PG_BIN)" >&2; exit 1; }

DIR=$(mktemp -d)
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi
}
cleanup() {
    as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$DIR"
}
trap cleanup EXIT
[ "$(id -u)" = 0 ] && chown nobody "$DIR"

as_owner "$BIN/initdb" -D "$DIR/data" -A trust -U postgres -E UTF8 --locale=C >/dev/null
as_owner "$BIN/pg_ctl" -D "$DIR/data" -o "-k $DIR -c listen_addresses=''" -l "$DIR/log" -w start >/dev/null

(cd "$ROOT" && cargo build --release --example pg_bench 2>&1 | tail -1)
echo "PostgreSQL $("$BIN/postgres" --version | awk '{print $3}'), $(nproc) cores"
"$ROOT/target/release/examples/pg_bench" "postgres://postgres@/postgres?host=$DIR" "$@"
