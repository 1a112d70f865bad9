#!/usr/bin/env bash
# A clean Debian 12 (bookworm) root made with mmdebstrap from Debian's own packages, as a
# tarball: what the package test installs cordon's .deb into and what the container test's
# image is imported from. Nothing from another image registry.
#
#   scripts/debian-root.sh OUT.tar [PACKAGE ...]
#
# OUT.tar is reused when it exists and is newer than this script (delete it to make it again);
# the extra packages are added to the minimal base (e.g. ca-certificates, curl).
# DEBIAN_SUITE=trixie makes a Debian 13 root instead (the package test's AppArmor 4 parser).
set -euo pipefail
if [ "$#" -lt 1 ]; then
    echo "usage: $0 OUT.tar [PACKAGE ...]" >&2
    exit 2
fi
out=$1
shift
if [ -s "$out" ] && [ "$out" -nt "$0" ]; then
    exit 0
fi
if ! command -v mmdebstrap >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "$0: mmdebstrap is not installed (apt-get install mmdebstrap, as root)" >&2
        exit 1
    fi
    apt-get install -y -q mmdebstrap >&2
fi
include=$(IFS=,; echo "$*")
mkdir -p "$(dirname "$out")"
tmp="$out.$$.part"
trap 'rm -f "$tmp"' EXIT
mmdebstrap --quiet --format=tar --variant=minbase ${include:+--include="$include"} "${DEBIAN_SUITE:-bookworm}" "$tmp" \
    http://deb.debian.org/debian
mv "$tmp" "$out"
