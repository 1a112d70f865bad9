#!/usr/bin/env python3
"""Where `cordon run -- true` spends its time, phase by phase, from the audit log's timestamps
(ms resolution; the first event of each kind ends a phase) and the wall clock around the spawn.

Usage: python3 bench/startup-phases.py [-n 25] BIN[:POLICY] ...
  BIN     a cordon binary; POLICY an optional --policy file (e.g. one with [network] mode = "none")
  `none` as POLICY writes and uses such a file.
Binaries are run round-robin, n rounds, in a scratch dir under /var/tmp (fake HOME, XDG dirs, a
project), as the calling user. Prints a markdown table of medians. Asserts nothing; compare
columns of one run only. The last row is CPU time (user + system of the run and everything it
reaped), which a loaded machine moves far less than the wall clock.
"""
import argparse
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import time

import scratch

MARKS = [
    (("session", "start"), "exec, arguments, policy load, audit log created"),
    (("http", "apply"), "state layer, gateway + CA + HTTP layer built"),
    (("filesystem", "apply"), "host-side layout"),
    (("network", "apply"), "clone, init, TUN, gateway start"),
    (("process", "start"), "mounts, nested namespace, Landlock, seccomp, exec"),
    (("process", "exit"), "command runs, is reaped, gateway stops"),
]


def ms(e):
    return datetime.datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp() * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=25)
    ap.add_argument("specs", nargs="+")
    a = ap.parse_args()
    work, env = scratch.make("cordon-phases.")
    try:
        audit = os.path.join(work, "audit.jsonl")
        res = {s: [] for s in a.specs}
        runs = scratch.cordon_runs(work, a.specs)
        for _ in range(a.n):
            for spec in a.specs:
                if os.path.exists(audit):
                    os.unlink(audit)
                cmd = runs[spec] + ["--project", ".", "--audit", audit, "--", "true"]
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.time() * 1000
                subprocess.run(cmd, env=env, cwd=os.path.join(work, "project"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                t1 = time.time() * 1000
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000
                first = {}
                for line in open(audit):
                    e = json.loads(line)
                    first.setdefault((e["layer"], e["action"]), ms(e))
                pts = [t0]
                for key, _ in MARKS:
                    # A phase without its event (no gateway) folds into the next one.
                    pts.append(first.get(key, pts[-1]))
                pts.append(t1)
                res[spec].append([pts[i + 1] - pts[i] for i in range(len(pts) - 1)] + [t1 - t0, cpu])
        names = [n for _, n in MARKS] + ["session end to the process being gone", "total",
                                         "CPU (user + system, all processes)"]
        print("| phase | " + " | ".join(a.specs) + " |")
        print("|---|" + "---|" * len(a.specs))
        for i, name in enumerate(names):
            cells = ["%.1f" % statistics.median(r[i] for r in res[s]) for s in a.specs]
            print("| %s | %s |" % (name, " | ".join(cells)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
