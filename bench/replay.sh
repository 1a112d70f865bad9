#!/usr/bin/env bash
# `cordon replay` throughput on a 1,000,000-event log, against `jq -c 'select(…)'` over the
# same file as the floor (jq only parses and filters; replay parses and re-decides every
# decision), round-robin in one run. Prints a markdown table: medians, events per second, the
# ratio to jq. Env: N (events, 1000000), ROUNDS (5), CORDON_BIN (a prebuilt binary).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
N=${N:-1000000}
ROUNDS=${ROUNDS:-5}
command -v jq >/dev/null || { echo "replay.sh needs jq" >&2; exit 1; }
bench_setup cordon-replay
mkdir -p "$WORK/project" "$WORK/home/.config" "$WORK/state"
export HOME=$WORK/home XDG_CONFIG_HOME=$WORK/home/.config XDG_STATE_HOME=$WORK/state
LOG=$WORK/bench.jsonl
python3 "$REPO/bench/replay-log.py" "$N" "$LOG" "$WORK/project"
cat > "$WORK/policy.toml" <<'TOML'
[[network.allow]]
host = "github.com"
ports = [22, 443]
[[http.rule]]
name = "no-uploads"
host = "*.example.com"
methods = ["POST"]
action = "deny"
[exec]
deny = ["docker *"]
TOML
echo "log: $N events, $(du -m "$LOG" | cut -f1) MiB" >&2
ms() { local t0 t1; t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)); }
replay() { "$WORK/bin/cordon" replay "$LOG" --policy "$WORK/policy.toml" --json; }
jqsel() { jq -c 'select(.action == "deny" and .layer == "http")' "$LOG"; }
# The report must be the whole log's: decisions counted, nothing changed under this policy.
replay | python3 -c 'import json,sys; r=json.load(sys.stdin); print("replay: %d decisions, %d changes" % (r["decisions"], len(r["changes"])), file=sys.stderr)'
declare -a R J
for i in $(seq "$ROUNDS"); do
    R+=("$(ms replay)")
    J+=("$(ms jqsel)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
r=$(median "${R[@]}")
j=$(median "${J[@]}")
echo
echo "| command | median ms | events/s | ÷ jq |"
echo "|---|---|---|---|"
awk -v n="$N" -v r="$r" -v j="$j" 'BEGIN {
    printf "| `cordon replay --json` | %d | %.0f | %.2f× |\n", r, n / (r / 1000), j / r
    printf "| `jq -c '\''select(…)'\''` | %d | %.0f | 1.00× |\n", j, n / (j / 1000)
}'
