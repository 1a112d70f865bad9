#!/usr/bin/env bash
# Installs pinned versions of the official MCP SDKs the MCP tests (crates/cordon/tests/mcp.rs)
# run as real clients, and as the loopback server, inside cordon. Run as root
# (scripts/setup-test-env.sh calls it); idempotent: a version already installed is not fetched
# again.
#
# Everything lands under /opt/cordon-agents, world-readable, so the unprivileged test user
# cordon-test runs the same code:
#   /opt/cordon-agents/mcp-venv   a Python venv with PyPI `mcp` (FastMCP server; sse and
#                                 streamable-http clients)
#   /opt/cordon-agents/mcp-node   an npm prefix with @modelcontextprotocol/sdk (its Client with
#                                 SSEClientTransport and StreamableHTTPClientTransport)
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
    echo "setup-mcp-sdks.sh: run as root (it installs under /opt/cordon-agents)" >&2
    exit 1
fi
root=/opt/cordon-agents
# Pinned: 1.x is the line whose FastMCP still serves the older SSE transport beside streamable
# HTTP, and the tests drive both. Bump deliberately and rerun the MCP tests.
py_version=1.30.0
ts_version=1.32.2
umask 022
mkdir -p "$root/mcp-node"
if [ "$(readlink -f "$root/mcp-venv/bin/python")" != "$(readlink -f /usr/bin/python3)" ] ||
    [ "$("$root/mcp-venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null)" != "$py_version" ]; then
    echo "setup-mcp-sdks.sh: pip install mcp==$py_version" >&2
    # The system's python, not a pyenv shim under /root: cordon-test must run the venv too.
    rm -rf "$root/mcp-venv"
    /usr/bin/python3 -m venv "$root/mcp-venv"
    "$root/mcp-venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$py_version" >&2
fi
pj="$root/mcp-node/node_modules/@modelcontextprotocol/sdk/package.json"
if [ ! -f "$pj" ] || [ "$(node -p "require('$pj').version" 2>/dev/null)" != "$ts_version" ]; then
    echo "setup-mcp-sdks.sh: npm install @modelcontextprotocol/sdk@$ts_version" >&2
    # A local (not -g) install: node resolves it from a script placed under the prefix, or
    # through NODE_PATH=$root/mcp-node/node_modules.
    npm install --prefix "$root/mcp-node" --no-fund --no-audit --loglevel=error \
        "@modelcontextprotocol/sdk@$ts_version" >&2
fi
chmod -R a+rX "$root"
"$root/mcp-venv/bin/python" -c 'import mcp.server.fastmcp, mcp.client.sse, mcp.client.streamable_http' ||
    { echo "setup-mcp-sdks.sh: the Python SDK does not import" >&2; exit 1; }
[ -f "$pj" ] || { echo "setup-mcp-sdks.sh: no @modelcontextprotocol/sdk after install" >&2; exit 1; }
