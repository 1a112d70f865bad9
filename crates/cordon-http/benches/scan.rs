//! The cost of outbound secret scanning and response scrubbing per request, in-process:
//! `cargo bench -p cordon-http --bench scan`. Prints a table (median of 9 rounds).

use std::time::Instant;

use cordon_http::dlp::{Known, Scanner, Scrubber};

fn body(size: usize) -> Vec<u8> {
    let words = [
        "the",
        "quick",
        "brown",
        "fox",
        "refactors",
        "a",
        "parser",
        "and",
        "keeps",
        "tests",
        "green",
        "while",
        "reading",
        "src/lib.rs:42",
    ];
    let mut s = String::from("{\"messages\": [{\"role\": \"user\", \"content\": \"");
    let mut i = 7usize;
    while s.len() < size - 4 {
        i = i.wrapping_mul(2_654_435_761).wrapping_add(1);
        s.push_str(words[i % words.len()]);
        s.push(' ');
    }
    s.truncate(size - 4);
    s.push_str("\"}]}");
    s.into_bytes()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(n: usize, mut f: impl FnMut()) -> f64 {
    let rounds: Vec<f64> = (0..9)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        })
        .collect();
    median(rounds)
}

fn main() {
    let known = vec![
        Known {
            name: "bench".into(),
            value: "real-bench-key-0123456789abcdef".into(),
            hosts: vec!["bench.example.test".parse().unwrap()],
        },
        Known {
            name: "DB_PASSWORD".into(),
            value: "db-bench-Pass-0123456789".into(),
            hosts: Vec::new(),
        },
    ];
    let scanner = Scanner::new(known, Vec::new());
    let headers: Vec<(String, String)> = [
        ("host", "bench.example.test"),
        ("user-agent", "python-requests/2.32"),
        ("accept", "*/*"),
        ("content-type", "application/json"),
        ("x-api-key", "cordon-0123456789abcdef0123456789ab"),
        ("anthropic-version", "2023-06-01"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    println!("| what | size | µs per request | MB/s |");
    println!("|---|---|---|---|");
    for size in [1 << 10, 16 << 10, 64 << 10] {
        let b = body(size);
        let us = time(200, || {
            let f =
                scanner.scan_request("bench.example.test", "/v1/messages?beta=true", &headers, &b);
            assert!(f.is_empty());
        });
        println!(
            "| scan URL + 6 headers + body | {} KiB | {us:.1} | {:.0} |",
            size >> 10,
            size as f64 / us
        );
    }
    let pairs = vec![(
        "real-bench-key-0123456789abcdef".to_string(),
        "cordon-0123456789abcdef01234567".to_string(),
    )];
    let template = Scrubber::new(&pairs).unwrap();
    for size in [16 << 10, 1 << 20] {
        let b = body(size);
        let us = time(50, || {
            let mut s = template.clone();
            let mut n = 0;
            for c in b.chunks(16 << 10) {
                n += s.push(c).len();
            }
            n += s.finish().len();
            assert_eq!(n, b.len());
        });
        println!(
            "| scrub a response (16 KiB chunks) | {} KiB | {us:.1} | {:.0} |",
            size >> 10,
            size as f64 / us
        );
    }
}
