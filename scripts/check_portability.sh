#!/usr/bin/env bash
# Portability check (issue 18: "the binary must run on any x86-64 and on
# aarch64"), see docs/development.md, "Portability check".
#
#   scripts/check_portability.sh [aarch64] [x86]     (default: both)
#
# aarch64: cargo check and clippy for aarch64-unknown-linux-gnu, then the
#   library's unit tests and the integration tests that need no mount
#   (engine::, cli::commands, cli::check, cli::gc), cross-built and run
#   under qemu-aarch64 (user mode); the aarch64 binary's output on the
#   fixture sessions must equal the native binary's byte for byte.
# x86: the release binary under `qemu-x86_64 -cpu qemu64` (a CPU without
#   AVX, AVX2, AVX-512, PCLMULQDQ, POPCNT and BMI, so the SSE2 baseline
#   paths run instead of the runtime-detected ones) must print the fixture
#   sessions byte for byte as natively; the unit tests of the scanner, the
#   pretty printer and the locator run on that CPU too.
#
# Installs nothing: it lists what is missing (and the command that installs
# it) and exits with status 2. Runs again without leftovers: builds go to
# target/, everything else to a temporary directory removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

A64=aarch64-unknown-linux-gnu
SYSROOT=/usr/aarch64-linux-gnu
# A CPU model every x86-64 machine is at least: SSE2, no later extensions.
OLD_CPU=qemu64

do_a64=0 do_x86=0
[ "$#" -eq 0 ] && set -- aarch64 x86
for arg in "$@"; do
    case "$arg" in
        aarch64) do_a64=1 ;;
        x86) do_x86=1 ;;
        *) echo "usage: $0 [aarch64] [x86]" >&2; exit 64 ;;
    esac
done

say() { printf '\n== %s\n' "$*"; }
die() { echo "check_portability.sh: $*" >&2; exit 1; }

# --- what is missing -------------------------------------------------------
apt=() other=()
if [ "$do_a64" = 1 ]; then
    command -v qemu-aarch64 >/dev/null 2>&1 || apt+=(qemu-user)
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || apt+=(gcc-aarch64-linux-gnu)
    [ -e "$SYSROOT/lib/libc.so.6" ] || apt+=(libc6-dev-arm64-cross)
    rustup target list --installed 2>/dev/null | grep -qx "$A64" ||
        other+=("rustup target add $A64")
fi
if [ "$do_x86" = 1 ]; then
    [ "$(uname -m)" = x86_64 ] || die "the x86 part runs on an x86-64 machine (pass: aarch64)"
    command -v qemu-x86_64 >/dev/null 2>&1 || apt+=(qemu-user)
fi
if [ "${#apt[@]}" -gt 0 ] || [ "${#other[@]}" -gt 0 ]; then
    echo "missing; install with:" >&2
    [ "${#apt[@]}" -gt 0 ] &&
        echo "  apt-get install $(printf '%s\n' "${apt[@]}" | sort -u | tr '\n' ' ')" >&2
    for c in "${other[@]}"; do echo "  $c" >&2; done
    exit 2
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
summary=()
export CARGO_TERM_COLOR=never

# Runs a command, showing its last line, or its last 40 lines and failing
# when it fails.
step() {
    local log="$TMP/step.log"
    if ! "$@" >"$log" 2>&1; then
        tail -40 "$log" >&2
        die "failed: $*"
    fi
    tail -1 "$log"
}

# Runs `cargo test ARGS…`, prints the result lines and records them under
# the label $1; fails when a test fails.
run_tests() {
    local label=$1 log="$TMP/test.log"
    shift
    if ! cargo test "$@" >"$log" 2>&1; then
        grep -E "^test .* FAILED$|panicked|^error" "$log" | head -40 >&2
        die "$label: tests failed"
    fi
    grep -E "^test result" "$log"
    local passed
    passed=$(grep -E "^test result" "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' |
        awk '{ s += $1 } END { print s }')
    summary+=("$label: $passed passed")
}

# Prints every fixture session with the binary `$2` (run under the words of
# `$1`, if any) into the directory $3, one file per command. The sessions
# are a fresh copy at the same path for every run (the output names files,
# and a v1 file is migrated on its first load), with their own index cache.
print_fixtures() {
    local runner=$1 bin=$2 out=$3 n=0 f rel args
    rm -rf "$TMP/agent" "$TMP/cache"
    mkdir -p "$TMP/agent" "$out"
    cp -r fixtures/sessions fixtures/blobs "$TMP/agent/"
    local -a cmds=(
        "context --no-index"
        "context --no-index --compact"
        "tree --json --no-index"
        "stats --json --no-index"
        "render --branch --no-index"
        # With the index: the first run writes it, the second loads the
        # lines it located.
        "context"
        "context --compact"
    )
    while IFS= read -r f; do
        rel=${f#"$TMP/agent/"}
        for args in "${cmds[@]}"; do
            n=$((n + 1))
            # shellcheck disable=SC2086 # words on purpose
            if ! XDG_CACHE_HOME="$TMP/cache" $runner "$bin" $args --agent-dir "$TMP/agent" "$f" \
                >"$out/$n.out" 2>"$out/$n.err"; then
                cat "$out/$n.err" >&2
                die "$runner $bin $args $rel failed"
            fi
            echo "$args $rel" >"$out/$n.what"
        done
    done < <(find "$TMP/agent/sessions" -name '*.jsonl' | sort)
    # Problems found are part of the output (and of the exit status).
    local status=0
    # shellcheck disable=SC2086
    XDG_CACHE_HOME="$TMP/cache" $runner "$bin" check --all --json --agent-dir "$TMP/agent" \
        >"$out/check.out" 2>&1 || status=$?
    echo "exit status $status" >>"$out/check.out"
}

# Fails unless the directories $1 (native) and $2 hold the same bytes.
same_output() {
    local label=$1 want=$2 got=$3 f count=0
    for f in "$want"/*.out; do
        count=$((count + 1))
        if ! cmp -s "$f" "$got/$(basename "$f")"; then
            local what="check --all"
            [ -e "${f%.out}.what" ] && what=$(cat "${f%.out}.what")
            die "$label: '$what' prints other bytes than natively"
        fi
    done
    echo "$count outputs equal the native ones ($(cat "$want"/*.out | wc -c) bytes)"
    summary+=("$label: $count fixture outputs byte-identical to native")
}

# --- native reference output -----------------------------------------------
say "native release binary and its output on the fixtures"
step cargo build --release --bin sessionfs
NATIVE=target/release/sessionfs
print_fixtures "" "$NATIVE" "$TMP/native"

# --- aarch64 ---------------------------------------------------------------
if [ "$do_a64" = 1 ]; then
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
    export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $SYSROOT"

    say "aarch64: cargo check and clippy"
    step cargo check --target "$A64" --all-targets
    step cargo clippy --target "$A64" --all-targets -- -D warnings
    # The shipped configuration: without the tests' `testing` feature.
    step cargo clippy --target "$A64" --lib --bins -- -D warnings
    summary+=("aarch64: cargo check and clippy (all targets; lib and bin alone) clean")

    say "aarch64: unit tests under qemu-aarch64"
    # The `portability` profile: dev with opt-level 1 (Cargo.toml).
    run_tests "aarch64 unit tests (qemu-aarch64)" --profile portability --target "$A64" --lib

    say "aarch64: integration tests under qemu-aarch64 (no mounts)"
    # The tests run the aarch64 binary through the runner
    # (tests/it/common/mod.rs, sessionfs_cmd); mount tests skip under it,
    # so FUSE must not be required here. PostgreSQL works: the emulated
    # tests start the host's server and talk to it over a socket.
    pg=0
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && pg=1
    [ "$pg" = 1 ] || echo "no PostgreSQL (apt-get install postgresql): its tests skip"
    SESSIONFS_TEST_RUNNER="qemu-aarch64 -L $SYSROOT" SESSIONFS_REQUIRE_FUSE=0 \
        SESSIONFS_REQUIRE_PG=$pg \
        run_tests "aarch64 integration tests (qemu-aarch64)" \
        --profile portability --target "$A64" --test it -- \
        engine:: cli::commands cli::check cli::gc

    say "aarch64: the binary's output on the fixtures"
    print_fixtures "qemu-aarch64 -L $SYSROOT" "target/$A64/portability/sessionfs" "$TMP/a64"
    same_output "aarch64 binary (qemu-aarch64)" "$TMP/native" "$TMP/a64"
fi

# --- old x86-64 --------------------------------------------------------------
if [ "$do_x86" = 1 ]; then
    say "x86-64 without AVX/AVX2/AVX-512/PCLMULQDQ/POPCNT/BMI (qemu-x86_64 -cpu $OLD_CPU)"
    # What the standard library detects on the emulated CPU: none of the
    # optional features may show, or the check proves nothing.
    cat >"$TMP/probe.rs" <<'EOF'
fn main() {
    let features = [
        ("avx", std::arch::is_x86_feature_detected!("avx")),
        ("avx2", std::arch::is_x86_feature_detected!("avx2")),
        ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
        ("pclmulqdq", std::arch::is_x86_feature_detected!("pclmulqdq")),
        ("popcnt", std::arch::is_x86_feature_detected!("popcnt")),
        ("bmi1", std::arch::is_x86_feature_detected!("bmi1")),
        ("bmi2", std::arch::is_x86_feature_detected!("bmi2")),
    ];
    for (name, on) in features {
        if on {
            println!("{name}");
        }
    }
}
EOF
    rustc -O "$TMP/probe.rs" -o "$TMP/probe"
    echo "native CPU: $("$TMP/probe" | tr '\n' ' ')"
    present=$(qemu-x86_64 -cpu "$OLD_CPU" "$TMP/probe" | tr '\n' ' ')
    [ -z "$present" ] || die "the emulated CPU $OLD_CPU has $present"
    echo "emulated CPU ($OLD_CPU): none of them"

    print_fixtures "qemu-x86_64 -cpu $OLD_CPU" "$NATIVE" "$TMP/old"
    same_output "x86-64 release binary (qemu64)" "$TMP/native" "$TMP/old"

    say "x86-64: scanner, pretty printer and locator unit tests on $OLD_CPU"
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="qemu-x86_64 -cpu $OLD_CPU" \
        run_tests "x86-64 unit tests session::json, session::context ($OLD_CPU)" \
        --lib -- session::json session::context
fi

say "summary"
printf '%s\n' "${summary[@]}"
