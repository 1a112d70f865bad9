#!/usr/bin/env bash
# Snapshot and diff of a large protected directory (10,000 files, ~1 GiB): cordon-state's
# snapshot(), StateStore::begin and Session::changes against `cp -a` and `rsync -a --dry-run`,
# all in ONE run, interleaved round by round (only ratios taken in the same run mean anything).
# Reports median seconds, the ratio to `cp -a`, and the extra disk each copy takes. Prints
# markdown; asserts nothing.
#
# Usage: bash bench/state.sh   (env: ROUNDS=5, FILES=10000 files in all, LARGE=100 of them large,
#        TOTAL_MIB=1024 total size, BENCH_BIN=path to a prebuilt state_bench example instead of
#        building target/release/examples/state_bench)
#
# Rows, per round, in this order (every copy is removed and `sync`ed before the next row):
#   cp -a               cp -a SRC COPY
#   rsync -n            rsync -a --dry-run --itemize-changes MOD/ SRC/   (MOD: a cp -a copy of SRC
#                       made once, with 10 files changed and 5 added, as many as cordon
#                       diffs; rsync's quick check compares sizes and mtimes only)
#   rsync -n -c         the same with --checksum (reads every byte of both trees)
#   cordon scan         cordon_state::scan(SRC): the manifest alone (BLAKE3 of every file)
#   cordon snapshot     cordon_state::snapshot(SRC, INTO): manifest + hard-linked copy
#   cordon begin        StateStore::begin(id, [SRC]): the real per-session cost (snapshot,
#                       manifest.json, overlay upper/work dirs, fsynced meta.json)
#   cordon changes      Session::changes() after 10 changed + 5 new files are written into the
#                       session's overlay upper dir (as a copy-up would leave them)
# The page cache holds SRC for every tool after the generation step (23 GiB RAM here, ~1 GiB
# tree): all rows are warm-cache numbers; cp -a's copy is written to the page cache, not waited
# for (the `sync` after each row is outside the timing).
#
# Extra disk: filesystem used bytes (`df --output=used -B1`, after `sync`) after minus before
# each copy, which counts shared (hard-linked) data once; plus `du -s -B1 SRC COPY`'s second line,
# which counts each inode once across both arguments, so it is the copy's own blocks exactly. Any
# other writer on the filesystem shows up in the df figure, not in the du one.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
FILES=${FILES:-10000}
LARGE=${LARGE:-100}
TOTAL_MIB=${TOTAL_MIB:-1024}
REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)

if [ -n "${BENCH_BIN:-}" ]; then
    echo "using prebuilt $BENCH_BIN (BENCH_BIN set; not building)" >&2
else
    echo "building the state_bench example (release)..." >&2
    (cd "$REPO" && cargo build --release -j2 --example state_bench -p cordon-state >&2)
    BENCH_BIN=$REPO/target/release/examples/state_bench
fi

HAVE_RSYNC=1
if ! command -v rsync >/dev/null; then
    HAVE_RSYNC=0
    echo "rsync not found: its rows are skipped" >&2
fi

WORK=$(mktemp -d /var/tmp/cordon-state-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SRC=$WORK/src
MOD=$WORK/mod
RES=$WORK/results
mkdir -p "$SRC" "$RES"

now() { echo "$EPOCHREALTIME"; }
used() {
    sync
    df --output=used -B1 "$WORK" | tail -n 1 | tr -d ' '
}
# Blocks of $1 not shared with SRC.
own_bytes() { du -s -B1 "$SRC" "$1" | awk 'NR == 2 { print $1 }'; }

# --- The tree: FILES-LARGE small files (512 B-16.5 KiB) and LARGE files making up the rest of
# TOTAL_MIB, in 50 x 4 directories; random content, fixed sizes (RANDOM is seeded).
echo "generating $FILES files (~$TOTAL_MIB MiB) in $SRC..." >&2
t0=$(now)
RANDOM=42
small=$((FILES - LARGE))
small_bytes=0
for ((d = 0; d < 50; d++)); do
    for ((e = 0; e < 4; e++)); do mkdir -p "$SRC/d$d/e$e"; done
done
for ((i = 0; i < small; i++)); do
    size=$((512 + (RANDOM * 32768 + RANDOM) % 16384))
    small_bytes=$((small_bytes + size))
    head -c "$size" /dev/urandom > "$SRC/d$((i % 50))/e$((i / 50 % 4))/s$i"
done
large_each=$(((TOTAL_MIB * 1048576 - small_bytes) / LARGE))
if [ "$large_each" -le 0 ]; then
    echo "TOTAL_MIB=$TOTAL_MIB is too small for $small small files" >&2
    exit 1
fi
for ((j = 0; j < LARGE; j++)); do
    head -c "$large_each" /dev/urandom > "$SRC/d$((j % 50))/e$((j % 4))/large$j"
done
sync
total_bytes=$((small_bytes + large_each * LARGE))
echo "generated in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s:" \
    "$small files of 512 B-16.5 KiB ($((small_bytes / 1048576)) MiB)," \
    "$LARGE of $((large_each / 1048576)) MiB; $total_bytes bytes" >&2

# The modified copy rsync compares against: 10 changed + 5 added files, as many as cordon diffs
# (every (FILES/10)-th file in path order is changed; new files go beside the first 5 of them).
if [ "$HAVE_RSYNC" = 1 ]; then
    cp -a "$SRC/." "$MOD"
    mapfile -t all_files < <(cd "$SRC" && find . -type f | LC_ALL=C sort)
    step=$((${#all_files[@]} / 10))
    for ((k = 0; k < 10; k++)); do
        echo "changed by state.sh" >> "$MOD/${all_files[k * step]}"
    done
    for ((k = 0; k < 5; k++)); do
        echo "new file $k" > "$MOD/$(dirname "${all_files[k * step]}")/state-bench-new-$k.txt"
    done
    sync
fi

record() { echo "$2" >> "$RES/$1.time"; }
record_disk() {
    echo "$2" >> "$RES/$1.df"
    echo "$3" >> "$RES/$1.du"
}

for ((r = 1; r <= ROUNDS; r++)); do
    echo "round $r/$ROUNDS" >&2

    # cp -a
    before=$(used)
    t0=$(now)
    cp -a "$SRC" "$WORK/cp"
    t1=$(now)
    record cp "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
    record_disk cp "$(($(used) - before))" "$(own_bytes "$WORK/cp")"
    rm -rf "$WORK/cp"
    sync

    if [ "$HAVE_RSYNC" = 1 ]; then
        t0=$(now)
        n=$(rsync -a --dry-run --itemize-changes "$MOD/" "$SRC/" | grep -c '^[<>c.]f' || true)
        t1=$(now)
        record rsync "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
        echo "$n" > "$RES/rsync.files"
        t0=$(now)
        n=$(rsync -a --dry-run --checksum --itemize-changes "$MOD/" "$SRC/" | grep -c '^[<>c.]f' || true)
        t1=$(now)
        record rsync_c "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
        echo "$n" > "$RES/rsync_c.files"
    fi

    # cordon: each subcommand times itself (`name seconds ...` on stdout).
    out=$("$BENCH_BIN" scan "$SRC")
    record scan "$(echo "$out" | awk '{ print $2 }')"
    echo "$out" > "$RES/scan.out"

    before=$(used)
    out=$("$BENCH_BIN" snapshot "$SRC" "$WORK/snap")
    record snapshot "$(echo "$out" | awk '{ print $2 }')"
    record_disk snapshot "$(($(used) - before))" "$(own_bytes "$WORK/snap")"
    rm -rf "$WORK/snap"
    sync

    before=$(used)
    out=$("$BENCH_BIN" begin "$SRC" "$WORK/store" "bench-$r")
    record begin "$(echo "$out" | awk '{ print $2 }')"
    record_disk begin "$(($(used) - before))" "$(own_bytes "$WORK/store")"
    out=$("$BENCH_BIN" diff "$WORK/store" "bench-$r")
    record changes "$(echo "$out" | awk '{ print $2 }')"
    echo "$out" > "$RES/changes.out"
    rm -rf "$WORK/store"
    sync
done

# --- Report.
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
minmax() { sort -g "$1" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.3f-%.3f", lo, hi }'; }
human() {
    awk -v b="$1" 'BEGIN {
        a = b < 0 ? -b : b
        if (a >= 1073741824) printf "%.2f GiB", b / 1073741824
        else if (a >= 1048576) printf "%.1f MiB", b / 1048576
        else if (a >= 1024) printf "%.0f KiB", b / 1024
        else printf "%d B", b
    }'
}
cp_med=$(median "$RES/cp.time")
row() { # key label
    local key=$1 label=$2 med disk="-"
    [ -f "$RES/$key.time" ] || return 0
    med=$(median "$RES/$key.time")
    if [ -f "$RES/$key.df" ]; then
        disk="$(human "$(median "$RES/$key.df")") (du: $(human "$(median "$RES/$key.du")"))"
    fi
    printf '| %s | %.3f | %s | %s | %s |\n' "$label" "$med" "$(minmax "$RES/$key.time")" \
        "$(awk -v m="$med" -v c="$cp_med" 'BEGIN { printf "%.3fx | %.1fx", m / c, c / m }')" \
        "$disk"
}

echo
echo "- $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) vCPU, $(awk '/MemTotal/ { printf "%.0f GiB RAM", $2 / 1048576 }' /proc/meminfo)," \
    "kernel $(uname -r), $(df --output=fstype "$WORK" | tail -n 1) at $WORK, commit $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- crates/cordon-state || echo ' (crates/cordon-state modified)')"
echo "- $(cp --version | head -n 1)$([ "$HAVE_RSYNC" = 1 ] && echo ", $(rsync --version | head -n 1 | awk '{ print "rsync", $3 }')")"
echo "- tree: $FILES files, $total_bytes bytes ($small of 512 B-16.5 KiB, $LARGE of $large_each B), 200 dirs; $ROUNDS rounds"
echo "- $(cat "$RES/scan.out")"
echo "- $(cat "$RES/changes.out")"
[ "$HAVE_RSYNC" = 1 ] && echo "- rsync itemized $(cat "$RES/rsync.files") files (quick check), $(cat "$RES/rsync_c.files") (--checksum)"
[ "$HAVE_RSYNC" = 1 ] || echo "- rsync not installed: no rsync rows"
echo
echo "| tool | median (s) | min-max (s) | ratio to cp -a | cp -a / tool | extra disk: df (du) |"
echo "|---|---|---|---|---|---|"
row cp 'cp -a'
row rsync 'rsync -a --dry-run (diff vs modified copy)'
row rsync_c 'rsync -a --dry-run --checksum (same)'
row scan 'cordon scan (manifest only)'
row snapshot 'cordon snapshot'
row begin 'cordon StateStore::begin'
row changes 'cordon Session::changes (15 changes)'
echo
echo "Per round, in order (s):"
echo
for key in cp rsync rsync_c scan snapshot begin changes; do
    [ -f "$RES/$key.time" ] || continue
    echo "- $key: $(awk '{ printf "%s%.3f", (NR > 1 ? ", " : ""), $1 }' "$RES/$key.time")"
done
