#!/usr/bin/env bash
# The CI recipe of docs/ci.md: mount an agent directory in the background,
# check its sessions through the mount and with `sessionfs check`, unmount,
# and exit non-zero if anything failed. tests/it/cli/ci_recipe.rs runs this file.
#
# Environment:
#   AGENT_DIR   the agent directory to check (default: $PI_CODING_AGENT_DIR,
#               else ~/.omp/agent)
#   SESSIONFS   the sessionfs binary (default: sessionfs on PATH; when there
#               is none, `cargo install --path .` from the repository)
#   MOUNTPOINT  where to mount (default: a new temporary directory)
set -euo pipefail

AGENT_DIR=${AGENT_DIR:-${PI_CODING_AGENT_DIR:-$HOME/.omp/agent}}
say() { printf 'ci-recipe: %s\n' "$*"; }

# 1. FUSE: fusermount3 for non-root mounts (root mounts directly).
if ! command -v fusermount3 >/dev/null 2>&1 && [ "$(id -u)" != 0 ]; then
    say "installing fuse3"
    sudo apt-get update -qq && sudo apt-get install -y -qq fuse3
fi

# 2. The binary.
if [ -z "${SESSIONFS:-}" ]; then
    if command -v sessionfs >/dev/null 2>&1; then
        SESSIONFS=$(command -v sessionfs)
    else
        say "installing sessionfs (cargo install --path .)"
        cargo install --locked --path "$(dirname "$0")/.."
        SESSIONFS=$HOME/.cargo/bin/sessionfs
    fi
fi

# 3. Mount in the background. `sessionfs mount` returns once the mount is
#    live (exit 0) or failed (non-zero): no polling. The trap unmounts
#    whatever happens next; `sessionfs umount` waits for the server.
MOUNTPOINT=${MOUNTPOINT:-$(mktemp -d "${TMPDIR:-/tmp}/sessionfs-ci.XXXXXX")}
mkdir -p "$MOUNTPOINT"
"$SESSIONFS" mount --read-only --agent-dir "$AGENT_DIR" "$MOUNTPOINT"
trap '"$SESSIONFS" umount "$MOUNTPOINT" || "$SESSIONFS" umount --lazy "$MOUNTPOINT"' EXIT
test -d "$MOUNTPOINT/by-id"   # the mount answers

# 4. Checks on the sessions, through the mount.
status=0
sessions=0
for dir in "$MOUNTPOINT"/*/*/; do
    case "$dir" in "$MOUNTPOINT/by-id/"* | "$MOUNTPOINT/by-cwd/"*) continue ;; esac   # links to the same
    [ -e "$dir/header.json" ] || { say "unreadable: $dir$(cat "$dir/last-error")"; status=1; continue; }
    sessions=$((sessions + 1))
    id=$(jq -r .id "$dir/header.json")
    if [ -s "$dir/problems" ]; then
        say "session $id has problems:"
        sed 's/^/    /' "$dir/problems"
        status=1
    fi
    # Every session's context is valid JSON (tools other than jq 1.6 read
    # lone-surrogate escapes too; `wc -c` only needs the bytes).
    [ "$(wc -c <"$dir/context.json")" -gt 2 ] || { say "session $id: empty context.json"; status=1; }
done
say "$sessions sessions mounted at $MOUNTPOINT"
[ "$sessions" -gt 0 ] || { say "no sessions found"; status=1; }

# 5. The whole store, blobs included, without the mount.
if ! "$SESSIONFS" check --all --agent-dir "$AGENT_DIR" >/dev/null; then
    say "sessionfs check --all found problems"
    status=1
fi

[ "$status" = 0 ] && say "ok" || say "FAILED"
exit "$status"
