#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and black-box sandbox tests.
# As root it first installs what the tests need (scripts/setup-test-env.sh) and then runs every
# sandbox test twice: as root and as the unprivileged user cordon-test. As a normal user it runs
# the unprivileged variants as yourself and skips the root ones.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then
    bash scripts/setup-test-env.sh
else
    echo "test.sh: not root: running the unprivileged variants as $(id -un); root variants are skipped" >&2
fi
cargo fmt --all --check
cargo clippy -j2 --all-targets -- -D warnings
cargo test -j2 --workspace
