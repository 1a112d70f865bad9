#!/usr/bin/env python3
"""Start to first byte of a first HTTPS request: `cordon run -- curl https://...` against a local
TLS server, beside bwrap running the same curl straight to it. Loopback only.

Usage: python3 bench/first-https.py [-n 12] BIN ...
  BIN  cordon binaries, timed round-robin with the bwrap row (before/after in one run).
A Python `http.server` over TLS (a self-signed certificate made here with openssl) listens on
127.0.0.1:443 (root, and the port must be free: the HTTP layer intercepts port 443). Each cordon
run gets a policy that allows `host.cordon.internal:443` and names the certificate in `[tls]
upstream_ca`; the curl inside trusts cordon's CA (the sandbox's bundle), cordon verifies the
server. The bwrap rows (`--unshare-all --share-net`, read-only root) run curl to
https://localhost/ with --cacert: the host's roots plus the server's certificate (what the curl
inside reads: its store; the ratio column is to this row), and the certificate alone. Prints a markdown table of medians: spawn to exit (wall clock around the spawn) and
curl's own `time_starttransfer`. Run as root; asserts nothing; compare rows of one run only.
"""
import argparse
import os
import shutil
import ssl
import statistics
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import scratch

HOST_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
CURL = ["curl", "-sS", "-o", "/dev/null", "-w", "%{time_starttransfer}"]


class Hello(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=12)
    ap.add_argument("bins", nargs="+")
    a = ap.parse_args()
    work, env = scratch.make("cordon-https.")
    try:
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout", key, "-out", cert,
             "-addext", "subjectAltName=DNS:localhost,DNS:host.cordon.internal,IP:127.0.0.1"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.chmod(cert, 0o644)
        srv = ThreadingHTTPServer(("127.0.0.1", 443), Hello)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        port = srv.server_address[1]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        policy = os.path.join(work, "policy.toml")
        with open(policy, "w") as f:
            f.write('[[network.allow]]\nhost = "host.cordon.internal"\nports = [%d]\n'
                    '[tls]\nupstream_ca = "%s"\n' % (port, cert))
        url = "https://host.cordon.internal/"
        # curl inside the sandbox reads its whole trust store (the host's roots plus cordon's
        # CA) before its handshake, as curl on the host reads the host's; OpenSSL's parse of
        # ~140 roots is tens of ms. The comparable direct row trusts the host's roots plus the
        # server's certificate; the one-certificate row shows what curl costs without a store.
        bundle = os.path.join(work, "bundle.pem")
        with open(bundle, "wb") as out:
            for src in (HOST_BUNDLE, cert):
                with open(src, "rb") as f:
                    out.write(f.read())
        bwrap = ["bwrap", "--unshare-all", "--share-net", "--die-with-parent", "--ro-bind", "/",
                 "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        rows = [("bwrap, curl direct (host roots + the server's certificate)",
                 bwrap + CURL + ["--cacert", bundle, "https://localhost/"]),
                ("bwrap, curl direct (the server's certificate alone)",
                 bwrap + CURL + ["--cacert", cert, "https://localhost/"])]
        # Run from copies made now (scratch.copy_binaries says why).
        copies = scratch.copy_binaries(work, a.bins)
        for b in a.bins:
            rows.append((b, [copies[b], "run", "--no-tty", "--policy", policy, "--project", "."]
                         + ["--"] + CURL + [url]))
        res = {label: ([], []) for label, _ in rows}
        for i in range(a.n + 1):
            for label, cmd in rows:
                t0 = time.monotonic()
                out = subprocess.run(cmd, env=env, cwd=os.path.join(work, "project"),
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                t1 = time.monotonic()
                if out.returncode != 0:
                    raise SystemExit("%s failed (exit %d)" % (label, out.returncode))
                if i == 0:
                    continue  # warm-up round
                res[label][0].append((t1 - t0) * 1000)
                res[label][1].append(float(out.stdout) * 1000)
        base = statistics.median(res[rows[0][0]][0])
        print("%s, uid %d, n=%d, load average %s" % (
            time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), os.getuid(), a.n,
            " ".join("%.2f" % x for x in os.getloadavg())))
        print()
        print("| row | spawn to exit (ms) | ratio to bwrap | curl start to first byte (ms) |")
        print("|---|---|---|---|")
        for label, _ in rows:
            wall, ttfb = res[label]
            m = statistics.median(wall)
            print("| %s | %.1f | %.2fx | %.1f |" % (label, m, m / base, statistics.median(ttfb)))
        srv.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
