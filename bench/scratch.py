"""The scratch caller the Python benches share: a directory under /var/tmp (not /tmp, which
cordon replaces inside) holding a project, a fake HOME and cordon's XDG directories, and the
environment that points every tool there, so no policy, trust store or state of the caller
leaks into a run."""
import os
import shutil
import tempfile


def make(prefix):
    """A new scratch directory (0755: an unprivileged user may reach it) and its environment."""
    work = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
    os.chmod(work, 0o755)
    for d in ("project", "state", "config", "data", "home"):
        os.makedirs(os.path.join(work, d))
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "HOME": os.path.join(work, "home"),
        "XDG_STATE_HOME": os.path.join(work, "state"),
        "XDG_CONFIG_HOME": os.path.join(work, "config"),
        "XDG_DATA_HOME": os.path.join(work, "data"),
    }
    return work, env


def none_policy(work):
    """A policy file in `work` with `[network] mode = "none"`; returns its path."""
    path = os.path.join(work, "none.toml")
    with open(path, "w") as f:
        f.write('[network]\nmode = "none"\n')
    return path


def copy_binaries(work, binaries):
    """Copies of `binaries` made in `work` now, by path: {original: copy}. Binaries compared in
    one run must be exec'd from files the page cache holds alike: the same bytes ran ~1 ms
    slower per start from a copy written hours earlier than from one just written (~100 more
    page faults; issue #18, start-up's eleventh round). bench/sandbox-start.sh copies too."""
    os.makedirs(os.path.join(work, "bin"), exist_ok=True)
    copies = {}
    for b in binaries:
        if b not in copies:
            copies[b] = os.path.join(work, "bin", "%d-%s" % (len(copies), os.path.basename(b)))
            shutil.copy2(b, copies[b])
    return copies


def cordon_runs(work, specs):
    """`cordon run --no-tty [--policy POLICY]` for each spec `BIN[:POLICY]` (`none` as POLICY: a
    policy with [network] mode = "none", written in `work`), run from copies of the binaries
    made now (see copy_binaries); by spec."""
    copies = copy_binaries(work, [spec.partition(":")[0] for spec in specs])
    none = None
    runs = {}
    for spec in specs:
        binary, _, pol = spec.partition(":")
        if pol == "none":
            none = none or none_policy(work)
            pol = none
        runs[spec] = [copies[binary], "run", "--no-tty"] + (["--policy", pol] if pol else [])
    return runs
