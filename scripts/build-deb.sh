#!/usr/bin/env bash
# Builds cordon's Debian package with cargo-deb (`[package.metadata.deb]` in
# crates/cordon/Cargo.toml): the binary, one man page per subcommand and the bash, zsh and fish
# completions (written by the binary itself from its command-line definition), the AppArmor
# profile (packaging/apparmor/cordon) and the docs. Prints the .deb's path on stdout.
#
#   scripts/build-deb.sh            # the release build: target/debian/cordon_VERSION-1_ARCH.deb
#   CORDON_DEB_PROFILE=NAME ...     # another Cargo profile (target/NAME/)
#
# Needs cargo-deb (pinned: `cargo install cargo-deb --version 3.8.0 --locked`; the test setup,
# scripts/setup-test-env.sh, installs it) and dpkg-shlibdeps (dpkg-dev) for the Depends line.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${CORDON_DEB_PROFILE:-release}
if ! cargo deb --version >/dev/null 2>&1; then
    echo "build-deb.sh: cargo-deb is not installed: cargo install cargo-deb --version 3.8.0 --locked" >&2
    exit 1
fi
if ! command -v dpkg-shlibdeps >/dev/null; then
    echo "build-deb.sh: dpkg-shlibdeps is missing (it computes the package's Depends): apt-get install dpkg-dev" >&2
    exit 1
fi
cargo build --profile "$profile" -j2 -p cordon --locked >&2
bin="${CARGO_TARGET_DIR:-target}/$profile/cordon"
gen="${CARGO_TARGET_DIR:-target}/$profile/deb"
rm -rf "$gen"
mkdir -p "$gen/man" "$gen/completions"
"$bin" man --dir "$gen/man"
# Compressed, as Debian policy has man pages (cargo-deb leaves files from target/ as they are).
gzip -9n "$gen"/man/*.1
"$bin" completions bash > "$gen/completions/cordon"
"$bin" completions zsh > "$gen/completions/_cordon"
"$bin" completions fish > "$gen/completions/cordon.fish"
out="${CARGO_TARGET_DIR:-target}/debian"
mkdir -p "$out"
rm -f "$out"/cordon_*.deb
cargo deb -p cordon --no-build --profile "$profile" --output "$out" >&2
ls "$out"/cordon_*.deb
