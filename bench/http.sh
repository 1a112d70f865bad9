#!/usr/bin/env bash
# Layer 3's cost: HTTP requests through cordon's HTTP layer (the sandbox's explicit proxy →
# the interceptor → a static rule → the upstream) against direct loopback and against
# mitmproxy (mitmdump from PyPI) as the same kind of proxy, in ONE run. Prints markdown;
# asserts nothing except the load row, which reports failed requests and peak memory.
#
#   a. added latency: 2000 sequential keep-alive GETs of a 1 KiB file, p50/p99 (python
#      http.client, the same client for every path; its own cost cancels in the differences);
#   b. throughput: ab -k -c 50 -n 20000 (1 KiB) req/s, and ab -k -c 8 -n 400 (1 MiB) MB/s;
#   c. load: ab -k -c 500 -t 30 through cordon: failed requests, peak RSS of the supervisor.
#
# Upstream: nginx on 127.0.0.1 (Debian's nginx-light). cordon's policy allows the bench host
# by a [[network.allow]] rule, so every request is decided by the rules (first match) and
# logged as an event, as in real use.
#
# Usage: bash bench/http.sh   (env: CORDON_BIN=prebuilt binary, MITM_VENV=/var/tmp/mitm-venv,
#        LOAD_T=30, LOAD_C=500)
# Needs: apt-get install apache2-utils nginx-light; python3 -m venv $MITM_VENV &&
#        $MITM_VENV/bin/pip install mitmproxy
set -euo pipefail
REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
MITM_VENV=${MITM_VENV:-/var/tmp/mitm-venv}
LOAD_T=${LOAD_T:-30}
LOAD_C=${LOAD_C:-500}
PY=$(command -v /usr/bin/python3 || command -v python3)
for t in ab nginx; do
    command -v "$t" >/dev/null || { echo "needs $t: apt-get install apache2-utils nginx-light" >&2; exit 1; }
done
bench_setup cordon-http-bench

PORT=18480
MPORT=18481
mkdir -p "$WORK/www" "$WORK/proj" "$WORK/nginx"
head -c 1024 /dev/urandom > "$WORK/www/small"
head -c $((1 << 20)) /dev/urandom > "$WORK/www/big"
chmod -R a+rX "$WORK"
cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
pid $WORK/nginx/pid;
error_log $WORK/nginx/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $WORK/nginx;
    server { listen 127.0.0.1:$PORT; root $WORK/www; }
}
CONF
nginx -c "$WORK/nginx/nginx.conf"
MITM_PID=
cleanup() {
    [ -f "$WORK/nginx/pid" ] && kill "$(cat "$WORK/nginx/pid")" 2>/dev/null || true
    [ -n "$MITM_PID" ] && kill "$MITM_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
if [ -x "$MITM_VENV/bin/mitmdump" ]; then
    "$MITM_VENV/bin/mitmdump" -q --listen-host 127.0.0.1 -p "$MPORT" --set confdir="$WORK/mitm" >/dev/null 2>&1 &
    MITM_PID=$!
    sleep 3
fi
cat > "$WORK/policy.toml" <<POL
[dns]
hosts = { "bench.example.test" = "127.0.0.1" }
[[network.allow]]
host = "bench.example.test"
ports = [$PORT]
POL
cat > "$WORK/lat.py" <<'PYEOF'
import http.client, sys, time
host, port, url, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
c = http.client.HTTPConnection(host, port)
ts = []
for i in range(n + 100):
    t = time.perf_counter()
    c.request("GET", url)
    r = c.getresponse(); r.read()
    if r.status != 200: raise SystemExit("status %d" % r.status)
    if i >= 100: ts.append(time.perf_counter() - t)
ts.sort()
print("%.1f %.1f" % (ts[len(ts) // 2] * 1e6, ts[int(len(ts) * 0.99)] * 1e6))
PYEOF
cp "$WORK/lat.py" "$WORK/proj/lat.py"
cordon() {
    (cd "$WORK/proj" && "$WORK/bin/cordon" run --no-tty --policy "$WORK/policy.toml" -- "$@")
}
ab_field() { awk -v f="$1" -F: '$1 ~ f { gsub(/^ +/, "", $2); split($2, a, " "); print a[1]; exit }'; }

echo "measuring latency..." >&2
read -r D50 D99 < <("$PY" "$WORK/lat.py" 127.0.0.1 "$PORT" "/small" 2000)
read -r C50 C99 < <(cordon "$PY" lat.py 127.0.0.1 3128 "http://bench.example.test:$PORT/small" 2000)
M50=- M99=-
if [ -n "$MITM_PID" ]; then
    read -r M50 M99 < <("$PY" "$WORK/lat.py" 127.0.0.1 "$MPORT" "http://127.0.0.1:$PORT/small" 2000)
fi

echo "measuring throughput..." >&2
DRPS=$(ab -q -r -k -c 50 -n 20000 "http://127.0.0.1:$PORT/small" | ab_field "Requests per second")
CAB=$(cordon ab -q -r -k -c 50 -n 20000 -X 127.0.0.1:3128 "http://bench.example.test:$PORT/small")
CRPS=$(echo "$CAB" | ab_field "Requests per second")
CFAIL=$(echo "$CAB" | ab_field "Failed requests")
DMB=$(ab -q -r -k -c 8 -n 400 "http://127.0.0.1:$PORT/big" | ab_field "Transfer rate")
CMB=$(cordon ab -q -r -k -c 8 -n 400 -X 127.0.0.1:3128 "http://bench.example.test:$PORT/big" | ab_field "Transfer rate")
MRPS=- MMB=-
if [ -n "$MITM_PID" ]; then
    MRPS=$(ab -q -r -k -c 50 -n 20000 -X 127.0.0.1:$MPORT "http://127.0.0.1:$PORT/small" | ab_field "Requests per second")
    MMB=$(ab -q -r -k -c 8 -n 400 -X 127.0.0.1:$MPORT "http://127.0.0.1:$PORT/big" | ab_field "Transfer rate")
fi

echo "load: $LOAD_C clients for $LOAD_T s..." >&2
LOAD_OUT=$(cd "$WORK/proj" && /usr/bin/time -f "MAXRSS %M" "$WORK/bin/cordon" run --no-tty --policy "$WORK/policy.toml" -- \
    ab -q -k -r -c "$LOAD_C" -t "$LOAD_T" -n 100000000 -X 127.0.0.1:3128 "http://bench.example.test:$PORT/small" 2>&1)
LOAD_DONE=$(echo "$LOAD_OUT" | ab_field "Complete requests")
LOAD_FAIL=$(echo "$LOAD_OUT" | ab_field "Failed requests")
LOAD_NON2XX=$(echo "$LOAD_OUT" | awk -F: '/Non-2xx responses/ { gsub(/ /, "", $2); print $2 }')
LOAD_RPS=$(echo "$LOAD_OUT" | ab_field "Requests per second")
LOAD_RSS=$(echo "$LOAD_OUT" | awk '/^MAXRSS/ { printf "%.0f", $2 / 1024 }')

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2fx", a / b }'; }
kbs_to_mbs() { awk -v a="$1" 'BEGIN { if (a == "-") print "-"; else printf "%.0f", a / 1024 }'; }
DMBS=$(kbs_to_mbs "$DMB"); CMBS=$(kbs_to_mbs "$CMB"); MMBS=$(kbs_to_mbs "$MMB")
echo "## Layer 3: HTTP layer latency, throughput and load"
echo
echo "- $(date -u +%FT%TZ), kernel $(uname -r), $(nproc) CPUs, uid $(id -u), $("$WORK/bin/cordon" --version 2>/dev/null || echo cordon)"
echo "- upstream: nginx $(nginx -v 2>&1 | sed 's/.*\///') on 127.0.0.1; clients: python http.client (latency), ab $(ab -V | awk 'NR==1{print $5}') (throughput, load)"
[ -n "$MITM_PID" ] && echo "- mitmproxy: $("$MITM_VENV/bin/mitmdump" --version 2>/dev/null | awk 'NR==1{print $2}') (mitmdump, same machine, explicit proxy, plain HTTP)"
echo
echo "| path | p50 µs | p99 µs | added p50 µs | 1 KiB req/s | vs direct | vs mitmproxy | 1 MiB MB/s | vs direct | vs mitmproxy |"
echo "|---|---|---|---|---|---|---|---|---|---|"
echo "| direct | $D50 | $D99 | - | $DRPS | 1.00x | $(ratio "$DRPS" "$MRPS") | $DMBS | 1.00x | $(ratio "$DMBS" "$MMBS") |"
echo "| cordon (proxy → rules) | $C50 | $C99 | $(awk -v a="$C50" -v b="$D50" 'BEGIN{printf "%.0f", a-b}') | $CRPS | $(ratio "$CRPS" "$DRPS") | $(ratio "$CRPS" "$MRPS") | $CMBS | $(ratio "$CMBS" "$DMBS") | $(ratio "$CMBS" "$MMBS") |"
echo "| mitmproxy | $M50 | $M99 | $(awk -v a="$M50" -v b="$D50" 'BEGIN{ if (a == "-") print "-"; else printf "%.0f", a-b}') | $MRPS | $(ratio "$MRPS" "$DRPS") | 1.00x | $MMBS | $(ratio "$MMBS" "$DMBS") | 1.00x |"
echo
echo "Failed requests in cordon's 20000-request throughput run: $CFAIL."
echo "Load through cordon: $LOAD_C keep-alive clients for $LOAD_T s: $LOAD_DONE requests ($LOAD_RPS req/s), failed: $LOAD_FAIL, non-2xx: ${LOAD_NON2XX:-0}; peak RSS of the cordon supervisor: ${LOAD_RSS} MiB."
