//! `tokentap bench compare A.json B.json`: two reports in; the fields in
//! which they are not like with like (workload, labels, model versions as
//! served), then — when none differs, or `--force` — the figures side by
//! side with the ratio B / A.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::report::{self, LevelReport, Report, SCHEMA, Spread};

/// `tokentap bench compare` flags.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct CompareArgs {
    /// The first report (`--json` of `tokentap bench`)
    pub a: PathBuf,
    /// The second report
    pub b: PathBuf,
    /// The field the comparison is about, allowed to differ (repeatable):
    /// labels.KEY, max_tokens, ignore_eos, prompt_sets, loads, runs,
    /// model_version
    #[arg(long, value_name = "FIELD")]
    pub vs: Vec<String>,
    /// Compare even when the reports are not like with like (the
    /// differences are still printed)
    #[arg(long)]
    pub force: bool,
}

/// One field in which the two reports differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The field (`max_tokens`, `labels.hardware`, `targets[0].model_version`).
    pub field: String,
    /// Its value in A.
    pub a: String,
    /// Its value in B.
    pub b: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} differs (A: {}, B: {})", self.field, self.a, self.b)
    }
}

/// Run `bench compare`.
pub fn run(args: &CompareArgs) -> anyhow::Result<()> {
    let a = read(&args.a)?;
    let b = read(&args.b)?;
    let diffs: Vec<Difference> = differences(&a, &b)
        .into_iter()
        .filter(|d| !allowed(&args.vs, &d.field))
        .collect();
    if !diffs.is_empty() {
        let list: Vec<String> = diffs.iter().map(Difference::to_string).collect();
        if !args.force {
            anyhow::bail!(
                "not like with like: {}. Pass --vs FIELD when FIELD is what you compare, or --force to compare anyway",
                list.join("; ")
            );
        }
        eprintln!(
            "tokentap bench compare: not like with like (--force): {}",
            list.join("; ")
        );
    }
    print!("{}", side_by_side(&a, &b, &args.a, &args.b));
    Ok(())
}

fn read(path: &Path) -> anyhow::Result<Report> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("bench compare: cannot read {}", path.display()))?;
    let report: Report = serde_json::from_str(&text).with_context(|| {
        format!(
            "bench compare: {} is not a tokentap bench JSON report ({SCHEMA})",
            path.display()
        )
    })?;
    anyhow::ensure!(
        report.schema == SCHEMA,
        "bench compare: {} is a {} report; this tokentap reads {SCHEMA}",
        path.display(),
        report.schema
    );
    Ok(report)
}

/// Whether `--vs` lets `field` differ (`targets[0].model_version` is let
/// by `model_version`).
fn allowed(vs: &[String], field: &str) -> bool {
    let bare = field.rsplit_once("].").map_or(field, |(_, f)| f);
    vs.iter().any(|v| v == field || v == bare)
}

/// Every field in which `a` and `b` are not like with like.
pub fn differences(a: &Report, b: &Report) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut check = |field: &str, x: String, y: String| {
        if x != y {
            out.push(Difference {
                field: field.to_owned(),
                a: x,
                b: y,
            });
        }
    };
    let (sa, sb) = (&a.settings, &b.settings);
    let sets = |r: &Report| {
        let names: Vec<String> = r
            .settings
            .prompt_sets
            .iter()
            .map(|p| format!("{} (≈{:.0} tokens)", p.name, p.mean_input_tokens))
            .collect();
        names.join(", ")
    };
    check("prompt_sets", sets(a), sets(b));
    check(
        "max_tokens",
        sa.max_tokens.to_string(),
        sb.max_tokens.to_string(),
    );
    check(
        "ignore_eos",
        sa.ignore_eos.to_string(),
        sb.ignore_eos.to_string(),
    );
    let loads = |r: &Report| {
        let l: Vec<String> = r.settings.loads.iter().map(|l| l.label()).collect();
        l.join(", ")
    };
    check("loads", loads(a), loads(b));
    check("runs", sa.runs.to_string(), sb.runs.to_string());
    let keys: BTreeSet<&String> = sa.labels.keys().chain(sb.labels.keys()).collect();
    let none = || "(none)".to_owned();
    for k in keys {
        let (x, y) = (sa.labels.get(k).cloned(), sb.labels.get(k).cloned());
        check(
            &format!("labels.{k}"),
            x.unwrap_or_else(none),
            y.unwrap_or_else(none),
        );
    }
    check(
        "targets",
        a.targets.len().to_string(),
        b.targets.len().to_string(),
    );
    for (i, (ta, tb)) in a.targets.iter().zip(&b.targets).enumerate() {
        // The same model asked for, served as a different version.
        if ta.model == tb.model {
            let served = |m: &[String]| if m.is_empty() { none() } else { m.join(", ") };
            check(
                &format!("targets[{i}].model_version"),
                served(&ta.served.models),
                served(&tb.served.models),
            );
        }
    }
    out
}

fn side_by_side(a: &Report, b: &Report, pa: &Path, pb: &Path) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "A: {} ({})\nB: {} ({})",
        pa.display(),
        a.date,
        pb.display(),
        b.date
    );
    for (ta, tb) in a.targets.iter().zip(&b.targets) {
        let _ = writeln!(out, "\nA {} — {}", ta.name, report::served_line(&ta.served));
        let _ = writeln!(out, "B {} — {}", tb.name, report::served_line(&tb.served));
        let _ = writeln!(
            out,
            "{:<14} {:<8} {:>14} {:>14} {:>6} {:>13} {:>13} {:>6} {:>13} {:>13} {:>6} {:>7}",
            "prompts",
            "load",
            "TTFT A ms",
            "B",
            "B/A",
            "decode A",
            "B",
            "B/A",
            "out t/s A",
            "B",
            "B/A",
            "errors"
        );
        for la in &ta.levels {
            let Some(lb) = tb
                .levels
                .iter()
                .find(|l| l.prompt_set == la.prompt_set && l.load == la.load)
            else {
                continue;
            };
            out.push_str(&row(la, lb));
        }
    }
    out
}

fn row(la: &LevelReport, lb: &LevelReport) -> String {
    let (sa, sb) = (&la.summary, &lb.summary);
    let ratio = |x: &Spread, y: &Spread| match (x.median, y.median) {
        (Some(x), Some(y)) if x != 0.0 => format!("{:.2}", y / x),
        _ => "-".to_owned(),
    };
    // Each figure with its run-to-run spread, so a ratio inside the noise shows as such.
    let with = |v: String, s: &Spread| format!("{v} {}", report::spread(s)).trim_end().to_owned();
    format!(
        "{:<14} {:<8} {:>14} {:>14} {:>6} {:>13} {:>13} {:>6} {:>13} {:>13} {:>6} {:>7}\n",
        la.prompt_set,
        la.load.label(),
        with(report::ms(sa.ttft_s.p50.median), &sa.ttft_s.p50),
        with(report::ms(sb.ttft_s.p50.median), &sb.ttft_s.p50),
        ratio(&sa.ttft_s.p50, &sb.ttft_s.p50),
        with(report::num(sa.decode_tps.p50.median, 1), &sa.decode_tps.p50),
        with(report::num(sb.decode_tps.p50.median, 1), &sb.decode_tps.p50),
        ratio(&sa.decode_tps.p50, &sb.decode_tps.p50),
        with(
            report::num(sa.output_tokens_per_s.median, 1),
            &sa.output_tokens_per_s
        ),
        with(
            report::num(sb.output_tokens_per_s.median, 1),
            &sb.output_tokens_per_s
        ),
        ratio(&sa.output_tokens_per_s, &sb.output_tokens_per_s),
        format!("{}/{}", la.errors, lb.errors)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vs_lets_a_field_differ_by_its_name_or_its_bare_name() {
        let vs = vec!["labels.hardware".to_owned(), "model_version".to_owned()];
        assert!(allowed(&vs, "labels.hardware"));
        assert!(allowed(&vs, "targets[1].model_version"));
        assert!(!allowed(&vs, "labels.quantization"));
        assert!(!allowed(&vs, "max_tokens"));
    }
}
