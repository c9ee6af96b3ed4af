//! `[[slo]]` and `[alerts]` validation: raw entries in (with the validated
//! routes and `[live]` windows they depend on), `SloSettings` out.

use std::collections::HashSet;
use std::time::Duration;

use super::super::parse::{self, fmt_duration};
use super::super::raw::RawAlerts;
use super::super::{AlertsConfig, ConfigError, LiveConfig, RouteConfig, SloConfig, SloSettings};
use super::Cx;

/// More retries than this only delay the next event.
const MAX_RETRIES: u32 = 20;

pub(in crate::config) fn settings(
    cx: &Cx,
    raw: &[SloConfig],
    alerts: Option<&RawAlerts>,
    routes: &[RouteConfig],
    live: &LiveConfig,
) -> Result<SloSettings, ConfigError> {
    let mut names = HashSet::new();
    let mut slos = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let s = slo(cx, i, r, routes, live)?;
        if !names.insert(s.name.clone()) {
            let message = format!("duplicate SLO name `{}`", s.name);
            return Err(cx.invalid(&format!("slo.{i}.name"), message));
        }
        slos.push(s);
    }
    let alerts = alerts.map(|a| self::alerts(cx, a)).transpose()?;
    Ok(SloSettings { slos, alerts })
}

fn slo(
    cx: &Cx,
    i: usize,
    r: &SloConfig,
    routes: &[RouteConfig],
    live: &LiveConfig,
) -> Result<SloConfig, ConfigError> {
    let at = |field: &str| format!("slo.{i}.{field}");
    cx.name(&at("name"), &r.name)?;
    if let Some(route) = &r.route
        && !routes.iter().any(|c| &c.name == route)
    {
        let known: Vec<&str> = routes.iter().map(|c| c.name.as_str()).collect();
        let message = format!(
            "no route named `{route}`; configured routes: {}",
            known.join(", ")
        );
        return Err(cx.invalid(&at("route"), message));
    }
    if r.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(cx.invalid(
            &at("model"),
            "must not be empty; omit it to match every model",
        ));
    }
    let window = within_live(cx, &at("window"), r.window, live, "")?;
    if r.min_requests == 0 {
        return Err(cx.invalid(&at("min_requests"), "must be at least 1"));
    }
    // `closed`: 0 and 1 allowed (error_ratio); else strictly between (a drop share).
    let share = |field: &str, v: Option<f64>, closed: bool| match v {
        Some(v) if !(0.0..=1.0).contains(&v) || (!closed && (v == 0.0 || v == 1.0)) => {
            let range = if closed {
                "from 0 to 1"
            } else {
                "above 0 and below 1"
            };
            let message = format!("{v} is not a share {range} (e.g. 0.3 = 30%)");
            Err(cx.invalid(&at(field), message))
        }
        v => Ok(v),
    };
    let decode_tps_p50_min = match r.decode_tps_p50_min {
        Some(v) if !(v.is_finite() && v > 0.0) => {
            let message = format!("{v} is not a positive rate in tokens per second");
            return Err(cx.invalid(&at("decode_tps_p50_min"), message));
        }
        v => v,
    };
    let decode_tps_drop = share("decode_tps_drop", r.decode_tps_drop, false)?;
    // Only checked when the relative check uses it: the default (1h) is
    // longer than the default `live.window` (10m).
    let baseline_window = match decode_tps_drop {
        Some(_) => {
            let b = within_live(
                cx,
                &at("baseline_window"),
                r.baseline_window,
                live,
                BASELINE_HINT,
            )?;
            if b <= window {
                let message = format!(
                    "{} must be longer than the SLO's window ({}): the baseline is the slower-moving reference",
                    fmt_duration(b),
                    fmt_duration(window)
                );
                return Err(cx.invalid(&at("baseline_window"), message));
            }
            b
        }
        None => r.baseline_window,
    };
    let s = SloConfig {
        name: r.name.clone(),
        route: r.route.clone(),
        model: r.model.as_ref().map(|m| m.trim().to_owned()),
        window,
        min_requests: r.min_requests,
        ttft_p95: r.ttft_p95,
        decode_tps_p50_min,
        max_stall: r.max_stall,
        error_ratio: share("error_ratio", r.error_ratio, true)?,
        decode_tps_drop,
        baseline_window,
    };
    let none = s.ttft_p95.is_none()
        && s.decode_tps_p50_min.is_none()
        && s.max_stall.is_none()
        && s.error_ratio.is_none()
        && s.decode_tps_drop.is_none();
    if none {
        return Err(cx.invalid(
            &at("name"),
            format!(
                "SLO `{}` sets no objective; add one or more of ttft_p95, decode_tps_p50_min, \
                 max_stall, error_ratio, decode_tps_drop",
                s.name
            ),
        ));
    }
    Ok(s)
}

const BASELINE_HINT: &str = "; the baseline_window default is 1h, so with decode_tps_drop either \
raise live.window (e.g. window = \"1h\" with bucket = \"15s\") or set a shorter baseline_window";

/// A window the live statistics can answer: at least one `live.bucket`,
/// at most `live.window`.
fn within_live(
    cx: &Cx,
    path: &str,
    d: Duration,
    live: &LiveConfig,
    hint: &str,
) -> Result<Duration, ConfigError> {
    if d.is_zero() {
        return Err(cx.invalid(path, "must be longer than zero"));
    }
    if d > live.window {
        let message = format!(
            "{} is longer than live.window ({}), the longest span the live statistics keep{hint}",
            fmt_duration(d),
            fmt_duration(live.window)
        );
        return Err(cx.invalid(path, message));
    }
    if d < live.bucket {
        let message = format!(
            "{} is shorter than live.bucket ({}), the live statistics' resolution",
            fmt_duration(d),
            fmt_duration(live.bucket)
        );
        return Err(cx.invalid(path, message));
    }
    Ok(d)
}

fn alerts(cx: &Cx, a: &RawAlerts) -> Result<AlertsConfig, ConfigError> {
    let webhook_url =
        parse::webhook_url(&a.webhook_url).map_err(|m| cx.invalid("alerts.webhook_url", m))?;
    if a.max_retries > MAX_RETRIES {
        return Err(cx.invalid("alerts.max_retries", format!("at most {MAX_RETRIES}")));
    }
    let mut headers = Vec::with_capacity(a.headers.len());
    for (k, v) in &a.headers {
        let name = cx.header("alerts.headers", k)?;
        let value = http::HeaderValue::from_str(v).map_err(|_| {
            cx.invalid(
                "alerts.headers",
                format!("the value of `{k}` is not a valid header value"),
            )
        })?;
        headers.push((name, value));
    }
    Ok(AlertsConfig {
        webhook_url,
        format: a.format,
        min_interval: a.min_interval,
        timeout: a.timeout,
        max_retries: a.max_retries,
        headers,
    })
}
