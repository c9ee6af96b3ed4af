//! Prometheus exposition: the meter provider's cumulative `ResourceMetrics`
//! (pulled on demand through a `ManualReader` that sits beside the OTLP
//! reader) in; Prometheus text 0.0.4 or OpenMetrics 1.0 out, with names,
//! units and labels mapped per the OpenTelemetry "Prometheus and
//! OpenMetrics compatibility" specification.
//!
//! Conversion happens in two steps so the text writer can be tested on hand
//! built input: `families` turns SDK data into `Family` values (names and
//! labels already mapped), `write_*` renders them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{
    self, AggregatedMetrics, MetricData, ResourceMetrics, ScopeMetrics,
};

use crate::telemetry::exemplars::{Kept, Snapshot};
use crate::telemetry::pull::Exposition;

/// Which exposition format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4 (no exemplars).
    Text,
    /// OpenMetrics text 1.0: adds `# UNIT`, `# EOF` and exemplars.
    OpenMetrics,
}

impl Format {
    /// Pick the format a scraper's `Accept` header prefers: OpenMetrics when
    /// it is accepted with at least the weight of plain text, else text.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let (mut om, mut text) = (0.0f32, 0.0f32);
        for range in accept.unwrap_or("").split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => om = om.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The response `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Render `rm` in `format`.
pub fn encode(rm: &ResourceMetrics, format: Format) -> String {
    encode_with(rm, format, &Snapshot::default(), Exposition::default())
}

/// Render `rm` in `format` as `opts` says, histogram buckets carrying the
/// exemplars in `kept` where the SDK gave none (OpenMetrics only).
pub(crate) fn encode_with(
    rm: &ResourceMetrics,
    format: Format,
    kept: &Snapshot,
    opts: Exposition,
) -> String {
    let mut out = String::with_capacity(16 * 1024);
    write_target_info(&mut out, rm.resource(), format);
    for family in families(rm, kept, opts.scope_labels) {
        write_family(&mut out, &family, format, opts.bucket_stride.max(1));
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// Prometheus metric type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family, names and labels already in Prometheus form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Family {
    /// Name with the unit suffix, without `_total` (the OpenMetrics family name).
    pub name: String,
    pub help: String,
    /// Prometheus unit (`seconds`, `bytes`, …), empty when unitless.
    pub unit: String,
    pub kind: Kind,
    pub series: Vec<Series>,
}

/// One labelled time series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    /// Sorted by name; never contains `le`.
    pub labels: Vec<(String, String)>,
    pub point: Point,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Point {
    Value(Number, Option<Exemplar>),
    Histogram(Hist),
}

/// A cumulative histogram: `buckets` ascending by bound, the last `+Inf`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hist {
    pub buckets: Vec<(f64, u64, Option<Exemplar>)>,
    pub sum: Number,
    pub count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Number {
    U(u64),
    I(i64),
    F(f64),
}

/// An OpenMetrics exemplar: `# {labels} value timestamp`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Exemplar {
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// Seconds since the Unix epoch.
    pub time: Option<f64>,
}

/// Instrument value types.
trait Num: Copy {
    fn number(self) -> Number;
    fn float(self) -> f64;
}

impl Num for u64 {
    fn number(self) -> Number {
        Number::U(self)
    }
    fn float(self) -> f64 {
        self as f64
    }
}

impl Num for i64 {
    fn number(self) -> Number {
        Number::I(self)
    }
    fn float(self) -> f64 {
        self as f64
    }
}

impl Num for f64 {
    fn number(self) -> Number {
        Number::F(self)
    }
    fn float(self) -> f64 {
        self
    }
}

/// Every metric in `rm` as families sorted by name. Metrics from different
/// scopes that map to one name share a family; one whose type conflicts
/// with the family's is dropped (the spec's rule), with a warning.
/// Histograms take tokentap's own exemplars from `kept`.
pub(crate) fn families(rm: &ResourceMetrics, kept: &Snapshot, with_scope: bool) -> Vec<Family> {
    let mut by_name: BTreeMap<String, Family> = BTreeMap::new();
    for scope in rm.scope_metrics() {
        let scope_labels = if with_scope {
            scope_labels(scope)
        } else {
            Vec::new()
        };
        for metric in scope.metrics() {
            let found = Found {
                kept,
                instrument: metric.name(),
            };
            let Some((kind, series)) = convert(metric.data(), &scope_labels, &found) else {
                continue;
            };
            let unit = unit(metric.unit());
            let name = metric_name(metric.name(), &unit, kind);
            match by_name.get_mut(&name) {
                Some(f) if f.kind == kind => f.series.extend(series),
                Some(f) => tracing::warn!(
                    metric = metric.name(),
                    prometheus_name = %name,
                    kind = kind.as_str(),
                    existing = f.kind.as_str(),
                    "dropping a metric whose Prometheus name clashes with another type"
                ),
                None => {
                    let help = metric.description().to_owned();
                    let f = Family {
                        name: name.clone(),
                        help,
                        unit,
                        kind,
                        series,
                    };
                    by_name.insert(name, f);
                }
            }
        }
    }
    let mut out: Vec<Family> = by_name.into_values().collect();
    for f in &mut out {
        f.series.sort_by(|a, b| a.labels.cmp(&b.labels));
    }
    out
}

fn scope_labels(scope: &ScopeMetrics) -> Vec<(String, String)> {
    let s = scope.scope();
    let mut labels = vec![("otel_scope_name".to_owned(), s.name().to_owned())];
    if let Some(v) = s.version() {
        labels.push(("otel_scope_version".to_owned(), v.to_owned()));
    }
    labels
}

/// Where one instrument's kept exemplars are looked up.
struct Found<'a> {
    kept: &'a Snapshot,
    instrument: &'a str,
}

impl Found<'_> {
    /// The kept exemplars of the series with `attrs`, per bucket.
    fn buckets<'k>(
        &'k self,
        attrs: impl Iterator<Item = &'k KeyValue>,
    ) -> Option<&'k [Option<Kept>]> {
        if !self.kept.has(self.instrument) {
            return None;
        }
        let attrs: Vec<KeyValue> = attrs.cloned().collect();
        self.kept.get(self.instrument, &attrs)
    }
}

fn convert(
    data: &AggregatedMetrics,
    scope: &[(String, String)],
    found: &Found<'_>,
) -> Option<(Kind, Vec<Series>)> {
    match data {
        AggregatedMetrics::F64(d) => convert_data(d, scope, found),
        AggregatedMetrics::U64(d) => convert_data(d, scope, found),
        AggregatedMetrics::I64(d) => convert_data(d, scope, found),
    }
}

fn convert_data<T: Num>(
    data: &MetricData<T>,
    scope: &[(String, String)],
    found: &Found<'_>,
) -> Option<(Kind, Vec<Series>)> {
    match data {
        MetricData::Gauge(g) => {
            let series = g.data_points().map(|p| Series {
                labels: labels(p.attributes(), scope),
                point: Point::Value(p.value().number(), None),
            });
            Some((Kind::Gauge, series.collect()))
        }
        // Delta sums and histograms cannot occur (the reader is cumulative).
        MetricData::Sum(s) if s.temporality() == Temporality::Cumulative => {
            let kind = if s.is_monotonic() {
                Kind::Counter
            } else {
                Kind::Gauge
            };
            let series = s.data_points().map(|p| Series {
                labels: labels(p.attributes(), scope),
                // Exemplars belong to counters only.
                point: Point::Value(
                    p.value().number(),
                    s.is_monotonic()
                        .then(|| latest_exemplar(p.exemplars()))
                        .flatten(),
                ),
            });
            Some((kind, series.collect()))
        }
        MetricData::Histogram(h) if h.temporality() == Temporality::Cumulative => {
            let series = h.data_points().map(|p| Series {
                labels: labels(p.attributes(), scope),
                point: Point::Histogram(histogram(p, found.buckets(p.attributes()))),
            });
            Some((Kind::Histogram, series.collect()))
        }
        // Exponential histograms would need native histograms (protobuf).
        _ => None,
    }
}

/// A histogram data point; each bucket carries its own exemplar (the SDK's
/// latest in it, else tokentap's from `kept`), never one from another
/// bucket, which would repeat one trace on many lines.
fn histogram<T: Num>(p: &data::HistogramDataPoint<T>, kept: Option<&[Option<Kept>]>) -> Hist {
    let bounds: Vec<f64> = p.bounds().collect();
    let mut exemplars: Vec<Option<Exemplar>> = vec![None; bounds.len() + 1];
    for e in p.exemplars() {
        let v = e.value.float();
        let i = bounds.partition_point(|b| *b < v);
        let new = exemplar(e);
        if exemplars[i].as_ref().is_none_or(|cur| new.time > cur.time) {
            exemplars[i] = Some(new);
        }
    }
    // Kept buckets line up with these only for the same bounds.
    if let Some(kept) = kept.filter(|k| k.len() == exemplars.len()) {
        for (slot, k) in exemplars.iter_mut().zip(kept) {
            if slot.is_none() {
                *slot = k.as_ref().map(kept_exemplar);
            }
        }
    }
    let mut cumulative = 0u64;
    let mut counts = p.bucket_counts();
    let mut buckets = Vec::with_capacity(bounds.len() + 1);
    for (bound, ex) in bounds.iter().zip(exemplars.iter_mut()) {
        cumulative += counts.next().unwrap_or(0);
        buckets.push((*bound, cumulative, ex.take()));
    }
    let last = exemplars.last_mut().and_then(Option::take);
    buckets.push((f64::INFINITY, p.count(), last));
    Hist {
        buckets,
        sum: p.sum().number(),
        count: p.count(),
    }
}

fn latest_exemplar<'a, T: Num + 'a>(
    exemplars: impl Iterator<Item = &'a data::Exemplar<T>>,
) -> Option<Exemplar> {
    exemplars.max_by_key(|e| e.time()).map(exemplar)
}

/// OpenMetrics caps an exemplar's label names and values at 128 characters.
const EXEMPLAR_LABEL_CHARS: usize = 128;

fn exemplar<T: Num>(e: &data::Exemplar<T>) -> Exemplar {
    let mut labels = Vec::new();
    if e.trace_id().iter().any(|b| *b != 0) {
        labels.push(("trace_id".to_owned(), hex(e.trace_id())));
        labels.push(("span_id".to_owned(), hex(e.span_id())));
    }
    let filtered = sanitize_labels(e.filtered_attributes());
    let chars = |ls: &[(String, String)]| -> usize {
        ls.iter()
            .map(|(k, v)| k.chars().count() + v.chars().count())
            .sum()
    };
    if chars(&labels) + chars(&filtered) <= EXEMPLAR_LABEL_CHARS {
        labels.extend(filtered);
    }
    Exemplar {
        labels,
        value: e.value.float(),
        time: unix_seconds(e.time()),
    }
}

/// An exemplar tokentap kept itself: the trace id only (the span id adds
/// nothing a trace lookup needs).
fn kept_exemplar(k: &Kept) -> Exemplar {
    Exemplar {
        labels: vec![("trace_id".to_owned(), hex(&k.trace_id))],
        value: k.value,
        time: unix_seconds(k.time),
    }
}

/// Seconds since the Unix epoch, to the millisecond.
fn unix_seconds(t: SystemTime) -> Option<f64> {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as f64 / 1000.0)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A data point's attributes plus the scope labels, sorted by name.
fn labels<'a>(
    attrs: impl Iterator<Item = &'a KeyValue>,
    scope: &[(String, String)],
) -> Vec<(String, String)> {
    let mut labels = sanitize_labels(attrs);
    labels.extend(scope.iter().cloned());
    labels.sort();
    labels
}

/// Attribute keys as label names; keys that collide after sanitizing get
/// their values joined with `;` in the order of the original keys.
pub(crate) fn sanitize_labels<'a>(
    attrs: impl Iterator<Item = &'a KeyValue>,
) -> Vec<(String, String)> {
    let mut by_key: Vec<(&str, String)> = attrs
        .map(|kv| (kv.key.as_str(), kv.value.as_str().into_owned()))
        .collect();
    by_key.sort_by(|a, b| a.0.cmp(b.0));
    let mut merged: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in by_key {
        let name = label_name(key);
        if name.is_empty() || name == "le" {
            continue;
        }
        merged
            .entry(name)
            .and_modify(|v| {
                v.push(';');
                v.push_str(&value);
            })
            .or_insert(value);
    }
    merged.into_iter().collect()
}

/// Replace characters outside `[a-zA-Z0-9_]` (plus `:` for metric names)
/// with `_` and collapse runs of `_`.
fn sanitize(s: &str, colon: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let ok = c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':');
        let c = if ok { c } else { '_' };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    out
}

/// An attribute key as a Prometheus label name.
pub(crate) fn label_name(key: &str) -> String {
    let s = sanitize(key, false);
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("key_{s}")
    } else {
        s
    }
}

/// The family name: sanitized, `_total` removed for counters (it is a
/// sample suffix), then the unit suffix unless the name already says it.
pub(crate) fn metric_name(name: &str, unit: &str, kind: Kind) -> String {
    let mut n = sanitize(name, true);
    if n.starts_with(|c: char| c.is_ascii_digit()) {
        n.insert(0, '_');
    }
    if kind == Kind::Counter {
        if let Some(base) = n.strip_suffix("_total") {
            n.truncate(base.len());
        }
    }
    if !unit.is_empty() && !format!("_{n}_").contains(&format!("_{unit}_")) {
        n.push('_');
        n.push_str(unit);
    }
    n
}

/// A UCUM unit as a Prometheus unit word: annotations in braces dropped
/// (`{token}` is a count, unitless), abbreviations spelled out (`s` →
/// `seconds`, `By` → `bytes`), `1` → `ratio`, `a/b` → `a_per_b`.
pub(crate) fn unit(ucum: &str) -> String {
    let mut plain = String::with_capacity(ucum.len());
    let mut depth = 0u32;
    for c in ucum.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let plain = plain.trim();
    if plain == "1" {
        return "ratio".into();
    }
    let (main, per) = match plain.split_once('/') {
        Some((m, p)) => (m.trim(), p.trim()),
        None => (plain, ""),
    };
    let main = match main {
        "1" | "" => String::new(),
        m => sanitize(unit_word(m).unwrap_or(m), false),
    };
    let per = match per {
        "" => String::new(),
        p => sanitize(per_word(p).unwrap_or(p), false),
    };
    let joined = match (main.is_empty(), per.is_empty()) {
        (_, true) => main,
        (true, false) => format!("per_{per}"),
        (false, false) => format!("{main}_per_{per}"),
    };
    joined.trim_matches('_').to_owned()
}

fn unit_word(u: &str) -> Option<&'static str> {
    Some(match u {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        _ => return None,
    })
}

fn per_word(u: &str) -> Option<&'static str> {
    Some(match u {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        _ => return None,
    })
}

fn write_target_info(out: &mut String, resource: &Resource, format: Format) {
    if resource.is_empty() {
        return;
    }
    let attrs: Vec<KeyValue> = resource
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    let labels = sanitize_labels(attrs.iter());
    match format {
        Format::Text => {
            out.push_str("# HELP target_info Target metadata\n# TYPE target_info gauge\n");
        }
        Format::OpenMetrics => out.push_str("# TYPE target info\n# HELP target Target metadata\n"),
    }
    write_sample(
        out,
        "target_info",
        &labels,
        None,
        &Number::U(1),
        None,
        format,
    );
}

fn write_family(out: &mut String, f: &Family, format: Format, stride: usize) {
    if f.series.is_empty() {
        return;
    }
    let header = match (f.kind, format) {
        (Kind::Counter, Format::Text) => format!("{}_total", f.name),
        _ => f.name.clone(),
    };
    if format == Format::OpenMetrics {
        let _ = writeln!(out, "# TYPE {header} {}", f.kind.as_str());
        if !f.unit.is_empty() && f.name.ends_with(&format!("_{}", f.unit)) {
            let _ = writeln!(out, "# UNIT {header} {}", f.unit);
        }
    }
    if !f.help.is_empty() {
        let _ = writeln!(out, "# HELP {header} {}", escape_help(&f.help, format));
    }
    if format == Format::Text {
        let _ = writeln!(out, "# TYPE {header} {}", f.kind.as_str());
    }
    for s in &f.series {
        write_series(out, f, s, format, stride);
    }
}

fn write_series(out: &mut String, f: &Family, s: &Series, format: Format, stride: usize) {
    match (&s.point, f.kind) {
        (Point::Value(v, ex), Kind::Counter) => {
            let name = format!("{}_total", f.name);
            write_sample(out, &name, &s.labels, None, v, ex.as_ref(), format);
        }
        (Point::Value(v, _), _) => write_sample(out, &f.name, &s.labels, None, v, None, format),
        (Point::Histogram(h), _) => {
            let bucket = format!("{}_bucket", f.name);
            let last = h.buckets.len().saturating_sub(1);
            // A skipped bucket's exemplar moves up to the next one written,
            // whose (wider) range still holds its value.
            let mut carried: Option<&Exemplar> = None;
            for (i, (bound, count, ex)) in h.buckets.iter().enumerate() {
                carried = ex.as_ref().or(carried);
                if i % stride != 0 && i != last {
                    continue;
                }
                let le = float(*bound, format);
                let n = Number::U(*count);
                write_sample(
                    out,
                    &bucket,
                    &s.labels,
                    Some(&le),
                    &n,
                    carried.take(),
                    format,
                );
            }
            let sum = format!("{}_sum", f.name);
            write_sample(out, &sum, &s.labels, None, &h.sum, None, format);
            let count = format!("{}_count", f.name);
            let n = Number::U(h.count);
            write_sample(out, &count, &s.labels, None, &n, None, format);
        }
    }
}

fn write_sample(
    out: &mut String,
    name: &str,
    labels: &[(String, String)],
    le: Option<&str>,
    value: &Number,
    exemplar: Option<&Exemplar>,
    format: Format,
) {
    out.push_str(name);
    write_labels(
        out,
        labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        le,
    );
    out.push(' ');
    out.push_str(&number(value, format));
    if let (Some(e), Format::OpenMetrics) = (exemplar, format) {
        out.push_str(" # ");
        // An exemplar always carries a label set, even an empty one.
        if e.labels.is_empty() {
            out.push_str("{}");
        }
        write_labels(
            out,
            e.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            None,
        );
        out.push(' ');
        out.push_str(&float(e.value, format));
        if let Some(t) = e.time {
            let _ = write!(out, " {t:.3}");
        }
    }
    out.push('\n');
}

fn write_labels<'a>(
    out: &mut String,
    labels: impl Iterator<Item = (&'a str, &'a str)>,
    le: Option<&'a str>,
) {
    let mut first = true;
    for (k, v) in labels.chain(le.map(|le| ("le", le))) {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        escape_value(out, v);
        out.push('"');
    }
    if !first {
        out.push('}');
    }
}

/// Label values escape backslash, double quote and newline.
fn escape_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// HELP text escapes backslash and newline (OpenMetrics: double quote too).
fn escape_help(help: &str, format: Format) -> String {
    let mut out = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if format == Format::OpenMetrics => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

fn number(n: &Number, format: Format) -> String {
    match *n {
        Number::U(v) => v.to_string(),
        Number::I(v) => v.to_string(),
        Number::F(v) => float(v, format),
    }
}

/// Shortest round-trip form; OpenMetrics writes integral floats as `1.0`.
fn float(v: f64, format: Format) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if format == Format::OpenMetrics && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests;
