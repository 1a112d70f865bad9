#!/usr/bin/env bash
# The floor under every process start on this machine: what an exec costs before a program
# does anything of its own, measured in ONE round-robin run (spawnbench) against cordon's own
# `--version` and bwrap's. Prints markdown; asserts nothing.
#
# Rows: a static binary with no libc (exec and exit only); the same empty `main` linked
# statically and dynamically against glibc; an empty Rust `main`; `cordon --version`;
# `bwrap --version`. Beside them, the cost of one CPUID instruction (leaves 2 and 4, the ones
# glibc's cache-size probe executes at every process start): in a VM that traps CPUID, this
# is what sets the glibc rows apart from the no-libc one.
#
# Usage: bash bench/exec-floor.sh   (env: N=300 runs per row, WARMUP=10, CORDON_BIN=prebuilt
#        binary instead of building target/release/cordon). Needs cc, rustc, bwrap and the
#        anchors' spawnbench.c beside the repository (../shared/anchors/src).
set -euo pipefail
N=${N:-300}
WARMUP=${WARMUP:-10}
REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
PY=$(command -v /usr/bin/python3 || command -v python3)
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_setup cordon-exec-floor
B=$WORK/bin
cc -O2 -o "$B/spawnbench" "$REPO/../shared/anchors/src/spawnbench.c"
printf 'void _start(void){__asm__ volatile("mov $60,%%eax; xor %%edi,%%edi; syscall");}\n' \
    > "$WORK/nolibc.c"
cc -O2 -nostdlib -static -o "$B/nolibc" "$WORK/nolibc.c"
echo 'int main(void){return 0;}' > "$WORK/empty.c"
cc -O2 -static -o "$B/glibc-static" "$WORK/empty.c"
cc -O2 -o "$B/glibc-dynamic" "$WORK/empty.c"
echo 'fn main() {}' > "$WORK/empty.rs"
rustc -O -o "$B/rust-empty" "$WORK/empty.rs"
cat > "$WORK/cpuid.c" <<'EOF'
#include <cpuid.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(void) {
    unsigned a, b, c, d, n = 2000;
    double t0 = now();
    for (unsigned i = 0; i < n; i++) __cpuid(2, a, b, c, d);
    double t1 = now();
    for (unsigned i = 0; i < n; i++) __cpuid_count(4, i % 4, a, b, c, d);
    double t2 = now();
    printf("%.2f %.2f\n", (t1 - t0) / n / 1e3, (t2 - t1) / n / 1e3);
    return 0;
}
EOF
cc -O2 -o "$B/cpuid" "$WORK/cpuid.c"
read -r leaf2 leaf4 < <("$B/cpuid")

"$B/spawnbench" "$N" "$WARMUP" \
    nolibc "$B/nolibc" ::: glibc-static "$B/glibc-static" ::: glibc-dynamic "$B/glibc-dynamic" ::: \
    rust-empty "$B/rust-empty" ::: cordon-version "$B/cordon" --version ::: \
    bwrap-version bwrap --version > "$WORK/raw.tsv"

echo "## Exec floor: what a process start costs before the program's own work"
echo
echo "- $(date -u +%FT%H:%MZ), kernel $(uname -r), $(nproc) CPUs, $(ldd --version | head -1)"
echo "- one CPUID: leaf 2 ${leaf2} µs, leaf 4 ${leaf4} µs (mean of 2000 each)"
echo "- spawnbench round-robin, n=$N per row, $WARMUP warm-up rounds dropped"
echo
"$PY" - "$WORK/raw.tsv" <<'EOF'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    label, ok, bad, ns = line.rstrip("\n").split("\t")
    rows.append((label, int(bad), statistics.median(int(x) for x in ns.split(",")) / 1e6))
floor = rows[0][2]
print("| row | failed | median ms | minus no-libc exec, ms |")
print("|---|---|---|---|")
for label, bad, med in rows:
    print(f"| {label} | {bad} | {med:.3f} | {med - floor:+.3f} |")
EOF
