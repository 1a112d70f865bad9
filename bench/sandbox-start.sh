#!/usr/bin/env bash
# Start-to-exit time of `cordon run -- true`, against bubblewrap with an equivalent set of mounts,
# `unshare -Urmpf --mount-proc true` and a bare `true`, all measured in ONE round-robin run (only
# ratios taken in the same run mean anything). Prints markdown tables; asserts nothing.
#
# Two cordon rows: `cordon` on the built-in policy (egress gateway and HTTP layer on, as users
# run it) and `cordon-none` with `[network] mode = "none"` (no network at all, like bwrap's
# --unshare-all).
#
# Usage: bash bench/sandbox-start.sh   (env: N=100 runs per tool, WARMUP=3 dropped rounds,
#        CORDON_BIN=path to measure a prebuilt binary instead of building target/release/cordon,
#        CORDON_BASE=path to a second binary measured in the same run as `base`/`base-none`,
#        for before/after ratios, DEV_HOME=1 to give the fake HOME a developer's caches:
#        ~/.npm, ~/.cache/pip, ~/.cargo/registry, each a copy-on-write overlay in cordon)
# As root it also repeats the run as the unprivileged user `cordon-test` if that account exists
# (UNPRIV=0 skips it). Timer: shared/anchors/src/spawnbench.c (posix_spawn + waitpid, argv
# direct, no shell, stdout/stderr to /dev/null); hyperfine -N if that file or cc is missing.
set -euo pipefail

N=${N:-100}
WARMUP=${WARMUP:-3}
REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
SPAWNBENCH_SRC=$REPO/../shared/anchors/src/spawnbench.c
PY=$(command -v /usr/bin/python3 || command -v python3)

# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_setup cordon-bench

if [ -f "$SPAWNBENCH_SRC" ] && command -v cc >/dev/null; then
    cc -O2 -o "$WORK/bin/spawnbench" "$SPAWNBENCH_SRC"
    chmod 755 "$WORK/bin/spawnbench"
    TIMER="spawnbench (round-robin, $WARMUP warm-up rounds dropped)"
else
    command -v hyperfine >/dev/null || { echo "need $SPAWNBENCH_SRC + cc, or hyperfine" >&2; exit 1; }
    TIMER="hyperfine -N (tool after tool, not round-robin; $WARMUP warm-ups dropped)"
fi

# A fake HOME with credential-like paths that both tools mask, a project, and cordon's state.
# $1 = name of the per-user directory.
make_env() {
    local d=$WORK/$1
    mkdir -p "$d/project" "$d/state" "$d/config" "$d/data"
    echo 'fn main() {}' > "$d/project/main.rs"
    local h=$d/home
    mkdir -p "$h"/{.ssh,.aws,.gnupg,.kube,.mozilla,.password-store,.config/gh,.config/gcloud}
    printf '[network]\nmode = "none"\n' > "$d/none.toml"
    echo fake > "$h/.ssh/id_ed25519"
    echo fake > "$h/.aws/credentials"
    for f in .netrc .git-credentials .npmrc .pypirc .bash_history .python_history .vault-token; do
        echo fake > "$h/$f"
    done
    if [ "${DEV_HOME:-0}" = 1 ]; then
        mkdir -p "$h"/{.npm/_cacache,.cache/pip/http,.cargo/registry/index}
    fi
}

# The environment every tool is started with (spawnbench passes its own environ on).
# XDG_STATE_HOME: each cordon run writes a new session log there (--audit refuses existing files).
# XDG_CONFIG_HOME/XDG_DATA_HOME: no user policy or trust store of the caller leaks into the run.
envfor() {
    local d=$WORK/$1
    echo env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        HOME="$d/home" XDG_STATE_HOME="$d/state" XDG_CONFIG_HOME="$d/config" XDG_DATA_HOME="$d/data"
}

# $1 = dir name, $2... = prefix that runs a command as the measured user (empty for the caller).
measure() {
    local name=$1; shift
    local as=("$@")
    local d=$WORK/$name proj=$WORK/$name/project
    local -a env_cmd
    read -r -a env_cmd <<<"$(envfor "$name")"

    # One probe run of cordon: its audit log says exactly which paths it masks for this user
    # (fake-home credentials, the passwd home's ones, /etc/shadow, /run, ...). bwrap masks the same.
    (cd "$proj" && "${as[@]}" "${env_cmd[@]}" "$WORK/bin/cordon" run --no-tty --project "$proj" \
        --audit "$d/probe.jsonl" -- true)
    local -a masks=()
    local nmask=0
    while IFS= read -r p; do
        nmask=$((nmask + 1))
        if [ -d "$p" ]; then masks+=(--tmpfs "$p" --remount-ro "$p"); else masks+=(--ro-bind /dev/null "$p"); fi
    done < <("$PY" -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["layer"] == "filesystem" and e["action"] == "deny":
        print(e["detail"]["path"])' "$d/probe.jsonl")
    rm -f "$d"/state/cordon/sessions/*.jsonl

    local -a bwrap_cmd=(bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --dev /dev
        --proc /proc --tmpfs /tmp --tmpfs /dev/shm --bind "$proj" "$proj" "${masks[@]}" true)
    # The peer anchors' bwrap line (shared/anchors/RESULTS.md), to tie this run to that table.
    local -a bwrap_bare_cmd=(bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-all
        --die-with-parent --new-session true)
    local -a unshare_cmd=(unshare -Urmpf --mount-proc true)
    local -a cordon_cmd=("$WORK/bin/cordon" run --no-tty --project "$proj" -- true)
    local -a none_cmd=("$WORK/bin/cordon" run --no-tty --policy "$d/none.toml" --project "$proj" -- true)
    # Optional: the same two rows for a baseline binary, round-robin with the rest.
    local -a base_rows=()
    if [ -x "$WORK/bin/cordon-base" ]; then
        local -a base_cmd=("$WORK/bin/cordon-base" run --no-tty --project "$proj" -- true)
        local -a base_none_cmd=("$WORK/bin/cordon-base" run --no-tty --policy "$d/none.toml" \
            --project "$proj" -- true)
        base_rows=(::: base "${base_cmd[@]}" ::: base-none "${base_none_cmd[@]}")
    fi

    echo "measuring as $("${as[@]}" id -un): cordon masks $nmask paths, bwrap is given the same" >&2
    local raw=$d/raw.tsv
    if [ -x "$WORK/bin/spawnbench" ]; then
        (cd "$proj" && "${as[@]}" "${env_cmd[@]}" "$WORK/bin/spawnbench" "$N" "$WARMUP" \
            true true ::: \
            bwrap "${bwrap_cmd[@]}" ::: \
            bwrap-anchor "${bwrap_bare_cmd[@]}" ::: \
            unshare "${unshare_cmd[@]}" ::: \
            cordon "${cordon_cmd[@]}" ::: \
            cordon-none "${none_cmd[@]}" "${base_rows[@]}") > "$raw"
    else
        local q; q() { local s; printf -v s '%q ' "$@"; echo "${s% }"; }
        (cd "$proj" && "${as[@]}" "${env_cmd[@]}" hyperfine -N --style none --runs "$N" --warmup "$WARMUP" \
            -i --export-json "$d/hf.json" -n true true -n bwrap "$(q "${bwrap_cmd[@]}")" \
            -n bwrap-anchor "$(q "${bwrap_bare_cmd[@]}")" \
            -n unshare "$(q "${unshare_cmd[@]}")" -n cordon "$(q "${cordon_cmd[@]}")" \
            -n cordon-none "$(q "${none_cmd[@]}")") >/dev/null
        "$PY" -c '
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    codes = r.get("exit_codes") or [0] * len(r["times"])
    bad = sum(1 for c in codes if c)
    print("%s\t%d\t%d\t%s" % (r["command"], len(codes) - bad, bad, ",".join(str(int(t * 1e9)) for t in r["times"])))
' "$d/hf.json" > "$raw"
    fi
    local sessions
    sessions=$(find "$d/state" -name '*.jsonl' | wc -l)

    echo
    echo "### As $("${as[@]}" id -un) (uid $("${as[@]}" id -u)), n=$N per tool"
    echo
    "$PY" - "$raw" <<'EOF'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    label, ok, bad, ns = line.rstrip("\n").split("\t")
    ms = [int(x) / 1e6 for x in ns.split(",") if x]
    rows.append((label, int(ok), int(bad), ms))
med = {l: statistics.median(ms) for l, _, _, ms in rows}
print("| tool | ok/fail | min / median / max (ms) | ratio to bare `true` | ratio to bwrap |")
print("|---|---|---|---|---|")
for l, ok, bad, ms in rows:
    print("| %s | %d/%d | %.2f / **%.2f** / %.2f | %.1fx | %.2fx |"
          % (l, ok, bad, min(ms), med[l], max(ms), med[l] / med["true"], med[l] / med["bwrap"]))
EOF
    echo
    echo "cordon masked $nmask paths (the bwrap row masks the same ones; bwrap-anchor masks none); cordon wrote $sessions"
    echo "session logs (one per run, warm-ups included)."
    echo
    echo "<details><summary>exact commands</summary>"
    echo
    echo '```'
    {
        echo "cwd: $proj"
        echo "env: ${env_cmd[*]:1}"
        printf 'bwrap: '; printf '%q ' "${bwrap_cmd[@]}"; echo
        printf 'bwrap-anchor: '; printf '%q ' "${bwrap_bare_cmd[@]}"; echo
        printf 'unshare: '; printf '%q ' "${unshare_cmd[@]}"; echo
        printf 'cordon: '; printf '%q ' "${cordon_cmd[@]}"; echo
        printf 'cordon-none: '; printf '%q ' "${none_cmd[@]}"; echo
    } | sed "s|$WORK|\$WORK|g"
    echo '```'
    echo
    echo "</details>"
}

echo "## sandbox start-to-exit of \`true\`"
echo
echo "- $(date -u +%FT%TZ), kernel $(uname -r), $(nproc) CPUs, $(bwrap --version), $("$WORK/bin/cordon" --version)"
echo "- timer: $TIMER"

make_env caller
measure caller

if [ "${UNPRIV:-1}" = 1 ] && [ "$(id -u)" = 0 ] && id cordon-test >/dev/null 2>&1; then
    make_env unpriv
    chown -R cordon-test:cordon-test "$WORK/unpriv"
    measure unpriv setpriv --reuid=cordon-test --regid=cordon-test --clear-groups
fi
