//! Rendering a [`Plan`] back in the policy file schema, for `cordon check`: each section
//! renders its own part ([`crate::sections::Section::render`]).

use std::time::SystemTime;

use crate::plan::Plan;
use crate::sections::{Render, comment};

impl Plan {
    /// The effective policy in the policy file schema, each rule followed by a `# origin`
    /// comment. The project directory is listed as writable with origin `project`.
    pub fn to_toml(&self) -> String {
        self.render(Render::default())
    }

    /// [`Plan::to_toml`], with the time left at `now` beside each rule that ends.
    pub fn to_toml_at(&self, now: SystemTime) -> String {
        self.render(Render {
            now: Some(now),
            ..Render::default()
        })
    }

    fn render(&self, mut out: Render) -> String {
        out.line("# Effective cordon policy");
        out.line(format!(
            "# project: {}",
            comment(&self.project.to_string_lossy())
        ));
        out.line(format!("# home: {}", comment(&self.home.to_string_lossy())));
        self.render_sections(&mut out);
        out.out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::plan::*;

    /// A plan with every key of every section set to something other than its default, so
    /// that rendering it shows every key.
    pub(crate) fn full_plan() -> Plan {
        let glob = |s: &str| HostPattern::glob(s).unwrap();
        Plan {
            project: "/work/p".into(),
            home: "/home/u".into(),
            learning: false,
            filesystem: full_filesystem(),
            env: EnvPlan {
                pass: vec!["TERM".into(), "LC_*".into()],
                set: [("CORDON_SANDBOX".to_string(), "1".to_string())].into(),
            },
            limits: LimitsPlan {
                memory: Some(4 << 30),
                pids: Some(100),
                cpu: Some(1.5),
                nofile: Some(4096),
            },
            sandbox: SandboxPlan {
                backend: Backend::Vm,
                vm: VmPlan {
                    accel: VmAccel::Tcg,
                    memory_mib: 4096,
                    cpus: 4,
                    kernel: Some("/boot/vmlinuz-6.1.0-57-amd64".into()),
                },
            },
            syscalls: SyscallsPlan {
                allow: vec![NamedRule {
                    name: "ptrace".into(),
                    origin: "/home/u/.config/cordon/cordon.toml:9".into(),
                }],
                deny: vec![NamedRule {
                    name: "chroot".into(),
                    origin: "/p/cordon.toml:2".into(),
                }],
                nested_userns: true,
            },
            exec: full_exec(),
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
            network: full_network(),
            dns: full_dns(),
            publish: vec![Publish {
                port: 3000,
                host_port: 8080,
                origin: "/p/cordon.toml:12".into(),
            }],
            http: full_http(glob),
            mcp: full_mcp(glob),
            tls: TlsPlan {
                passthrough: vec![glob("*.pinned.example")],
                upstream_ca: vec!["/etc/ssl/test-ca.pem".into()],
            },
            judge: Some(JudgePlan {
                policy: "Reads are fine.".into(),
                api: JudgeApi::OpenAi,
                url: "https://judge.test/v1".into(),
                model: "small".into(),
                credential: Some("JUDGE_KEY".into()),
                timeout_ms: 5000,
                on_error: JudgeOnError::Ask,
                max_body_bytes: 1000,
                origin: "/p/cordon.toml:25".into(),
            }),
            dlp: DlpPlan {
                action: DlpAction::Log,
                max_body_bytes: 1000,
                allow: vec![DlpAllow {
                    kinds: vec!["jwt".into()],
                    hosts: vec![glob("auth.example.com")],
                    origin: "/p/cordon.toml:28".into(),
                }],
            },
            credentials: full_credentials(glob),
            agent: AgentPlan {
                commands: vec!["myagent".into()],
                packages: vec!["@me/myagent".into()],
                quiet: vec![glob("telemetry.myagent.test")],
            },
            ssh: SshPlan {
                agent: true,
                show: vec![PathRule::new("/home/u/.ssh/known_hosts", "built-in")],
            },
            audit: AuditPlan {
                export: vec!["journald".into(), "otlp".into()],
                otlp_endpoint: Some("http://127.0.0.1:4318/v1/logs".into()),
                journald_socket: Some("/run/systemd/journal/socket".into()),
                syslog_socket: Some("/dev/log".into()),
                origin: "/p/cordon.toml:40".into(),
            },
        }
    }

    /// The filesystem of [`full_plan`].
    fn full_filesystem() -> FilesystemPlan {
        FilesystemPlan {
            readable: vec![PathRule::new("/", "built-in")],
            writable: vec![
                PathRule::new("/work/p", "project"),
                PathRule::new(
                    "/home/u/.cache/a \"q\"",
                    "/home/u/.config/cordon/cordon.toml:3",
                ),
            ],
            deny: vec![PathRule::new("/home/u/.ssh", "evil\norigin")],
            read_only: vec![PathRule::new("/work/p/.git/hooks", "built-in")],
            landlock: LandlockMode::BestEffort,
            home: HomeView::Whole,
            home_show: vec![PathRule::new("/home/u/.gitconfig", "built-in")],
            home_tools: vec![PathRule::new("/home/u/.rustup", "built-in")],
        }
    }

    /// The `[exec]` of [`full_plan`].
    fn full_exec() -> ExecPlan {
        ExecPlan {
            rules: vec![
                ExecRule {
                    pattern: "sudo *".into(),
                    action: ExecAction::Deny,
                    origin: "built-in".into(),
                    expires: None,
                },
                ExecRule {
                    pattern: "git push \"x\" *".into(),
                    action: ExecAction::Ask,
                    origin: "/p/cordon.toml:4".into(),
                    expires: Some(Expiry::from_unix(1_800_000_000)),
                },
            ],
            ask_timeout_secs: 30,
        }
    }

    /// The `[network]` of [`full_plan`].
    fn full_network() -> NetworkPlan {
        NetworkPlan {
            mode: NetMode::None,
            allow_ips: vec!["10.1.2.0/24".into()],
            allow: vec![HostRule {
                host: HostPattern::name("*.example.com", Bare::Exact).unwrap(),
                ports: vec![443, 22],
                origin: "/p/cordon.toml:9".into(),
                expires: Some(Expiry::from_unix(1_900_000_000)),
                programs: crate::Programs {
                    programs: vec!["git".into(), "/usr/bin/gh".into()],
                    run_by: vec!["make".into()],
                },
            }],
        }
    }

    /// The `[dns]` of [`full_plan`].
    fn full_dns() -> DnsPlan {
        DnsPlan {
            block: vec![
                DnsBlock {
                    pattern: HostPattern::name("paste.test", Bare::AtOrBelow).unwrap(),
                    origin: "built-in".into(),
                },
                DnsBlock {
                    pattern: HostPattern::name("*.drop.test", Bare::AtOrBelow).unwrap(),
                    origin: "/p/cordon.toml:10".into(),
                },
            ],
            hosts: [("db.test".to_string(), "127.0.0.1".parse().unwrap())].into(),
            upstream: Some("127.0.0.1:5353".parse().unwrap()),
        }
    }

    /// The `[http]` of [`full_plan`].
    fn full_http(glob: impl Fn(&str) -> HostPattern) -> HttpPlan {
        HttpPlan {
            rules: vec![HttpRule {
                name: "api".into(),
                host: glob("api.example.com"),
                port: Some(8443),
                methods: vec!["POST".into()],
                path: Some("/v1/*".into()),
                query: Some("beta=*".into()),
                headers: vec![("content-type".into(), "application/json*".into())],
                max_body: Some(1024),
                action: HttpAction::Allow,
                reason: Some("the API".into()),
                origin: "/p/cordon.toml:20".into(),
                expires: Some(Expiry::from_unix(2_000_000_000)),
                programs: crate::Programs {
                    programs: vec!["@anthropic-ai/claude-code".into()],
                    run_by: vec!["npm".into()],
                },
            }],
            default: HttpAction::Judge,
        }
    }

    /// The `[mcp]` of [`full_plan`].
    fn full_mcp(glob: impl Fn(&str) -> HostPattern) -> McpPlan {
        McpPlan {
            rules: vec![
                McpRule {
                    path: Some("/mcp*".into()),
                    tool: Some("delete_*".into()),
                    arguments: vec![("path".into(), "src/*".into())],
                    reason: Some("deletes go through review".into()),
                    origin: "/home/u/.config/cordon/cordon.toml:20".into(),
                    expires: Some(crate::expiry::Expiry::parse("2026-12-31T18:00Z").unwrap()),
                    ..McpRule::new(
                        "no-deletes",
                        McpServer::Http(glob("mcp.example.com")),
                        McpAction::Deny,
                    )
                },
                McpRule::new("gh", McpServer::Stdio("github".into()), McpAction::Ask),
            ],
            default: McpAction::Ask,
            pin: false,
            stdio: Vec::new(),
        }
    }

    /// The credentials of [`full_plan`]: one of each source and slot.
    fn full_credentials(glob: impl Fn(&str) -> HostPattern) -> Vec<CredentialPlan> {
        vec![
            CredentialPlan {
                programs: crate::Programs {
                    programs: vec!["gh".into()],
                    run_by: vec!["bash".into()],
                },
                name: "gh".into(),
                env: Some("GH_TOKEN".into()),
                source: CredentialSource::Command(vec!["gh".into(), "auth".into(), "token".into()]),
                hosts: vec![glob("github.com")],
                slot: CredentialSlot::Header {
                    name: "authorization".into(),
                    format: "Basic x-access-token:{}".into(),
                },
                files: vec!["/home/u/.config/gh/hosts.yml".into()],
                inject: true,
                refresh: None,
                origin: "/p/cordon.toml:30".into(),
            },
            CredentialPlan {
                programs: Default::default(),
                name: "gh login".into(),
                env: None,
                source: CredentialSource::Yaml {
                    file: "/home/u/.config/gh/hosts.yml".into(),
                    field: "github.com.oauth_token".into(),
                },
                hosts: vec![glob("api.github.com")],
                slot: CredentialSlot::Header {
                    name: "authorization".into(),
                    format: "Bearer {}".into(),
                },
                files: vec![],
                inject: false,
                refresh: None,
                origin: "/p/cordon.toml:35".into(),
            },
            CredentialPlan {
                programs: Default::default(),
                name: "maps key".into(),
                env: None,
                source: CredentialSource::Env("MAPS_KEY".into()),
                hosts: vec![glob("maps.test")],
                slot: CredentialSlot::Query { name: "key".into() },
                files: vec![],
                inject: false,
                refresh: None,
                origin: "/p/cordon.toml:40".into(),
            },
            CredentialPlan {
                programs: Default::default(),
                name: "file".into(),
                env: Some("FILE_KEY".into()),
                source: CredentialSource::File("/home/u/.config/k".into()),
                hosts: vec![glob("*.k.test")],
                slot: CredentialSlot::Header {
                    name: "x-api-key".into(),
                    format: "{}".into(),
                },
                files: vec![],
                inject: false,
                refresh: None,
                origin: "/p/cordon.toml:50".into(),
            },
            CredentialPlan {
                programs: Default::default(),
                name: "two headers".into(),
                env: Some("TWO_KEY".into()),
                source: CredentialSource::Json {
                    file: "/home/u/.agent/auth.json".into(),
                    field: "tokens.access_token".into(),
                },
                hosts: vec![glob("api.two.test")],
                slot: CredentialSlot::Headers(vec![
                    crate::HeaderSlot {
                        name: "x-api-key".into(),
                        format: "{}".into(),
                    },
                    crate::HeaderSlot {
                        name: "authorization".into(),
                        format: "Bearer {}".into(),
                    },
                ]),
                files: vec![],
                inject: true,
                refresh: Some(crate::RefreshPlan {
                    url: "https://auth.two.test:8443/oauth/token".into(),
                    host: "auth.two.test".into(),
                    port: 8443,
                    path: "/oauth/token".into(),
                    token: "access_token".into(),
                    expires_ms: Some("tokens.expires_at".into()),
                    refreshed_at: Some("last_refresh".into()),
                }),
                origin: "/p/cordon.toml:60".into(),
            },
        ]
    }

    #[test]
    fn renders_the_file_schema_with_origins() {
        let text = full_plan().to_toml();
        assert!(text.contains("    \"/work/p\", # project\n"), "{text}");
        assert!(
            text.contains("# /home/u/.config/cordon/cordon.toml:3\n"),
            "{text}"
        );
        assert!(text.contains("# evil\\u{a}origin\n"), "{text}");
        assert!(text.contains("landlock = \"best-effort\""));
        assert!(text.contains("memory = \"4G\""));
        assert!(text.contains("cpu = 1.5"));
        assert!(
            text.contains("allow = [\n    \"ptrace\", # /home/u/.config/cordon/cordon.toml:9\n]"),
            "{text}"
        );
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
        let mut p = full_plan();
        p.state = StatePlan::default();
        p.limits.nofile = None;
        p.judge = None;
        let text = p.to_toml();
        assert!(
            text.contains("protect = []\non_exit = \"ask\"\nproject_files = \"readonly\"\n"),
            "{text}"
        );
        assert!(text.contains("# nofile: no limit"), "{text}");
        assert!(text.contains("# [judge]: none"), "{text}");
    }

    #[test]
    fn every_value_renders_as_its_serde_name() {
        for e in [OnExit::Ask, OnExit::Keep, OnExit::Discard, OnExit::Pending] {
            let mut p = full_plan();
            p.state.on_exit = e;
            let v: toml::Table = toml::from_str(&p.to_toml()).unwrap();
            assert_eq!(v["state"]["on_exit"].as_str(), Some(e.name()));
            assert_eq!(serde_json::to_value(e).unwrap(), e.name());
        }
        assert_eq!(
            serde_json::to_value(ProjectFiles::Readonly).unwrap(),
            "readonly"
        );
        assert_eq!(
            serde_json::to_value(LandlockMode::BestEffort).unwrap(),
            "best-effort"
        );
    }
}
