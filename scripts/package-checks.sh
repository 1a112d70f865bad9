#!/bin/sh
# Run by scripts/test-package.sh inside the Debian 12 root where the .deb is installed, once as
# root and once as a user: what someone who just installed the package would try first.
set -u
fail() {
    echo "package-checks.sh ($(id -un)): FAIL: $*" >&2
    exit 1
}
me=$(id -un)
[ -n "${HOME:-}" ] || HOME=$(getent passwd "$me" | cut -d: -f6)
export HOME
cd "$HOME" || fail "no home directory"
mkdir -p proj && cd proj || fail "cannot make $HOME/proj"

v=$(cordon --version) || fail "cordon --version"
echo "$me: $v"
out=$(cordon doctor 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "cordon doctor exited $rc:
$out"
echo "$out" | grep -q "The built-in default policy can be enforced on this machine." \
    || fail "cordon doctor did not say the default policy can be enforced:
$out"
echo "$me: cordon doctor: exit 0, the default policy can be enforced"

out=$(cordon run -q -- true 2>&1) || fail "cordon run -- true exited $?:
$out"
echo "$me: cordon run -- true: exit 0"

# The project is writable from inside, the rest of the filesystem is not.
cordon run -q -- sh -c 'echo inside > made-inside' || fail "a write in the project failed inside"
[ "$(cat made-inside)" = inside ] || fail "the project write did not reach the project"
outside=/var/tmp/cordon-escape-$me
if out=$(cordon run -q -- sh -c "echo escaped > $outside" 2>&1); then
    fail "a write outside the project ($outside) succeeded inside the sandbox"
fi
[ ! -e "$outside" ] || fail "$outside exists: the sandbox let a write out"
echo "$me: the project is writable, $outside (writable outside) is not: $out"

MANPAGER=cat MANWIDTH=80 man -l /usr/share/man/man1/cordon-run.1.gz 2>/dev/null | grep -q "cordon-run" \
    || fail "man -l /usr/share/man/man1/cordon-run.1.gz did not render"
echo "$me: man -l cordon-run.1.gz renders"
bash -c '. /usr/share/bash-completion/completions/cordon && complete -p cordon' | grep -q "cordon" \
    || fail "the bash completion does not load"
echo "$me: bash completion loads"
