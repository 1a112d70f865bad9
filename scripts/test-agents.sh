#!/usr/bin/env bash
# The real agent CLIs inside cordon (crates/cordon/tests/agents.rs), on their own: each agent
# runs non-interactively against a local stand-in of its API. scripts/test.sh runs this last;
# run it alone after changing a profile. As root it first installs the pinned agents
# (scripts/setup-agents.sh, idempotent) and is strict like test.sh: a skipped agent fails.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then
    bash scripts/setup-agents.sh
    export CORDON_TEST_STRICT="${CORDON_TEST_STRICT:-1}"
fi
# Not among `cargo clippy --all-targets` (the target is test = false): linted here.
cargo clippy -j2 -p cordon --test agents -- -D warnings
cargo test -j2 -p cordon --test agents -- --test-threads=2
