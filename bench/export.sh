#!/usr/bin/env bash
# Events per second a session writes with the audit log's export off and on, round-robin in
# one run: a session that runs /bin/true N times (every exec is decided and logged, with its
# process events), its log's lines over its wall time. On: OTLP/HTTP to a local receiver that
# reads and discards (tests/fixtures/otlp/receiver.py --discard), and syslog to a local socket
# a reader drains. Prints a markdown table: medians, events per second, the ratio to off.
# Env: N (execs a session, 2000), ROUNDS (5), CORDON_BIN (a prebuilt binary).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
N=${N:-2000}
ROUNDS=${ROUNDS:-5}
bench_setup cordon-export
mkdir -p "$WORK/project" "$WORK/home/.config" "$WORK/state"
export HOME=$WORK/home XDG_CONFIG_HOME=$WORK/home/.config XDG_STATE_HOME=$WORK/state
python3 "$REPO/crates/cordon/tests/fixtures/otlp/receiver.py" "$WORK/port" --discard &
RX=$!
python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
while True:
    s.recv(1 << 16)
' "$WORK/syslog.sock" &
SL=$!
trap 'kill $RX $SL 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do [ -f "$WORK/port" ] && [ -S "$WORK/syslog.sock" ] && break; sleep 0.05; done
printf '' > "$WORK/off.toml"
printf '[audit]\nexport = ["otlp"]\notlp_endpoint = "http://127.0.0.1:%s/v1/logs"\n' "$(cat "$WORK/port")" > "$WORK/otlp.toml"
printf '[audit]\nexport = ["syslog"]\nsyslog_socket = "%s"\n' "$WORK/syslog.sock" > "$WORK/syslog.toml"
# One session: "MS LINES" (wall time, and the lines its log holds).
session() {
    local t0 t1
    rm -f "$WORK/a.jsonl"
    t0=$(date +%s%N)
    (cd "$WORK/project" && "$WORK/bin/cordon" run --no-tty -q --policy "$WORK/$1.toml" --audit "$WORK/a.jsonl" \
        -- sh -c "i=0; while [ \$i -lt $N ]; do /bin/true; i=\$((i+1)); done") >/dev/null 2>"$WORK/err"
    t1=$(date +%s%N)
    if grep -q "export incomplete" "$WORK/err"; then echo "export incomplete in $1: $(cat "$WORK/err")" >&2; exit 1; fi
    echo "$(((t1 - t0) / 1000000)) $(wc -l < "$WORK/a.jsonl")"
}
declare -A MS EV
for i in $(seq "$ROUNDS"); do
    for k in off otlp syslog; do
        read -r ms ev < <(session "$k")
        MS[$k]+="$ms "
        EV[$k]=$ev
    done
done
median() { printf '%s\n' $@ | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
echo "| export | median ms | events | events/s | ÷ off |"
echo "|---|---|---|---|---|"
off=$(median ${MS[off]})
for k in off otlp syslog; do
    m=$(median ${MS[$k]})
    awk -v k="$k" -v m="$m" -v e="${EV[$k]}" -v o="$off" 'BEGIN {
        printf "| %s | %d | %d | %.0f | %.3f× |\n", k, m, e, e / (m / 1000), (e / (m / 1000)) / (e / (o / 1000))
    }'
done
