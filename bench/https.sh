#!/usr/bin/env bash
# HTTPS through cordon's transparent gateway (TUN → userspace TCP → TLS interception → rule →
# upstream TLS) against direct and against mitmproxy as an intercepting proxy, in ONE run,
# round-robin, with the same client (`hey`) and the same server (nginx over TLS). Prints
# markdown; asserts nothing. Run as root (nginx binds port 443 on a loopback address of its
# own, 127.0.0.201, so it meets no test server).
#
#   a. 1 KiB GETs, c=1 and c=32, fixed duration (DUR, 4 s): req/s;
#   b. 10 MiB GETs, c=1, fixed count (BIG_N, 30): MB/s;
#   c. the same 10 MiB over plain HTTP on a port the HTTP layer does not take (18480): the
#      gateway splices it (TUN → userspace TCP → host socket), so this isolates the stack;
#   d. load: LOAD_C (500) connections for LOAD_T (20) s of 1 KiB HTTPS through the gateway:
#      failures, and the supervisor's peak RSS (VmHWM of the `cordon run` process, sampled).
#
# Each run's whole-machine CPU time (all processes, kernel included: /proc/stat, read just
# before and after hey, inside the sandbox for the cordon paths so its start and end are left
# out) gives CPU per request. From it the table's ceiling: the rate this path would reach if it
# kept every core busy at that cost, as a ratio to direct's measured rate — what better
# scheduling alone could give, before any work is taken off the path.
#
# Paths: direct (hey on the host, trusting the test CA), mitmproxy (hey -x through mitmdump,
# trusting mitmproxy's CA only: a success proves it intercepted), cordon (hey inside
# `cordon run`, no proxy variables: the transparent path; it trusts cordon's CA through the
# sandbox's bundle, and cordon verifies nginx against the test CA via [tls] upstream_ca).
#
# Usage: bash bench/https.sh  (env: REPS=3, DUR=4s, BIG_N=30, LOAD_C=500, LOAD_T=20s,
#        BENCH_ADDR=127.0.0.201, CORDON_BIN=prebuilt binary, CORDON_BASE=a second binary
#        measured as "base" in the same round-robin, MITM_VENV=/var/tmp/mitm-venv,
#        CASES="1k1 1k32 10m 10m-tcp")
# Needs: apt-get install hey nginx-light; python3 -m venv $MITM_VENV &&
#        $MITM_VENV/bin/pip install mitmproxy (that row is left out without it)
set -euo pipefail
REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
REPS=${REPS:-3}
DUR=${DUR:-4s}
BIG_N=${BIG_N:-30}
LOAD_C=${LOAD_C:-500}
LOAD_T=${LOAD_T:-20s}
CASES=${CASES:-1k1 1k32 10m 10m-tcp}
MITM_VENV=${MITM_VENV:-/var/tmp/mitm-venv}
PY=$(command -v /usr/bin/python3 || command -v python3)
# BENCH_ADDR: another loopback address, so two runs (two helpers) never share a server.
ADDR=${BENCH_ADDR:-127.0.0.201}
NAME=bench.example.test
TCP_PORT=18480
MPORT=18482
[ "$(id -u)" = 0 ] || { echo "run as root (nginx binds $ADDR:443)" >&2; exit 1; }
for t in hey nginx openssl; do
    command -v "$t" >/dev/null || { echo "needs $t: apt-get install hey nginx-light openssl" >&2; exit 1; }
done
bench_setup cordon-https-bench

W=$WORK
mkdir -p "$W/www" "$W/nginx" "$W/caller"/{home,project,state,config,data}
head -c 1024 /dev/urandom > "$W/www/1k.bin"
head -c $((10 << 20)) /dev/urandom > "$W/www/10m.bin"
(
    cd "$W"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
        -keyout ca.key -out ca.pem -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$NAME" \
        -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=DNS:%s,IP:%s\nextendedKeyUsage=serverAuth\n' "$NAME" "$ADDR" > ext.cnf
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile ext.cnf -out server.pem 2>/dev/null
)
# cpu.sh CMD...: CMD's output, then the machine's busy and total CPU ticks (user, nice,
# system, irq, softirq, steal; total adds idle and iowait) before and after it. /proc/stat is
# the host's inside the sandbox too.
cat > "$W/cpu.sh" <<'SH'
#!/bin/sh
c0=$(head -n1 /proc/stat)
"$@"
c1=$(head -n1 /proc/stat)
printf '%s\n%s\n' "$c0" "$c1" | awk '{print "CPU" NR - 1, $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}'
SH
chmod -R a+rX "$W"
cat > "$W/nginx/nginx.conf" <<CONF
worker_processes 2;
pid $W/nginx/pid;
error_log $W/nginx/error.log;
events { worker_connections 4096; }
http {
    access_log off; sendfile on; keepalive_requests 1000000; keepalive_timeout 60;
    client_body_temp_path $W/nginx;
    server {
        listen $ADDR:443 ssl; listen $ADDR:$TCP_PORT;
        ssl_certificate $W/server.pem; ssl_certificate_key $W/server.key;
        ssl_protocols TLSv1.2 TLSv1.3; root $W/www;
    }
}
CONF
nginx -c "$W/nginx/nginx.conf"
MITM_PID=
cleanup() {
    [ -f "$W/nginx/pid" ] && kill "$(cat "$W/nginx/pid")" 2>/dev/null || true
    [ -n "$MITM_PID" ] && kill "$MITM_PID" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
if [ -x "$MITM_VENV/bin/mitmdump" ]; then
    "$MITM_VENV/bin/mitmdump" -q --listen-host 127.0.0.1 --listen-port "$MPORT" \
        --set confdir="$W/mitm" --set ssl_verify_upstream_trusted_ca="$W/ca.pem" >/dev/null 2>&1 &
    MITM_PID=$!
    for _ in $(seq 50); do [ -s "$W/mitm/mitmproxy-ca-cert.pem" ] && break; sleep 0.2; done
    sleep 1
fi
cat > "$W/policy.toml" <<POL
[dns]
hosts = { "$NAME" = "$ADDR" }
[[network.allow]]
host = "$NAME"
ports = [443, $TCP_PORT]
[tls]
upstream_ca = "$W/ca.pem"
POL
chmod 644 "$W/policy.toml"

ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
    HOME="$W/caller/home" XDG_STATE_HOME="$W/caller/state" XDG_CONFIG_HOME="$W/caller/config"
    XDG_DATA_HOME="$W/caller/data")
# in_cordon BIN CMD...: CMD inside `cordon run` with this policy, no proxy variables.
in_cordon() {
    local bin=$1
    shift
    (cd "$W/caller/project" && "${ENV[@]}" "$bin" run --no-tty --project "$W/caller/project" \
        --policy "$W/policy.toml" -- env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY \
        -u https_proxy -u ALL_PROXY -u all_proxy "$@")
}
# hey_args CASE: the load and the path for one case.
hey_args() {
    case $1 in
        1k1) echo "-z $DUR -c 1" ;;
        1k32) echo "-z $DUR -c 32" ;;
        10m | 10m-tcp) echo "-n $BIG_N -c 1" ;;
    esac
}
url_path() { case $1 in 1k*) echo /1k.bin ;; *) echo /10m.bin ;; esac; }
# run_case PATH CASE: prints hey's output.
run_case() {
    local path=$1 case=$2 args p
    args=$(hey_args "$case")
    p=$(url_path "$case")
    local scheme=https host_d=$ADDR host_c=$NAME
    if [ "$case" = 10m-tcp ]; then scheme=http host_d=$ADDR:$TCP_PORT host_c=$NAME:$TCP_PORT; fi
    # shellcheck disable=SC2086
    case $path in
        direct) "${ENV[@]}" SSL_CERT_FILE="$W/ca.pem" sh "$W/cpu.sh" hey $args -disable-compression "$scheme://$host_d$p" ;;
        mitmproxy) "${ENV[@]}" SSL_CERT_FILE="$W/mitm/mitmproxy-ca-cert.pem" sh "$W/cpu.sh" hey $args -disable-compression \
            -x "http://127.0.0.1:$MPORT" "$scheme://$host_d$p" ;;
        cordon) in_cordon "$W/bin/cordon" sh "$W/cpu.sh" hey $args -disable-compression "$scheme://$host_c$p" ;;
        base) in_cordon "$W/bin/cordon-base" sh "$W/cpu.sh" hey $args -disable-compression "$scheme://$host_c$p" ;;
    esac
}
PATHS=(direct cordon)
[ -n "${CORDON_BASE:-}" ] && PATHS+=(base)
[ -n "$MITM_PID" ] && PATHS+=(mitmproxy)
RAW=$W/raw.jsonl
: > "$RAW"
record() { # path case rep file-with-hey-output
    "$PY" - "$@" >> "$RAW" <<'EOF'
import json, re, sys
out = open(sys.argv[4]).read()
m = re.search(r"Requests/sec:\s+([\d.]+)", out)
codes = dict((a, int(b)) for a, b in re.findall(r"\[(\d+)\]\s+(\d+) responses", out))
tail = out.split("Error distribution", 1)[1] if "Error distribution" in out else ""
errs = re.findall(r"^\s*\[(\d+)\]\s+\S", tail, re.M)
cpu = dict((k, (int(a), int(b))) for k, a, b in re.findall(r"^(CPU[01]) (\d+) (\d+)$", out, re.M))
busy = total = None
if len(cpu) == 2:
    busy = cpu["CPU1"][0] - cpu["CPU0"][0]
    total = cpu["CPU1"][1] - cpu["CPU0"][1]
print(json.dumps({"path": sys.argv[1], "case": sys.argv[2], "rep": int(sys.argv[3]),
    "rps": float(m.group(1)) if m else None, "codes": codes, "errors": sum(int(n) for n in errs),
    "busy_ticks": busy, "total_ticks": total}))
EOF
}
echo "warm-up..." >&2
for p in "${PATHS[@]}"; do run_case "$p" 1k1 >/dev/null 2>&1 || true; done
for rep in $(seq 1 "$REPS"); do
    for c in $CASES; do
        for p in "${PATHS[@]}"; do
            [ "$p" = mitmproxy ] && [ "$c" = 10m-tcp ] && continue
            echo "round $rep/$REPS: $c $p" >&2
            run_case "$p" "$c" > "$W/out.txt" 2>&1 || true
            record "$p" "$c" "$rep" "$W/out.txt"
        done
    done
done

echo "load: $LOAD_C connections for $LOAD_T through the gateway..." >&2
in_cordon "$W/bin/cordon" hey -z "$LOAD_T" -c "$LOAD_C" -disable-compression "https://$NAME/1k.bin" \
    > "$W/load.txt" 2>&1 &
LOAD_PID=$!
HWM=0
while kill -0 "$LOAD_PID" 2>/dev/null; do
    sup=$(pgrep -f -n "^$W/bin/cordon run" || true)
    if [ -n "$sup" ]; then
        h=$(awk '/^VmHWM/ {print $2}' "/proc/$sup/status" 2>/dev/null || echo 0)
        [ "${h:-0}" -gt "$HWM" ] && HWM=$h
    fi
    sleep 0.5
done
wait "$LOAD_PID" || true
LOAD_OUT=$(cat "$W/load.txt")
# LOAD_KEEP=FILE keeps hey's whole report of the load (its error distribution).
[ -n "${LOAD_KEEP:-}" ] && cp "$W/load.txt" "$LOAD_KEEP"

echo "## HTTPS through the transparent gateway"
echo
echo "- $(date -u +%FT%TZ), kernel $(uname -r), $(nproc) CPUs, uid $(id -u), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- $("$W/bin/cordon" --version); hey $(dpkg-query -W -f='${Version}' hey 2>/dev/null); nginx $(nginx -v 2>&1 | sed 's/.*\///') (2 workers, TLS 1.3, P-256)$([ -n "$MITM_PID" ] && echo "; mitmproxy $("$MITM_VENV/bin/mitmdump" --version 2>/dev/null | awk 'NR==1{print $2}')")"
echo "- $REPS rounds, round-robin over the paths; 1 KiB: hey -z $DUR; 10 MiB: hey -n $BIG_N -c 1"
echo
"$PY" - "$RAW" <<'EOF'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
cases = [("1k1", "HTTPS 1 KiB c=1 req/s", 1), ("1k32", "HTTPS 1 KiB c=32 req/s", 1),
         ("10m", "HTTPS 10 MiB c=1 MB/s", 10.48576), ("10m-tcp", "HTTP 10 MiB c=1, spliced TCP port, MB/s", 10.48576)]
paths = [p for p in ["direct", "cordon", "base", "mitmproxy"] if any(r["path"] == p for r in rows)]
def vals(p, c):
    return [r["rps"] for r in rows if r["path"] == p and r["case"] == c and r["rps"] is not None]
def bad(p, c):
    return sum(r["errors"] + sum(n for k, n in r["codes"].items() if k != "200")
               for r in rows if r["path"] == p and r["case"] == c)
hz = os.sysconf("SC_CLK_TCK"); ncpu = os.cpu_count()
def cpu(p, c):
    # Median CPU ms per request over the rounds, and the cores' median busy share.
    per, share = [], []
    for r in rows:
        n = r["codes"].get("200", 0)
        if r["path"] == p and r["case"] == c and r.get("total_ticks") and n:
            per.append(r["busy_ticks"] * 1000 / hz / n)
            share.append(r["busy_ticks"] / r["total_ticks"])
    return (med(per), med(share)) if per else (None, None)
print("| measure | path | min / **median** / max | vs direct | vs mitmproxy | failed | CPU busy | CPU ms per request | ceiling vs direct |")
print("|---|---|---|---|---|---|---|---|---|")
for c, label, scale in cases:
    d = vals("direct", c); m = vals("mitmproxy", c)
    for p in paths:
        v = vals(p, c)
        if not v:
            continue
        x = [a * scale for a in v]
        cell = "%.0f / **%.0f** / %.0f" % (min(x), med(x), max(x))
        rd = "%.2fx" % (med(v) / med(d)) if d else "–"
        rm = "%.1fx" % (med(v) / med(m)) if m else "–"
        per, share = cpu(p, c)
        busy = "%.0f %%" % (share * 100) if per else "–"
        cost = "%.3f" % per if per else "–"
        ceil = "%.2fx" % (ncpu * 1000 / per / med(d)) if per and d else "–"
        print("| %s | %s | %s | %s | %s | %d | %s | %s | %s |" % (label, p, cell, rd, rm, bad(p, c), busy, cost, ceil))
EOF
LOAD_DONE=$(echo "$LOAD_OUT" | awk '/responses/ && /\[200\]/ {print $2}')
LOAD_RPS=$(echo "$LOAD_OUT" | awk '/Requests\/sec/ {print $2}')
LOAD_ERR=$(echo "$LOAD_OUT" | awk '/Error distribution/ {on=1; next} on && /\[/ {gsub(/[\[\]]/, "", $1); s += $1} END {print s + 0}')
LOAD_NON200=$(echo "$LOAD_OUT" | awk '/Status code distribution/ {on=1; next} on && /^\s*\[/ && !/\[200\]/ {s += $2} /^$/ {on=0} END {print s + 0}')
echo
echo "Load through the gateway: $LOAD_C connections × $LOAD_T, HTTPS 1 KiB: ${LOAD_DONE:-0} × 200 (${LOAD_RPS:-?} req/s), errors: $LOAD_ERR, non-200: $LOAD_NON200; peak RSS of the cordon supervisor (VmHWM): $((HWM / 1024)) MiB."
