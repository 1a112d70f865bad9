#!/usr/bin/env bash
# Layer 2's cost: TCP throughput and connection setup from inside a sandbox to a server on the
# host's loopback, through cordon's egress gateway, against direct loopback, pasta and
# slirp4netns, all in ONE run, round-robin across the paths (only ratios taken in the same run
# mean anything). Prints markdown tables; asserts nothing.
#
#   a. iperf3 -R (host → sandbox), BYTES (1 GiB) over one stream and over STREAMS (8) streams;
#   b. connection setup: CONNS (1000) sequential socket+connect+read-1-byte+close to a host
#      listener that writes one byte on accept (shared/anchors/src/connlat.c, the anchors'
#      "TCP connect + first byte"; a python equivalent if that file or cc is missing).
#
# Paths (the same iperf3/connlat servers on 127.0.0.1 serve all of them):
#   direct        the client on the host itself, to 127.0.0.1
#   cordon        `cordon run` with a policy allowing host.cordon.internal on the two ports; the
#                 client inside reaches the host's loopback as host.cordon.internal
#   cordon-user   the same as the unprivileged `cordon-test` user (as root, when that account
#                 exists and /dev/net/tun is 0666; UNPRIV=0 skips it)
#   pasta         pasta --config-net on a fresh user+net namespace; the default gateway address
#                 maps to the host's loopback (pasta's default), as in shared/anchors
#   slirp4netns   slirp4netns --configure --mtu=65520; host loopback at 10.0.2.2, as in the anchors
#
# As root the whole measurement runs inside a private network namespace (`unshare -n`, NETNS=0
# turns that off) whose only links are loopback and a veth pair carrying a dead default route
# (pasta copies it), like shared/anchors/bench_netns.sh: nothing can leave the machine.
#
# Usage: bash bench/net.sh   (env: REPS=3 rounds, BYTES=1G, STREAMS=8, CONNS=1000,
#        IPERF_PORT=5201, LAT_PORT=5301, CORDON_BIN=path to measure a prebuilt binary instead of
#        building target/release/cordon, CORDON_BASE=a second binary measured as the row
#        "cordon-base" in the same rounds (before/after in one run), UNPRIV=0, NETNS=0)
# Needs iperf3; pasta and slirp4netns rows are skipped when missing:
#   apt-get install iperf3 passt slirp4netns
set -euo pipefail

REPS=${REPS:-3}
BYTES=${BYTES:-1G}
STREAMS=${STREAMS:-8}
CONNS=${CONNS:-1000}
IPERF_PORT=${IPERF_PORT:-5201}
LAT_PORT=${LAT_PORT:-5301}
REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
PY=$(command -v /usr/bin/python3 || command -v python3)
SELF=$REPO/bench/net.sh
export REPS BYTES STREAMS CONNS IPERF_PORT LAT_PORT PY

# ---- inner: runs the measurements (in the private netns as root); $2 = WORK -----------------
if [ "${1:-}" = --inner ]; then
    WORK=$2
    RAW=$WORK/raw.jsonl
    ERR=$WORK/err.log
    CONNLAT=$(cat "$WORK/connlat.cmd")
    T=300   # seconds any one client command may take
    : > "$RAW"
    if [ "${IN_NETNS:-0}" = 1 ]; then
        ip link set lo up
        ip link add v0 type veth peer name v1
        ip addr add 10.99.0.1/24 dev v0
        ip link set v1 up
        ip link set v0 up
        ip route add default via 10.99.0.254 dev v0
    fi
    iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" -D --pidfile "$WORK/iperf3.pid"
    $CONNLAT server "$LAT_PORT" & LAT_PID=$!
    HOLDER=
    HELPER=
    cleanup() {
        kill "$LAT_PID" 2>/dev/null || true
        [ -s "$WORK/iperf3.pid" ] && kill "$(cat "$WORK/iperf3.pid")" 2>/dev/null || true
        [ -n "$HELPER" ] && kill "$HELPER" 2>/dev/null || true
        [ -n "$HOLDER" ] && kill "$HOLDER" 2>/dev/null || true
    }
    trap cleanup EXIT
    sleep 0.3

    # Runners: `run_X 'shell command'` runs it on that path, stdout = the command's stdout.
    ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
    run_direct() { "${ENV[@]}" sh -c "$1"; }
    cordon_env() {
        local d=$WORK/$1
        echo "HOME=$d/home XDG_STATE_HOME=$d/state XDG_CONFIG_HOME=$d/config XDG_DATA_HOME=$d/data"
    }
    run_cordon() {
        local -a e
        read -r -a e <<<"$(cordon_env caller)"
        (cd "$WORK/caller/project" && "${ENV[@]}" "${e[@]}" "$WORK/bin/cordon" run --no-tty \
            --project "$WORK/caller/project" --policy "$WORK/policy.toml" -- sh -c "$1")
    }
    run_cordon_base() {
        local -a e
        read -r -a e <<<"$(cordon_env caller)"
        (cd "$WORK/caller/project" && "${ENV[@]}" "${e[@]}" "$WORK/bin/cordon-base" run --no-tty \
            --project "$WORK/caller/project" --policy "$WORK/policy.toml" -- sh -c "$1")
    }
    run_cordon_user() {
        local -a e
        read -r -a e <<<"$(cordon_env unpriv)"
        (cd "$WORK/unpriv/project" && setpriv --reuid=cordon-test --regid=cordon-test --clear-groups \
            "${ENV[@]}" "${e[@]}" "$WORK/bin/cordon" run --no-tty \
            --project "$WORK/unpriv/project" --policy "$WORK/policy.toml" -- sh -c "$1")
    }
    run_ns() { "${ENV[@]}" nsenter -t "$HOLDER" -U -n --preserve-credentials sh -c "$1"; }

    # Fresh user+net namespace held by a sleeper: sets HOLDER.
    new_ns() {
        unshare -Urn sleep 3600 >/dev/null 2>&1 &
        HOLDER=$!
        sleep 0.2
    }
    end_ns() {
        kill "$HELPER" "$HOLDER" 2>/dev/null || true
        wait "$HELPER" "$HOLDER" 2>/dev/null || true
        HELPER=
        HOLDER=
    }

    # measure LABEL RUNNER HOST: HOST is a shell expression evaluated on that path.
    measure() {
        local label=$1 runner=$2 host=$3 j1=$WORK/j1.json j8=$WORK/j8.json lat=$WORK/lat.txt
        echo "  $label" >&2
        $runner "H=$host; exec timeout $T iperf3 -c \"\$H\" -p $IPERF_PORT -R -n $BYTES -J" \
            > "$j1" 2>>"$ERR" || echo "$label: 1-stream iperf3 failed" >>"$ERR"
        $runner "H=$host; exec timeout $T iperf3 -c \"\$H\" -p $IPERF_PORT -R -n $BYTES -P $STREAMS -J" \
            > "$j8" 2>>"$ERR" || echo "$label: $STREAMS-stream iperf3 failed" >>"$ERR"
        $runner "H=$host; exec timeout $T $CONNLAT client \"\$H\" $LAT_PORT $CONNS" \
            > "$lat" 2>>"$ERR" || echo "$label: connlat failed" >>"$ERR"
        "$PY" - "$label" "$j1" "$j8" "$lat" >> "$RAW" <<'EOF'
import json, sys
label, j1, j8, lat = sys.argv[1:5]
def gbps(path):
    try:
        d = json.load(open(path))
        return d["end"]["sum_received"]["bits_per_second"] / 1e9
    except Exception:
        return None
try:
    ns = [int(x) for x in open(lat).read().strip().split(",") if x]
except Exception:
    ns = []
print(json.dumps({"label": label, "gbps1": gbps(j1), "gbps8": gbps(j8), "connect_ns": ns}))
EOF
    }

    RESOLVE_ALIAS="\$(getent ahostsv4 host.cordon.internal | awk 'NR==1{print \$1}')"
    GW_EXPR="\$(ip -4 route show default | awk '{print \$3; exit}')"
    PASTA_RUNAS=()
    [ "$(id -u)" = 0 ] && PASTA_RUNAS=(--runas 0:0)
    for rep in $(seq 1 "$REPS"); do
        echo "round $rep/$REPS" >&2
        measure direct run_direct 127.0.0.1
        measure cordon run_cordon "$RESOLVE_ALIAS"
        if [ -x "$WORK/bin/cordon-base" ]; then
            measure cordon-base run_cordon_base "$RESOLVE_ALIAS"
        fi
        if [ -d "$WORK/unpriv" ]; then
            measure cordon-user run_cordon_user "$RESOLVE_ALIAS"
        fi
        if command -v pasta >/dev/null; then
            new_ns
            pasta -q -f "${PASTA_RUNAS[@]}" --config-net "$HOLDER" >/dev/null 2>&1 & HELPER=$!
            sleep 0.5
            measure pasta run_ns "$GW_EXPR"
            end_ns
        fi
        if command -v slirp4netns >/dev/null; then
            new_ns
            slirp4netns --configure --mtu=65520 "$HOLDER" tap0 >/dev/null 2>&1 & HELPER=$!
            sleep 0.5
            measure slirp4netns run_ns 10.0.2.2
            end_ns
        fi
    done
    exit 0
fi

# ---- outer: set up, run the inner part, report ------------------------------------------------
missing=()
for t in iperf3 pasta slirp4netns; do command -v "$t" >/dev/null || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
    echo "missing: ${missing[*]} (install: apt-get install iperf3 passt slirp4netns)" >&2
    command -v iperf3 >/dev/null || exit 1
    echo "continuing without the missing rows" >&2
fi

# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_setup cordon-net-bench

CONNLAT_SRC=$REPO/../shared/anchors/src/connlat.c
if [ -f "$CONNLAT_SRC" ] && command -v cc >/dev/null; then
    cc -O2 -o "$WORK/bin/connlat" "$CONNLAT_SRC"
    echo "$WORK/bin/connlat" > "$WORK/connlat.cmd"
    LAT_TIMER="connlat.c (anchors): socket+connect+read 1 byte+close, CLOCK_MONOTONIC"
else
    cat > "$WORK/bin/connlat.py" <<'EOF'
import socket, sys, time
if sys.argv[1] == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[2]))); s.listen(1024)
    while True:
        c, _ = s.accept()
        try: c.send(b"x")
        except OSError: pass
        c.close()
host, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
v, fails = [], 0
for _ in range(n):
    t0 = time.perf_counter_ns()
    c = socket.socket()
    try:
        c.connect((host, port))
        if c.recv(1) != b"x": fails += 1
    except OSError:
        fails += 1
    c.close()
    v.append(time.perf_counter_ns() - t0)
if fails: print("fails=%d" % fails, file=sys.stderr)
print(",".join(map(str, v)))
sys.exit(1 if fails else 0)
EOF
    echo "$PY $WORK/bin/connlat.py" > "$WORK/connlat.cmd"
    LAT_TIMER="python connect loop (connlat.c or cc missing): socket+connect+recv 1 byte+close"
fi
chmod -R a+rX "$WORK/bin"

printf '[[network.allow]]\nhost = "host.cordon.internal"\nports = [%s, %s]\n' \
    "$IPERF_PORT" "$LAT_PORT" > "$WORK/policy.toml"
chmod 644 "$WORK/policy.toml"
mkdir -p "$WORK/caller"/{home,project,state,config,data}
if [ "${UNPRIV:-1}" = 1 ] && [ "$(id -u)" = 0 ] && id cordon-test >/dev/null 2>&1; then
    if [ "$(stat -c %a /dev/net/tun 2>/dev/null)" = 666 ]; then
        mkdir -p "$WORK/unpriv"/{home,project,state,config,data}
        chown -R cordon-test:cordon-test "$WORK/unpriv"
    else
        echo "skipping cordon-user: /dev/net/tun is not 0666 (chmod 0666 /dev/net/tun, as distros ship it)" >&2
    fi
fi

NS_NOTE="host network namespace (loopback only is used)"
if [ "$(id -u)" = 0 ] && [ "${NETNS:-1}" = 1 ]; then
    NS_NOTE="private outer netns (unshare -n): loopback + veth with a dead default route"
    IN_NETNS=1 unshare -n bash "$SELF" --inner "$WORK"
else
    bash "$SELF" --inner "$WORK"
fi

echo "## Layer 2: egress gateway throughput and connection setup"
echo
echo "- $(date -u +%FT%TZ), kernel $(uname -r), $(nproc) CPUs, uid $(id -u), $("$WORK/bin/cordon" --version)"
echo "- $(iperf3 --version | head -1)$(command -v pasta >/dev/null && echo ", passt $(dpkg-query -W -f='${Version}' passt 2>/dev/null || echo '?')")$(command -v slirp4netns >/dev/null && echo ", $(slirp4netns --version | head -1)")"
echo "- $NS_NOTE; $REPS rounds, round-robin over the paths"
echo "- throughput: iperf3 -R (server on the host's 127.0.0.1 sends), -n $BYTES, 1 and $STREAMS streams"
echo "- connect: $CONNS sequential connections per round; timer: $LAT_TIMER"
echo
"$PY" - "$WORK/raw.jsonl" "$STREAMS" <<'EOF'
import json, statistics, sys
raw, streams = sys.argv[1], sys.argv[2]
med = statistics.median
rows = {}
for line in open(raw):
    r = json.loads(line)
    d = rows.setdefault(r["label"], {"g1": [], "g8": [], "mean_us": [], "all_us": [], "fail": 0})
    for k, src in (("g1", "gbps1"), ("g8", "gbps8")):
        if r[src] is None:
            d["fail"] += 1
        else:
            d[k].append(r[src])
    if r["connect_ns"]:
        us = [x / 1e3 for x in r["connect_ns"]]
        d["mean_us"].append(sum(us) / len(us))
        d["all_us"].extend(us)
    else:
        d["fail"] += 1
order = [l for l in ["direct", "cordon", "cordon-base", "cordon-user", "pasta", "slirp4netns"] if l in rows]

def m(label, k):
    v = rows.get(label, {}).get(k)
    return med(v) if v else None

def spread(v, fmt):
    return (fmt + " / **" + fmt + "** / " + fmt) % (min(v), med(v), max(v)) if v else "failed"

def ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return "%.2fx" % (a / b)

print("| path | 1 stream Gbit/s | vs pasta | vs direct | %s streams Gbit/s | vs pasta | vs direct | connect mean µs | p50 µs | vs pasta | vs direct |" % streams)
print("|---|---|---|---|---|---|---|---|---|---|---|")
for l in order:
    d = rows[l]
    p50 = med(d["all_us"]) if d["all_us"] else None
    print("| %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        l, " (%d failed)" % d["fail"] if d["fail"] else "",
        spread(d["g1"], "%.2f"), ratio(m(l, "g1"), m("pasta", "g1")), ratio(m(l, "g1"), m("direct", "g1")),
        spread(d["g8"], "%.2f"), ratio(m(l, "g8"), m("pasta", "g8")), ratio(m(l, "g8"), m("direct", "g8")),
        spread(d["mean_us"], "%.0f"), "%.0f" % p50 if p50 is not None else "–",
        ratio(m(l, "mean_us"), m("pasta", "mean_us")), ratio(m(l, "mean_us"), m("direct", "mean_us"))))
print()
print("Throughput cells: min / **median** / max over rounds; ratios of medians (higher is better).")
print("Connect: per-round mean, min / **median** / max over rounds; p50 over all connections; ratios")
print("of the median means (lower is better). Aim (issue #4): cordon ≥ pasta's throughput, connect < 1 ms.")
EOF
if [ -s "$WORK/err.log" ]; then
    echo
    echo "<details><summary>errors during the run</summary>"
    echo
    echo '```'
    tail -n 40 "$WORK/err.log" | sed "s|$WORK|\$WORK|g"
    echo '```'
    echo
    echo "</details>"
fi
echo
echo "<details><summary>exact commands</summary>"
echo
echo '```'
{
    echo "servers: iperf3 -s -B 127.0.0.1 -p $IPERF_PORT; $(cat "$WORK/connlat.cmd") server $LAT_PORT"
    echo "client: iperf3 -c \$H -p $IPERF_PORT -R -n $BYTES [-P $STREAMS] -J; $(cat "$WORK/connlat.cmd") client \$H $LAT_PORT $CONNS"
    echo "direct: H=127.0.0.1"
    echo "cordon: cordon run --no-tty --project \$P --policy $WORK/policy.toml -- sh -c 'H=\$(getent ahostsv4 host.cordon.internal | awk \"NR==1{print \\\$1}\"); …'"
    sed 's/^/  policy: /' "$WORK/policy.toml"
    echo "cordon-user: the same under setpriv --reuid=cordon-test --regid=cordon-test --clear-groups"
    echo "pasta: unshare -Urn sleep & pasta -q -f [--runas 0:0] --config-net \$PID; nsenter -t \$PID -U -n --preserve-credentials; H=default gateway"
    echo "slirp4netns: unshare -Urn sleep & slirp4netns --configure --mtu=65520 \$PID tap0; nsenter …; H=10.0.2.2"
} | sed "s|$WORK|\$WORK|g"
echo '```'
echo
echo "</details>"
