//! A small line-based unified diff (LCS on the part between the common prefix and suffix; when
//! that part is too large for the quadratic table, it is shown as removed then added).

const CONTEXT: usize = 3;
const MAX_CELLS: usize = 4_000_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Same(usize, usize),
    Del(usize),
    Ins(usize),
}

fn ops(a: &[&str], b: &[&str]) -> Vec<Op> {
    let mut pre = 0;
    while pre < a.len() && pre < b.len() && a[pre] == b[pre] {
        pre += 1;
    }
    let mut suf = 0;
    while suf < a.len() - pre && suf < b.len() - pre && a[a.len() - 1 - suf] == b[b.len() - 1 - suf]
    {
        suf += 1;
    }
    let (ma, mb) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut out: Vec<Op> = (0..pre).map(|i| Op::Same(i, i)).collect();
    let (n, m) = (ma.len(), mb.len());
    if n.saturating_mul(m) <= MAX_CELLS {
        // lcs[i][j] = LCS length of ma[i..] and mb[j..]
        let w = m + 1;
        let mut lcs = vec![0u32; (n + 1) * w];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i * w + j] = if ma[i] == mb[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && ma[i] == mb[j] {
                out.push(Op::Same(pre + i, pre + j));
                i += 1;
                j += 1;
            } else if i < n && (j == m || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
                out.push(Op::Del(pre + i));
                i += 1;
            } else {
                out.push(Op::Ins(pre + j));
                j += 1;
            }
        }
    } else {
        out.extend((0..n).map(|i| Op::Del(pre + i)));
        out.extend((0..m).map(|j| Op::Ins(pre + j)));
    }
    out.extend((0..suf).map(|k| Op::Same(a.len() - suf + k, b.len() - suf + k)));
    out
}

/// A unified diff of `a` → `b` labelled `label`, at most `max_lines` lines of hunks (the rest is
/// counted in a last line). Empty when the texts are equal.
pub(crate) fn unified(a: &str, b: &str, label: &str, max_lines: usize) -> String {
    let la: Vec<&str> = a.lines().collect();
    let lb: Vec<&str> = b.lines().collect();
    let ops = ops(&la, &lb);
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| !matches!(o, Op::Same(..)))
        .map(|(i, _)| i)
        .collect();
    if changed.is_empty() {
        return String::new();
    }
    // Group changed op indices into hunks with CONTEXT lines around each.
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for &c in &changed {
        let start = c.saturating_sub(CONTEXT);
        let end = (c + CONTEXT + 1).min(ops.len());
        match hunks.last_mut() {
            Some(h) if start <= h.1 => h.1 = end,
            _ => hunks.push((start, end)),
        }
    }
    let mut lines: Vec<String> = Vec::new();
    for (s, e) in hunks {
        let (mut a0, mut b0, mut na, mut nb) = (None, None, 0, 0);
        let mut body = Vec::new();
        for op in &ops[s..e] {
            match *op {
                Op::Same(i, j) => {
                    a0.get_or_insert(i);
                    b0.get_or_insert(j);
                    na += 1;
                    nb += 1;
                    body.push(format!(" {}", la[i]));
                }
                Op::Del(i) => {
                    a0.get_or_insert(i);
                    na += 1;
                    body.push(format!("-{}", la[i]));
                }
                Op::Ins(j) => {
                    b0.get_or_insert(j);
                    nb += 1;
                    body.push(format!("+{}", lb[j]));
                }
            }
        }
        // Where a side has no lines in the hunk, unified diff names the line before it.
        let a_start = match a0 {
            Some(i) if na > 0 => i + 1,
            _ => position_before(&ops[..s], true),
        };
        let b_start = match b0 {
            Some(j) if nb > 0 => j + 1,
            _ => position_before(&ops[..s], false),
        };
        lines.push(format!("@@ -{a_start},{na} +{b_start},{nb} @@"));
        lines.extend(body);
    }
    let mut out = format!("--- a/{label}\n+++ b/{label}\n");
    let total = lines.len();
    for l in lines.iter().take(max_lines) {
        out.push_str(l);
        out.push('\n');
    }
    if total > max_lines {
        out.push_str(&format!(
            "… {} more diff lines not shown\n",
            total - max_lines
        ));
    }
    out
}

fn position_before(ops: &[Op], side_a: bool) -> usize {
    ops.iter()
        .filter(|o| match o {
            Op::Same(..) => true,
            Op::Del(_) => side_a,
            Op::Ins(_) => !side_a,
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_shows_changed_lines_with_context() {
        let a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let b = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n";
        let d = unified(a, b, "f", 200);
        assert_eq!(
            d,
            "--- a/f\n+++ b/f\n@@ -2,8 +2,9 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n 9\n+10\n"
        );
    }

    #[test]
    fn added_file_diff_and_truncation() {
        let b: String = (0..300).map(|i| format!("l{i}\n")).collect();
        let d = unified("", &b, "new", 200);
        assert!(
            d.starts_with("--- a/new\n+++ b/new\n@@ -0,0 +1,300 @@\n+l0\n"),
            "{d}"
        );
        assert!(d.ends_with("… 101 more diff lines not shown\n"), "{d}");
        assert_eq!(unified("x\n", "x\n", "same", 200), "");
    }
}
