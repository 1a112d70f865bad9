#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and black-box sandbox tests.
# As root (as in CI: .ci/run calls this) it first installs what the tests need
# (scripts/setup-test-env.sh), runs every sandbox test twice, as root and as the unprivileged user
# cordon-test, and is strict: CORDON_TEST_STRICT=1 makes every skip (a missing tool, a variant
# that cannot run) a failure, so a green run means everything ran. As a normal user it runs the
# unprivileged variants as yourself and skips the root ones visibly (listed at the end); set
# CORDON_TEST_STRICT=1 yourself to have those skips fail too.
set -euo pipefail
cd "$(dirname "$0")/.."
# The test harness hides a passing test's output, so skips are collected here and shown last.
skips=$(mktemp)
trap 'if [ -s "$skips" ]; then echo "test.sh: skipped:" >&2; sort -u "$skips" >&2; fi; rm -f "$skips"' EXIT
export CORDON_TEST_SKIP_LOG="$skips"
if [ "$(id -u)" -eq 0 ]; then
    bash scripts/setup-test-env.sh
    export CORDON_TEST_STRICT="${CORDON_TEST_STRICT:-1}"
    # What this environment cannot have, and so may skip even when strict (comma separated):
    #  cargo-1.68: the cargo cordon-test can run is Debian 12's (1.65; rustup's is under /root),
    #  and sparse registries need 1.68.
    export CORDON_TEST_UNAVAILABLE="${CORDON_TEST_UNAVAILABLE-cargo-1.68}"
else
    echo "test.sh: not root: running the unprivileged variants as $(id -un); root variants are skipped" >&2
fi
cargo fmt --all --check
# The fuzz targets are a crate of their own (fuzz/Cargo.toml), outside the workspace.
rustfmt --edition 2024 --check fuzz/fuzz_targets/*.rs
cargo clippy -j2 --all-targets -- -D warnings
cargo test -j2 --workspace
# Faults under load (docs/soak.md): root runs the sinks on port 443 and the audit log's disk (a
# small tmpfs); the second run is cordon itself as the unprivileged user.
if [ "$(id -u)" -eq 0 ]; then
    SOAK_SECONDS="${SOAK_SECONDS:-120}" bash scripts/soak.sh
    SOAK_USER=cordon-test SOAK_SECONDS="${SOAK_USER_SECONDS:-60}" bash scripts/soak.sh
else
    echo "soak (scripts/soak.sh): needs root" >> "$skips"
fi
# The fuzz targets, a fixed number of inputs each (docs/fuzzing.md). They need no privileges,
# so they run for anyone who has cargo-fuzz; as root (CI) setup-test-env.sh installed it, so a
# missing one fails there, and is a visible skip for anyone else.
if [ "$(id -u)" -eq 0 ] || cargo fuzz --version >/dev/null 2>&1; then
    # Linted here, not beside the workspace's clippy: libFuzzer's build needs g++, which
    # setup-test-env.sh installs with cargo-fuzz.
    cargo clippy -j2 --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings
    bash scripts/fuzz.sh
else
    echo "fuzz (scripts/fuzz.sh): cargo-fuzz is not installed" >> "$skips"
fi
# The .deb in a clean Debian 12 root: installed, then doctor and a sandbox as root and as a user
# there (docs/development.md); it needs root for dpkg into the root and its namespaces.
if [ "$(id -u)" -eq 0 ]; then
    bash scripts/test-package.sh
else
    echo "package (scripts/test-package.sh): needs root" >> "$skips"
fi
bash scripts/test-agents.sh
