//! `cordon init`: a commented cordon.toml that `cordon check` accepts, never written over
//! an existing one without --force, showing what a profile adds.

mod common;

use common::{Env, show};

fn init(env: &Env, args: &[&str]) -> std::process::Output {
    env.cordon().arg("init").args(args).output().unwrap()
}

fn check(env: &Env) -> std::process::Output {
    env.cordon().arg("check").output().unwrap()
}

both!(the_file_it_writes_is_a_policy_check_accepts, |env: Env| {
    let o = init(&env, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let path = env.project.join("cordon.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    // Every section of the schema, commented out.
    for section in [
        "[filesystem]",
        "[[network.allow]]",
        "[[http.rule]]",
        "[exec]",
        "[credentials.NAME]",
    ] {
        assert!(
            text.contains(&format!("# {section}")),
            "{section} missing\n{text}"
        );
    }
    assert!(
        text.lines().all(|l| l.is_empty() || l.starts_with('#')),
        "{text}"
    );
    let o = check(&env);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // Uncommented, a section's lines are policy too: the examples come from the schema.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines
        .iter()
        .position(|l| l == "# [[network.allow]]")
        .unwrap();
    // Except `for`, the other way to write `until`: a rule has one or the other.
    for l in lines.iter_mut().skip(at).take_while(|l| !l.is_empty()) {
        if l.starts_with("# ") && !l.starts_with("#   ") && !l.starts_with("# for = ") {
            *l = l
                .trim_start_matches("# ")
                .split("  #")
                .next()
                .unwrap()
                .to_string();
        }
    }
    std::fs::write(&path, lines.join("\n")).unwrap();
    // It loosens the built-in policy, so it needs the user's trust first.
    let o = env.cordon().arg("trust").arg(&path).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = check(&env);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        lines.join("\n"),
        show(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("github.com"),
        "{}",
        show(&o)
    );
});

both!(an_existing_file_is_kept_without_force, |env: Env| {
    let path = env.write("cordon.toml", "# mine\n");
    let o = init(&env, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("exists already") && err.contains("--force"),
        "{}",
        show(&o)
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# mine\n");
    let o = init(&env, &["--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("# [filesystem]")
    );
});

both!(a_profile_shows_what_it_adds, |env: Env| {
    let o = init(&env, &["--profile", "claude"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let text = std::fs::read_to_string(env.project.join("cordon.toml")).unwrap();
    assert!(text.contains("cordon run --profile claude"), "{text}");
    assert!(
        text.contains("#   hosts = [\"api.anthropic.com\"]"),
        "{text}"
    );
    let o = check(&env);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = init(&env, &["--force", "--profile", "no-such-agent"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no-such-agent"),
        "{}",
        show(&o)
    );
});

/// One table of the written template: its header, the table it sits in, and its key lines
/// (uncommented, with their notes).
struct Block {
    header: String,
    parent: Option<usize>,
    required: Vec<String>,
    optional: Vec<String>,
}

/// The template's tables, read from the text alone (`# [x]` headers, `# key = value` lines),
/// so whatever the schema adds is covered without this test naming it.
fn blocks(text: &str) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    for l in text.lines() {
        let Some(code) = l.strip_prefix("# ") else {
            continue;
        };
        if code.starts_with('[') {
            let path = |h: &str| h.trim_matches(['[', ']']).to_string();
            let me = path(code);
            let parent = (0..out.len())
                .rev()
                .find(|i| me.starts_with(&format!("{}.", path(&out[*i].header))));
            out.push(Block {
                header: code.to_string(),
                parent,
                required: Vec::new(),
                optional: Vec::new(),
            });
            continue;
        }
        let is_key = code.split_once(" = ").is_some_and(|(k, _)| {
            !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        });
        if !is_key {
            continue;
        }
        let block = out.last_mut().expect("a key line before the first table");
        if says(code, "required") {
            block.required.push(code.to_string());
        } else {
            block.optional.push(code.to_string());
        }
    }
    out
}

/// Whether a key line's trailing note (`key = value  # one of …; required; loosens: …`)
/// has a part starting with `word`.
fn says(line: &str, word: &str) -> bool {
    line.split_once("  # ")
        .is_some_and(|(_, n)| n.split("; ").any(|p| p.starts_with(word)))
}

/// The lines a table needs to be valid on its own: its parents', its header, its required keys.
fn minimal(blocks: &[Block], i: usize) -> Vec<String> {
    let b = &blocks[i];
    let mut out = b.parent.map(|p| minimal(blocks, p)).unwrap_or_default();
    out.push(b.header.clone());
    out.extend(b.required.iter().cloned());
    out
}

both!(every_commented_example_is_valid_uncommented, |env: Env| {
    let o = init(&env, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let path = env.project.join("cordon.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let blocks = blocks(&text);
    assert!(blocks.len() > 10, "{text}");
    let mut docs: Vec<Vec<String>> = Vec::new();
    for i in 0..blocks.len() {
        let base = minimal(&blocks, i);
        docs.push(base.clone());
        for l in &blocks[i].optional {
            let mut d = base.clone();
            d.push(l.clone());
            docs.push(d);
        }
    }
    // Every example is tried before failing, so one run lists all the bad ones.
    let mut bad = Vec::new();
    for d in docs {
        let doc = d.join("\n") + "\n";
        std::fs::write(&path, &doc).unwrap();
        env.own(&path);
        let o = check(&env);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        // An example that loosens the built-in policy says so: uncommented, it needs trust.
        let said = d.iter().any(|l| says(l, "loosens"));
        let problem = if said && !err.contains("untrusted:") {
            Some("says it loosens the policy, but does not")
        } else if said {
            let t = env.cordon().arg("trust").arg(&path).output().unwrap();
            assert_eq!(t.status.code(), Some(0), "{}", show(&t));
            let o = check(&env);
            (o.status.code() != Some(0)).then_some("refused once trusted")
        } else if err.contains("untrusted:") {
            Some("loosens the policy without saying so")
        } else if o.status.code() != Some(0) {
            Some("refused")
        } else if err
            .lines()
            // A credential's source is the host's (GH_TOKEN unset here), not the example's.
            .any(|l| l.contains("warning") && !l.contains("does not resolve"))
        {
            Some("warned about")
        } else {
            None
        };
        if let Some(p) = problem {
            bad.push(format!("{p}:\n{doc}{err}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of the examples:\n\n{}",
        bad.len(),
        bad.join("\n")
    );
});
