#!/usr/bin/env bash
# The host-executed-files mechanism's cost, in ONE run: the built-in policy (`[state]
# project_files = "staged"`: the project's git dir and host-loaded names copy-on-write, found
# at start, settled and classified at exit) against `project_files = "readonly"` (the old
# read-only binds), on
#   - `cargo build --offline` of a small crate (two dependencies from the local registry,
#     fresh target dir inside the run) in a git repository with history;
#   - `npm install --offline` of a small local package (a tarball with 40 files) into an
#     empty node_modules;
#   - `cordon run -- true` in a project whose .git is a copy of this repository's (start and
#     exit, where the mechanism's work is).
# Prints hyperfine's tables; asserts nothing.
#
# Usage: bash bench/host_files.sh   (env: N=10 runs per command, CORDON_BIN=prebuilt binary)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
N=${N:-10}
bench_setup cordon-bench-hostfiles
B=$WORK/bin/cordon
printf '[state]\nproject_files = "readonly"\n' >"$WORK/readonly.toml"
printf '' >"$WORK/staged.toml"
G="git -c user.email=b@e.invalid -c user.name=b"

# A small crate in a repository with history.
P=$WORK/crate
mkdir -p "$P/src"
cat >"$P/Cargo.toml" <<'EOF'
[package]
name = "small"
version = "0.1.0"
edition = "2021"
[dependencies]
itoa = "1"
memchr = "2"
EOF
for i in $(seq 20); do echo "pub fn f$i(x: u64) -> String { itoa::Buffer::new().format(x * $i).to_string() }" >"$P/src/m$i.rs"; done
{ for i in $(seq 20); do echo "mod m$i;"; done; echo 'fn main() { println!("{}", m1::f1(memchr::memchr(b"x"[0], b"abx").unwrap() as u64)); }'; } >"$P/src/main.rs"
(cd "$P" && $G init -q && for i in $(seq 30); do echo "$i" >>log.txt; $G add -A && $G commit -qm "c$i"; done)
(cd "$P" && "$B" run --no-tty -q -- cargo build --offline -q >/dev/null 2>&1 || true)

# A small npm package, packed locally.
K=$WORK/pkgsrc
mkdir -p "$K/lib"
echo '{"name":"small-pkg","version":"1.0.0","main":"lib/index.js"}' >"$K/package.json"
for i in $(seq 40); do echo "module.exports.f$i = () => $i;" >"$K/lib/f$i.js"; done
(cd "$K" && npm pack -q >/dev/null 2>&1)
N2=$WORK/npmproj
mkdir -p "$N2"
echo '{"name":"app","version":"1.0.0"}' >"$N2/package.json"
cp "$K/small-pkg-1.0.0.tgz" "$N2/"
(cd "$N2" && $G init -q && $G add -A && $G commit -qm init)

# A project whose .git is this repository's, for start and exit.
S=$WORK/startproj
mkdir -p "$S"
cp -a "$REPO/.git" "$S/.git"
echo "git dir of the start project: $(du -sh "$S/.git" | cut -f1), $(find "$S/.git" -type f | wc -l) files" >&2

# Medians, and the ratio of medians to the read-only run (the second command of each pair).
run() {
    hyperfine -N -w 2 -r "$N" --export-json "$WORK/$1.json" "${@:2}" >&2
    python3 - "$WORK/$1.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))["results"]
base = statistics.median(r[-1]["times"])
for x in r:
    m = statistics.median(x["times"])
    print(f"| {x['command']} | {m*1000:.1f} ms | {x['mean']*1000:.1f} ms | {min(x['times'])*1000:.1f} ms | {m/base:.3f}x |")
PY
}
# Builds and installs interleaved round by round (A B, then B A), so drift on this shared
# machine falls on both.
rounds() {
    local name=$1 dir=$2 clean=$3; shift 3
    : >"$WORK/$name.tsv"
    for r in $(seq "$N"); do
        local order="staged readonly"
        [ $((r % 2)) -eq 0 ] && order="readonly staged"
        for p in $order; do
            (cd "$dir" && eval "$clean")
            local t0 t1
            t0=$(date +%s.%N)
            (cd "$dir" && "$B" run --no-tty -q --policy "$WORK/$p.toml" -- "$@" >/dev/null 2>&1)
            t1=$(date +%s.%N)
            echo "$p $t0 $t1" >>"$WORK/$name.tsv"
        done
    done
    python3 - "$WORK/$name.tsv" "$name" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    p, a, b = line.split()
    t.setdefault(p, []).append(float(b) - float(a))
base = statistics.median(t["readonly"])
for p in ("staged", "readonly"):
    m = statistics.median(t[p])
    print(f"| {sys.argv[2]}, {p} ({len(t[p])} runs, interleaved) | {m*1000:.1f} ms | {statistics.mean(t[p])*1000:.1f} ms | {min(t[p])*1000:.1f} ms | {m/base:.3f}x |")
PY
}
echo "| what | median | mean | min | ratio of medians to readonly |"
echo "|---|---|---|---|---|"
rounds "cargo build" "$P" "rm -rf target" cargo build --offline -q
rounds "npm install" "$N2" "rm -rf node_modules package-lock.json" \
    npm install --offline --no-audit --no-fund -q ./small-pkg-1.0.0.tgz
cd "$S"
run start \
    -n "run -- true, staged (built-in)" "$B run --no-tty -q --policy $WORK/staged.toml -- true" \
    -n "run -- true, readonly" "$B run --no-tty -q --policy $WORK/readonly.toml -- true"
