//! Rendering a [`Plan`] back in the policy file schema, for `cordon check`.

use std::fmt::Write;
use std::path::Path;

use crate::plan::{
    ExecAction, HomeMode, LandlockMode, NamedRule, OnExit, PathRule, Plan, ProjectFiles,
};
use crate::schema::{quote_key, toml_string};

/// A TOML comment holding `text` on one line, whatever it contains.
fn comment(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            }
        })
        .collect()
}

fn path_string(p: &Path) -> String {
    toml_string(&p.to_string_lossy())
}

fn rules(out: &mut String, key: &str, rules: &[PathRule]) {
    if rules.is_empty() {
        let _ = writeln!(out, "{key} = []");
        return;
    }
    let _ = writeln!(out, "{key} = [");
    for r in rules {
        let _ = writeln!(
            out,
            "    {}, # {}",
            path_string(&r.path),
            comment(&r.origin)
        );
    }
    let _ = writeln!(out, "]");
}

fn names(out: &mut String, key: &str, rules: &[NamedRule]) {
    if rules.is_empty() {
        let _ = writeln!(out, "{key} = []");
        return;
    }
    let _ = writeln!(out, "{key} = [");
    for r in rules {
        let _ = writeln!(
            out,
            "    {}, # {}",
            toml_string(&r.name),
            comment(&r.origin)
        );
    }
    let _ = writeln!(out, "]");
}

/// `4294967296` → `"4G"`; sizes that are not a whole number of a unit stay in bytes.
fn size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return toml_string(&format!("{}{unit}", bytes >> shift));
        }
    }
    bytes.to_string()
}

impl Plan {
    /// The effective policy in the policy file schema, each path followed by a `# origin`
    /// comment. The project directory is listed as writable with origin `project`.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Effective cordon policy");
        let _ = writeln!(
            out,
            "# project: {}",
            comment(&self.project.to_string_lossy())
        );
        let _ = writeln!(out, "# home: {}", comment(&self.home.to_string_lossy()));
        let fs = &self.filesystem;
        let _ = writeln!(out, "\n[filesystem]");
        rules(&mut out, "readable", &fs.readable);
        rules(&mut out, "writable", &fs.writable);
        rules(&mut out, "deny", &fs.deny);
        rules(&mut out, "read_only", &fs.read_only);
        let landlock = match fs.landlock {
            LandlockMode::Required => "required",
            LandlockMode::BestEffort => "best-effort",
        };
        let _ = writeln!(out, "landlock = \"{landlock}\"");

        let _ = writeln!(out, "\n[env]");
        if self.env.pass.is_empty() {
            let _ = writeln!(out, "pass = []");
        } else {
            let _ = writeln!(out, "pass = [");
            for p in &self.env.pass {
                let _ = writeln!(out, "    {},", toml_string(p));
            }
            let _ = writeln!(out, "]");
        }
        let _ = writeln!(out, "\n[env.set]");
        for (k, v) in &self.env.set {
            let _ = writeln!(out, "{} = {}", quote_key(k), toml_string(v));
        }

        let _ = writeln!(out, "\n[limits]");
        let l = &self.limits;
        match l.memory {
            Some(m) => writeln!(out, "memory = {}", size(m)),
            None => writeln!(out, "# memory: no limit"),
        }
        .ok();
        for (key, v) in [("pids", l.pids), ("nofile", l.nofile)] {
            match v {
                Some(n) => writeln!(out, "{key} = {n}"),
                None => writeln!(out, "# {key}: no limit"),
            }
            .ok();
        }
        match l.cpu {
            Some(c) if c.is_finite() => writeln!(out, "cpu = {c:?}"),
            _ => writeln!(out, "# cpu: no limit"),
        }
        .ok();

        let sys = &self.syscalls;
        let _ = writeln!(out, "\n[syscalls]");
        let _ = writeln!(out, "# built-in denials lifted");
        names(&mut out, "allow", &sys.allow);
        let _ = writeln!(out, "# denied in addition to the built-in filter");
        names(&mut out, "deny", &sys.deny);
        let _ = writeln!(out, "nested_userns = {}", sys.nested_userns);

        let state = &self.state;
        let _ = writeln!(out, "\n[state]");
        let _ = writeln!(
            out,
            "# copy-on-write; changes reach the host only as on_exit says"
        );
        rules(&mut out, "protect", &state.protect);
        let on_exit = match state.on_exit {
            OnExit::Ask => "ask",
            OnExit::Keep => "keep",
            OnExit::Discard => "discard",
            OnExit::Pending => "pending",
        };
        let _ = writeln!(out, "on_exit = \"{on_exit}\"");
        let project_files = match state.project_files {
            ProjectFiles::Readonly => "readonly",
            ProjectFiles::Staged => "staged",
        };
        let _ = writeln!(out, "project_files = \"{project_files}\"");
        let home = match state.home {
            HomeMode::Overlay => "overlay",
            HomeMode::Readonly => "readonly",
        };
        let _ = writeln!(
            out,
            "# the home: copy-on-write layer (discarded at exit) or read-only"
        );
        let _ = writeln!(out, "home = \"{home}\"");
        let _ = writeln!(
            out,
            "# persist across sessions in cordon's own layers; never written back to the host"
        );
        rules(&mut out, "caches", &state.caches);

        let exec = &self.exec;
        let _ = writeln!(out, "\n[exec]");
        let _ = writeln!(out, "ask_timeout = {}", exec.ask_timeout_secs);
        let _ = writeln!(
            out,
            "# Rules in order; the first match decides, none matching allows."
        );
        for r in &exec.rules {
            let action = match r.action {
                ExecAction::Allow => "allow",
                ExecAction::Deny => "deny",
                ExecAction::Ask => "ask",
            };
            let _ = writeln!(out, "\n[[exec.rule]] # {}", comment(&r.origin));
            let _ = writeln!(out, "pattern = {}", toml_string(&r.pattern));
            let _ = writeln!(out, "action = \"{action}\"");
        }

        let net = &self.network;
        let _ = writeln!(out, "\n[network]");
        let mode = match net.mode {
            crate::plan::NetMode::Gateway => "gateway",
            crate::plan::NetMode::None => "none",
            crate::plan::NetMode::Host => "host",
        };
        let _ = writeln!(out, "mode = \"{mode}\"");
        let ips: Vec<String> = net.allow_ips.iter().map(|c| toml_string(c)).collect();
        let _ = writeln!(out, "allow_ips = [{}]", ips.join(", "));
        let _ = writeln!(
            out,
            "# TCP by name and port; everything else (raw IPs, UDP but DNS) is refused."
        );
        for r in &net.allow {
            let _ = writeln!(out, "\n[[network.allow]] # {}", comment(&r.origin));
            let _ = writeln!(out, "host = {}", toml_string(&r.host));
            let ports: Vec<String> = r.ports.iter().map(u16::to_string).collect();
            let _ = writeln!(out, "ports = [{}]", ports.join(", "));
        }
        let _ = writeln!(out, "\n[dns]");
        let block: Vec<String> = net.dns_block.iter().map(|b| toml_string(b)).collect();
        let _ = writeln!(
            out,
            "block = [{}] # plus the built-in blocklist",
            block.join(", ")
        );
        let hosts: Vec<String> = net
            .dns_hosts
            .iter()
            .map(|(k, v)| format!("{} = {}", toml_string(k), toml_string(&v.to_string())))
            .collect();
        let _ = writeln!(out, "hosts = {{ {} }}", hosts.join(", "));
        match net.dns_upstream {
            Some(u) => {
                let _ = writeln!(out, "upstream = {}", toml_string(&u.to_string()));
            }
            None => {
                let _ = writeln!(out, "# upstream: the host's own resolver");
            }
        }
        for p in &net.publish {
            let _ = writeln!(out, "\n[[publish]] # {}", comment(&p.origin));
            let _ = writeln!(out, "port = {}", p.port);
            let _ = writeln!(out, "host_port = {}", p.host_port);
        }

        let http = &self.http;
        let action = |a: crate::plan::HttpAction| match a {
            crate::plan::HttpAction::Allow => "allow",
            crate::plan::HttpAction::Deny => "deny",
            crate::plan::HttpAction::Ask => "ask",
            crate::plan::HttpAction::Judge => "judge",
        };
        let _ = writeln!(out, "\n[http]");
        let _ = writeln!(
            out,
            "# Requests to 80/443: rules in order, then [[network.allow]] host and port, then this."
        );
        let _ = writeln!(out, "default = \"{}\"", action(http.default));
        for r in &http.rules {
            let _ = writeln!(out, "\n[[http.rule]] # {}", comment(&r.origin));
            let _ = writeln!(out, "name = {}", toml_string(&r.name));
            let _ = writeln!(out, "host = {}", toml_string(&r.host));
            if let Some(p) = r.port {
                let _ = writeln!(out, "port = {p}");
            }
            if !r.methods.is_empty() {
                let m: Vec<String> = r.methods.iter().map(|m| toml_string(m)).collect();
                let _ = writeln!(out, "methods = [{}]", m.join(", "));
            }
            if let Some(p) = &r.path {
                let _ = writeln!(out, "path = {}", toml_string(p));
            }
            if let Some(q) = &r.query {
                let _ = writeln!(out, "query = {}", toml_string(q));
            }
            if !r.headers.is_empty() {
                let h: Vec<String> = r
                    .headers
                    .iter()
                    .map(|(k, v)| format!("{} = {}", toml_string(k), toml_string(v)))
                    .collect();
                let _ = writeln!(out, "headers = {{ {} }}", h.join(", "));
            }
            if let Some(m) = r.max_body {
                let _ = writeln!(out, "max_body = {m}");
            }
            let _ = writeln!(out, "action = \"{}\"", action(r.action));
            if let Some(reason) = &r.reason {
                let _ = writeln!(out, "reason = {}", toml_string(reason));
            }
        }
        let _ = writeln!(out, "\n[tls]");
        let pt: Vec<String> = http.passthrough.iter().map(|p| toml_string(p)).collect();
        let _ = writeln!(out, "passthrough = [{}]", pt.join(", "));
        let ca: Vec<String> = http
            .upstream_ca
            .iter()
            .map(|p| toml_string(&p.display().to_string()))
            .collect();
        let _ = writeln!(out, "upstream_ca = [{}]", ca.join(", "));
        let dlp = &http.dlp;
        let _ = writeln!(out, "\n[dlp]");
        let _ = writeln!(
            out,
            "# Secrets (token shapes, credentials' and secret-looking host variables' values) in a request's URL, headers or body prefix."
        );
        let a = match dlp.action {
            crate::plan::DlpAction::Deny => "deny",
            crate::plan::DlpAction::Ask => "ask",
            crate::plan::DlpAction::Log => "log",
            crate::plan::DlpAction::Off => "off",
        };
        let _ = writeln!(out, "action = \"{a}\"");
        let _ = writeln!(out, "max_body_bytes = {}", dlp.max_body_bytes);
        for a in &dlp.allow {
            let _ = writeln!(out, "\n[[dlp.allow]] # {}", comment(&a.origin));
            let k: Vec<String> = a.kinds.iter().map(|x| toml_string(x)).collect();
            let _ = writeln!(out, "kinds = [{}]", k.join(", "));
            let h: Vec<String> = a.hosts.iter().map(|x| toml_string(x)).collect();
            let _ = writeln!(out, "hosts = [{}]", h.join(", "));
        }
        for c in &self.credentials {
            let _ = writeln!(
                out,
                "\n[credentials.{}] # {}",
                crate::schema::quote_key(&c.name),
                comment(&c.origin)
            );
            if let Some(e) = &c.env {
                let _ = writeln!(out, "env = {}", toml_string(e));
            }
            let source = match &c.source {
                crate::plan::CredentialSource::Env(v) => format!("{{ env = {} }}", toml_string(v)),
                crate::plan::CredentialSource::File(p) => {
                    format!("{{ file = {} }}", toml_string(&p.display().to_string()))
                }
                crate::plan::CredentialSource::Command(argv) => {
                    let a: Vec<String> = argv.iter().map(|x| toml_string(x)).collect();
                    format!("{{ command = [{}] }}", a.join(", "))
                }
            };
            let _ = writeln!(out, "source = {source}");
            let h: Vec<String> = c.hosts.iter().map(|x| toml_string(x)).collect();
            let _ = writeln!(out, "hosts = [{}]", h.join(", "));
            match &c.query {
                Some(q) => {
                    let _ = writeln!(out, "query = {}", toml_string(q));
                }
                None => {
                    let _ = writeln!(out, "header = {}", toml_string(&c.header));
                }
            }
            if !c.files.is_empty() {
                let f: Vec<String> = c
                    .files
                    .iter()
                    .map(|p| toml_string(&p.display().to_string()))
                    .collect();
                let _ = writeln!(out, "files = [{}]", f.join(", "));
            }
            let _ = writeln!(out, "format = {}", toml_string(&c.format));
            let _ = writeln!(out, "inject = {}", c.inject);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{
        EnvPlan, ExecPlan, ExecRule, FilesystemPlan, LimitsPlan, NamedRule, StatePlan, SyscallsPlan,
    };

    fn plan() -> Plan {
        Plan {
            project: "/work/p".into(),
            home: "/home/u".into(),
            filesystem: FilesystemPlan {
                readable: vec![PathRule::new("/", "built-in")],
                writable: vec![
                    PathRule::new("/work/p", "project"),
                    PathRule::new(
                        "/home/u/.cache/a \"q\"",
                        "/home/u/.config/cordon/cordon.toml:3",
                    ),
                ],
                deny: vec![PathRule::new("/home/u/.ssh", "evil\norigin")],
                read_only: vec![],
                landlock: LandlockMode::BestEffort,
            },
            env: EnvPlan {
                pass: vec!["TERM".into(), "LC_*".into()],
                set: [("CORDON_SANDBOX".to_string(), "1".to_string())].into(),
            },
            limits: LimitsPlan {
                memory: Some(4 << 30),
                pids: Some(100),
                cpu: Some(1.5),
                nofile: None,
            },
            syscalls: SyscallsPlan {
                allow: vec![NamedRule {
                    name: "ptrace".into(),
                    origin: "/home/u/.config/cordon/cordon.toml:9".into(),
                }],
                deny: vec![],
                nested_userns: true,
            },
            exec: ExecPlan {
                rules: vec![
                    ExecRule {
                        pattern: "sudo *".into(),
                        action: ExecAction::Deny,
                        origin: "built-in".into(),
                    },
                    ExecRule {
                        pattern: "git push \"x\" *".into(),
                        action: ExecAction::Ask,
                        origin: "/p/cordon.toml:4".into(),
                    },
                ],
                ask_timeout_secs: 30,
            },
            state: StatePlan {
                protect: vec![
                    PathRule::new("/home/u/.bashrc", "built-in"),
                    PathRule::new("/home/u/.claude", "/p/cordon.toml:7"),
                ],
                on_exit: OnExit::Pending,
                project_files: ProjectFiles::Staged,
                home: HomeMode::Readonly,
                caches: vec![PathRule::new("/home/u/.npm", "built-in")],
            },
            network: crate::plan::NetworkPlan {
                allow: vec![crate::plan::HostRule {
                    host: "*.example.com".into(),
                    ports: vec![443, 22],
                    origin: "/p/cordon.toml:9".into(),
                }],
                dns_hosts: [("db.test".to_string(), "127.0.0.1".parse().unwrap())].into(),
                publish: vec![crate::plan::Publish {
                    port: 3000,
                    host_port: 8080,
                    origin: "/p/cordon.toml:12".into(),
                }],
                ..Default::default()
            },
            http: crate::plan::HttpPlan {
                rules: vec![crate::plan::HttpRule {
                    name: "api".into(),
                    host: "api.example.com".into(),
                    port: None,
                    methods: vec!["POST".into()],
                    path: Some("/v1/*".into()),
                    query: None,
                    headers: vec![("content-type".into(), "application/json*".into())],
                    max_body: Some(1024),
                    action: crate::plan::HttpAction::Allow,
                    reason: None,
                    origin: "/p/cordon.toml:20".into(),
                }],
                passthrough: vec!["*.pinned.example".into()],
                ..Default::default()
            },
            credentials: vec![crate::plan::CredentialPlan {
                name: "gh".into(),
                env: Some("GH_TOKEN".into()),
                source: crate::plan::CredentialSource::Command(vec![
                    "gh".into(),
                    "auth".into(),
                    "token".into(),
                ]),
                hosts: vec!["github.com".into()],
                header: "authorization".into(),
                query: None,
                files: vec!["/home/u/.config/gh/hosts.yml".into()],
                format: "Basic x-access-token:{}".into(),
                inject: true,
                origin: "/p/cordon.toml:30".into(),
            }],
        }
    }

    #[test]
    fn renders_the_file_schema_with_origins() {
        let text = plan().to_toml();
        assert!(text.contains("    \"/work/p\", # project\n"), "{text}");
        assert!(
            text.contains("# /home/u/.config/cordon/cordon.toml:3\n"),
            "{text}"
        );
        assert!(text.contains("# evil\\norigin\n"), "{text}");
        assert!(text.contains("landlock = \"best-effort\""));
        assert!(text.contains("memory = \"4G\""));
        assert!(text.contains("cpu = 1.5"));
        assert!(text.contains("# nofile: no limit"));
        assert!(text.contains("read_only = []"));
        assert!(
            text.contains("allow = [\n    \"ptrace\", # /home/u/.config/cordon/cordon.toml:9\n]"),
            "{text}"
        );
        assert!(text.contains("deny = []\nnested_userns = true\n"), "{text}");
        assert!(
            text.contains("[[exec.rule]] # built-in\npattern = \"sudo *\"\naction = \"deny\"\n"),
            "{text}"
        );
        assert!(text.contains("ask_timeout = 30\n"), "{text}");
        assert!(
            text.contains(
                "\n[state]\n# copy-on-write; changes reach the host only as on_exit says\n\
                 protect = [\n    \"/home/u/.bashrc\", # built-in\n    \"/home/u/.claude\", # /p/cordon.toml:7\n]\n\
                 on_exit = \"pending\"\nproject_files = \"staged\"\n"
            ),
            "{text}"
        );
        let mut p = plan();
        p.state = StatePlan::default();
        let text = p.to_toml();
        assert!(
            text.contains("protect = []\non_exit = \"ask\"\nproject_files = \"readonly\"\n"),
            "{text}"
        );
    }

    #[test]
    fn output_parses_back_to_the_same_values() {
        let p = plan();
        let v: toml::Table = toml::from_str(&p.to_toml()).unwrap();
        let fs = v["filesystem"].as_table().unwrap();
        let writable: Vec<_> = fs["writable"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        assert_eq!(writable, ["/work/p", "/home/u/.cache/a \"q\""]);
        assert_eq!(v["env"]["set"]["CORDON_SANDBOX"].as_str(), Some("1"));
        assert_eq!(v["limits"]["pids"].as_integer(), Some(100));
        assert_eq!(v["limits"]["cpu"].as_float(), Some(1.5));
        assert!(v["limits"].get("nofile").is_none());
        assert_eq!(v["syscalls"]["allow"][0].as_str(), Some("ptrace"));
        assert_eq!(v["syscalls"]["nested_userns"].as_bool(), Some(true));
        assert_eq!(v["exec"]["ask_timeout"].as_integer(), Some(30));
        let rules = v["exec"]["rule"].as_array().unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[1]["pattern"].as_str(), Some("git push \"x\" *"));
        assert_eq!(rules[1]["action"].as_str(), Some("ask"));
        let protect: Vec<_> = v["state"]["protect"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        assert_eq!(protect, ["/home/u/.bashrc", "/home/u/.claude"]);
        assert_eq!(v["state"]["on_exit"].as_str(), Some("pending"));
        assert_eq!(v["state"]["project_files"].as_str(), Some("staged"));
        assert_eq!(v["network"]["mode"].as_str(), Some("gateway"));
        let allow = v["network"]["allow"].as_array().unwrap();
        assert_eq!(allow[0]["host"].as_str(), Some("*.example.com"));
        assert_eq!(allow[0]["ports"][1].as_integer(), Some(22));
        assert_eq!(v["dns"]["hosts"]["db.test"].as_str(), Some("127.0.0.1"));
        assert_eq!(v["publish"][0]["host_port"].as_integer(), Some(8080));
        assert_eq!(v["http"]["default"].as_str(), Some("deny"));
        let rule = &v["http"]["rule"][0];
        assert_eq!(rule["name"].as_str(), Some("api"));
        assert_eq!(
            rule["headers"]["content-type"].as_str(),
            Some("application/json*")
        );
        assert_eq!(rule["max_body"].as_integer(), Some(1024));
        assert_eq!(
            v["tls"]["passthrough"][0].as_str(),
            Some("*.pinned.example")
        );
        // Every value renders as the serde name the plan uses, so JSON and TOML agree.
        for (e, name) in [
            (OnExit::Ask, "ask"),
            (OnExit::Keep, "keep"),
            (OnExit::Discard, "discard"),
            (OnExit::Pending, "pending"),
        ] {
            let mut p = plan();
            p.state.on_exit = e;
            let v: toml::Table = toml::from_str(&p.to_toml()).unwrap();
            assert_eq!(v["state"]["on_exit"].as_str(), Some(name));
            assert_eq!(serde_json::to_value(e).unwrap(), name);
        }
        assert_eq!(
            serde_json::to_value(ProjectFiles::Readonly).unwrap(),
            "readonly"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(size(4 << 30), "\"4G\"");
        assert_eq!(size(1536 << 20), "\"1536M\"");
        assert_eq!(size(1000), "1000");
        assert_eq!(size(0), "0");
    }
}
