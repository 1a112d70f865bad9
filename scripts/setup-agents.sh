#!/usr/bin/env bash
# Installs pinned versions of the real agent CLIs the agent tests (scripts/test-agents.sh) run
# inside cordon. Run as root (scripts/setup-test-env.sh calls it); idempotent: a version already
# installed is not fetched again.
#
# Everything lands under /opt/cordon-agents, outside /tmp (the sandbox has a private /tmp) and
# world-readable, so the unprivileged test user cordon-test runs the same binaries:
#   /opt/cordon-agents/node   npm prefix (npm install -g --prefix): the npm agents
#   /opt/cordon-agents/aider  a Python venv with aider-chat
#   /opt/cordon-agents/bin    one entry per agent command, what the tests put on PATH
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
    echo "setup-agents.sh: run as root (it installs under /opt/cordon-agents)" >&2
    exit 1
fi
root=/opt/cordon-agents
# Pinned: a new release can change the files an agent writes on first run or the API calls it
# makes, and the tests assert both. Bump deliberately and rerun scripts/test-agents.sh.
npm_pkgs=(
    "@anthropic-ai/claude-code@2.1.332"
    "@openai/codex@0.171.0"
    "@google/gemini-cli@0.61.0"
    "opencode-ai@1.18.33"
    "@github/copilot@1.0.102"
    "@qwen-code/qwen-code@0.24.4"
)
# Not installed: @charmland/crush (0.96.1). Its npm package is only a postinstall (install.js,
# made by GoReleaser) that downloads crush_<v>_Linux_x86_64.tar.gz from GitHub releases, which CI
# cannot reach (only the package registries). Checked, none carries the binary: the npm package
# has no optionalDependencies and there is no @charmland/crush-linux-x64 (or -amd64) on npm; PyPI's
# `crush` is an unrelated 2017 library; Debian has no crush package (apt-cache search: pngcrush
# and the like). It is a Go module (github.com/charmbracelet/crush), but CI has no Go proxy.
# agents.rs tests its profile with a same-named stand-in instead.
aider_version=0.86.2
umask 022
mkdir -p "$root/node" "$root/bin"
installed() { # name@version -> is that exact version in the prefix?
    local name="${1%@*}" version="${1##*@}" pj
    pj="$root/node/lib/node_modules/$name/package.json"
    [ -f "$pj" ] && [ "$(node -p "require('$pj').version" 2>/dev/null)" = "$version" ]
}
need=()
for p in "${npm_pkgs[@]}"; do
    installed "$p" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
    echo "setup-agents.sh: npm install ${need[*]}" >&2
    # --foreground-scripts: a postinstall that fails says why instead of a bare exit code.
    npm install -g --prefix "$root/node" --no-fund --no-audit --loglevel=error \
        --foreground-scripts "${need[@]}" >&2
fi
for p in "${npm_pkgs[@]}"; do
    installed "$p" || { echo "setup-agents.sh: $p did not install" >&2; exit 1; }
done
if [ "$(readlink -f "$root/aider/bin/python")" != "$(readlink -f /usr/bin/python3)" ] ||
    [ "$("$root/aider/bin/python" -c 'import importlib.metadata as m; print(m.version("aider-chat"))' 2>/dev/null)" != "$aider_version" ]; then
    echo "setup-agents.sh: pip install aider-chat==$aider_version" >&2
    # The system's python, not a pyenv shim under /root: cordon-test must run the venv too.
    rm -rf "$root/aider"
    /usr/bin/python3 -m venv "$root/aider"
    "$root/aider/bin/pip" install --quiet --disable-pip-version-check "aider-chat==$aider_version" >&2
fi
# One directory for PATH: npm's bin links plus aider (the venv's own bin also holds python, pip,
# ... which must not shadow the system's inside the tests).
for b in "$root/node/bin/"*; do
    ln -sfn "$b" "$root/bin/$(basename "$b")"
done
ln -sfn "$root/aider/bin/aider" "$root/bin/aider"
chmod -R a+rX "$root"
for cmd in claude codex gemini opencode copilot qwen aider; do
    [ -x "$root/bin/$cmd" ] || { echo "setup-agents.sh: no $root/bin/$cmd after install" >&2; exit 1; }
done
