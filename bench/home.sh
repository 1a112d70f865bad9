#!/usr/bin/env bash
# The copy-on-write home's cost, in ONE run, interleaved: `cordon run -- true` and a
# `cargo build --offline` of a mid-sized crate (cordon-policy and its dependencies, fresh
# target dir) with the copy-on-write home (the default: overlay home, cargo's registry in
# cordon's cache layer) against the home without it (`[state] home = "readonly"`, with
# `~/.cargo` writable so cargo can run at all — the registry written in place); the start-up
# pair again with `[network] mode = "none"`, whose spread is small enough to show the home's
# own cost. Prints markdown;
# asserts nothing.
#
# Usage: bash bench/home.sh   (env: N=30 start runs, BUILD_RUNS=4 interleaved build rounds,
#        CORDON_BIN=prebuilt binary)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
N=${N:-30}
BUILD_RUNS=${BUILD_RUNS:-4}
bench_setup cordon-bench-home
B=$WORK/bin/cordon
cat >"$WORK/readonly.toml" <<EOF
[state]
home = "readonly"
[filesystem]
writable = ["~/.cargo"]
EOF
echo '' >"$WORK/overlay.toml"
# The same pair without the gateway, whose start-up varies by more than the home costs.
printf '[network]\nmode = "none"\n' >"$WORK/overlay-none.toml"
cat "$WORK/readonly.toml" "$WORK/overlay-none.toml" >"$WORK/readonly-none.toml"
cd "$REPO"
# Warm both: the cache layer is made on the first run, the registry is on the host already.
for p in overlay readonly; do
    "$B" run --no-tty --policy "$WORK/$p.toml" -- cargo build --offline -q -p cordon-policy \
        --target-dir "$REPO/target/bench-home-warm-$p" >/dev/null 2>&1 || true
done
hyperfine -N -w 5 -r "$N" --export-json "$WORK/start.json" \
    -n "overlay home" "$B run --no-tty --policy $WORK/overlay.toml -- true" \
    -n "read-only home" "$B run --no-tty --policy $WORK/readonly.toml -- true" >&2
hyperfine -N -w 5 -r "$N" --export-json "$WORK/start-none.json" \
    -n "overlay home, network none" "$B run --no-tty --policy $WORK/overlay-none.toml -- true" \
    -n "read-only home, network none" "$B run --no-tty --policy $WORK/readonly-none.toml -- true" >&2
# Builds interleaved round by round (A B, then B A), so drift on the machine falls on both.
: >"$WORK/build.tsv"
build() {
    rm -rf "$REPO/target/bench-home-t"
    local t0 t1
    t0=$(date +%s.%N)
    "$B" run --no-tty --policy "$WORK/$1.toml" -- cargo build --offline -q -p cordon-policy \
        --target-dir "$REPO/target/bench-home-t" >/dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$1 $t0 $t1" >>"$WORK/build.tsv"
}
for r in $(seq "$BUILD_RUNS"); do
    if [ $((r % 2)) -eq 1 ]; then build overlay; build readonly; else build readonly; build overlay; fi
done
rm -rf "$REPO/target/bench-home-t" "$REPO"/target/bench-home-warm-*
python3 - "$WORK/start.json" "$WORK/start-none.json" "$WORK/build.tsv" <<'EOF'
import json, statistics, sys
print("| what | median | mean | ratio of medians to read-only home |")
print("|---|---|---|---|")
fmt = lambda v: "%.1f ms" % (v * 1000) if v < 10 else "%.2f s" % v
def rows(rs):
    base = rs[1][1]
    for name, med, mean in rs:
        print("| %s | %s | %s | %.3fx (%+.1f ms) |" % (name, fmt(med), fmt(mean), med / base, (med - base) * 1000))
for path in sys.argv[1:3]:
    rows([(r["command"], r["median"], r["mean"]) for r in json.load(open(path))["results"]])
times = {}
for line in open(sys.argv[3]):
    k, t0, t1 = line.split()
    times.setdefault(k, []).append(float(t1) - float(t0))
rows([("cargo build, %s home (%d runs)" % (k.replace("readonly", "read-only"), len(times[k])),
       statistics.median(times[k]), statistics.mean(times[k])) for k in ("overlay", "readonly")])
EOF
