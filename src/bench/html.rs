//! The HTML report: a [`Report`] in; one self-contained page out (inline
//! CSS and SVG, no script, no external asset): per prompt set, TTFT,
//! decode tokens/s and output tokens/s against the load, one line per
//! target with the run-to-run range as a bar, then the tables and the
//! metadata.

use std::fmt::Write as _;

use super::report::{self, Report, Spread, Summary};

/// Line colours, one per target (cycled).
const COLOURS: [&str; 8] = [
    "#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#4b5563",
];

/// Escape text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole page.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>tokentap bench report — {}</title><style>{CSS}</style></head><body>\n\
<h1>tokentap bench report</h1>\n<p class=\"meta\" id=\"meta\">{} · tokentap {} · {} run(s) per level, medians across runs; bars show the lowest and highest run</p>\n",
        escape(&r.date),
        escape(&r.date),
        escape(&r.tokentap_version),
        r.settings.runs
    );
    legend(&mut out, r);
    for set in &r.settings.prompt_sets {
        let _ = writeln!(
            out,
            "<h2>Prompts {} (≈{:.0} input tokens), max_tokens {}</h2>\n<div class=\"charts\">",
            escape(&set.name),
            set.mean_input_tokens,
            r.settings.max_tokens
        );
        let charts: [(&str, &str, &str, Pick); 3] = [
            ("ttft", "TTFT p50", "ms", |s| scale(s.ttft_s.p50, 1000.0)),
            ("decode", "Decode tokens/s p50", "tokens/s", |s| {
                s.decode_tps.p50
            }),
            ("throughput", "Output tokens/s served", "tokens/s", |s| {
                s.output_tokens_per_s
            }),
        ];
        for (id, title, unit, pick) in charts {
            chart(&mut out, r, &set.name, id, title, unit, pick);
        }
        out.push_str("</div>\n");
    }
    tables(&mut out, r);
    metadata(&mut out, r);
    out.push_str("</body></html>\n");
    out
}

type Pick = fn(&Summary) -> Spread;

fn scale(s: Spread, by: f64) -> Spread {
    Spread {
        median: s.median.map(|v| v * by),
        min: s.min.map(|v| v * by),
        max: s.max.map(|v| v * by),
        runs: s.runs,
    }
}

fn legend(out: &mut String, r: &Report) {
    out.push_str("<ul class=\"legend\">");
    for (i, t) in r.targets.iter().enumerate() {
        let _ = write!(
            out,
            "<li><span class=\"swatch\" style=\"background:{}\"></span>{}</li>",
            COLOURS[i % COLOURS.len()],
            escape(&t.name)
        );
    }
    out.push_str("</ul>\n");
}

/// Chart geometry (SVG user units).
const W: f64 = 420.0;
const H: f64 = 260.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 40.0;

/// One line chart: x = the loads in the order they ran (evenly spaced),
/// y from 0 to a little above the highest run.
fn chart(out: &mut String, r: &Report, set: &str, id: &str, title: &str, unit: &str, pick: Pick) {
    let loads = &r.settings.loads;
    let lines: Vec<Vec<Option<Spread>>> = r
        .targets
        .iter()
        .map(|t| {
            loads
                .iter()
                .map(|load| {
                    t.levels
                        .iter()
                        .find(|l| l.prompt_set == set && l.load == *load)
                        .map(|l| pick(&l.summary))
                })
                .collect()
        })
        .collect();
    let top = lines
        .iter()
        .flatten()
        .flatten()
        .filter_map(|s| s.max.or(s.median))
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { nice(top * 1.1) } else { 1.0 };
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |i: usize| {
        if loads.len() <= 1 {
            LEFT + pw / 2.0
        } else {
            LEFT + pw * i as f64 / (loads.len() - 1) as f64
        }
    };
    let y = |v: f64| TOP + ph * (1.0 - v / top);
    let _ = write!(
        out,
        "<figure class=\"chart\" data-chart=\"{id}\" data-prompts=\"{}\"><figcaption>{} ({})</figcaption>\
<svg viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{} against load\">",
        escape(set),
        escape(title),
        escape(unit),
        escape(title)
    );
    for k in 0..=4 {
        let v = top * k as f64 / 4.0;
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>\
<text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            y(v),
            y(v),
            LEFT - 6.0,
            y(v) + 4.0,
            short(v)
        );
    }
    for (i, load) in loads.iter().enumerate() {
        let _ = write!(
            out,
            "<text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            x(i),
            H - BOTTOM + 18.0,
            escape(&load.label())
        );
    }
    let _ = write!(
        out,
        "<text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">load</text>",
        LEFT + pw / 2.0,
        H - 4.0
    );
    for (t, line) in lines.iter().enumerate() {
        let colour = COLOURS[t % COLOURS.len()];
        let points: Vec<String> = line
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.and_then(|s| s.median)
                    .map(|m| format!("{:.1},{:.1}", x(i), y(m)))
            })
            .collect();
        let _ = write!(
            out,
            "<g class=\"series\" data-target=\"{}\"><polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            escape(&r.targets[t].name),
            points.join(" ")
        );
        for (i, s) in line.iter().enumerate() {
            let Some(s) = s else { continue };
            if let (Some(lo), Some(hi)) = (s.min, s.max) {
                let _ = write!(
                    out,
                    "<line stroke=\"{colour}\" stroke-width=\"1\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\"/>",
                    x(i),
                    y(lo),
                    y(hi)
                );
            }
            if let Some(m) = s.median {
                let _ = write!(
                    out,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{colour}\"><title>{}: {}</title></circle>",
                    x(i),
                    y(m),
                    escape(&r.targets[t].name),
                    short(m)
                );
            }
        }
        out.push_str("</g>");
    }
    out.push_str("</svg></figure>\n");
}

/// A round axis top at or above `v`: 1, 2 or 5 × a power of ten.
fn nice(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|t| *t >= v)
        .unwrap_or(10.0 * p)
}

fn short(v: f64) -> String {
    if v >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn tables(out: &mut String, r: &Report) {
    for t in &r.targets {
        let _ = write!(
            out,
            "<h2>{} <small>{} · {}</small></h2>\n<table class=\"levels\" data-target=\"{}\"><thead><tr>\
<th>Prompts</th><th>Load</th><th>Requests</th><th>Errors</th><th>TTFT p50 ms</th><th>p90</th><th>p99</th>\
<th>Prefill tok/s p50</th><th>Decode tok/s p50</th><th>p90</th><th>p99</th><th>Req/s</th><th>Output tok/s</th><th>Output tokens</th></tr></thead><tbody>",
            escape(&t.name),
            escape(t.family.as_str()),
            escape(&report::served_line(&t.served)),
            escape(&t.name)
        );
        for l in &t.levels {
            let s = &l.summary;
            let cell = |v: String, sp: &Spread| {
                format!(
                    "<td>{} <span class=\"spread\">{}</span></td>",
                    escape(&v),
                    escape(&report::spread(sp))
                )
            };
            let mut errors = l.errors.to_string();
            for (kind, n) in &l.error_types {
                let _ = write!(errors, " · {kind}: {n}");
            }
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"errors\">{}</td>{}<td>{}</td><td>{}</td><td>{}</td>{}<td>{}</td><td>{}</td>{}{}<td>{}</td></tr>",
                escape(&l.prompt_set),
                escape(&l.load.label()),
                l.requests,
                escape(&errors),
                cell(report::ms(s.ttft_s.p50.median), &s.ttft_s.p50),
                report::ms(s.ttft_s.p90.median),
                report::ms(s.ttft_s.p99.median),
                report::num(s.prefill_tps.p50.median, 0),
                cell(report::num(s.decode_tps.p50.median, 1), &s.decode_tps.p50),
                report::num(s.decode_tps.p90.median, 1),
                report::num(s.decode_tps.p99.median, 1),
                cell(report::num(s.requests_per_s.median, 2), &s.requests_per_s),
                cell(
                    report::num(s.output_tokens_per_s.median, 1),
                    &s.output_tokens_per_s
                ),
                report::num(s.output_tokens_mean.median, 1)
            );
        }
        out.push_str("</tbody></table>\n");
    }
}

fn metadata(out: &mut String, r: &Report) {
    let s = &r.settings;
    let c = &r.client;
    let mut rows: Vec<(String, String)> = vec![
        ("Date".into(), r.date.clone()),
        ("tokentap".into(), r.tokentap_version.clone()),
        (
            "Client machine".into(),
            format!(
                "{} · {} {} · {} CPUs{}",
                c.hostname.as_deref().unwrap_or("-"),
                c.os,
                c.arch,
                c.cpus,
                c.cpu_model
                    .as_deref()
                    .map(|m| format!(" · {m}"))
                    .unwrap_or_default()
            ),
        ),
        ("max_tokens".into(), s.max_tokens.to_string()),
        ("ignore_eos".into(), s.ignore_eos.to_string()),
        ("Runs per level".into(), s.runs.to_string()),
        (
            "Loads".into(),
            s.loads
                .iter()
                .map(|l| l.label())
                .collect::<Vec<_>>()
                .join(", "),
        ),
    ];
    for (k, v) in &s.labels {
        rows.push((format!("label {k}"), v.clone()));
    }
    for t in &r.targets {
        rows.push((
            format!("{} served", t.name),
            format!("{} ({})", report::served_line(&t.served), t.base_url),
        ));
    }
    out.push_str("<h2>Run</h2>\n<table class=\"metadata\"><tbody>");
    for (k, v) in rows {
        let _ = write!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(&k),
            escape(&v)
        );
    }
    out.push_str("</tbody></table>\n");
}

const CSS: &str = "body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#111;background:#fff}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:24px 0 8px}h2 small{font-weight:normal;color:#555}\
.meta{color:#555;margin:0 0 12px}.legend{list-style:none;padding:0;display:flex;gap:16px;flex-wrap:wrap}\
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}\
.charts{display:flex;flex-wrap:wrap;gap:16px}.chart{margin:0;border:1px solid #e5e7eb;border-radius:6px;padding:8px}\
.chart figcaption{font-weight:600;margin-bottom:4px}.grid{stroke:#e5e7eb}.tick,.axis{font-size:11px;fill:#555}\
table{border-collapse:collapse;margin:4px 0 12px}th,td{border-bottom:1px solid #e5e7eb;padding:4px 8px;text-align:right;white-space:nowrap}\
th{background:#f9fafb}td:first-child,th:first-child,.metadata td{text-align:left}.spread{color:#6b7280;font-size:12px}\
.errors{text-align:left}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_picks_round_axis_tops() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(nice(0.87), 1.0);
        assert_eq!(nice(120.0), 200.0);
        assert_eq!(nice(4.2), 5.0);
        assert_eq!(nice(50.0), 50.0);
    }
}
