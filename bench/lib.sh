# Shared by the bench scripts (source it; it needs REPO set). Sets CORDON_BIN (building the
# release binary unless CORDON_BIN is given) and WORK: a scratch dir under /var/tmp — not /tmp,
# since cordon gives the sandbox a private /tmp and a project there would be hidden — removed
# on exit, holding bin/cordon executable by any user.
bench_setup() {
    local name=$1
    if [ -n "${CORDON_BIN:-}" ]; then
        echo "using prebuilt $CORDON_BIN (CORDON_BIN set; not building)" >&2
    else
        echo "building cordon (release)..." >&2
        (cd "$REPO" && cargo build --release -j2 -p cordon >&2)
        CORDON_BIN=$REPO/target/release/cordon
    fi
    WORK=$(mktemp -d "/var/tmp/$name.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
    chmod 755 "$WORK"
    mkdir -p "$WORK/bin"
    install -m 755 "$CORDON_BIN" "$WORK/bin/cordon"
    if [ -n "${CORDON_BASE:-}" ]; then
        install -m 755 "$CORDON_BASE" "$WORK/bin/cordon-base"
    fi
}
