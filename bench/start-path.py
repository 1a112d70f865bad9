#!/usr/bin/env python3
"""The path from `cordon run -- true`'s exec to its exit, by the kernel's own process events:
when init starts (forked, or exec'd), when it forks the command's process (its spec has come and the view is
built), when that process execs the command (nested namespace, Landlock, seccomp and the
supervised exec done), when the command exits, when init exits, and when cordon exits. Beside
it, bwrap's exec of the same command and its exit, and the CPU time of each start.

Usage (root; needs perf): python3 bench/start-path.py [-n 40] [--dev-home] BIN[:POLICY] ...
  BIN     a cordon binary; POLICY an optional --policy file (`none`: [network] mode = "none")
  --dev-home  the fake HOME also holds ~/.npm, ~/.cache/pip and ~/.cargo/registry (a
              developer's caches: one copy-on-write overlay each, besides the home's own)
Starts run round-robin with bwrap (`--unshare-all`, read-only `/`, its own /dev, /proc and
/tmp), n rounds, in a scratch dir under /var/tmp, under `perf record` of
sched_process_{exec,fork,exit} only (no syscall tracing, so the times are the start's own).
Prints medians as a markdown table; asserts nothing; compare columns of one run only.
"""
import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

import scratch

EVENT = re.compile(r"\s*(.+?)\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+sched:(\S+):\s*(.*)")
CORDON_MARKS = [
    ("init_exec", "cordon's exec to init's start (its fork by the namespaces' helper, or its exec)"),
    ("fork_cmd", "to the command's process forked (state layer, view, spec, init's mounts)"),
    ("cmd_exec", "to the command's exec (nested namespace, Landlock, seccomp, supervised exec)"),
    ("cmd_exit", "the command runs (`true`: its own exec and exit)"),
    ("init_exit", "to init's exit"),
    ("end", "to cordon's exit (gateway, state layer, audit log)"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("--dev-home", action="store_true")
    ap.add_argument("specs", nargs="+")
    a = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("needs perf (linux-perf)")
    work, env = scratch.make("cordon-path.")
    try:
        if a.dev_home:
            for d in (".npm/_cacache", ".cache/pip/http", ".cargo/registry/index"):
                os.makedirs(os.path.join(work, "home", d))
        bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind",
                 "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "true"]
        rows = [("bwrap", bwrap)]
        for spec, cmd in scratch.cordon_runs(work, a.specs).items():
            rows.append((spec, cmd + ["--project", ".", "--", "true"]))
        # One driver script, so perf follows every start and nothing else.
        script = os.path.join(work, "loop.py")
        with open(script, "w") as f:
            f.write(
                "import json, os, resource, subprocess, sys\n"
                "rows, env, n, cwd = json.load(open(sys.argv[1]))\n"
                "cpu = {name: [] for name, _ in rows}\n"
                "for _ in range(n):\n"
                "    for name, cmd in rows:\n"
                "        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
                "        subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,\n"
                "                       stderr=subprocess.DEVNULL, check=True)\n"
                "        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
                "        cpu[name].append((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000)\n"
                "json.dump(cpu, open(sys.argv[2], 'w'))\n")
        args = os.path.join(work, "args.json")
        json.dump([rows, env, a.n + 3, os.path.join(work, "project")], open(args, "w"))
        cpu_out = os.path.join(work, "cpu.json")
        data = os.path.join(work, "perf.data")
        subprocess.run(["perf", "record", "-q", "-o", data, "-e",
                        "sched:sched_process_exec,sched:sched_process_fork,sched:sched_process_exit",
                        "--", sys.executable, script, args, cpu_out],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        text = subprocess.run(["perf", "script", "-i", data], check=True, capture_output=True,
                              text=True).stdout
        cpu = json.load(open(cpu_out))
        report(text, rows, cpu)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(text, rows, cpu):
    """Walk the events start by start: each start is its tool's exec until its own exit."""
    names = [name for name, _ in rows]
    paths = {name: cmd[0] for name, cmd in rows}

    def runs(name, fname):
        return fname == paths[name] or (paths[name] == "bwrap" and fname.endswith("/bwrap"))

    starts = {name: [] for name in names}
    # The driver starts the tools in this order, round after round.
    order = itertools.cycle(names)
    cur = None
    for line in text.splitlines():
        m = EVENT.match(line)
        if not m:
            continue
        comm, pid, t, ev, rest = m.group(1), int(m.group(2)), float(m.group(3)) * 1000, m.group(4), m.group(5)
        if cur is None and ev == "sched_process_exec":
            fname = re.search(r"filename=(\S+)", rest).group(1)
            if any(runs(n, fname) for n in names):
                tool = next(order)
                if not runs(tool, fname):
                    sys.exit("starts out of order: %s for %s" % (fname, tool))
                cur = {"tool": tool, "pid": pid, "t0": t}
                continue
        if cur is None:
            continue
        if ev == "sched_process_exec" and "filename=/proc/self/exe" in rest:
            cur["init"] = pid
            cur["init_exec"] = t
        elif ev == "sched_process_fork" and "init" not in cur:
            # A forked init (`sys::fork_init`): cordon's first fork is the namespaces' helper,
            # whose one fork is init. An exec'd init's cordon forks threads, which fork nothing.
            parent = int(re.search(r"\bpid=(\d+)", rest).group(1))
            child = int(re.search(r"child_pid=(\d+)", rest).group(1))
            if parent == cur["pid"] and "helper" not in cur:
                cur["helper"] = child
            elif parent == cur.get("helper"):
                cur["init"] = child
                cur["init_exec"] = t
        elif ev == "sched_process_fork" and "fork_cmd" not in cur and \
                re.search(r"\bpid=%d " % cur.get("init", -1), rest):
            cur["fork_cmd"] = t
        elif ev == "sched_process_exec" and rest.startswith("filename=/usr/bin/true"):
            cur["cmd_exec"] = t
        elif ev == "sched_process_exit" and comm == "true":
            cur["cmd_exit"] = t
        elif ev == "sched_process_exit" and pid == cur.get("init"):
            cur["init_exit"] = t
        elif ev == "sched_process_exit" and pid == cur["pid"]:
            cur["end"] = t
            starts[cur["tool"]].append(cur)
            cur = None
    print("| from the tool's exec, ms (medians) | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))

    def cell(name, key, prev):
        done = [s for s in starts[name][3:] if key in s and (prev is None or prev in s)]
        if not done:
            return "–"
        at = statistics.median(s[key] - s["t0"] for s in done)
        step = statistics.median(s[key] - (s[prev] if prev else s["t0"]) for s in done)
        return "%.2f (+%.2f)" % (at, step)

    prev = None
    for key, label in CORDON_MARKS:
        cells = []
        for name in names:
            if name == "bwrap" and key in ("init_exec", "fork_cmd", "init_exit"):
                cells.append("–")
            elif name == "bwrap":
                p = {"cmd_exec": None, "cmd_exit": "cmd_exec", "end": "cmd_exit"}[key]
                cells.append(cell(name, key, p))
            else:
                cells.append(cell(name, key, prev))
        print("| %s | %s |" % (label, " | ".join(cells)))
        prev = key
    print("| CPU time of the start (all its processes) | " +
          " | ".join("%.2f" % statistics.median(cpu[n][3:]) for n in names) + " |")


if __name__ == "__main__":
    main()
