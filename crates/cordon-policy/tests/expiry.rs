//! Rules that end, as loaded from real files: `for` counts from the file's modification time,
//! and a rule that ends still loosens (an untrusted project file needs trust for it, and one
//! that outlasts the user's own grant loosens it).

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use common::Env;
use cordon_policy::Expiry;

/// Sets `path`'s modification time.
fn written_at(path: &Path, t: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

const FOR_2H: &str = "[[network.allow]]\nhost = \"grant.test\"\nports = [443]\nfor = \"2h\"\n";

#[test]
fn for_counts_from_the_files_modification_time() {
    let env = Env::new();
    env.user(FOR_2H);
    let written = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_569_445);
    written_at(&env.user_config, written);
    let l = env.load();
    let r = l
        .plan
        .network
        .allow
        .iter()
        .find(|r| r.host.to_string() == "grant.test");
    assert_eq!(
        r.and_then(|r| r.expires),
        Some(Expiry::from_unix(1_796_569_445 + 7200))
    );
    // Written again (the same text): it starts again.
    written_at(&env.user_config, written + Duration::from_secs(600));
    let r = env
        .load()
        .plan
        .network
        .allow
        .into_iter()
        .find(|r| r.host.to_string() == "grant.test");
    assert_eq!(
        r.and_then(|r| r.expires),
        Some(Expiry::from_unix(1_796_569_445 + 7800))
    );
}

#[test]
fn an_ending_grant_in_an_untrusted_project_file_still_loosens() {
    let env = Env::new();
    env.project(FOR_2H);
    let l = env.load();
    assert_eq!(
        l.untrusted_loosening.len(),
        1,
        "{:?}",
        l.untrusted_loosening
    );
    assert!(l.untrusted_loosening[0].what.contains("grant.test"));
    // Even once it has ended: trust is about what the file says.
    env.project(
        "[[network.allow]]\nhost = \"grant.test\"\nports = [443]\nuntil = \"2000-01-01T00:00Z\"\n",
    );
    assert_eq!(env.load().untrusted_loosening.len(), 1);
}

#[test]
fn a_project_rule_outlasting_the_users_grant_loosens() {
    let env = Env::new();
    env.user(
        "[[network.allow]]\nhost = \"grant.test\"\nports = [443]\nuntil = \"2030-01-01T00:00Z\"\n\
         [[exec.rule]]\npattern = \"make *\"\naction = \"allow\"\nuntil = \"2030-01-01T00:00Z\"\n",
    );
    // The same grants ending no later: nothing new.
    env.project(
        "[[network.allow]]\nhost = \"grant.test\"\nports = [443]\nuntil = \"2029-01-01T00:00Z\"\n\
         [[exec.rule]]\npattern = \"make *\"\naction = \"allow\"\nuntil = \"2030-01-01T00:00Z\"\n",
    );
    let l = env.load();
    assert!(
        l.untrusted_loosening.is_empty(),
        "{:?}",
        l.untrusted_loosening
    );
    // Ending later, or never: each loosens.
    env.project(
        "[[network.allow]]\nhost = \"grant.test\"\nports = [443]\n\
         [[exec.rule]]\npattern = \"make *\"\naction = \"allow\"\nuntil = \"2031-01-01T00:00Z\"\n",
    );
    let l = env.load();
    let what: Vec<&str> = l
        .untrusted_loosening
        .iter()
        .map(|x| x.what.as_str())
        .collect();
    assert_eq!(what.len(), 2, "{what:?}");
    assert!(what.iter().any(|w| w.contains("grant.test")), "{what:?}");
    assert!(what.iter().any(|w| w.contains("make *")), "{what:?}");
}
