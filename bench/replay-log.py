#!/usr/bin/env python3
"""Writes a synthetic audit log of N events for bench/replay.sh: one session's start, then a
mix shaped like a real agent session's decisions (HTTP requests allowed and denied, flows,
execs, lookups, a few filesystem masks), then its stop. The hash chain is not computed
(replay and jq do not read it): `cordon log --verify` would refuse this file.

usage: replay-log.py N OUT PROJECT
"""
import json
import sys

n, out, project = int(sys.argv[1]), sys.argv[2], sys.argv[3]
session = "20261206T120000Z-0badc0de"
zero = "0" * 64
hosts = ["registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "api.anthropic.com",
         "github.com", "index.crates.io", "static.crates.io"]
denied = ["evil.example", "telemetry.example.com", "webhook.site", "tracker.example.net"]
programs = ["node", "git", "sh", "npm", "python3", "cargo", "rustc", "cc"]


def event(seq, layer, action, reason, rule=None, detail=None):
    e = {"time": "2026-12-06T12:00:00.%03dZ" % (seq % 1000), "session": session, "seq": seq,
         "layer": layer, "action": action, "reason": reason}
    if rule is not None:
        e["rule"] = rule
    if detail:
        e["detail"] = detail
    e["prev"] = zero
    e["hash"] = zero
    return json.dumps(e, separators=(",", ":"), sort_keys=True)


def body(i):
    k = i % 20
    h = hosts[i % len(hosts)]
    if k < 9:
        path = "/pkg-%d/-/pkg-%d-1.0.%d.tgz" % (i % 500, i % 500, i % 7)
        return ("http", "allow", "GET https://%s%s → 200: forwarded" % (h, path),
                "network.allow %s (built-in)" % h,
                {"method": "GET", "url": "https://%s%s" % (h, path), "host": h, "port": 443,
                 "path": path, "body_len": 0, "status": 200, "latency_ms": 12,
                 "bytes_up": 310, "bytes_down": 48213})
    if k < 11:
        d = denied[i % len(denied)]
        return ("http", "deny", "POST https://%s/collect → 403: no rule allows it" % d, "default",
                {"method": "POST", "url": "https://%s/collect" % d, "host": d, "port": 443,
                 "path": "/collect", "body_len": 512, "status": 403, "latency_ms": 1})
    if k < 14:
        return ("network", "allow", "%s:22 — closed after 4 B up, 9 B down" % "github.com",
                "network.allow github.com (built-in)",
                {"host": "github.com", "port": 22, "proto": "ssh", "via": "tun", "pid": 40 + i % 9,
                 "cmdline": "ssh git@github.com", "bytes_up": 4000, "bytes_down": 9000,
                 "duration_ms": 800})
    if k < 15:
        d = denied[i % len(denied)]
        return ("network", "deny", "%s:8443 — no [[network.allow]] rule names it" % d,
                "network.default-deny",
                {"host": d, "port": 8443, "proto": "tls", "via": "tun", "pid": 41})
    if k < 19:
        p = programs[i % len(programs)]
        args = ["--version"] if p != "git" else ["status", "--short"]
        return ("exec", "allow", "exec allowed: no [exec] rule matches", None,
                {"command": " ".join([p] + args), "program": p, "resolved": p, "args": args,
                 "pid": 100 + i % 50})
    return ("dns", "allow", "A %s → 198.18.0.%d" % (h, i % 250), None,
            {"name": h, "qtype": "A", "answer": "198.18.0.%d" % (i % 250), "via": "tun"})


with open(out, "w") as f:
    f.write(event(0, "session", "start", "session started", None,
                  {"command": ["sh"], "project": project, "profile": "", "profile_detected": "",
                   "policy_files": [], "learn": False, "uid": 0, "version": "0.1.0"}) + "\n")
    f.write(event(1, "http", "apply", "HTTP layer on") + "\n")
    for j, p in enumerate(["/etc/shadow", "/etc/ssh", "/run"]):
        f.write(event(2 + j, "filesystem", "deny", "masked", "built-in", {"path": p}) + "\n")
    seq = 5
    while seq < n - 1:
        layer, action, reason, rule, detail = body(seq)
        f.write(event(seq, layer, action, reason, rule, detail) + "\n")
        seq += 1
    f.write(event(seq, "session", "stop", "session ended", None, {"code": 0}) + "\n")
