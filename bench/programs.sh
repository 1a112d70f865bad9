#!/usr/bin/env bash
# What a rule keyed on the program costs a connection: TCP connect + first byte through the
# gateway (shared/anchors/src/connlat.c: socket+connect+read 1 byte+close, CLOCK_MONOTONIC)
# under the same `[[network.allow]]` rule with and without `programs = [...]`, interleaved
# round by round in ONE run (only ratios taken in the same run mean anything). With the
# matcher, each connection's process is found (sock_diag, its descriptor) and identified (its
# executable checked against the host's file) before it is decided. Two clients: connlat.c as
# it is (a plain socket(), as libcurl makes them: not close-on-exec, so every process of the
# sandbox is searched for other holders of it), and the same built with SOCK_CLOEXEC (as
# node, Python, Go and Rust make theirs). Prints a markdown table; asserts nothing. Aim
# (issue #47): at most +5 % at the median.
#
# Usage: bash bench/programs.sh   (env: REPS=5 rounds, CONNS=2000 connections per round and
#        policy, LAT_PORT=5311, CORDON_BIN=a prebuilt binary instead of the release build)
set -euo pipefail

REPS=${REPS:-5}
CONNS=${CONNS:-2000}
LAT_PORT=${LAT_PORT:-5311}
REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
PY=$(command -v /usr/bin/python3 || command -v python3)

# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_setup cordon-programs-bench

SRC=$REPO/../shared/anchors/src/connlat.c
if ! [ -f "$SRC" ] || ! command -v cc >/dev/null; then
    echo "needs cc and shared/anchors/src/connlat.c" >&2
    exit 1
fi
# Under /var/tmp, which the sandbox sees read-only: the host's own file, so a program.
cc -O2 -o "$WORK/bin/connlat" "$SRC"
printf '#include <sys/socket.h>\n#define socket(d, t, p) socket((d), (t) | SOCK_CLOEXEC, (p))\n' \
    > "$WORK/cloexec.h"
cc -O2 -include "$WORK/cloexec.h" -o "$WORK/bin/connlat-cloexec" "$SRC"
chmod -R a+rX "$WORK/bin"
"$WORK/bin/connlat" server "$LAT_PORT" & SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
sleep 0.3

rule='[[network.allow]]\nhost = "host.cordon.internal"\nports = [%s]\n'
printf "$rule" "$LAT_PORT" > "$WORK/plain.toml"
printf "$rule"'programs = ["connlat", "connlat-cloexec"]\n' "$LAT_PORT" > "$WORK/keyed.toml"
mkdir -p "$WORK"/{home,project,state,config,data}
ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
    HOME="$WORK/home" XDG_STATE_HOME="$WORK/state" XDG_CONFIG_HOME="$WORK/config"
    XDG_DATA_HOME="$WORK/data")
RESOLVE='H=$(getent ahostsv4 host.cordon.internal | awk "NR==1{print \$1}")'
: > "$WORK/raw.txt"
for rep in $(seq 1 "$REPS"); do
    echo "round $rep/$REPS" >&2
    for c in connlat connlat-cloexec; do
        for p in plain keyed; do
            (cd "$WORK/project" && "${ENV[@]}" "$WORK/bin/cordon" run --no-tty --project "$WORK/project" \
                --policy "$WORK/$p.toml" -- sh -c "$RESOLVE; exec $WORK/bin/$c client \$H $LAT_PORT $CONNS") \
                | sed "s/^/$c:$p /" >> "$WORK/raw.txt"
        done
    done
done

echo "## Rules keyed on the program: connect + first byte"
echo
echo "- $(date -u +%FT%TZ), kernel $(uname -r), $(nproc) CPUs, uid $(id -u), $("$WORK/bin/cordon" --version)"
echo "- $REPS rounds × $CONNS sequential connections per policy, interleaved; timer: connlat.c (anchors)"
echo
"$PY" - "$WORK/raw.txt" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, ns = line.split(" ", 1)
    us = [int(x) / 1e3 for x in ns.strip().split(",") if x]
    rows.setdefault(label, {"p50": [], "all": []})
    rows[label]["p50"].append(statistics.median(us))
    rows[label]["all"].extend(us)
print("| client | rule | p50 µs per round (min / **median** / max) | p50 over all | p90 over all | vs without |")
print("|---|---|---|---|---|---|")
for client, what in (("connlat-cloexec", "close-on-exec socket"), ("connlat", "plain socket()")):
    base = statistics.median(rows[client + ":plain"]["all"])
    for rule, name in (("plain", "without `programs`"), ("keyed", "with `programs`")):
        r = rows[client + ":" + rule]
        p = sorted(r["all"])
        p50 = statistics.median(p)
        print("| %s | %s | %.0f / **%.0f** / %.0f | %.0f | %.0f | %.3fx |" % (
            what, name, min(r["p50"]), statistics.median(r["p50"]), max(r["p50"]), p50,
            p[int(len(p) * 0.9)], p50 / base))
EOF
