#!/usr/bin/env bash
# The floor under every process start on this machine: what an exec costs before a program
# does anything of its own, measured in ONE round-robin run (spawnbench) against cordon's own
# `--version` and bwrap's. Prints markdown; asserts nothing.
#
# Rows: a static binary with no libc (exec and exit only); the same empty `main` linked
# statically and dynamically against glibc; an empty Rust `main`; `cordon --version`;
# `bwrap --version`. Beside them, the cost of one CPUID instruction (leaves 2 and 4, the ones
# glibc's cache-size probe executes at every process start): in a VM that traps CPUID, this
# is what sets the glibc rows apart from the no-libc one. Last, where a new thread starts: how
# long after its spawn a thread first runs while its parent keeps its CPU busy, and while its
# parent blocks at once (on a kernel that starts new tasks on their parent's CPU, the first
# waits for the parent's slice: cordon's threads and init then run one after the other).
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
cat > "$WORK/spawn.c" <<'EOF'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static volatile long long ran;
static void *first(void *a) { (void)a; ran = now(); return 0; }
static int cmp(const void *a, const void *b) { long long x = *(const long long *)a, y = *(const long long *)b; return (x > y) - (x < y); }
/* argv[1]: 1 = the parent spins until the thread has run (up to 5 ms), 0 = it joins at once. */
int main(int argc, char **argv) {
    int busy = argc > 1 && atoi(argv[1]);
    long long d[400];
    for (int i = 0; i < 400; i++) {
        pthread_t t;
        ran = 0;
        long long t0 = now();
        pthread_create(&t, 0, first, 0);
        while (busy && !ran && now() - t0 < 5000000) {}
        pthread_join(t, 0);
        d[i] = ran - t0;
        struct timespec pause = {0, 2000000};
        nanosleep(&pause, 0);
    }
    qsort(d, 400, sizeof d[0], cmp);
    printf("%.3f %.3f\n", d[200] / 1e6, d[360] / 1e6);
    return 0;
}
EOF
cc -O2 -pthread -o "$B/spawn" "$WORK/spawn.c"
read -r busy50 busy90 < <("$B/spawn" 1)
read -r idle50 idle90 < <("$B/spawn" 0)

"$B/spawnbench" "$N" "$WARMUP" \
    nolibc "$B/nolibc" ::: glibc-static "$B/glibc-static" ::: glibc-dynamic "$B/glibc-dynamic" ::: \
    rust-empty "$B/rust-empty" ::: cordon-version "$B/cordon" --version ::: \
    bwrap-version bwrap --version > "$WORK/raw.tsv"

echo "## Exec floor: what a process start costs before the program's own work"
echo
echo "- $(date -u +%FT%H:%MZ), kernel $(uname -r), $(nproc) CPUs, $(ldd --version | head -1)"
echo "- one CPUID: leaf 2 ${leaf2} µs, leaf 4 ${leaf4} µs (mean of 2000 each)"
echo "- a new thread first runs after ${busy50} ms (p50; p90 ${busy90}) while its parent spins, after ${idle50} ms (p90 ${idle90}) when the parent blocks at once (400 spawns each)"
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
