//! `[limits]`: resource limits (layer 1).

use serde_spanned::Spanned;

use crate::PolicyError;
use crate::schema::{Schema, Shape, Size, toml_string};
use crate::sections::{Convert, Loosen, Origin, Render, Scalar, Section, Sections, set_scalar};

/// Resource limits (layer 1). `None` means no limit from cordon.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LimitsPlan {
    /// Memory in bytes (cgroup `memory.max`, else `RLIMIT_AS`).
    pub memory: Option<u64>,
    /// Number of processes/threads (cgroup `pids.max`, else `RLIMIT_NPROC`).
    pub pids: Option<u64>,
    /// CPU bandwidth in cores, e.g. 1.5 (cgroup `cpu.max` only; no rlimit equivalent).
    pub cpu: Option<f64>,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub nofile: Option<u64>,
}

raw_table! {
    /// `[limits]` as written.
    pub(crate) struct Raw example "memory = \"4G\"" {
        /// Memory for the whole sandbox, bytes or `"4G"` (cgroup `memory.max`, else
        /// `RLIMIT_AS`).
        memory: Size = "memory = \"4G\"",
        /// Processes and threads at once (cgroup `pids.max`, else `RLIMIT_NPROC`).
        pids: Integer = "pids = 1024",
        /// CPU bandwidth in cores, e.g. 1.5 (cgroup `cpu.max` only).
        cpu: Number = "cpu = 2.0",
        /// Open files per process (`RLIMIT_NOFILE`).
        nofile: Integer = "nofile = 4096",
    }
}

/// `[limits]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Limits {
    pub memory: Scalar<u64>,
    pub pids: Scalar<u64>,
    pub cpu: Scalar<f64>,
    pub nofile: Scalar<u64>,
}

const MIN_MEMORY: u64 = 1 << 20;
const MAX_PIDS: i64 = 1 << 22;
const MAX_NOFILE: i64 = 1 << 30;
const MIN_CPU: f64 = 0.01;
const MAX_CPU: f64 = 65536.0;

/// Parses a memory size: bytes, or a number with a K/M/G/T suffix (1024-based), optionally
/// followed by `B` or `iB` (`"4G"`, `"512MiB"`, `"1t"`).
pub(crate) fn parse_size(text: &str) -> Result<u64, &'static str> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err("does not start with a number");
    }
    let (num, unit) = t.split_at(digits);
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err("has an unknown unit"),
    };
    let n: u64 = num.parse().map_err(|_| "is too large")?;
    n.checked_mul(1u64 << shift).ok_or("is too large")
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

fn count(cx: &Convert<'_>, key: &str, v: &Spanned<i64>, max: i64) -> Result<u64, PolicyError> {
    cx.int_in(
        v,
        key,
        1..=max,
        &format!("must be from 1 to {max}; leave `{key}` out for no limit"),
    )
}

impl Section for Limits {
    type Raw = Raw;
    type Plan = LimitsPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Limits::default();
        if let Some(m) = raw.memory {
            let bytes = match m.get_ref() {
                Size::Bytes(n) => u64::try_from(*n).unwrap_or(0),
                Size::Text(t) => parse_size(t).map_err(|why| {
                    cx.diag(
                        format!("invalid memory size {}: it {why}", toml_string(t)),
                        m.span(),
                        "write bytes, or a number with K, M, G or T (1024-based), e.g. memory = \"4G\"",
                    )
                })?,
            };
            if bytes < MIN_MEMORY {
                return Err(cx.out_of_range(
                    "memory",
                    m.span(),
                    "must be at least 1M (1048576 bytes); leave `memory` out for no limit",
                ));
            }
            out.memory = Some((bytes, cx.origin(m.span())));
        }
        if let Some(p) = raw.pids {
            out.pids = Some((count(cx, "pids", &p, MAX_PIDS)?, cx.origin(p.span())));
        }
        if let Some(n) = raw.nofile {
            out.nofile = Some((count(cx, "nofile", &n, MAX_NOFILE)?, cx.origin(n.span())));
        }
        if let Some(c) = raw.cpu {
            let v = *c.get_ref();
            if !(MIN_CPU..=MAX_CPU).contains(&v) {
                return Err(cx.out_of_range(
                    "cpu",
                    c.span(),
                    &format!("must be a number of cores from {MIN_CPU} to {MAX_CPU}, e.g. cpu = 1.5; leave `cpu` out for no limit"),
                ));
            }
            out.cpu = Some((v, cx.origin(c.span())));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        set_scalar(&mut self.memory, &later.memory);
        set_scalar(&mut self.pids, &later.pids);
        set_scalar(&mut self.cpu, &later.cpu);
        set_scalar(&mut self.nofile, &later.nofile);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.limits, &base.limits);
        let as_f = |x: &Scalar<u64>| x.as_ref().map(|(v, o)| (*v as f64, o.clone()));
        let cpu = |x: &Scalar<f64>| x.clone();
        for (name, b, f) in [
            ("memory", as_f(&b.memory), as_f(&f.memory)),
            ("pids", as_f(&b.pids), as_f(&f.pids)),
            ("cpu", cpu(&b.cpu), cpu(&f.cpu)),
            ("nofile", as_f(&b.nofile), as_f(&f.nofile)),
        ] {
            match (b, f) {
                (Some((b, _)), Some((f, o))) if f > b => {
                    out.add(&o, format!("raises the {name} limit"));
                }
                (Some(_), None) => out.add(&Origin::project(), format!("removes the {name} limit")),
                _ => {}
            }
        }
    }

    fn plan(self) -> LimitsPlan {
        LimitsPlan {
            memory: self.memory.map(|x| x.0),
            pids: self.pids.map(|x| x.0),
            cpu: self.cpu.map(|x| x.0),
            nofile: self.nofile.map(|x| x.0),
        }
    }

    fn render(l: &LimitsPlan, out: &mut Render) {
        out.header("limits");
        match l.memory {
            Some(m) => out.line(format!("memory = {}", size(m))),
            None => out.line("# memory: no limit"),
        }
        for (key, v) in [("pids", l.pids), ("nofile", l.nofile)] {
            match v {
                Some(n) => out.line(format!("{key} = {n}")),
                None => out.line(format!("# {key}: no limit")),
            }
        }
        match l.cpu {
            Some(c) if c.is_finite() => out.line(format!("cpu = {c:?}")),
            _ => out.line("# cpu: no limit"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4g"), Ok(4 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size(" 1G "), Ok(1 << 30));
        assert!(parse_size("4 gigs").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(size(4 << 30), "\"4G\"");
        assert_eq!(size(1536 << 20), "\"1536M\"");
        assert_eq!(size(1000), "1000");
        assert_eq!(size(0), "0");
    }
}
