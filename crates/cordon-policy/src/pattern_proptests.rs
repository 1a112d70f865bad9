//! Properties of the one pattern language, over generated patterns, texts and host names
//! (proptest; `PROPTEST_CASES` sets how many cases each property runs, 256 by default).

use proptest::prelude::*;

use super::*;

/// The meaning the module docs give, by dynamic programming over characters: `*` any run
/// (including `/` and none), `?` one character, everything else itself.
fn model(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // m[j]: whether p[..i] matches t[..j], row by row.
    let mut m = vec![false; t.len() + 1];
    m[0] = true;
    for &pc in &p {
        let mut next = vec![false; t.len() + 1];
        for j in 0..=t.len() {
            next[j] = match pc {
                '*' => m[j] || (j > 0 && next[j - 1]),
                '?' => j > 0 && m[j - 1],
                c => j > 0 && m[j - 1] && t[j - 1] == c,
            };
        }
        m = next;
    }
    m[t.len()]
}

/// Short strings over an alphabet with the wildcards, a separator, a dot and multi-byte
/// characters, so matches and near misses are both common.
fn over(alphabet: &'static [char], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(alphabet), 0..max)
        .prop_map(|cs| cs.into_iter().collect())
}

const PATTERN_CHARS: &[char] = &['a', 'b', '/', '.', ' ', 'é', '€', '*', '?'];
const TEXT_CHARS: &[char] = &['a', 'b', '/', '.', ' ', 'é', '€', '*', '?'];
const LITERAL_CHARS: &[char] = &['a', 'b', '/', '.', ' ', '-', 'é', '€', '\\', '['];

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?"
}

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(label(), 1..4).prop_map(|ls| ls.join("."))
}

/// `text` with the ASCII letters whose bit in `mask` is set upper-cased.
fn recase(text: &str, mask: u64) -> String {
    text.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

proptest! {
    #[test]
    fn glob_is_the_documented_meaning(p in over(PATTERN_CHARS, 9), t in over(TEXT_CHARS, 14)) {
        prop_assert_eq!(glob_match(&p, &t), model(&p, &t), "pattern {:?} text {:?}", p, t);
    }

    #[test]
    fn a_literal_pattern_matches_exactly_itself(
        p in over(LITERAL_CHARS, 12),
        t in over(LITERAL_CHARS, 12),
    ) {
        // No escaping exists: `\` and `[` are literal characters like any other.
        prop_assert!(glob_match(&p, &p));
        prop_assert_eq!(glob_match(&p, &t), p == t);
    }

    #[test]
    fn star_spans_separators_and_question_mark_is_one_character(
        pre in over(LITERAL_CHARS, 6),
        mid in over(TEXT_CHARS, 10),
        post in over(LITERAL_CHARS, 6),
    ) {
        let text = format!("{pre}{mid}{post}");
        assert!(glob_match(&format!("{pre}*{post}"), &text));
        prop_assert!(glob_match("*", &text));
        let q = "?".repeat(text.chars().count());
        prop_assert!(glob_match(&q, &text));
        assert!(!glob_match(&format!("{q}?"), &text));
    }

    #[test]
    fn below_matches_subdomains_never_the_apex_or_a_lookalike(
        apex in name(),
        sub in name(),
        lookalike in "[a-z0-9-]{1,6}",
        mask in any::<u64>(),
        dot in any::<bool>(),
    ) {
        let p = HostPattern::glob(&format!("*.{apex}")).unwrap();
        prop_assert_eq!(&p, &HostPattern::Below(apex.clone()));
        assert_eq!(HostPattern::name(&format!("*.{apex}"), Bare::Exact).unwrap(), p.clone());
        let trail = if dot { "." } else { "" };
        let host = recase(&format!("{sub}.{apex}{trail}"), mask);
        prop_assert!(p.matches(&host), "{} should match {}", p, host);
        assert!(!p.matches(&recase(&format!("{apex}{trail}"), mask)));
        assert!(!p.matches(&format!("{lookalike}{apex}")));
        let beyond = format!("{sub}.{apex}.{lookalike}");
        assert_eq!(p.matches(&beyond), beyond.ends_with(&format!(".{apex}")));
        assert!(!p.matches(&format!(".{apex}")));
    }

    #[test]
    fn exact_and_at_or_below_mean_what_they_say(
        host in name(),
        sub in label(),
        lookalike in "[a-z0-9-]{1,6}",
        mask in any::<u64>(),
    ) {
        let exact = HostPattern::name(&recase(&host, mask), Bare::Exact).unwrap();
        prop_assert_eq!(&exact, &HostPattern::Exact(host.clone()));
        assert_eq!(HostPattern::glob(&format!("{host}.")).unwrap(), exact.clone());
        assert!(exact.matches(&recase(&host, !mask)) && exact.matches(&format!("{host}.")));
        assert!(!exact.matches(&format!("{sub}.{host}")));
        assert!(!exact.matches(&format!("{lookalike}{host}")));

        let block = HostPattern::name(&host, Bare::AtOrBelow).unwrap();
        assert!(block.matches(&host) && block.matches(&recase(&format!("{sub}.{host}."), mask)));
        assert!(!block.matches(&format!("{lookalike}{host}")));
        assert!(!block.matches(&format!("{lookalike}-{host}")));
    }

    #[test]
    fn host_globs_are_case_insensitive_and_print_as_parsed(
        pattern in "[a-z*?.-]{1,12}",
        host in "[a-zA-Z0-9.-]{0,16}",
    ) {
        if let Ok(p) = HostPattern::glob(&pattern) {
            prop_assert_eq!(HostPattern::glob(&p.to_string()).unwrap(), p.clone());
            prop_assert_eq!(p.matches(&host), p.matches(&host.to_ascii_lowercase()));
            if !host.ends_with('.') {
                assert_eq!(p.matches(&host), p.matches(&format!("{host}.")));
            }
        }
    }
}
