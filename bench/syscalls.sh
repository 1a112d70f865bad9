#!/usr/bin/env bash
# Layer 4's cost: per-syscall overhead of cordon's seccomp filter (and Landlock) and the cost of
# the exec supervisor, against the same command outside any sandbox and inside bubblewrap with the
# same namespaces, mounts and masks but no seccomp and no Landlock. All in ONE run, round-robin
# across the tools (only ratios taken in the same run mean anything). Prints markdown tables;
# asserts nothing.
#
#   a. getpid (raw syscall), stat("/etc/passwd"), open+close("/etc/passwd") in a loop, ns/call
#      timed inside the process (so sandbox start is not in these numbers);
#   b. exec loop: `sh -c` running /bin/true 1000 times, whole-command wall time (sandbox start
#      included, nothing subtracted); in cordon every execve traps to the supervisor;
#   c. syscall-heavy build: `cargo build --offline` of a generated dependency-free crate, fresh
#      target dir each run (removed outside the timed command).
#
# Usage: bash bench/syscalls.sh   (env: ROUNDS=9 for a, EXEC_ROUNDS=10 for b, BUILD_RUNS=5 for c,
#        N=2000000 getpid calls per round (stat N/4, open+close N/8), EXECS=1000, STRUCTS=12
#        generated structs per module of the crate in c,
#        CORDON_BIN=path to measure a prebuilt binary instead of building target/release/cordon,
#        SKIP_BUILD=1 to leave out c)
# Runs as the calling user (as root here; the unprivileged variant is not scripted).
set -euo pipefail

ROUNDS=${ROUNDS:-9}
EXEC_ROUNDS=${EXEC_ROUNDS:-10}
BUILD_RUNS=${BUILD_RUNS:-5}
N=${N:-2000000}
EXECS=${EXECS:-1000}
STRUCTS=${STRUCTS:-12}   # generated structs per module of the crate (c); 6 modules
REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
PY=$(command -v /usr/bin/python3 || command -v python3)

# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_setup cordon-syscalls
mkdir -p "$WORK/src" "$WORK/home" "$WORK/state" "$WORK/config" "$WORK/data"
P=$WORK/project
mkdir -p "$P"

# One C file, two modes:
#   sysloop N PATH   ns/call of getpid (raw syscall, N), stat (N/4), open+close (N/8)
#   wall CMD ARGS... fork+exec CMD, wait, print "<exit status>\t<wall ns>" (CLOCK_MONOTONIC)
cat > "$WORK/src/bench.c" <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static long long now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "sysloop")) {
        long n = atol(argv[2]);
        const char *path = argv[3];
        struct stat st;
        for (int i = 0; i < 1000; i++) {            /* warm caches, fault pages in */
            syscall(SYS_getpid);
            if (stat(path, &st)) { perror("stat"); return 1; }
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) { perror("open"); return 1; }
            close(fd);
        }
        long long t0 = now();
        for (long i = 0; i < n; i++) syscall(SYS_getpid);
        long long t1 = now();
        printf("getpid\t%.1f\n", (double)(t1 - t0) / n);
        long m = n / 4;
        t0 = now();
        for (long i = 0; i < m; i++) stat(path, &st);
        t1 = now();
        printf("stat\t%.1f\n", (double)(t1 - t0) / m);
        m = n / 8;
        t0 = now();
        for (long i = 0; i < m; i++) close(open(path, O_RDONLY | O_CLOEXEC));
        t1 = now();
        printf("open+close\t%.1f\n", (double)(t1 - t0) / m);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "wall")) {
        long long t0 = now();
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) { execvp(argv[2], &argv[2]); perror("exec"); _exit(127); }
        int st;
        if (waitpid(pid, &st, 0) < 0) { perror("waitpid"); return 1; }
        long long t1 = now();
        printf("%d\t%lld\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), t1 - t0);
        return 0;
    }
    fprintf(stderr, "usage: bench sysloop N PATH | bench wall CMD ARGS...\n");
    return 2;
}
EOF
gcc -O2 -Wall -o "$WORK/bin/bench" "$WORK/src/bench.c"
cp "$WORK/bin/bench" "$P/sysloop"

# The toolchain: cargo on PATH (a rustup proxy under /root/.cargo/bin as root), so PATH and
# RUSTUP_HOME must reach the sandbox; cordon's env allow-list passes PATH, HOME, CARGO_HOME and
# RUSTUP_HOME. CARGO_HOME and the target dir live in the project (writable in every tool); the
# target dir is cargo's default, $P/crate/target: cordon does not pass CARGO_TARGET_DIR.
CARGO=$(command -v cargo)
TOOLDIR=$(dirname "$CARGO")
RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}

# The environment every tool is started with: no user policy, trust store or state of the
# caller leaks in; each cordon run writes its own session log under $WORK/state (logging on, as
# in normal use).
ENV=(env -i PATH="$TOOLDIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    LANG=C.UTF-8 HOME="$WORK/home" XDG_STATE_HOME="$WORK/state" XDG_CONFIG_HOME="$WORK/config"
    XDG_DATA_HOME="$WORK/data" RUSTUP_HOME="$RUSTUP_HOME" CARGO_HOME="$P/.cargo-home"
    CARGO_TERM_COLOR=never)

# One probe run of cordon: its audit log says exactly which paths it masks (as in
# bench/sandbox-start.sh); bwrap masks the same, a directory as a read-only tmpfs, a file as
# /dev/null bound read-only.
(cd "$P" && "${ENV[@]}" "$WORK/bin/cordon" run --no-tty --project "$P" --audit "$WORK/probe.jsonl" -- true)
MASKS=()
NMASK=0
while IFS= read -r p; do
    NMASK=$((NMASK + 1))
    if [ -d "$p" ]; then MASKS+=(--tmpfs "$p" --remount-ro "$p"); else MASKS+=(--ro-bind /dev/null "$p"); fi
done < <("$PY" -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["layer"] == "filesystem" and e["action"] == "deny":
        print(e["detail"]["path"])' "$WORK/probe.jsonl")
LANDLOCK=$("$PY" -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["layer"] == "landlock":
        print(e["reason"]); break' "$WORK/probe.jsonl" 2>/dev/null || true)
SECCOMP=$("$PY" -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["layer"] == "syscall":
        n = len(e["detail"].get("exec_rules", []))
        print("%s (%d exec rules: every execve goes to the supervisor)" % (e["reason"], n) if n else e["reason"])' "$WORK/probe.jsonl" 2>/dev/null | paste -sd ';' || true)

# Prefixes: the measured command follows each.
BWRAP=(bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --dev /dev
    --proc /proc --tmpfs /tmp --tmpfs /dev/shm --bind "$P" "$P" "${MASKS[@]}")
CORDON=("$WORK/bin/cordon" run --no-tty --project "$P" --)
TOOLS=(outside bwrap cordon)
prefix() {
    case $1 in
        outside) PFX=() ;;
        bwrap) PFX=("${BWRAP[@]}") ;;
        cordon) PFX=("${CORDON[@]}") ;;
    esac
}

# --- a. per-syscall loop ---------------------------------------------------------------------
echo "a. syscall loops: $ROUNDS rounds x ${TOOLS[*]}" >&2
RAW_A=$WORK/a.tsv
: > "$RAW_A"
for r in $(seq 0 "$ROUNDS"); do          # round 0 is a warm-up, dropped
    for t in "${TOOLS[@]}"; do
        prefix "$t"
        out=$(cd "$P" && "${ENV[@]}" "${PFX[@]}" "$P/sysloop" sysloop "$N" /etc/passwd)
        [ "$r" = 0 ] && continue
        while IFS=$'\t' read -r op ns; do printf '%s\t%s\t%s\n' "$t" "$op" "$ns" >> "$RAW_A"; done <<<"$out"
    done
done

# --- b. exec loop ----------------------------------------------------------------------------
LOOP="i=0; while [ \$i -lt $EXECS ]; do /bin/true; i=\$((i+1)); done"
echo "b. exec loop ($EXECS x /bin/true): $EXEC_ROUNDS rounds x ${TOOLS[*]}" >&2
RAW_B=$WORK/b.tsv
: > "$RAW_B"
for r in $(seq 0 "$EXEC_ROUNDS"); do     # round 0 is a warm-up, dropped
    for t in "${TOOLS[@]}"; do
        prefix "$t"
        out=$(cd "$P" && "${ENV[@]}" "$WORK/bin/bench" wall "${PFX[@]}" /bin/sh -c "$LOOP")
        [ "$r" = 0 ] && continue
        printf '%s\t%s\n' "$t" "$out" >> "$RAW_B"
    done
done

# --- c. cargo build --------------------------------------------------------------------------
# A dependency-free crate with a few modules of generic code and derives, so rustc does real
# work (and cargo and rustc make their usual thousands of stat/open/read calls).
gen_crate() {
    local c=$P/crate
    mkdir -p "$c/src"
    printf '[package]\nname = "benchcrate"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n' > "$c/Cargo.toml"
    {
        for m in 1 2 3 4 5 6; do echo "mod m$m;"; done
        echo 'fn main() {'
        for m in 1 2 3 4 5 6; do echo "    println!(\"{}\", m$m::run(7));"; done
        echo '}'
    } > "$c/src/main.rs"
    for m in 1 2 3 4 5 6; do
        {
            echo 'use std::collections::{BTreeMap, HashMap};'
            echo 'macro_rules! rec { ($($n:ident),*) => { $('
            echo '    #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]'
            echo '    pub struct $n { pub a: u64, pub b: String, pub c: Vec<u32>, pub d: Option<Box<$n>> }'
            echo '    impl $n { pub fn score(&self) -> u64 { self.a + self.b.len() as u64 + self.c.iter().map(|x| *x as u64).sum::<u64>() } }'
            echo ')* } }'
            printf 'rec!('
            for i in $(seq 1 "$STRUCTS"); do printf 'R%s_%s, ' "$m" "$i"; done
            echo 'Last);'
            echo 'pub fn fold<T: Clone + std::fmt::Debug, F: Fn(u64, &T) -> u64>(v: &[T], f: F) -> u64 { v.iter().fold(0, |a, x| f(a, x)) }'
            echo 'pub fn run(n: u64) -> u64 {'
            echo '    let mut total = 0u64;'
            for i in $(seq 1 "$STRUCTS"); do
                echo "    { let v: Vec<R${m}_$i> = (0..n).map(|a| R${m}_$i { a, b: format!(\"{a}\"), c: vec![a as u32; 3], d: None }).collect();"
                echo "      let mut h: HashMap<R${m}_$i, u64> = HashMap::new(); let mut b: BTreeMap<R${m}_$i, u64> = BTreeMap::new();"
                echo "      for x in &v { h.insert(x.clone(), x.score()); b.insert(x.clone(), x.score()); }"
                echo "      total += fold(&v, |a, x| a + x.score()) + h.len() as u64 + b.len() as u64 + format!(\"{:?}\", v.first()).len() as u64; }"
            done
            echo '    total'
            echo '}'
        } > "$P/crate/src/m$m.rs"
    done
}
RAW_C=$WORK/c.tsv
: > "$RAW_C"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    gen_crate
    echo "c. cargo build: $BUILD_RUNS runs x ${TOOLS[*]} (+1 warm-up round)" >&2
    for r in $(seq 0 "$BUILD_RUNS"); do  # round 0 is a warm-up, dropped
        for t in "${TOOLS[@]}"; do
            prefix "$t"
            rm -rf "$P/crate/target"
            out=$(cd "$P/crate" && "${ENV[@]}" "$WORK/bin/bench" wall "${PFX[@]}" cargo build --offline -q 2>"$WORK/c.err") \
                || { cat "$WORK/c.err" >&2; exit 1; }
            case $out in 0$'\t'*) ;; *) echo "cargo build failed in $t:" >&2; cat "$WORK/c.err" >&2; exit 1 ;; esac
            [ "$r" = 0 ] && continue
            printf '%s\t%s\n' "$t" "$out" >> "$RAW_C"
        done
    done
    "$P/crate/target/debug/benchcrate" >/dev/null   # the build produced a working program
fi

# --- report ----------------------------------------------------------------------------------
SESSIONS=$(find "$WORK/state" -name '*.jsonl' | wc -l)
echo "## Layer 4: syscall filter and exec supervision"
echo
echo "- $(date -u +%FT%TZ), kernel $(uname -r), $(nproc) CPUs, $(bwrap --version), $("$WORK/bin/cordon" --version), $("${ENV[@]}" cargo --version), uid $(id -u)"
echo "- cordon probe run: masks $NMASK paths (bwrap is given the same); ${LANDLOCK:-no landlock event}; ${SECCOMP:-no seccomp event}"
echo "- round-robin outside → bwrap → cordon, first round dropped; $SESSIONS cordon session logs written"
echo
"$PY" - "$RAW_A" "$RAW_B" "$RAW_C" "$ROUNDS" "$N" "$EXECS" <<'EOF'
import statistics, sys
a, b, c, rounds, n, execs = sys.argv[1:7]
tools = ["outside", "bwrap", "cordon"]
med = statistics.median

def spread(xs, fmt):
    return (fmt + " / **" + fmt + "** / " + fmt) % (min(xs), med(xs), max(xs))

rows = {}
for line in open(a):
    t, op, ns = line.rstrip("\n").split("\t")
    rows.setdefault(op, {}).setdefault(t, []).append(float(ns))
print("### a. ns per call (in-process loop; %s rounds; getpid x%s, stat x%d, open+close x%d per round)"
      % (rounds, n, int(n) // 4, int(n) // 8))
print()
print("| syscall | outside | bwrap | cordon | cordon/outside | cordon/bwrap | cordon−bwrap |")
print("|---|---|---|---|---|---|---|")
for op in ["getpid", "stat", "open+close"]:
    r = rows[op]
    m = {t: med(r[t]) for t in tools}
    print("| %s | %s | %s | %s | %.2fx | **%.2fx** | %+.0f ns |" % (
        op, spread(r["outside"], "%.0f"), spread(r["bwrap"], "%.0f"), spread(r["cordon"], "%.0f"),
        m["cordon"] / m["outside"], m["cordon"] / m["bwrap"], m["cordon"] - m["bwrap"]))
print()
print("Cells: min / **median** / max ns per call; ratios of medians.")
print()

def walls(path):
    d, bad = {}, {}
    for line in open(path):
        t, st, ns = line.rstrip("\n").split("\t")
        d.setdefault(t, []).append(int(ns) / 1e9)
        bad[t] = bad.get(t, 0) + (st != "0")
    return d, bad

def table(path, title):
    d, bad = walls(path)
    if not d:
        return
    m = {t: med(d[t]) for t in tools}
    print(title)
    print()
    print("| tool | ok/fail | min / median / max (s) | ratio to outside | ratio to bwrap |")
    print("|---|---|---|---|---|")
    for t in tools:
        print("| %s | %d/%d | %s | %.3fx | **%.3fx** |" % (
            t, len(d[t]) - bad[t], bad[t], spread(d[t], "%.3f"), m[t] / m["outside"], m[t] / m["bwrap"]))
    print()
    return m

m = table(b, "### b. exec loop: `sh -c` running /bin/true %s times (whole command, sandbox start included)" % execs)
if m:
    print("Per exec (median wall / %s): outside %.0f µs, bwrap %.0f µs, cordon %.0f µs; cordon−bwrap %+.1f µs per exec."
          % (execs, m["outside"] / int(execs) * 1e6, m["bwrap"] / int(execs) * 1e6,
             m["cordon"] / int(execs) * 1e6, (m["cordon"] - m["bwrap"]) / int(execs) * 1e6))
    print()
table(c, "### c. `cargo build --offline` of a generated 7-file crate, no dependencies, fresh target dir")
EOF

echo "<details><summary>exact commands</summary>"
echo
echo '```'
{
    echo "cwd: $P (a, b), $P/crate (c)"
    printf 'env: '; printf '%q ' "${ENV[@]:1}"; echo
    printf 'bwrap prefix: '; printf '%q ' "${BWRAP[@]}"; echo
    printf 'cordon prefix: '; printf '%q ' "${CORDON[@]}"; echo
    echo "a: \$PREFIX $P/sysloop sysloop $N /etc/passwd"
    printf 'b: bench wall $PREFIX /bin/sh -c %q\n' "$LOOP"
    echo "c: rm -rf $P/crate/target; bench wall \$PREFIX cargo build --offline -q"
} | sed "s|$WORK|\$WORK|g"
echo '```'
echo
echo "</details>"
