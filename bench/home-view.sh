#!/usr/bin/env bash
# The home's view at start, in ONE run, interleaved: `cordon run -- true` on the built-in
# policy from a home of 50,000 files (toolchains under ~/.rustup and ~/.nvm, caches, documents,
# the configuration the view copies and checks), this build against CORDON_BASE (an older
# binary: the whole home minus a deny list). Starts alternate A B / B A, so drift on the
# machine falls on both; the view is warm (built by the warm-up runs, then reused). Prints
# markdown; asserts nothing.
#
# Usage: CORDON_BASE=/path/to/old/cordon bash bench/home-view.sh
#        (env: N=200 runs of each, FILES=50000, CORDON_BIN=prebuilt binary, NPM_TOKEN=1:
#        ~/.npmrc holds a registry token, which the view turns into a credential)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
N=${N:-200}
FILES=${FILES:-50000}
: "${CORDON_BASE:?set CORDON_BASE to the binary to compare with}"
bench_setup cordon-bench-home-view
H=$WORK/home
mkdir -p "$H/proj"
# The home: most files in toolchains and caches, as a developer's home has them.
python3 - "$H" "$FILES" "${NPM_TOKEN:-0}" <<'EOF'
import os, sys
home, total, token = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
parts = [
    (".rustup/toolchains/stable/lib/rustlib/src", 0.40),
    (".nvm/versions/node/v20/lib/node_modules", 0.20),
    (".cache/pip/http", 0.15),
    ("Documents/notes", 0.15),
    (".local/share/app", 0.10),
]
for rel, share in parts:
    n = int(total * share)
    for i in range(n):
        d = os.path.join(home, rel, "d%03d" % (i // 200))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%05d" % i), "w") as f:
            f.write("x" * (i % 97))
cfg = {
    ".gitconfig": "[user]\n\tname = Dev\n\temail = dev@example.com\n",
    ".bashrc": "export PATH=$HOME/.cargo/bin:$PATH\nalias ll='ls -l'\n",
    ".profile": "[ -f ~/.bashrc ] && . ~/.bashrc\n",
    ".config/git/ignore": "*.o\n",
    ".config/nvim/init.lua": "vim.opt.number = true\n",
    ".npmrc": "registry=https://registry.npmjs.org/\n"
    + ("//registry.npmjs.org/:_authToken=npm_%s\n" % ("a" * 36) if token else ""),
    ".aws/credentials": "[default]\naws_secret_access_key = x\n",
    ".ssh/id_ed25519": "key\n",
}
for rel, text in cfg.items():
    p = os.path.join(home, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)
EOF
echo "home: $(find "$H" -type f | wc -l) files" >&2
cd "$H/proj"
export HOME=$H XDG_STATE_HOME=$WORK/state XDG_CACHE_HOME=$WORK/cache XDG_CONFIG_HOME=$H/.config
A=$WORK/bin/cordon
B=$WORK/bin/cordon-base
for _ in 1 2 3 4 5; do
    "$A" run --no-tty -- true >/dev/null 2>&1
    "$B" run --no-tty -- true >/dev/null 2>&1
done
: >"$WORK/times"
one() {
    local t0 t1
    t0=$(date +%s%N)
    "$2" run --no-tty -- true >/dev/null 2>&1
    t1=$(date +%s%N)
    echo "$1 $(((t1 - t0) / 1000))" >>"$WORK/times"
}
for i in $(seq "$N"); do
    if [ $((i % 2)) -eq 1 ]; then one view "$A"; one base "$B"; else one base "$B"; one view "$A"; fi
done
python3 - "$WORK/times" "$FILES" "$([ "${NPM_TOKEN:-0}" = 1 ] && echo ', ~/.npmrc with a token')" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    k, us = line.split()
    runs.setdefault(k, []).append(int(us) / 1000)
v, b = runs["view"], runs["base"]
q = lambda xs: statistics.quantiles(xs, n=4)
print("| `cordon run -- true`, home of %s files%s | median ms | p25–p75 ms | runs |" % (sys.argv[2], sys.argv[3]))
print("|---|---|---|---|")
for name, xs in [("home's view (this build)", v), ("whole home minus deny (CORDON_BASE)", b)]:
    a, _, c = q(xs)
    print("| %s | %.2f | %.2f–%.2f | %d |" % (name, statistics.median(xs), a, c, len(xs)))
print()
print("median difference: %+.2f ms" % (statistics.median(v) - statistics.median(b)))
EOF
