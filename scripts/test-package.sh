#!/usr/bin/env bash
# The package test (issue #49): builds cordon's .deb (scripts/build-deb.sh), installs it with
# apt into a clean Debian 12 root made by mmdebstrap from Debian's packages
# (scripts/debian-root.sh), then, in that root with its own mount and pid namespaces (pivoted
# into, not chrooted: the kernel refuses user namespaces to a chrooted process), runs
# `cordon doctor`, `cordon run -- true` and a write outside the project that the sandbox must
# refuse, as root and as a user of the root. Also: the man pages render, the bash completion
# loads, the AppArmor profile's install script behaves with AppArmor 3 (Debian 12's parser
# rejects `userns`: nothing installed, the install still succeeds) and with AppArmor 4.1
# (Debian 13's: the profile goes into /etc/apparmor.d), purge removes it all; and `cargo install --path crates/cordon` builds and runs.
#
# Needs root (apt and dpkg in the root, namespaces, a second user). scripts/test.sh runs it as root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "test-package.sh: needs root (it installs the .deb into a Debian root and enters it with namespaces)" >&2
    exit 1
fi
fail() {
    echo "test-package.sh: FAIL: $*" >&2
    exit 1
}
deb=$(bash scripts/build-deb.sh | tail -n 1)
[ -s "$deb" ] || fail "scripts/build-deb.sh made no .deb"
echo "test-package.sh: $deb:" >&2
dpkg-deb -c "$deb" >&2

# Beside minbase: man-db renders the pages, bash-completion loads the completion, apparmor
# brings Debian 12's parser (3.0.8) for the postinst, ca-certificates is the trust bundle
# cordon's doctor and sandbox start from (as on nearly every installed system). The tars are
# kept in target/ and remade when scripts/debian-root.sh changes (delete them after changing
# these lists). Debian 13's root has AppArmor 4.1, whose parser takes the profile.
bash scripts/debian-root.sh target/debian12-package-root.tar man-db apparmor bash-completion ca-certificates
DEBIAN_SUITE=trixie bash scripts/debian-root.sh target/debian13-package-root.tar apparmor ca-certificates
work=$(mktemp -d /tmp/cordon-package.XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT

# A fresh root from TAR at $work/NAME, with the .deb and the checks in /cordon-test.
new_root() {
    mkdir "$work/$1"
    tar -xf "$2" -C "$work/$1"
    mkdir "$work/$1/cordon-test"
    cp "$deb" "$work/$1/cordon-test/cordon.deb"
    cp scripts/package-checks.sh "$work/$1/cordon-test/checks.sh"
}

# Runs a shell command line in ROOT: own mount and pid namespaces, /dev and /sys of the host,
# a fresh /proc and /tmp, the host's / unmounted after pivot_root. Output to stdout.
in_root() {
    unshare --mount --pid --fork --propagation private -- bash -euc '
        root=$1
        mount --bind "$root" "$root"
        mount --rbind /dev "$root/dev"
        mount --rbind /sys "$root/sys"
        mount -t proc proc "$root/proc"
        mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
        cd "$root"
        mkdir -p .host
        pivot_root . .host
        exec /usr/sbin/chroot . /bin/sh -c "umount -l /.host && rmdir /.host && cd / && $2"
    ' in_root "$1" "$2" </dev/null 2>&1
}

# dpkg --purge in ROOT takes everything away, the AppArmor profile in /etc included.
purge() {
    local out gone
    out=$(in_root "$1" 'dpkg --purge cordon') || fail "dpkg --purge cordon in $1:
$out"
    for gone in usr/bin/cordon etc/apparmor.d/cordon usr/share/man/man1/cordon.1.gz; do
        [ ! -e "$1/$gone" ] || fail "/$gone is still there after dpkg --purge cordon in $1"
    done
}

# Debian 12: install as the README says, with apt (Depends: libc6, in minbase: no download).
new_root bookworm target/debian12-package-root.tar
root=$work/bookworm
out=$(in_root "$root" 'apt-get install -y -q /cordon-test/cordon.deb') || fail "apt-get install ./cordon.deb in the Debian 12 root:
$out"
echo "$out" >&2
# Debian 12's AppArmor 3.0.8 rejects `userns`: the profile stays out of /etc/apparmor.d, and
# the install script says why.
grep -q "AppArmor profile not installed: this apparmor_parser" <<<"$out" \
    || fail "the install did not report the AppArmor parser as too old"
[ ! -e "$root/etc/apparmor.d/cordon" ] || fail "the profile went into /etc/apparmor.d with a parser that rejects it"
[ -s "$root/usr/share/cordon/apparmor/cordon" ] || fail "the package has no AppArmor profile"

# As root, then as a user of the root.
in_root "$root" 'useradd --create-home --shell /bin/sh tester' >/dev/null || fail "useradd in the root"
out=$(in_root "$root" 'sh /cordon-test/checks.sh') || fail "as root in the Debian 12 root:
$out"
echo "$out" >&2
out=$(in_root "$root" 'setpriv --reuid tester --regid tester --init-groups --reset-env sh /cordon-test/checks.sh') \
    || fail "as the user tester in the Debian 12 root:
$out"
echo "$out" >&2
purge "$root"
echo "test-package.sh: the .deb installs, works as root and as a user, and purges in Debian 12" >&2

# Debian 13: AppArmor 4.1's parser takes the profile, so the postinst puts it in
# /etc/apparmor.d (where AppArmor loads it at boot); it is the shipped one, unchanged.
new_root trixie target/debian13-package-root.tar
root=$work/trixie
out=$(in_root "$root" 'apt-get install -y -q /cordon-test/cordon.deb') || fail "apt-get install ./cordon.deb in the Debian 13 root:
$out"
cmp -s "$root/usr/share/cordon/apparmor/cordon" "$root/etc/apparmor.d/cordon" \
    || fail "with AppArmor 4.1, the postinst did not install /etc/apparmor.d/cordon:
$out"
purge "$root"
echo "test-package.sh: with AppArmor 4.1 (Debian 13) the profile goes into /etc/apparmor.d, and out with the package" >&2

# `cargo install --path crates/cordon`: with this checkout's target directory the release
# build is reused (a fresh one is the release build again); other profiles skip it.
if [ "${CORDON_DEB_PROFILE:-release}" = release ]; then
    CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target} cargo install --locked -j2 --quiet \
        --path crates/cordon --root "$work/cargo-install" >&2 || fail "cargo install --path crates/cordon"
    "$work/cargo-install/bin/cordon" --version >/dev/null || fail "the cargo-installed cordon does not run"
    echo "test-package.sh: cargo install --path crates/cordon works" >&2
else
    echo "cargo install --path crates/cordon: not checked for the ${CORDON_DEB_PROFILE} profile" \
        >>"${CORDON_TEST_SKIP_LOG:-/dev/null}"
fi
