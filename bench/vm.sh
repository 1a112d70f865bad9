#!/usr/bin/env bash
# The VM backend's start, against the namespace backend in the SAME round-robin run: for each,
# the time from spawning `cordon run` to the command's first output (boot to first command)
# and to its exit (`cordon run -- true`, the whole session). Prints a markdown table; asserts
# nothing.
#
# Usage: bash bench/vm.sh   (env: N=5 rounds, ACCEL=tcg or kvm (the VM's accel; kvm needs a
#        usable /dev/kvm), MEMORY=2048 (MiB), CORDON_BIN=a prebuilt binary instead of building
#        target/release/cordon)
# Needs qemu-system-x86 and a distribution kernel with its modules (linux-image-amd64).
set -euo pipefail

N=${N:-5}
ACCEL=${ACCEL:-tcg}
MEMORY=${MEMORY:-2048}
REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
PY=$(command -v /usr/bin/python3 || command -v python3)

# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_setup cordon-vm-bench

mkdir -p "$WORK/project" "$WORK/home" "$WORK/state" "$WORK/cache"
printf '[sandbox.vm]\naccel = "%s"\nmemory = %s\n' "$ACCEL" "$MEMORY" > "$WORK/vm.toml"
export HOME=$WORK/home XDG_STATE_HOME=$WORK/state XDG_CACHE_HOME=$WORK/cache
cd "$WORK/project"
# The initramfs is built on first use and cached: one run outside the timing.
"$WORK/bin/cordon" run -q --no-tty --policy "$WORK/vm.toml" --backend vm -- true

"$PY" - "$N" "$WORK/bin/cordon" "$WORK/vm.toml" "$ACCEL" <<'EOF'
import statistics, subprocess, sys, time
n, cordon, policy, accel = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
backends = {"namespace": ["--backend", "namespace"], f"vm ({accel})": ["--backend", "vm"]}

def once(opts, cmd):
    """(seconds to the first byte of output, seconds to exit) of one session."""
    t0 = time.monotonic()
    p = subprocess.Popen([cordon, "run", "-q", "--no-tty", "--policy", policy, *opts, "--", *cmd],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    first = None
    if p.stdout.read(1):
        first = time.monotonic() - t0
    p.stdout.read()
    code = p.wait()
    if code != 0:
        sys.exit(f"{' '.join(opts)}: exit {code}")
    return first, time.monotonic() - t0

first = {b: [] for b in backends}
whole = {b: [] for b in backends}
for _ in range(n):
    for b, opts in backends.items():
        f, _ = once(opts, ["echo", "ready"])
        first[b].append(f)
        _, w = once(opts, ["true"])
        whole[b].append(w)

ns = "namespace"
print(f"\n{n} rounds, round-robin, median seconds (min–max)\n")
print("| backend | boot to first command | `cordon run -- true` | ÷ namespace (true) |")
print("|---|---|---|---|")
for b in backends:
    f, w = first[b], whole[b]
    ratio = statistics.median(w) / statistics.median(whole[ns])
    print(f"| {b} | {statistics.median(f):.2f} ({min(f):.2f}–{max(f):.2f}) "
          f"| {statistics.median(w):.2f} ({min(w):.2f}–{max(w):.2f}) | {ratio:.1f}× |")
EOF
