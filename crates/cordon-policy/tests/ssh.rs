//! `[ssh]`: the built-in policy turns the filtering agent on and shows `known_hosts` and
//! `config` while `~/.ssh` stays denied; a project file turning either on is a loosening.

mod common;
use common::*;

#[test]
fn built_in_shows_known_hosts_and_config_inside_the_still_masked_ssh_dir() {
    let env = Env::new();
    let l = env.load();
    let ssh = &l.plan.ssh;
    assert!(ssh.agent);
    let shown: Vec<_> = ssh.show.iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        shown,
        [
            env.home.join(".ssh/known_hosts"),
            env.home.join(".ssh/config")
        ]
    );
    assert!(has(&l.plan.filesystem.deny, &env.home.join(".ssh")).is_some());
}

#[test]
fn the_user_turns_the_agent_off_and_a_project_cannot_turn_it_back_untrusted() {
    let env = Env::new();
    env.user("[ssh]\nagent = false\n");
    assert!(!env.load().plan.ssh.agent);
    env.project("[ssh]\nagent = true\nshow = [\"~/.ssh/id_ed25519\"]\n");
    let l = env.load();
    let key = env.home.join(".ssh/id_ed25519");
    assert_eq!(
        loosened(&l),
        [
            "turns on the filtering SSH agent (line 2)".to_string(),
            format!("shows {} inside the sandbox (line 3)", key.display()),
        ]
    );
}

#[test]
fn a_glob_in_show_is_an_error_naming_its_line() {
    let (s, line, _) = broken("[ssh]\nshow = [\"~/.ssh/id_*\"]\n");
    assert_eq!(line, 2, "{s}");
    assert!(s.contains("has a glob"), "{s}");
}

#[test]
fn check_prints_it_and_what_it_prints_loads_back() {
    let env = Env::new();
    env.user("[ssh]\nagent = false\n");
    let l = env.load();
    let text = l.plan.to_toml();
    assert!(text.contains("\n[ssh]\nagent = false\n"), "{text}");
    assert_eq!(env.reload(&text).plan.ssh, l.plan.ssh);
}
