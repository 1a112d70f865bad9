//! Host unix sockets, named and abstract, reached for from inside (attacks 32-34 of the
//! battery's table in `escape_kernel.rs`).

use std::os::unix::fs::PermissionsExt;

use super::*;

// ---- host unix sockets -----------------------------------------------------------------------

/// A host unix socket server at `path` (or abstract `@name` when it starts with '@'), owned so
/// the variant's user may connect on the host; counts accepted connections.
struct SockServer {
    listener: std::os::unix::net::UnixListener,
    path: Option<PathBuf>,
}

impl SockServer {
    fn at(path: &Path) -> SockServer {
        let _ = std::fs::remove_file(path);
        let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
        listener.set_nonblocking(true).unwrap();
        SockServer {
            listener,
            path: Some(path.to_path_buf()),
        }
    }

    fn abstract_(name: &str) -> SockServer {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
        let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        SockServer {
            listener,
            path: None,
        }
    }

    fn accepted(&self) -> usize {
        std::iter::from_fn(|| self.listener.accept().ok()).count()
    }
}

impl Drop for SockServer {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `python3` connecting to each of `targets` (a path, or `\0name` for abstract), printing
/// `CONNECT_i=ok|errno=N`.
fn connect_script(targets: &[String]) -> String {
    targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "/usr/bin/python3 -c 'import socket, sys\ns = socket.socket(socket.AF_UNIX)\n\
                 try:\n    s.connect(sys.argv[1].replace(\"@\", \"\\0\", 1)); print(\"CONNECT_{i}=ok\")\n\
                 except OSError as e:\n    print(\"CONNECT_{i}=errno=%d\" % e.errno)' '{t}'"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Connect on the host, as the variant's user: whether it worked.
fn host_connects(env: &Env, target: &str) -> bool {
    let script = connect_script(&[target.to_string()]);
    let o = host_cmd(env, "sh").arg("-c").arg(&script).output().unwrap();
    String::from_utf8_lossy(&o.stdout).contains("CONNECT_0=ok")
}

// Layers: the copy-on-write home (a socket the host made under the home is reached through
// overlayfs, whose inode is not the host socket's: ECONNREFUSED) and the /run mask (every
// runtime socket: D-Bus at /run/user/UID/bus, docker.sock, agents': ENOENT). Host side: the
// servers accepted nothing; the same connects from the host work. Not logged per connect (the
// masks are logged at start, checked).
both!(host_unix_sockets_are_unreachable, |env: Env| {
    if !is_root() {
        skip("root", "placing host sockets under /run");
        return;
    }
    let uid = env.uid();
    let home_sock = env.home.join(".cache/escape-kernel.sock");
    std::fs::create_dir_all(home_sock.parent().unwrap()).unwrap();
    env.own(&env.home.join(".cache"));
    let run_sock = PathBuf::from(format!("/run/{}.sock", token("cordon-escape")));
    let user_run = PathBuf::from(format!("/run/user/{uid}"));
    let made_user_run = !user_run.exists();
    std::fs::create_dir_all(&user_run).unwrap();
    let bus = user_run.join("bus");
    // The real D-Bus session bus if there is one, else one of ours at its place.
    let own_bus = (!bus.exists()).then(|| SockServer::at(&bus));
    let servers = [SockServer::at(&home_sock), SockServer::at(&run_sock)];
    let mut targets = vec![
        home_sock.display().to_string(),
        run_sock.display().to_string(),
        bus.display().to_string(),
    ];
    if Path::new("/var/run/docker.sock").exists() {
        targets.push("/var/run/docker.sock".into());
    }
    let got = attack(&env, &[], &connect_script(&targets));
    let result: Vec<String> = (0..targets.len())
        .map(|i| got.get(&format!("CONNECT_{i}")).to_string())
        .collect();
    let in_sandbox: Vec<usize> = servers.iter().map(|s| s.accepted()).collect();
    let bus_hits = own_bus.as_ref().map(|s| s.accepted());
    // Control before cleaning up: the host's own connects work.
    let control: Vec<bool> = targets[..2]
        .iter()
        .map(|t| host_connects(&env, t))
        .collect();
    if let Some(s) = own_bus.as_ref()
        && host_connects(&env, &bus.display().to_string())
    {
        assert_eq!(s.accepted(), 1, "control: the bus takes host connections");
    }
    drop(own_bus);
    if made_user_run {
        let _ = std::fs::remove_dir(&user_run);
        let _ = std::fs::remove_dir("/run/user");
    }
    for (t, r) in targets.iter().zip(&result) {
        assert_ne!(r, "ok", "{t} reached from inside\n{}", got.text());
    }
    assert_eq!(result[1], ENOENT, "{}", got.text());
    assert_eq!(result[2], ENOENT, "{}", got.text());
    assert_eq!(bus_hits.unwrap_or(0), 0);
    assert_eq!(
        in_sandbox,
        [0, 0],
        "a sandboxed connect reached a host server"
    );
    assert_eq!(control, [true, true], "control: the host connects");
    assert_eq!(
        servers.iter().map(|s| s.accepted()).collect::<Vec<_>>(),
        [1, 1],
        "control: one accept per host connect"
    );
    let masked_run = events(&env).iter().any(|e| {
        e["layer"] == "filesystem" && e["action"] == "deny" && e["detail"]["path"] == "/run"
    });
    assert!(masked_run, "the /run mask is not in the log");
});

// Layers: the network namespace (abstract unix sockets belong to it: ECONNREFUSED inside) and
// Landlock's abstract-socket scoping (ABI 6), which cannot be shown alone while the network
// namespace stands. Host side: the server accepted nothing; the host connects. Not logged.
both!(host_abstract_socket_is_unreachable, |env: Env| {
    let name = token("cordon-escape-abstract");
    let server = SockServer::abstract_(&name);
    let target = format!("@{name}");
    let got = attack(&env, &[], &connect_script(std::slice::from_ref(&target)));
    got.is("CONNECT_0", "errno=111");
    assert_eq!(server.accepted(), 0);
    assert!(host_connects(&env, &target), "control: the host connects");
    assert_eq!(server.accepted(), 1);
});

// Layer: the mount fence's mask of `$XDG_RUNTIME_DIR` (the built-in policy's deny list names it
// wherever it is, so a runtime directory outside /run — no logind: some WSL and container
// setups — is hidden like /run/user/UID). A host D-Bus `bus` there: EACCES inside (the mask is
// an empty tmpfs of mode 000), the same with Landlock off. Landlock is no second layer here:
// connect() to a named socket is none of its filesystem rights, so with the mask off (control)
// the connect reaches the host. The server
// accepted nothing from a fenced run; the host's own connect works. Logged: the mask at start.
// cordon's own brokers' directory (`$XDG_RUNTIME_DIR/cordon`) is inside the mask.
both!(runtime_dir_outside_run_is_masked, |env: Env| {
    let runtime = common::runtime_dir(&env);
    let bus = runtime.join("bus");
    let server = SockServer::at(&bus);
    let script = format!(
        "{}\nls -A '{}' | wc -l | sed 's/^/LISTED=/'",
        connect_script(&[bus.display().to_string()]),
        runtime.display()
    );
    let run = |off: &str| {
        let _ = std::fs::remove_file(&env.audit);
        let o = env
            .cordon()
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("CORDON_TEST_LAYER_OFF", off)
            .args(["run", "--no-tty", "--audit"])
            .arg(&env.audit)
            .args(["--", "sh", "-c"])
            .arg(common::marked(&script))
            .output()
            .unwrap();
        let got = Got::parse(o);
        common::assert_ran(&got.o);
        got
    };
    let got = run("");
    got.is("CONNECT_0", EACCES);
    // Neither the bus nor cordon's own brokers show: the directory cannot be listed.
    got.is("LISTED", "0");
    let masked = events(&env).iter().any(|e| {
        e["layer"] == "filesystem"
            && e["action"] == "deny"
            && e["detail"]["path"] == runtime.display().to_string()
    });
    assert!(masked, "the runtime dir's mask is not in the log");
    run("landlock").is("CONNECT_0", EACCES);
    assert_eq!(
        server.accepted(),
        0,
        "a fenced connect reached the host bus"
    );
    // Landlock alone: connect() to a named socket is none of its filesystem rights.
    run("mounts").is("CONNECT_0", "ok");
    assert_eq!(
        server.accepted(),
        1,
        "control: without the mask, the connect arrives"
    );
    assert!(
        host_connects(&env, &bus.display().to_string()),
        "control: the host connects"
    );
    assert_eq!(server.accepted(), 1, "control: one accept per host connect");
});
