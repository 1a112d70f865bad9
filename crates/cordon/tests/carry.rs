//! What a session leaves behind for the host or a later session to run, black-box, as root and
//! as an unprivileged user, each checked on the host side after the session: the cache layers
//! carry nothing from one project's session to another project's builds (a second session of
//! the same project still finds its downloads warm), and no set-id or file-capability file the
//! session made stays in the project.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{Env, Who, need, show};

/// A second project beside the first, the variant's user's.
fn other_project(env: &Env) -> PathBuf {
    let p = env.home.join("other");
    std::fs::create_dir_all(&p).unwrap();
    env.own(&p);
    p
}

/// `cordon run … -- sh -c SCRIPT` in `project`.
fn run_in(env: &Env, project: &Path, script: &str) -> Output {
    let mut c = env.cordon();
    c.current_dir(project)
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--", "sh", "-c", script]);
    let _ = std::fs::remove_file(&env.audit);
    c.output().unwrap()
}

#[track_caller]
fn ok_in(env: &Env, project: &Path, script: &str) -> String {
    let o = run_in(env, project, script);
    assert_eq!(o.status.code(), Some(0), "{script}\n{}", show(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

// Session A rewrites an extracted crate (a cache the host has) and a Go module's tree (one the
// host lacks, adopted as a layer at exit): another project's session sees the host's crate and
// no Go module; A's next session sees its own writes (the control: they were kept, so a
// shared layer would have handed them on). The host's caches never change.
both!(a_cache_layer_is_the_projects_own, |env: Env| {
    let src = ".cargo/registry/src/index.crates.io-0000/dep-1.0.0/src/lib.rs";
    env.write_home(src, "HOST\n");
    let b = other_project(&env);
    let module = "go/pkg/mod/example.com/dep@v1.0.0";
    let out = ok_in(
        &env,
        &env.project,
        &format!(
            "set -e; echo POISON-A > ~/{src}; mkdir -p ~/{module}; echo POISON-A > ~/{module}/dep.go; \
             cat ~/{src} ~/{module}/dep.go"
        ),
    );
    assert_eq!(out, "POISON-A\nPOISON-A\n");
    assert_eq!(
        std::fs::read_to_string(env.home.join(src)).unwrap(),
        "HOST\n",
        "written back to the host's cache"
    );
    assert!(!env.home.join("go").exists(), "written to the host's home");
    let look = format!("cat ~/{src}; cat ~/{module}/dep.go 2>/dev/null || echo NO-MODULE");
    // Another project: the host's crate, no module.
    assert_eq!(ok_in(&env, &b, &look), "HOST\nNO-MODULE\n");
    // The control: the same project's next session has both.
    assert_eq!(ok_in(&env, &env.project, &look), "POISON-A\nPOISON-A\n");
    // And the other project's own writes stay its own as well.
    ok_in(&env, &b, &format!("echo FROM-B > ~/{src}"));
    assert_eq!(ok_in(&env, &env.project, &look), "POISON-A\nPOISON-A\n");
    assert_eq!(ok_in(&env, &b, &look), "FROM-B\nNO-MODULE\n");
    // `cordon cache list` names each layer's project.
    let list = env.cordon().args(["cache", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains(&format!("(project {})", env.project.display()))
            && text.contains(&format!("(project {})", b.display())),
        "{}",
        show(&list)
    );
});

/// A module proxy on disk (`GOPROXY=file://…`) serving `example.com/dep v1.0.0`, whose
/// `Probe` is "dep-ok".
fn go_proxy(env: &Env) -> PathBuf {
    let proxy = env.base.join("goproxy");
    let v = proxy.join("example.com/dep/@v");
    std::fs::create_dir_all(&v).unwrap();
    std::fs::write(v.join("list"), "v1.0.0\n").unwrap();
    std::fs::write(
        v.join("v1.0.0.info"),
        "{\"Version\":\"v1.0.0\",\"Time\":\"2024-01-01T00:00:00Z\"}\n",
    )
    .unwrap();
    std::fs::write(v.join("v1.0.0.mod"), "module example.com/dep\n").unwrap();
    let zipped = std::process::Command::new(common::net::PY)
        .arg("-c")
        .arg(
            "import sys, zipfile\n\
             z = zipfile.ZipFile(sys.argv[1], 'w')\n\
             z.writestr('example.com/dep@v1.0.0/go.mod', 'module example.com/dep\\n')\n\
             z.writestr('example.com/dep@v1.0.0/dep.go', 'package dep\\n\\nconst Probe = \"dep-ok\"\\n')\n\
             z.close()\n",
        )
        .arg(v.join("v1.0.0.zip"))
        .status()
        .unwrap();
    assert!(zipped.success());
    env.own(&proxy);
    proxy
}

/// The Go program [`go_app`] writes.
const MAIN_GO: &str = "package main\n\nimport (\n\t\"fmt\"\n\t\"example.com/dep\"\n)\n\nfunc main() { fmt.Println(\"GO\", dep.Probe) }\n";

/// A Go program in `dir` that prints the dependency's probe.
fn go_app(env: &Env, dir: &Path) {
    std::fs::write(
        dir.join("go.mod"),
        "module example.com/app\n\ngo 1.19\n\nrequire example.com/dep v1.0.0\n",
    )
    .unwrap();
    std::fs::write(dir.join("main.go"), MAIN_GO).unwrap();
    env.own(dir);
}

// `go build` for real: the first session of project A downloads a module (from a proxy on
// disk) and rewrites its extracted tree; A's second session builds with the proxy off (warm,
// nothing fetched) and runs A's rewrite — what a shared cache would hand to every project.
// Project B, with an intact go.mod, does not find the module with the proxy off and, with it
// on, builds the clean module: A's rewrite never runs in B's build.
both!(a_go_build_is_warm_for_its_project_only, |env: Env| {
    if !need(&["go"], "a Go build through the cache layers") {
        return;
    }
    let proxy = go_proxy(&env);
    let b = other_project(&env);
    go_app(&env, &env.project);
    go_app(&env, &b);
    let go = |proxy_url: &str| {
        format!(
            "export GOPROXY={proxy_url} GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local \
             GOTELEMETRY=off; go build -o app . && ./app"
        )
    };
    let online = go(&format!("file://{}", proxy.display()));
    let offline = go("off");
    let m = "~/go/pkg/mod/example.com/dep@v1.0.0";
    let out = ok_in(
        &env,
        &env.project,
        &format!(
            "set -e; {online}; chmod -R u+w {m}; \
             sed -i s/dep-ok/POISON-A/ {m}/dep.go"
        ),
    );
    assert_eq!(out, "GO dep-ok\n");
    assert!(!env.home.join("go").exists(), "written to the host's home");
    // Warm for A, with nothing to fetch from: and A's own rewrite is what it builds.
    assert_eq!(ok_in(&env, &env.project, &offline), "GO POISON-A\n");
    // Not for B: nothing there with the proxy off, the clean module with it on.
    let o = run_in(&env, &b, &offline);
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("GOPROXY=off"),
        "{}",
        show(&o)
    );
    assert_eq!(ok_in(&env, &b, &online), "GO dep-ok\n");
    // And B's download is warm for B.
    assert_eq!(ok_in(&env, &b, &offline), "GO dep-ok\n");
});

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// A policy with nested sandboxes on, as the claude and codex profiles have.
fn nested_policy(env: &Env) -> String {
    env.policy_file("nested.toml", "[syscalls]\nnested_userns = true\n")
}

// A set-id file made in the project, directly (`chmod u+s`, which the filter refuses root and
// allows a user, whose set-id files are their own) or by a nested sandbox's overlay, whose
// copy-up keeps `/usr/bin/su`'s owner and setuid bit without any call the filter sees: after
// the session the host's files have no set-id bit, and the exit names them. The control: a
// setuid file the project had before, untouched, keeps its bit (the host-side check sees one
// when it is there), and inside the session the overlay's copy did carry it.
both!(set_id_files_never_reach_the_host, |env: Env| {
    if !need(&["unshare"], "a nested sandbox's overlay") {
        return;
    }
    // Mode after owner: a chown clears set-id bits.
    let before = env.write("tool-before", "#!/bin/sh\n");
    std::fs::set_permissions(&before, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // Older than the session by more than the clock's slack (see cordon_state::setid).
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let kept = mode(&before);
    let pol = nested_policy(&env);
    let script = "cp /usr/bin/su ./direct; chmod u+s ./direct; echo DIRECT=$?\n\
         mkdir hid; cp /bin/true hid/y; chmod u+s hid/y; chmod 000 hid\n\
         mkdir -p ov/u ov/w ov/m\n\
         unshare -rm sh -c 'mount -t overlay ov -o lowerdir=/usr/bin,upperdir=$PWD/ov/u,workdir=$PWD/ov/w $PWD/ov/m && touch ov/m/su'; echo OVERLAY=$?\n\
         stat -c 'INSIDE %a' ov/u/su direct 2>&1; true";
    let o = env.run_with(&["--policy", &pol], script);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let copied_up = out.contains("OVERLAY=0");
    let inside: Vec<u32> = out
        .lines()
        .filter_map(|l| l.strip_prefix("INSIDE "))
        .filter_map(|m| u32::from_str_radix(m, 8).ok())
        .collect();
    match env.who {
        Who::Root => {
            // The filter refused the chmod; the overlay's copy-up did what it could not.
            assert!(out.contains("DIRECT=1"), "{}", show(&o));
            assert!(
                copied_up,
                "the nested overlay did not copy up: {}",
                show(&o)
            );
            assert!(
                inside.iter().any(|m| m & 0o4000 != 0),
                "the copy-up carried no setuid bit inside (nothing to show): {}",
                show(&o)
            );
        }
        Who::User => {
            // A user may chmod its own file; a user's nested root cannot copy up a file of
            // the host's root (its owner has no uid there).
            assert!(out.contains("DIRECT=0"), "{}", show(&o));
            assert!(
                inside.iter().any(|m| m & 0o4000 != 0),
                "the setuid bit was never set inside (nothing to show): {}",
                show(&o)
            );
            // A directory of its own it made unreadable: the user's cordon cannot look
            // inside, and says so rather than pass over it.
            assert!(
                err.contains("hid may keep a set-id bit or file capability"),
                "{}",
                show(&o)
            );
        }
    }
    // The host side: no set-id file the session made.
    for f in ["direct", "ov/u/su"] {
        let p = env.project.join(f);
        if p.exists() {
            assert_eq!(
                mode(&p) & 0o6000,
                0,
                "{f} reached the host set-id: {:o}\n{}",
                mode(&p),
                show(&o)
            );
        }
    }
    assert!(
        err.contains("set-id bits or file capabilities stripped from"),
        "{}",
        show(&o)
    );
    let log = std::fs::read_to_string(&env.audit).unwrap_or_default();
    assert!(
        log.contains("set-id bits stripped from a file the session made"),
        "{log}"
    );
    // The control: untouched, the project's own setuid file keeps its bit.
    assert_eq!(
        mode(&before),
        kept,
        "a file the session did not touch changed"
    );
    assert_ne!(
        kept & 0o4000,
        0,
        "the host keeps no setuid bit here: nothing shown"
    );
});

// File capabilities set from a nested user namespace (root's is refused the xattr calls; a
// user's nested root may set one scoped to the user): none is on the host's file after the
// session.
both!(file_capabilities_are_stripped_at_exit, |env: Env| {
    if !need(&["unshare", "setcap", "getcap"], "file capabilities") {
        return;
    }
    let pol = nested_policy(&env);
    let o = env.run_with(
        &["--policy", &pol],
        // By path: a user's PATH has no sbin.
        "cp /bin/true ./x; unshare -r /usr/sbin/setcap cap_net_raw+ep ./x; echo SET=$?; \
         /usr/sbin/getcap ./x",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let host = std::process::Command::new("getcap")
        .arg(env.project.join("x"))
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&host.stdout).into_owned();
    assert_eq!(
        host.trim(),
        "",
        "a capability reached the host: {host}\n{}",
        show(&o)
    );
    if env.who == Who::User {
        // The control: inside, the capability was there (so the host check had one to miss).
        assert!(
            out.contains("SET=0") && out.contains("cap_net_raw"),
            "{}",
            show(&o)
        );
        let log = std::fs::read_to_string(&env.audit).unwrap_or_default();
        assert!(log.contains("file capabilities stripped"), "{log}");
        // Its content is the program it was.
        assert_eq!(
            std::fs::read(env.project.join("x")).unwrap(),
            std::fs::read("/bin/true").unwrap()
        );
    }
});
