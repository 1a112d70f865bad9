#!/usr/bin/env python3
"""Soak cordon with faults under load (issue #19). Loopback only, bounded in time, stdlib only.

  soak.py run                 the whole soak (as root; see scripts/soak.sh and docs/soak.md)
  soak.py load OUT SECONDS N  inside the sandbox: N agents (threads in worker processes) busy
  soak.py worker OUT SECONDS N   one worker process of `load` (a tree: it keeps a child)

Environment for `run`: SOAK_SECONDS (120), SOAK_AGENTS (200), CORDON_BIN (target/debug/cordon),
SOAK_USER (run cordon as this user via setpriv; the sinks stay root's), SOAK_RSS_LIMIT_MB (640),
SOAK_KEEP=1 (keep the work directory).
"""
import collections
import http.client
import http.server
import json
import os
import random
import re
import shutil
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

UP = "up.soak.test"
DENY = "deny.soak.test"
# Allowed by connection only ([tls] passthrough): spliced, decided by the gateway, not per request.
PASS = "pass.soak.test"
ID_RE = re.compile(r"sk\d+x\d+x\d+")
# kind: (weight, host, path prefix). Every request's path ends in its canary id.
KINDS = {
    "small": (30, UP, "/small/"),
    "large": (8, UP, "/large/"),
    "reset": (5, UP, "/reset/"),
    "private": (14, UP, "/private/"),
    "judged-ok": (8, UP, "/judged/ok-"),
    "judged-no": (8, UP, "/judged/no-"),
    "judged-hang": (2, UP, "/judged/hang-"),
    "judged-junk": (5, UP, "/judged/junk-"),
    "deny-host": (14, DENY, "/small/"),
    "spliced": (6, PASS, "/small/"),
}
# What must never reach an upstream.
FORBIDDEN = {"private", "judged-no", "judged-hang", "judged-junk", "deny-host"}
LARGE = 512 * 1024
JUDGE_TIMEOUT_MS = 2000
CLIENT_TIMEOUT = 30
# Debian's python inside: the unprivileged user cannot run root's pyenv shims.
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"


def kind_of(host, path):
    if host.startswith(PASS):
        return "spliced"
    for k, (_, h, prefix) in KINDS.items():
        if h == UP and path.startswith(prefix):
            return k
    return "?"


# ---- inside the sandbox: the load ------------------------------------------------------------


def worker(out, seconds, agents):
    """`agents` threads, each a loop of requests until the deadline; one line per request
    attempted (`A`) and per outcome (`R` status / `E` error), each one write(2)."""
    deadline = time.time() + seconds
    # A child, so a kill from the host takes a process tree.
    child = subprocess.Popen(["sleep", str(int(seconds) + 60)])
    fd = os.open(os.path.join(out, "w%d.log" % os.getpid()), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    ctx = ssl.create_default_context()
    # A spliced connection meets the upstream's own certificate.
    ctx_pass = ssl.create_default_context(cafile=os.path.join(os.path.dirname(os.path.abspath(__file__)), "soak-ca.pem"))
    kinds = list(KINDS)
    weights = [KINDS[k][0] for k in kinds]

    def line(s):
        os.write(fd, (s + "\n").encode())

    def agent(t):
        rnd = random.Random(os.getpid() * 1000 + t)
        conn = None
        n = 0
        while time.time() < deadline:
            n += 1
            kind = rnd.choices(kinds, weights)[0]
            _, host, prefix = KINDS[kind]
            rid = "sk%dx%dx%d" % (os.getpid(), t, n)
            line("A %s %s" % (rid, kind))
            t0 = time.time()
            try:
                # Allowed hosts reuse a keep-alive connection: decisions per request, not per flow.
                if host == UP and conn is None:
                    conn = http.client.HTTPSConnection(UP, 443, timeout=CLIENT_TIMEOUT, context=ctx)
                c = conn if host == UP else http.client.HTTPSConnection(
                    host, 443, timeout=CLIENT_TIMEOUT, context=ctx_pass if host == PASS else ctx)
                c.request("GET", prefix + rid)
                r = c.getresponse()
                body = r.read()
                who = r.getheader("x-soak-upstream", "cordon")
                line("R %s %s %d %d %s %d" % (rid, kind, r.status, len(body), who, (time.time() - t0) * 1000))
                if host != UP or r.getheader("connection", "").lower() == "close":
                    c.close()
                    if host == UP:
                        conn = None
            except Exception as e:  # noqa: BLE001 - every failure is an outcome to count
                line("E %s %s %s %d" % (rid, kind, type(e).__name__, (time.time() - t0) * 1000))
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=agent, args=(t,), daemon=True) for t in range(agents)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(CLIENT_TIMEOUT + 10 + max(0.0, deadline - time.time()))
    child.kill()
    child.wait()
    os._exit(0)


def load(out, seconds, agents):
    """Worker processes of 25 agents each; one killed from the host is started again."""
    per = 25
    procs = {}
    deadline = time.time() + seconds
    me = os.path.abspath(__file__)

    def spawn(share):
        left = deadline - time.time()
        p = subprocess.Popen([sys.executable, me, "worker", out, "%.1f" % left, str(share)])
        procs[p.pid] = (p, share)

    for i in range(0, agents, per):
        spawn(min(per, agents - i))
    with open(os.path.join(out, "ready"), "w") as f:
        f.write("%d\n" % os.getpid())
    respawned = 0
    while procs:
        time.sleep(0.2)
        for pid, (p, share) in list(procs.items()):
            rc = p.poll()
            if rc is None:
                continue
            del procs[pid]
            if rc == -signal.SIGKILL and time.time() < deadline - 2:
                respawned += 1
                spawn(share)
    with open(os.path.join(out, "done"), "w") as f:
        f.write("respawned %d\n" % respawned)


# ---- on the host: sinks ----------------------------------------------------------------------


class Log:
    def __init__(self):
        self.lock = threading.Lock()
        self.lines = []

    def add(self, s):
        with self.lock:
            self.lines.append(s)

    def all(self):
        with self.lock:
            return list(self.lines)


class TLSServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 512
    allow_reuse_address = True

    def __init__(self, addr, handler, ctx, log):
        self.ctx, self.log = ctx, log
        super().__init__(addr, handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        self.log.add("CONN %s" % (addr,))
        # The handshake runs in the request's thread, not the accept loop.
        return self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):
        pass


class Upstream(http.server.BaseHTTPRequestHandler):
    """The allowed upstream (and, as another instance, the denied sink): small answers, a
    large one streamed in pieces, and one that resets its connection mid-body."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.server.log.add("REQ %.3f %s %s" % (time.time(), self.headers.get("Host", ""), self.path))
        if self.path.startswith("/large/"):
            self.answer(LARGE, reset=False)
        elif self.path.startswith("/reset/"):
            self.answer(LARGE, reset=True)
        else:
            body = b"ok " + self.path.encode() + b"\n"
            self.send_response(200)
            self.send_header("x-soak-upstream", "1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def answer(self, n, reset):
        self.send_response(200)
        self.send_header("x-soak-upstream", "1")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        chunk = b"x" * 16384
        sent = 0
        while sent < n:
            if reset and sent >= 64 * 1024:
                # RST, not FIN: linger 0, then drop the descriptor under the TLS object.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                os.close(self.connection.detach())
                self.close_connection = True
                self.wfile = open(os.devnull, "wb")
                return
            self.wfile.write(chunk)
            sent += len(chunk)
            time.sleep(0.002)

    def log_message(self, *a):
        pass


class Judge(http.server.BaseHTTPRequestHandler):
    """The LLM judge's stand-in (OpenAI Chat Completions): allows `/judged/ok-`, denies
    `/judged/no-`, hangs past cordon's timeout (then says allow) on `/judged/hang-`, and
    answers garbage on `/judged/junk-`."""
    protocol_version = "HTTP/1.1"
    junk = [
        (200, b"not json at all"),
        (200, json.dumps({"id": "x"}).encode()),
        (200, json.dumps({"choices": [{"message": {"content": "ALLOW"}}]}).encode()),
        (200, json.dumps({"choices": [{"message": {"content": json.dumps({"decision": "perhaps", "reason": "?"})}}]}).encode()),
        (200, b'{"choices": [{"message": {"content": "{\\"decision\\": \\"allow\\"'),
        (500, b"upstream model overloaded"),
    ]

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        try:
            user = json.loads(raw)["messages"][1]["content"]
            quoted = json.loads(user.split("BEGIN UNTRUSTED REQUEST", 1)[1].split("END UNTRUSTED REQUEST", 1)[0])
            url = quoted["url"]
        except Exception:  # noqa: BLE001
            url = "?"
        self.server.log.add("JUDGE %s" % url)
        status = 200
        if "/judged/ok-" in url:
            content = json.dumps({"decision": "allow", "reason": "soak: fine"})
        elif "/judged/hang-" in url:
            time.sleep(JUDGE_TIMEOUT_MS / 1000 * 3)
            content = json.dumps({"decision": "allow", "reason": "soak: too late"})
        elif "/judged/junk-" in url:
            status, out = random.choice(self.junk)
            self.reply(status, out)
            return
        else:
            content = json.dumps({"decision": "deny", "reason": "soak: no"})
        self.reply(status, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode())

    def reply(self, status, out):
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        except OSError:
            pass

    def log_message(self, *a):
        pass


def serve(addr, handler, ctx):
    log = Log()
    srv = TLSServer(addr, handler, ctx, log)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, log


def make_tls(d):
    os.makedirs(d, mode=0o755)
    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write(
            "subjectAltName=DNS:%s,DNS:%s,DNS:%s,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n" % (UP, DENY, PASS)
        )
    sh = (
        "set -e; cd '%s'; "
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem "
        "-days 2 -subj /CN=cordon-soak-ca -addext basicConstraints=critical,CA:TRUE "
        "-addext keyUsage=critical,keyCertSign,cRLSign; "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key -out srv.csr -subj /CN=%s; "
        "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext.cnf"
    ) % (d, UP)
    subprocess.run(["sh", "-c", sh], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, "srv.pem"), os.path.join(d, "srv.key"))
    return ctx, os.path.join(d, "ca.pem")


# ---- on the host: watching and hurting the session -------------------------------------------


def cordon_pids(exe):
    """Every process running the cordon binary (the supervisor and the sandbox's init)."""
    out = []
    real = os.path.realpath(exe)
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.readlink("/proc/%s/exe" % p) == real:
                    out.append(int(p))
            except OSError:
                pass
    return out


def status_kb(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for l in f:
                if l.startswith(key + ":"):
                    return int(l.split()[1])
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """Peak VmHWM/VmRSS of every cordon process, sampled every 0.5 s."""

    def __init__(self, exe):
        super().__init__(daemon=True)
        self.exe, self.stop, self.peak, self.rss_series = exe, threading.Event(), {}, []

    def run(self):
        while not self.stop.is_set():
            tot = 0
            for pid in cordon_pids(self.exe):
                hwm = status_kb(pid, "VmHWM")
                rss = status_kb(pid, "VmRSS")
                tot += rss
                self.peak[pid] = max(self.peak.get(pid, 0), hwm)
            self.rss_series.append(tot)
            self.stop.wait(0.5)


def ns_of(pid, what):
    try:
        return os.readlink("/proc/%d/ns/%s" % (pid, what))
    except OSError:
        return None


def procs_in_ns(what, ident):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and ns_of(int(p), what) == ident:
            out.append(int(p))
    return out


def workers(project):
    """Worker processes of the load (found by their command line), with their children."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 3 and argv[1].endswith(b"soak.py") and argv[2] == b"worker":
            found.append(int(p))
    return found


def children(pid):
    out = []
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def kill_tree(pid):
    tree = [pid]
    i = 0
    while i < len(tree):
        tree += children(tree[i])
        i += 1
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return len(tree)


def fill(path):
    """Writes until the filesystem is full; returns the bytes written."""
    n = 0
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                w = f.write(block)
                n += w
                if w < len(block):
                    break
            except OSError:
                break
    return n


def host_view():
    with open("/proc/self/mountinfo") as f:
        mounts = sorted(" ".join(l.split()[3:5]) for l in f)
    return mounts, sorted(os.listdir("/sys/class/net"))


# ---- on the host: the run --------------------------------------------------------------------


class Soak:
    def __init__(self):
        self.seconds = int(os.environ.get("SOAK_SECONDS", "120"))
        self.agents = int(os.environ.get("SOAK_AGENTS", "200"))
        self.exe = os.path.abspath(os.environ.get("CORDON_BIN", "target/debug/cordon"))
        self.user = os.environ.get("SOAK_USER", "")
        self.rss_limit = int(os.environ.get("SOAK_RSS_LIMIT_MB", "640")) * 1024
        self.failures = []
        self.started = []
        # Addresses of our own, so a root and a cordon-test soak (or the tests) can run at once.
        base = 90 if not self.user else 93
        self.up_addr = "127.0.0.%d" % base
        self.deny_addr = "127.0.0.%d" % (base + 1)

    def check(self, ok, what):
        print("  [%s] %s" % ("ok" if ok else "FAIL", what))
        if not ok:
            self.failures.append(what)

    def setup(self):
        if os.geteuid() != 0:
            sys.exit("soak.py: run as root (SOAK_USER=cordon-test runs cordon unprivileged): the sinks "
                     "listen on port 443 and the audit log's disk is a small tmpfs")
        if not os.access(self.exe, os.X_OK):
            sys.exit("soak.py: no cordon binary at %s (cargo build, or set CORDON_BIN)" % self.exe)
        self.work = tempfile.mkdtemp(prefix="cordon-soak-", dir="/var/tmp")
        os.chmod(self.work, 0o755)
        self.project = os.path.join(self.work, "project")
        self.out = os.path.join(self.project, "results")
        self.audit_dir = os.path.join(self.work, "audit")
        self.home = os.path.join(self.work, "home")
        for d in (self.project, self.out, self.audit_dir, self.home):
            os.makedirs(d)
        shutil.copy(os.path.abspath(__file__), os.path.join(self.project, "soak.py"))
        ctx, self.ca = make_tls(os.path.join(self.work, "tls"))
        os.chmod(self.ca, 0o644)
        shutil.copy(self.ca, os.path.join(self.project, "soak-ca.pem"))
        # The audit log's disk: small, so filling it is quick.
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m,mode=0755", "soak-audit", self.audit_dir], check=True)
        self.mounted = True
        if self.user:
            subprocess.run(["chown", "-R", self.user, self.project, self.out, self.audit_dir, self.home], check=True)
        self.up, self.up_log = serve((self.up_addr, 443), Upstream, ctx)
        self.sink, self.sink_log = serve((self.deny_addr, 443), Upstream, ctx)
        self.judge, self.judge_log = serve(("127.0.0.1", 0), Judge, ctx)
        self.policy = os.path.join(self.work, "soak.toml")
        with open(self.policy, "w") as f:
            f.write(
                '[dns]\nhosts = { "%s" = "%s", "%s" = "%s", "%s" = "%s" }\n'
                '[[network.allow]]\nhost = "%s"\nports = [443]\n'
                '[[network.allow]]\nhost = "%s"\nports = [443]\n'
                '[[http.rule]]\nname = "soak-private"\nhost = "%s"\npath = "/private/*"\naction = "deny"\n'
                'reason = "soak: never allowed"\n'
                '[[http.rule]]\nname = "soak-judged"\nhost = "%s"\npath = "/judged/*"\naction = "judge"\n'
                '[tls]\nupstream_ca = ["%s"]\npassthrough = ["%s"]\n'
                '[judge]\napi = "openai"\nurl = "https://127.0.0.1:%d"\nmodel = "fake"\n'
                'policy = "Reading public files is fine."\ntimeout_ms = %d\non_error = "deny"\n'
                % (UP, self.up_addr, DENY, self.deny_addr, PASS, self.up_addr, UP, PASS, UP, UP, self.ca, PASS,
                   self.judge.server_address[1], JUDGE_TIMEOUT_MS)
            )
        os.chmod(self.policy, 0o644)

    def cordon(self, args, **kw):
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": self.home,
            "XDG_RUNTIME_DIR": os.path.join(self.home, "run"),
            "LANG": "C.UTF-8",
        }
        os.makedirs(env["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
        if self.user:
            subprocess.run(["chown", self.user, env["XDG_RUNTIME_DIR"]], check=True)
        pre = ["setpriv", "--reuid", self.user, "--regid", self.user, "--init-groups", "--"] if self.user else []
        p = subprocess.Popen(pre + [self.exe] + args, env=env, cwd=self.project, **kw)
        self.started.append(p)
        return p

    def session(self, log, seconds):
        return self.cordon(
            ["run", "--no-tty", "-q", "--audit", log, "--policy", self.policy, "--project", self.project,
             "--", PY, "soak.py", "load", self.out, str(seconds), str(self.agents)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )

    def wait_ready(self, proc, limit=60):
        end = time.time() + limit
        while time.time() < end:
            if os.path.exists(os.path.join(self.out, "ready")):
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def phase1(self):
        print("soak: phase 1: %d agents for %d s through one supervisor, with faults" % (self.agents, self.seconds))
        self.log1 = os.path.join(self.audit_dir, "phase1.jsonl")
        sampler = Sampler(self.exe)
        sampler.start()
        start = time.time()
        proc = self.session(self.log1, self.seconds)
        output = []
        threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
        if not self.wait_ready(proc):
            sampler.stop.set()
            self.check(False, "the load generator started inside the sandbox")
            print(b"".join(output).decode(errors="replace")[-3000:])
            proc.kill()
            return
        t0 = time.time()
        T = self.seconds
        kills, killed_procs = 0, 0
        full_at, free_at = T * 0.3, T * 0.3 + min(15, T * 0.15)
        filled = None
        kill_times = [T * f for f in (0.15, 0.25, 0.45, 0.55, 0.7, 0.85)]
        filler = os.path.join(self.audit_dir, "filler")
        while time.time() - t0 < T:
            now = time.time() - t0
            if kill_times and now >= kill_times[0]:
                kill_times.pop(0)
                ws = workers(self.project)
                if ws:
                    killed_procs += kill_tree(random.choice(ws))
                    kills += 1
            if filled is None and now >= full_at:
                filled = fill(filler)
                self.full_window = (time.time(), None)
                print("soak: audit disk full (%d MiB of filler) at %.0f s" % (filled >> 20, now))
            if filled is not None and os.path.exists(filler) and now >= free_at:
                os.unlink(filler)
                self.full_window = (self.full_window[0], time.time())
                print("soak: audit disk freed at %.0f s" % now)
            time.sleep(0.2)
        if os.path.exists(filler):
            os.unlink(filler)
        # Bounded: the agents stop at the deadline; their requests time out within CLIENT_TIMEOUT.
        try:
            proc.wait(timeout=CLIENT_TIMEOUT + 60)
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            proc.kill()
            proc.wait()
        sampler.stop.set()
        sampler.join()
        self.elapsed1 = time.time() - start
        self.rc1 = proc.returncode
        self.output1 = b"".join(output).decode(errors="replace")
        self.peak = sampler.peak
        self.rss_series = sampler.rss_series
        self.kills = (kills, killed_procs)
        self.check(not hung, "phase 1 ended by itself within %d s of its deadline (no hang): %.0f s in all"
                   % (CLIENT_TIMEOUT + 60, self.elapsed1))
        self.check(self.rc1 == 0, "cordon run exited 0 (got %s)" % self.rc1)
        self.check(kills >= 4, "%d process trees (%d processes) SIGKILLed inside the sandbox from the host"
                   % (kills, killed_procs))
        self.check(filled is not None and filled > 0, "the audit log's disk was filled for a while")

    def phase2(self):
        print("soak: phase 2: SIGKILL of cordon itself mid-load")
        shutil.rmtree(self.out)
        os.makedirs(self.out)
        if self.user:
            subprocess.run(["chown", self.user, self.out], check=True)
        mounts0, links0 = host_view()
        log2 = os.path.join(self.audit_dir, "phase2.jsonl")
        secs = max(20, self.seconds // 4)
        proc = self.session(log2, secs)
        threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
        if not self.wait_ready(proc):
            self.check(False, "phase 2's load started")
            proc.kill()
            return
        time.sleep(min(8, secs / 3))
        ws = workers(self.project)
        ids = {w: (ns_of(w, "pid"), ns_of(w, "net"), ns_of(w, "mnt")) for w in ws}
        inside = set()
        for w in ws:
            inside |= set(procs_in_ns("pid", ids[w][0]))
        print("soak: %d processes inside, SIGKILL cordon (pid %d)" % (len(inside), proc.pid))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        end = time.time() + 10
        left = inside
        while time.time() < end:
            left = [p for p in inside if os.path.exists("/proc/%d" % p) and ns_of(p, "pid") in {i[0] for i in ids.values()}]
            if not left:
                break
            time.sleep(0.1)
        self.check(bool(ws) and not left, "no process of the sandbox survives cordon's SIGKILL (%d were inside, %d left)"
                   % (len(inside), len(left)))
        nets = {i[1] for i in ids.values()}
        mnts = {i[2] for i in ids.values()}
        holders = [p for p in os.listdir("/proc") if p.isdigit() and (ns_of(int(p), "net") in nets or ns_of(int(p), "mnt") in mnts)]
        self.check(not holders, "no process holds the sandbox's network or mount namespace")
        time.sleep(0.5)
        mounts1, links1 = host_view()
        extra_m = sorted(set(mounts1) - set(mounts0))
        extra_l = sorted(set(links1) - set(links0))
        self.check(not extra_m, "no mount left on the host%s" % (": %s" % extra_m[:5] if extra_m else ""))
        self.check(not extra_l, "no network device left on the host%s" % (": %s" % extra_l if extra_l else ""))
        p = self.cordon(["run", "--no-tty", "-q", "--audit", os.path.join(self.audit_dir, "after.jsonl"),
                         "--project", self.project, "--", "true"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = p.communicate(timeout=60)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            out, rc = p.communicate()[0], "hang"
        self.check(rc == 0, "a following `cordon run -- true` works (exit %s)%s"
                   % (rc, "" if rc == 0 else ": " + out.decode(errors="replace")[-500:]))

    def read_client(self, out):
        attempts, outcomes = {}, {}
        for name in os.listdir(out):
            if not name.endswith(".log"):
                continue
            with open(os.path.join(out, name), errors="replace") as f:
                for l in f:
                    p = l.split()
                    if len(p) < 3:
                        continue
                    if p[0] == "A":
                        attempts[p[1]] = p[2]
                    elif p[0] == "R" and len(p) >= 7:
                        outcomes[p[1]] = ("status", int(p[3]), p[5], int(p[6]))
                    elif p[0] == "E" and len(p) >= 5:
                        outcomes[p[1]] = ("error", p[3], "", int(p[4]))
        return attempts, outcomes

    def read_audit(self, path):
        events, bad = [], 0
        with open(path, errors="replace") as f:
            for l in f:
                try:
                    events.append(json.loads(l))
                except ValueError:
                    bad += 1
        return events, bad

    def report(self):
        attempts, outcomes = self.read_client(self.out1)
        events, bad = self.read_audit(self.log1)
        reached = collections.Counter()
        reached_ids = {}
        reached_at = {}
        for l in self.up_log.all():
            if l.startswith("REQ "):
                m = ID_RE.search(l)
                if m:
                    _, t, host, path = l.split(" ", 3)
                    reached_ids[m.group(0)] = kind_of(host, path)
                    reached_at[m.group(0)] = float(t)
        for rid, k in reached_ids.items():
            reached[k] += 1
        sink_conns = [l for l in self.sink_log.all()]
        # Decisions in the audit log, by canary id.
        decided = collections.defaultdict(list)
        held = lost = refused = suppressed = flows_denied = flows_spliced = 0
        for e in events:
            d = e.get("detail") or {}
            # The denied host is refused by connection (each agent request is a connection of
            # its own): those decisions carry the host, not the path.
            if e.get("layer") == "network" and e.get("action") == "deny" and d.get("host") == DENY:
                flows_denied += 1
            if e.get("layer") == "network" and e.get("action") == "allow" and d.get("host") == PASS:
                flows_spliced += 1
            if e.get("rule") == "network.event-budget":
                suppressed += int(d.get("suppressed", 0) or 0)
            if e.get("layer") == "http" and "url" in d:
                m = ID_RE.search(d["url"])
                if m:
                    decided[m.group(0)].append((e.get("action"), d.get("status")))
            if e.get("rule") == "audit.unwritable":
                held += int(d.get("held", 0) or 0)
                lost += int(d.get("lost", 0) or 0)
                refused += int(d.get("refused", 0) or 0)
        rows = []
        kinds = list(KINDS)
        tot = collections.Counter()
        for k in kinds:
            ids = [i for i, kk in attempts.items() if kk == k]
            st = collections.Counter()
            for i in ids:
                o = outcomes.get(i)
                if o is None:
                    st["no answer (killed)"] += 1
                elif o[0] == "error":
                    st["error"] += 1
                else:
                    st[str(o[1])] += 1
            allow = sum(1 for i in ids if any(a == "allow" for a, _ in decided.get(i, [])))
            deny = sum(1 for i in ids if any(a == "deny" for a, _ in decided.get(i, [])))
            if k == "deny-host":
                deny = flows_denied
            if k == "spliced":
                allow = flows_spliced
            err = sum(1 for i in ids if any(a == "error" for a, _ in decided.get(i, [])))
            rows.append((k, len(ids), st, reached[k], allow, deny, err))
            tot["attempted"] += len(ids)
        print()
        print("| kind | attempted | answered (status: count) | errors | no answer | reached upstream | audit allow | audit deny | audit error |")
        print("|---|---|---|---|---|---|---|---|---|")
        for k, n, st, r, a, d, e in rows:
            answered = ", ".join("%s: %d" % (s, c) for s, c in sorted(st.items()) if s[0].isdigit())
            print("| %s | %d | %s | %d | %d | %d | %d | %d | %d |" % (
                k, n, answered or "-", st["error"], st["no answer (killed)"], r, a, d, e))
        ms = sorted(o[3] for o in outcomes.values())
        if ms:
            timeouts = sum(1 for o in outcomes.values() if o[0] == "error" and o[1] == "TimeoutError")
            print("\nlatency as the agents saw it: p50 %d ms, p99 %d ms, max %d ms; %d client timeouts (%d s)"
                  % (ms[len(ms) // 2], ms[int(len(ms) * 0.99)], ms[-1], timeouts, CLIENT_TIMEOUT))
        print()
        hwm = max(self.peak.values()) if self.peak else 0
        print("cordon processes sampled: %d; peak VmHWM %.1f MiB (limit %d MiB)" % (
            len(self.peak), hwm / 1024, self.rss_limit // 1024))
        print("audit log: %d events, %d unreadable lines, %s" % (len(events), bad, self.log1))
        # The checks.
        bad_reach = [(i, k) for i, k in reached_ids.items() if k in FORBIDDEN]
        self.check(not bad_reach, "no denied kind reached the upstream%s" % (": %s" % bad_reach[:5] if bad_reach else ""))
        self.check(not sink_conns, "the denied host's sink saw no connection (%d)" % len(sink_conns))
        # A request let out that the upstream then cut before its answer's head is an `error`
        # (502) naming the rule that let it out: logged, as a failure rather than an answer.
        unlogged = [i for i, k in reached_ids.items() if k != "spliced"
                    and not any(a == "allow" or (a == "error" and st == 502) for a, st in decided.get(i, []))]
        self.check(not unlogged, "every request that reached the upstream has an allow in the audit log, or a 502 "
                   "error when the upstream cut it (%d reached, %d without%s)"
                   % (len(reached_ids), len(unlogged), ": %s" % unlogged[:5] if unlogged else ""))
        spliced = sum(1 for k in reached_ids.values() if k == "spliced")
        self.check(spliced > 0 and flows_spliced >= spliced,
                   "every spliced connection that reached the upstream is an allowed flow in the audit log "
                   "(%d reached, %d logged)" % (spliced, flows_spliced))
        # Fail closed: while the log's disk was full nothing new went out. A decision made just
        # before it filled may still be on its way (a judge's answer takes up to its timeout).
        if getattr(self, "full_window", (None, None))[1]:
            lo, hi = self.full_window[0] + JUDGE_TIMEOUT_MS / 1000 + 2, self.full_window[1]
            during = [i for i, t in reached_at.items() if lo < t < hi]
            self.check(not during, "nothing reached the upstream while the audit log's disk was full "
                       "(%.0f s window, %d did%s)" % (hi - lo, len(during), ": %s" % during[:5] if during else ""))
        answered = {i: o for i, o in outcomes.items() if o[0] == "status"}
        by_request = {i: o for i, o in answered.items() if attempts.get(i) not in ("deny-host", "spliced")}
        undecided = [i for i in by_request if not decided.get(i)]
        # Refused for the outage: counted in its note, not one by one.
        outage_503 = [i for i in undecided if answered[i][1] == 503]
        others = [i for i in undecided if answered[i][1] != 503]
        self.check(len(others) <= lost and len(outage_503) <= refused + lost,
                   "every answered request has its decision in the audit log, one by one or in the outage's "
                   "counts (%d answered; %d without an event of their own: %d refused for the outage (%d counted), "
                   "%d others (%d reported lost))" % (len(by_request), len(undecided), len(outage_503), refused,
                                                      len(others), lost))
        refused_flows = sum(1 for i in answered if attempts.get(i) == "deny-host")
        self.check(flows_denied + suppressed >= refused_flows,
                   "every refused connection to the denied host is in the audit log, one by one or in "
                   "the event budget's counts (%d refused; %d logged, %d counted over the budget)"
                   % (refused_flows, flows_denied, suppressed))
        wrong = [i for i, o in answered.items() if o[1] == 200 and o[2] != "1"]
        self.check(not wrong, "every 200 came from the upstream")
        allowed_unreached = [i for i, o in answered.items() if o[1] == 200 and i not in reached_ids]
        self.check(not allowed_unreached, "every 200 the agents got was seen by the upstream")
        self.check(bad == 0, "every line of the audit log is whole JSON (%d are not)" % bad)
        v = self.cordon(["log", "--verify", "--file", self.log1], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        vout = v.communicate(timeout=120)[0].decode(errors="replace")
        self.check(v.returncode == 0, "`cordon log --verify` accepts the log%s" % ("" if v.returncode == 0 else ": " + vout[-600:]))
        self.check(hwm <= self.rss_limit, "cordon's peak RSS %.1f MiB is under %d MiB" % (hwm / 1024, self.rss_limit // 1024))
        # The replay property: the log re-decided under the policy that produced it, with the
        # judge's verdicts and the outage's refusals taken from the log, changes nothing.
        r = self.cordon(["replay", self.log1, "--policy", self.policy, "--json"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        rout, rerr = r.communicate(timeout=600)
        try:
            rep = json.loads(rout)
        except ValueError:
            rep = {}
        changed = len(rep.get("changes", [None])) + int(rep.get("rule_changed", 1) or 0)
        self.check(r.returncode == 0 and changed == 0,
                   "`cordon replay` of the log under its own policy reproduces all %s decisions (%d re-decided, %d kept as logged): %d differ%s"
                   % (rep.get("decisions", "?"), rep.get("unchanged", 0), rep.get("kept", 0), changed,
                      "" if changed == 0 else ": " + json.dumps(rep.get("changes", []))[:600] + rerr.decode(errors="replace")[-300:]))
        print("audit outage: %d events held and written late, %d lost, %d flows and requests refused for it"
              % (held, lost, refused))
        notes = sum(1 for e in events if e.get("rule") == "audit.unwritable" and e.get("layer") == "session")
        self.check(notes >= 1, "the log says the disk was full (%d audit.unwritable notes)" % notes)
        said = "the audit log cannot be written" in self.output1 and "can be written again" in self.output1
        self.check(said, "cordon said on its terminal when the log stopped and started being written")
        series = self.rss_series
        if series:
            q = [series[min(len(series) - 1, int(len(series) * f))] / 1024 for f in (0.25, 0.5, 0.75, 0.99)]
            print("cordon's RSS (all its processes) at 25/50/75/99%% of phase 1: %s MiB" % " / ".join("%.0f" % x for x in q))

    def cleanup(self):
        for p in self.started:
            if p.poll() is None:
                p.kill()
                p.wait()
        for s in ("up", "sink", "judge"):
            if hasattr(self, s):
                getattr(self, s).shutdown()
        if getattr(self, "mounted", False):
            if os.environ.get("SOAK_KEEP") == "1":
                shutil.copytree(self.audit_dir, self.audit_dir + "-kept", dirs_exist_ok=True)
            subprocess.run(["umount", "-l", self.audit_dir])
        if os.environ.get("SOAK_KEEP") != "1" and hasattr(self, "work"):
            shutil.rmtree(self.work, ignore_errors=True)

    def run(self):
        try:
            self.setup()
            self.phase1()
            if not self.failures or os.path.exists(self.log1):
                self.out1 = os.path.join(self.work, "results1")
                shutil.copytree(self.out, self.out1)
                self.report()
            if self.failures and os.environ.get("SOAK_KEEP") == "1":
                print(self.output1[-4000:] if hasattr(self, "output1") else "")
            self.phase2()
        finally:
            self.cleanup()
        if self.failures:
            print("soak: FAILED: %d check(s):" % len(self.failures))
            for f in self.failures:
                print("  - " + f)
            return 1
        print("soak: all checks passed")
        return 0


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else "run"
    if cmd == "worker":
        worker(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "load":
        load(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "run":
        # soak.sh's hard timeout sends TERM: clean up (sessions, sinks, the tmpfs) on the way out.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit("soak.py: stopped by SIGTERM (the hard time limit?)"))
        sys.exit(Soak().run())
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
