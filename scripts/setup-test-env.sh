#!/usr/bin/env bash
# Installs what cordon's tests need on a fresh Debian machine (run as root; idempotent).
#  - git, python3, util-linux (script, unshare, setpriv), procps (pgrep): used inside sandboxes
#  - cargo/rustc from Debian: a toolchain the unprivileged test user can run (rustup's is under /root)
#  - strace: to show debuggers stay denied
#  - bubblewrap, hyperfine: the benchmark's peer and timer (bwrap also for the nested-sandbox tests)
#  - libcap2-bin (setcap, getcap): file capabilities must not reach the host from a nested sandbox
#  - curl, openssl, gcc (static libc), python3-pip, python3-venv, python3-requests: clients and
#    servers of the network tests (npm comes with the machine's Node.js)
#  - iperf3, passt, slirp4netns: the network benchmark and its peers
#  - chromium, chromium-driver, fonts-dejavu-core: the dashboard's end-to-end browser test
#    (headless Chromium driven over WebDriver; the font so its screenshot has legible text)
#  - golang-go: a second session of a project builds a Go module from its cache layer, another
#    project's does not see it (carry.rs)
#  - man-db: `man -l` renders `cordon man`'s pages in the install test
#  - bind9-dnsutils (dig), iputils-ping: the network escape battery's DNS-tunnel and ICMP attacks
#  - openssh-server, openssh-client: the SSH test's own sshds (loopback, unprivileged), ssh-agent,
#    ssh and git over SSH through cordon's filtering agent
#  - g++ and cargo-fuzz (pinned): the fuzz targets under fuzz/ (libFuzzer is C++), run by
#    scripts/fuzz.sh
#  - systemd (journald, journalctl; not started: the export test runs its own journald in a
#    private mount namespace) and PyPI opentelemetry-proto, pinned, in a venv: the export
#    test's OTLP receiver decodes with the official definitions (crates/cordon/tests/export.rs)
#  - cargo-deb (pinned), dpkg-dev (dpkg-shlibdeps: the package's Depends) and mmdebstrap: the
#    package test builds the .deb and installs it into a Debian 12 root (scripts/test-package.sh)
#  - docker.io (Debian's engine; the test starts dockerd when none runs), podman and runc,
#    iproute2 (ip), mmdebstrap: cordon inside a container (crates/cordon/tests/container.rs,
#    its image made by scripts/debian-root.sh)
#  - qemu-system-x86 (QEMU's microvm machine) and linux-image-amd64 (a distribution kernel with
#    its modules): the VM backend's guest, booted under TCG (crates/cordon/tests/vm.rs)
#  - an unprivileged account, cordon-test, for the second run of every sandbox test
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
    echo "setup-test-env.sh: run as root (it installs packages and adds the cordon-test user)" >&2
    exit 1
fi
need=()
for pkg in git python3 util-linux procps cargo strace bubblewrap hyperfine libcap2-bin \
    curl openssl gcc g++ libc6-dev python3-pip python3-venv python3-requests iperf3 passt slirp4netns \
    openssh-server openssh-client bind9-dnsutils iputils-ping \
    chromium chromium-driver fonts-dejavu-core man-db golang-go systemd dpkg-dev mmdebstrap \
    docker.io podman runc iproute2 qemu-system-x86 linux-image-amd64; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# cargo-fuzz, pinned, for scripts/fuzz.sh (built from crates.io with the toolchain's cargo).
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz 0.13.2" ]; then
    cargo install cargo-fuzz --version 0.13.2 --locked -j2 --quiet
fi
# cargo-deb, pinned, for scripts/build-deb.sh (the package test).
if [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb 3.8.0" ]; then
    cargo install cargo-deb --version 3.8.0 --locked -j2 --quiet
fi
# The OTLP receiver's decoder: the system's python, so cordon-test could run it too.
otlp_proto=1.45.2
otlp_venv=/opt/cordon-agents/otlp-venv
if [ "$("$otlp_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))' 2>/dev/null)" != "$otlp_proto" ]; then
    rm -rf "$otlp_venv"
    mkdir -p /opt/cordon-agents
    /usr/bin/python3 -m venv "$otlp_venv"
    "$otlp_venv/bin/pip" install --quiet --disable-pip-version-check "opentelemetry-proto==$otlp_proto" >&2
    chmod -R a+rX "$otlp_venv"
fi
if ! id cordon-test >/dev/null 2>&1; then
    useradd --create-home --shell /bin/sh cordon-test
fi
# The egress gateway's TUN device: distributions ship /dev/net/tun 0666 (opening it grants
# nothing outside one's own network namespace); some containers make it root-only.
if [ -e /dev/net/tun ] && [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
    chmod 0666 /dev/net/tun
fi
# Unprivileged user namespaces must be allowed, as on a stock Debian kernel.
if [ -e /proc/sys/kernel/unprivileged_userns_clone ] && [ "$(cat /proc/sys/kernel/unprivileged_userns_clone)" != 1 ]; then
    echo 1 > /proc/sys/kernel/unprivileged_userns_clone
fi
# The real agent CLIs, pinned, for scripts/test-agents.sh.
bash "$(dirname "$0")/setup-agents.sh"
# The official MCP SDKs, pinned, for crates/cordon/tests/mcp.rs (real clients, and the server).
bash "$(dirname "$0")/setup-mcp-sdks.sh"
