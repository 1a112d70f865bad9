#!/usr/bin/env bash
# Runs each fuzz target under fuzz/ (docs/fuzzing.md) for a fixed number of inputs, starting
# from its checked-in seeds; fails on the first crash, panic, leak or timeout (libFuzzer
# writes the input under fuzz/artifacts/<target>/). What a run adds to the corpus goes to a
# scratch directory under fuzz/target, never into the checked-in seeds.
#   scripts/fuzz.sh                  every target, the CI counts below
#   scripts/fuzz.sh packet dns_message
#   CORDON_FUZZ_RUNS=1000000 scripts/fuzz.sh    the same count for every target
# Needs cargo-fuzz (scripts/setup-test-env.sh installs it); libFuzzer and the sanitizer need
# nightly flags, which RUSTC_BOOTSTRAP=1 allows on the stable toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
# Inputs per target in CI: 20 to 30 s each (235, 1500, 1875 and 1200 inputs/s measured on the
# 2-core machine), after the build. git_config forks git three times per input: a few
# thousand keep it as short.
declare -A runs=([policy_parse]=5000 [http_head]=30000 [dns_message]=40000 [packet]=25000 [git_config]=3000)
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(policy_parse http_head dns_message packet git_config)
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is not installed (cargo install cargo-fuzz --version 0.13.2 --locked; scripts/setup-test-env.sh does it)" >&2
    exit 1
fi
start=$(date +%s)
cargo fuzz build
echo "fuzz.sh: built in $(($(date +%s) - start)) s"
for t in "${targets[@]}"; do
    [ -n "${runs[$t]:-}" ] || { echo "fuzz.sh: no target $t" >&2; exit 2; }
    n="${CORDON_FUZZ_RUNS:-${runs[$t]}}"
    scratch="fuzz/target/corpus/$t"
    rm -rf "$scratch"
    mkdir -p "$scratch" "fuzz/artifacts/$t"
    extra=()
    if [ "$t" = policy_parse ]; then
        extra=(-dict=fuzz/policy.dict)
        # The checked-in seed is a copy taken when the seeds were made; the built-in policy
        # as it is now goes in too, so the fuzzer always starts from the policy users get.
        cp crates/cordon-policy/src/default.toml "$scratch/built-in-now.toml"
    fi
    if [ "$t" = git_config ]; then
        extra=(-dict=fuzz/gitconfig.dict)
    fi
    t0=$(date +%s)
    # New inputs go to the first directory; the seeds are only read.
    cargo fuzz run "$t" "$scratch" "fuzz/corpus/$t" -- \
        -runs="$n" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 "${extra[@]}" \
        2>"fuzz/target/$t.log" || {
        tail -n 60 "fuzz/target/$t.log" >&2
        echo "fuzz.sh: $t FAILED; the input is in fuzz/artifacts/$t/ (rerun: RUSTC_BOOTSTRAP=1 cargo fuzz run $t fuzz/artifacts/$t/<file>)" >&2
        exit 1
    }
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "fuzz/target/$t.log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz.sh: $t: $execs inputs in $(($(date +%s) - t0)) s, no crash"
done
