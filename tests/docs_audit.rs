//! The docs against the binary: every `tokentap …` command in README.md,
//! docs/CONFIG.md and docs/COMPARING.md names a subcommand that exists and flags its
//! `--help` lists; every key in CONFIG.md's key tables is a key the config
//! loader knows, and is in config/tokentap.toml, which has no other keys
//! and loads; CONFIG.md's advice for an admin listener beyond loopback
//! loads; every Markdown table row sits in its table and every code fence
//! is clean; a flag whose help states a range refuses values outside it;
//! the shipped TOML names every provider; every link to a heading (in the
//! docs and in config/tokentap.toml's comments) finds its heading; every
//! range a key's type states holds at both ends; each default CONFIG.md
//! gives is shown in the same form by `check` and `/config`; the
//! restart-only lists (the example's comment, CONFIG.md's table) name
//! every restart-only key. (tests/grafana_names.rs checks METRICS.md's
//! Prometheus mapping against a real scrape.)

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#![allow(
    clippy::disallowed_methods,
    reason = "a deadline for a child process that should have refused its flags"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

const DOCS: [(&str, &str); 3] = [
    ("README.md", include_str!("../README.md")),
    ("docs/CONFIG.md", include_str!("../docs/CONFIG.md")),
    ("docs/COMPARING.md", include_str!("../docs/COMPARING.md")),
];

/// Every Markdown file a user reads.
const ALL_DOCS: [(&str, &str); 13] = [
    ("README.md", include_str!("../README.md")),
    ("CONTRIBUTING.md", include_str!("../CONTRIBUTING.md")),
    (
        "docs/ARCHITECTURE.md",
        include_str!("../docs/ARCHITECTURE.md"),
    ),
    ("docs/BENCHMARKS.md", include_str!("../docs/BENCHMARKS.md")),
    (
        "docs/BENCHMARKS-HISTORY.md",
        include_str!("../docs/BENCHMARKS-HISTORY.md"),
    ),
    ("docs/COMPARING.md", include_str!("../docs/COMPARING.md")),
    ("docs/CONFIG.md", include_str!("../docs/CONFIG.md")),
    ("docs/COST.md", include_str!("../docs/COST.md")),
    ("docs/DEPLOYMENT.md", include_str!("../docs/DEPLOYMENT.md")),
    ("docs/METRICS.md", include_str!("../docs/METRICS.md")),
    ("docs/PROVIDERS.md", include_str!("../docs/PROVIDERS.md")),
    (
        "docs/RELIABILITY.md",
        include_str!("../docs/RELIABILITY.md"),
    ),
    ("examples/README.md", include_str!("../examples/README.md")),
];

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(args)
        .arg("--help")
        .env_remove("TOKENTAP_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "tokentap {args:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// One invocation: subcommand (`""` = none), flags, the text, and whether
/// it sits in a fenced block (an inline span may be a log line instead).
type Invocation = (String, Vec<String>, String, bool);

/// Every `tokentap …` / `cargo run --release -- …` invocation in code
/// (fenced blocks and inline spans).
fn invocations(doc: &str) -> Vec<Invocation> {
    let mut found = Vec::new();
    let mut code: Vec<(String, bool)> = Vec::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            code.push((line.to_owned(), true));
        } else {
            code.extend(
                line.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(|c| (c.to_owned(), false)),
            );
        }
    }
    for (text, fenced) in code {
        for start in ["cargo run --release -- ", "tokentap "] {
            let Some(at) = text.find(start) else { continue };
            // `tokentap` as a word of its own, not a path or a name.
            if start == "tokentap " && at > 0 && !text[..at].ends_with([' ', '(', '&', ';']) {
                continue;
            }
            let words: Vec<&str> = text[at + start.len()..]
                .split_whitespace()
                .take_while(|w| !["|", "&&", "#", ";", ">"].contains(w))
                .collect();
            // `bench compare` is a subcommand of a subcommand, with its own flags.
            let sub = match words.as_slice() {
                ["bench", "compare", ..] => "bench compare".to_owned(),
                [w, ..] if !w.starts_with('-') => w.to_string(),
                _ => String::new(),
            };
            let flags = words
                .iter()
                .filter(|w| w.trim_start_matches('[').starts_with("--"))
                .map(|w| {
                    w.split(['=', ']', '`', ')'])
                        .next()
                        .unwrap()
                        .trim_start_matches('[')
                        .to_owned()
                })
                .collect();
            found.push((sub, flags, text.clone(), fenced));
            break;
        }
    }
    found
}

#[test]
fn documented_commands_and_flags_exist() {
    let top = help(&[]);
    let subs = [
        "run", "check", "simulate", "demo", "price", "bench", "compare",
    ];
    for s in subs {
        assert!(top.contains(&format!("  {s} ")), "`{s}` in --help:\n{top}");
    }
    let mut helps: BTreeMap<String, String> = BTreeMap::new();
    helps.insert(String::new(), top.clone());
    for s in subs {
        helps.insert(s.to_owned(), help(&[s]));
    }
    helps.insert("bench compare".to_owned(), help(&["bench", "compare"]));
    let mut checked = 0;
    for (name, doc) in DOCS {
        for (sub, flags, line, fenced) in invocations(doc) {
            // Outside a command block, or in upper case (`SUBCOMMAND`), a
            // word after the binary that is no subcommand is prose or a
            // placeholder; in a command block it is a mistake.
            if !sub.is_empty() && !helps.contains_key(&sub) {
                assert!(
                    !fenced || !sub.chars().all(|c| c.is_ascii_lowercase()),
                    "{name}: `{line}` uses subcommand `{sub}`, which does not exist"
                );
                continue;
            }
            let h = &helps[&sub];
            for f in flags {
                if f == "--help" || f == "--version" {
                    continue;
                }
                assert!(
                    h.contains(&format!("{f} ")) || h.contains(&format!("{f}\n")),
                    "{name}: `{line}` passes {f}, which `tokentap {sub} --help` does not list"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked > 15,
        "the audit saw the documented flags ({checked})"
    );
}

/// The keys the loader knows in `section` (`""` = top level), from its
/// unknown-key error.
fn known_keys(section: &str) -> BTreeSet<String> {
    let route = "[[routes]]\nname = \"a\"\nupstream = \"http://127.0.0.1:9\"\n";
    let toml = match section {
        "" => format!("zz_unknown = 1\n{route}"),
        "routes" => format!("{route}zz_unknown = 1\n"),
        "slo" => format!("{route}[[slo]]\nname = \"s\"\nzz_unknown = 1\n"),
        "prices" => format!("{route}[[prices]]\nmodel = \"m\"\nzz_unknown = 1\n"),
        s => format!("{route}[{s}]\nzz_unknown = 1\n"),
    };
    let e = tokentap::config::from_toml(&toml).expect_err("unknown key");
    let text = e.to_string();
    let list = text
        .split("expected one of: ")
        .nth(1)
        .unwrap_or_else(|| panic!("[{section}]: no key list in `{text}`"));
    list.split(", ").map(|k| k.trim().to_owned()).collect()
}

/// `(section, key)` of every row of docs/CONFIG.md's `| key |` tables;
/// section `""` is the top level, `routes` is `[[routes]]`.
fn documented_keys() -> Vec<(String, String)> {
    let mut section: Option<String> = None;
    let mut key_table = false;
    let mut keys = Vec::new();
    for line in DOCS[1].1.lines() {
        // Only rows of `| key | … |` tables name keys.
        if line.starts_with("| key |") {
            key_table = true;
        } else if !line.starts_with('|') {
            key_table = false;
        }
        if let Some(h) = line.strip_prefix("### ") {
            section = match h {
                "Top level" => Some(String::new()),
                _ if h.starts_with("`[") => Some(h.trim_matches(['`', '[', ']']).to_owned()),
                _ => None,
            };
            continue;
        }
        if line.starts_with("## ") {
            section = None;
        }
        let Some(s) = &section else { continue };
        let Some(cell) = line.strip_prefix("| `").filter(|_| key_table) else {
            continue;
        };
        keys.push((s.clone(), cell.split('`').next().unwrap().to_owned()));
    }
    keys
}

#[test]
fn documented_config_keys_exist() {
    let keys = documented_keys();
    for (s, key) in &keys {
        let known = known_keys(s);
        assert!(
            known.contains(key),
            "docs/CONFIG.md documents `{key}` in [{s}], which the loader does not know (knows: {known:?})"
        );
    }
    assert!(
        keys.len() > 40,
        "the audit saw the key tables ({})",
        keys.len()
    );
}

const EXAMPLE: &str = include_str!("../config/tokentap.toml");

/// Sub-tables of the example whose keys are those of a documented section.
const SAME_KEYS_AS: [(&str, &str); 2] = [("admin.tls", "tls"), ("routes.prices", "prices")];

/// `(section, key)` of every key the example sets or shows commented out
/// (`# key = …`, `# [section]`); a sub-table `[a.b]` counts as key `b` of
/// `a`. Keys inside a sub-table CONFIG.md gives no table of its own (free
/// tables such as `otlp_headers`, `[routes.sigv4]`) are left out.
fn example_keys(documented: &BTreeSet<&str>) -> BTreeSet<(String, String)> {
    let mut section = String::new();
    let mut keys = BTreeSet::new();
    for line in EXAMPLE.lines() {
        let line = line.strip_prefix("# ").unwrap_or(line);
        if line.starts_with('[') {
            let name = line.split(']').next().unwrap().trim_start_matches('[');
            section = name.to_owned();
            // A sub-table with a key table of its own (`[telemetry.sampling]`)
            // is a section, not a key of its parent's table.
            if let Some((parent, child)) =
                name.rsplit_once('.').filter(|_| !documented.contains(name))
            {
                keys.insert((parent.to_owned(), child.to_owned()));
            }
            continue;
        }
        let Some((key, _)) = line.split_once(" = ") else {
            continue;
        };
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            continue;
        }
        let owner = SAME_KEYS_AS
            .iter()
            .find(|(table, _)| *table == section)
            .map_or(section.as_str(), |(_, same)| same);
        if documented.contains(owner) {
            keys.insert((owner.to_owned(), key.to_owned()));
        }
    }
    keys
}

/// config/tokentap.toml says it has every key: each key of CONFIG.md's
/// tables is in it (set or commented out), each key in it is in a table,
/// and it loads.
#[test]
fn example_config_has_every_documented_key_and_no_other() {
    let documented: BTreeSet<(String, String)> = documented_keys().into_iter().collect();
    let sections: BTreeSet<&str> = documented.iter().map(|(s, _)| s.as_str()).collect();
    let example = example_keys(&sections);
    let show = |(s, k): &(String, String)| match s.as_str() {
        "" => format!("`{k}` (top level)"),
        s => format!("`{s}.{k}`"),
    };
    let missing: Vec<String> = documented.difference(&example).map(show).collect();
    assert!(
        missing.is_empty(),
        "config/tokentap.toml lacks these keys of docs/CONFIG.md (add each, set or as `# key = …` \
         in its section): {missing:?}"
    );
    let undocumented: Vec<String> = example.difference(&documented).map(show).collect();
    assert!(
        undocumented.is_empty(),
        "config/tokentap.toml has keys docs/CONFIG.md's tables lack: {undocumented:?}"
    );
    assert!(
        example.len() > 80,
        "the audit read the example ({})",
        example.len()
    );
    tokentap::config::from_toml(EXAMPLE).expect("config/tokentap.toml loads");
}

/// A Markdown table row must follow a row or be a header row (the next
/// line its `|---|` delimiter): a row cut off from its table by a code
/// block or prose renders as a line of text. A code fence holds nothing
/// but its language.
#[test]
fn table_rows_belong_to_a_table() {
    let mut checked = 0;
    for (name, doc) in ALL_DOCS {
        let lines: Vec<&str> = doc.lines().collect();
        let mut fenced = false;
        for (i, line) in lines.iter().enumerate() {
            if let Some(info) = line.trim_start().strip_prefix("```") {
                // A fence carries at most a language name; text after it
                // means the fence was glued to prose and renders wrong.
                assert!(
                    info.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                    "{name}:{}: `{line}` is a code fence with text after it",
                    i + 1
                );
                fenced = !fenced;
                continue;
            }
            if fenced || !line.starts_with('|') {
                continue;
            }
            let after_row = i > 0 && lines[i - 1].starts_with('|');
            let header = lines.get(i + 1).is_some_and(|n| {
                n.starts_with("|-") || n.starts_with("| -") || n.starts_with("|:")
            });
            assert!(
                after_row || header,
                "{name}:{}: `{line}` is a table row with no table above it (it renders as text)",
                i + 1
            );
            checked += 1;
        }
    }
    assert!(checked > 300, "the audit saw the tables ({checked})");
}

#[test]
fn shipped_toml_names_every_provider() {
    let toml = include_str!("../config/tokentap.toml");
    for kind in tokentap::providers::ProviderKind::ALL {
        let name = serde_json::to_value(kind).unwrap();
        let name = name.as_str().unwrap();
        assert!(
            toml.contains(&format!("\"{name}\"")),
            "config/tokentap.toml's provider comment names \"{name}\""
        );
    }
}

/// The TOML blocks of `doc`, in order.
fn toml_blocks(doc: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```toml") => current = Some(String::new()),
            (Some(b), "```") => {
                blocks.push(std::mem::take(b));
                current = None;
            }
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// CONFIG.md's advice for scraping the admin listener from another host
/// loads as written (with a token file in place), while the address alone
/// is refused, as the advice says.
#[test]
fn admin_advice_for_another_host_loads() {
    let block = toml_blocks(DOCS[1].1)
        .into_iter()
        .find(|b| b.contains("admin_listen = \"0.0.0.0:9464\""))
        .expect("CONFIG.md shows admin_listen beyond loopback in a toml block");
    let route = "[[routes]]\nname = \"a\"\nupstream = \"http://127.0.0.1:9\"\n";
    let dir = std::env::temp_dir().join(format!("tokentap-admin-advice-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "0123456789abcdef-a-test-token\n").unwrap();
    let mut text = block.clone();
    for line in block.lines() {
        if let Some(path) = line.strip_prefix("token_file = ") {
            text = text.replace(path, &format!("{:?}", token.display().to_string()));
        }
    }
    let (top, tables) = text.split_at(text.find("\n[").map_or(text.len(), |i| i + 1));
    let advice = format!("{top}{route}{tables}");
    let loaded = tokentap::config::from_toml(&advice);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = loaded {
        panic!("the advice is refused: {e}\n{advice}");
    }
    let alone = format!("admin_listen = \"0.0.0.0:9464\"\n{route}");
    let e = tokentap::config::from_toml(&alone).expect_err("an open admin listener is refused");
    assert!(
        e.to_string().contains("admin"),
        "the refusal names the admin listener: {e}"
    );
}

/// Values outside the range a flag's help states: `0..1` (a share),
/// `≥ 0`, `≥ 1`.
fn out_of_range(help: &str) -> &'static [&'static str] {
    if help.contains("0..1") {
        &["2", "-0.5"]
    } else if help.contains("≥ 0") {
        &["-1"]
    } else if help.contains("≥ 1") {
        &["0"]
    } else {
        &[]
    }
}

/// Each flag of `simulate` and `demo` whose help states a range refuses a
/// value outside it (exit code 2, naming the flag) instead of running.
#[test]
fn flag_ranges_in_help_are_enforced() {
    let mut checked = 0;
    for sub in ["simulate", "demo"] {
        let text = help(&[sub]);
        let mut flags: Vec<(String, String)> = Vec::new();
        for line in text.lines() {
            let t = line.trim_start();
            if t.starts_with("--") || (t.starts_with('-') && t.contains(", --")) {
                let flag = t
                    .split(['-', ',', ' '])
                    .find(|w| !w.is_empty())
                    .unwrap_or("");
                let long = t
                    .split_whitespace()
                    .find(|w| w.starts_with("--"))
                    .unwrap_or(flag);
                flags.push((long.trim_end_matches(',').to_owned(), String::new()));
            } else if let Some((_, h)) = flags.last_mut() {
                h.push_str(t);
                h.push(' ');
            }
        }
        for (flag, text) in &flags {
            for value in out_of_range(text) {
                let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
                    // `--flag=value`, so a negative value is a value.
                    .args([sub, "--listen", "127.0.0.1:0", &format!("{flag}={value}")])
                    .env_remove("TOKENTAP_CONFIG")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                let status = loop {
                    if let Some(s) = child.try_wait().unwrap() {
                        break Some(s);
                    }
                    if std::time::Instant::now() > deadline {
                        let _ = child.kill();
                        let _ = child.wait();
                        break None;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                };
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                assert_eq!(
                    status.and_then(|s| s.code()),
                    Some(2),
                    "`tokentap {sub} {flag} {value}` must be refused (its help: {text}); stderr: {err}"
                );
                assert!(err.contains(flag.as_str()), "the error names {flag}: {err}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 8, "the audit tried the ranged flags ({checked})");
}

/// GitHub's anchor of a heading: lowercase, letters, digits, `-` and `_`
/// kept, spaces made `-`, the rest dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The anchors of `doc`'s headings (outside code fences), with GitHub's
/// `-1`, `-2` … for repeated ones.
fn anchors(doc: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(text) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        let s = slug(text.trim_start_matches('#'));
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// `a/b/../c.md` → `a/c.md`.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// `(file, anchor)` of every `FILE.md#anchor` and `#anchor` link target in
/// Markdown `](…)` links of `text`, the file resolved from `from`'s folder.
fn md_links(from: &str, text: &str) -> Vec<(String, String)> {
    let dir = from.rsplit_once('/').map_or("", |(d, _)| d);
    let mut out = Vec::new();
    for piece in text.split("](").skip(1) {
        let Some(target) = piece.split(')').next() else {
            continue;
        };
        let Some((file, anchor)) = target.split_once('#') else {
            continue;
        };
        if file.contains("://") || !(file.is_empty() || file.ends_with(".md")) {
            continue;
        }
        let file = match file {
            "" => from.to_owned(),
            f => normalize(&format!("{dir}/{f}")),
        };
        out.push((file, anchor.to_owned()));
    }
    out
}

/// Every link to a heading (`CONFIG.md#reloading`, `#outcomes`) in the
/// Markdown docs and in config/tokentap.toml's comments names a heading
/// that exists: a renamed section leaves no link pointing nowhere.
#[test]
fn links_to_headings_resolve() {
    let headings: BTreeMap<&str, BTreeSet<String>> =
        ALL_DOCS.iter().map(|(n, d)| (*n, anchors(d))).collect();
    let mut links: Vec<(String, String, String)> = Vec::new();
    for (name, doc) in ALL_DOCS {
        for (file, anchor) in md_links(name, doc) {
            links.push((name.to_owned(), file, anchor));
        }
    }
    // The example's comments name `docs/CONFIG.md#key-anchor` bare.
    for word in EXAMPLE.split(|c: char| c.is_whitespace() || c == '(' || c == ')') {
        if let Some((file, anchor)) = word.split_once(".md#") {
            let anchor = anchor.trim_end_matches(['.', ',', ';', ':']);
            links.push((
                "config/tokentap.toml".into(),
                format!("{file}.md"),
                anchor.into(),
            ));
        }
    }
    let mut checked = 0;
    for (from, file, anchor) in &links {
        let Some(known) = headings.get(file.as_str()) else {
            continue;
        };
        assert!(
            known.contains(anchor),
            "{from} links to {file}#{anchor}, which is no heading of {file}"
        );
        checked += 1;
    }
    assert!(checked > 50, "the audit followed the links ({checked})");
}

/// A minimal config with `line` in `section` (`""` = top level).
fn with_key(section: &str, line: &str) -> String {
    let route = "[[routes]]\nname = \"a\"\nupstream = \"http://127.0.0.1:9\"\n";
    match section {
        "" => format!("{line}\n{route}"),
        // `[alerts]` needs its webhook.
        "alerts" => {
            format!("{route}[alerts]\nwebhook_url = \"https://hooks.example.com/x\"\n{line}\n")
        }
        s => format!("{route}[{s}]\n{line}\n"),
    }
}

/// A size as CONFIG.md writes it (`16KiB`, `(2GiB − 1)`), in bytes.
fn doc_size(text: &str) -> Option<u64> {
    let t = text.trim().trim_start_matches('(').trim_end_matches(')');
    let (t, minus) = match t.split_once('−') {
        Some((a, b)) => (a.trim(), b.trim().parse::<u64>().ok()?),
        None => (t, 0),
    };
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..split].parse().ok()?;
    let mult = match &t[split..] {
        "" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    Some(n * mult - minus)
}

/// CONFIG.md's key-table lines with the section they sit in (`""` for the
/// top level; `[[…]]` array sections left out), an escaped `\|` inside a
/// cell turned into `¦` so it is no column break.
fn config_table_rows() -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut section: Option<String> = None;
    for line in DOCS[1].1.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            section = match h {
                "Top level" => Some(String::new()),
                _ if h.starts_with("`[[") => None,
                _ if h.starts_with("`[") => Some(h.trim_matches(['`', '[', ']']).to_owned()),
                _ => None,
            };
            continue;
        }
        if let Some(s) = &section {
            rows.push((s.clone(), line.replace("\\|", "¦")));
        }
    }
    rows
}

/// Every key whose type in CONFIG.md states a range (`integer 1–10000`,
/// `size 16KiB–(2GiB − 1)`, `number 0–1`) takes both ends and refuses the
/// values just outside them.
#[test]
fn documented_key_ranges_hold() {
    let mut checked = 0;
    for (s, line) in &config_table_rows() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(key), Some(kind)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Some(key) = key.strip_prefix('`').and_then(|k| k.strip_suffix('`')) else {
            continue;
        };
        let Some((unit, range)) = kind.split_once(' ') else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('–') else {
            continue;
        };
        let (inside, outside): (Vec<String>, Vec<String>) = match unit {
            "integer" | "size" => {
                let parse = |t: &str| match unit {
                    "size" => doc_size(t),
                    _ => t.trim().parse::<u64>().ok(),
                };
                let (Some(lo), Some(hi)) = (parse(lo), parse(hi)) else {
                    panic!("CONFIG.md: `{key}`: cannot read the range `{range}`");
                };
                let mut outside = vec![(hi + 1).to_string()];
                if lo > 0 {
                    outside.push((lo - 1).to_string());
                }
                (vec![lo.to_string(), hi.to_string()], outside)
            }
            "number" if range == "0–1" => (
                vec!["0.0".into(), "1.0".into()],
                vec!["1.5".into(), "-0.1".into()],
            ),
            _ => continue,
        };
        for v in &inside {
            let toml = with_key(s, &format!("{key} = {v}"));
            if let Err(e) = tokentap::config::from_toml(&toml) {
                panic!("CONFIG.md says `{s}.{key}` takes {range}, but {v} is refused: {e}");
            }
        }
        for v in &outside {
            let toml = with_key(s, &format!("{key} = {v}"));
            let e = tokentap::config::from_toml(&toml).err();
            assert!(
                e.as_ref().is_some_and(|e| e.to_string().contains(key)),
                "CONFIG.md says `{s}.{key}` takes {range}, so {v} must be refused naming it: {e:?}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 8, "the audit tried the ranged keys ({checked})");
}

/// The value at `section.key` of a TOML document.
fn toml_at<'a>(doc: &'a toml::Value, section: &str, key: &str) -> Option<&'a toml::Value> {
    let mut v = doc;
    for part in section.split('.').filter(|p| !p.is_empty()) {
        v = v.get(part)?;
    }
    v.get(key)
}

/// `check` and `/config` show each default as CONFIG.md writes it (a
/// duration as `"24h"`, not `"1day"`; `1.0`, not a float's long tail).
#[test]
fn shown_defaults_read_as_documented() {
    let config = tokentap::config::from_toml(&with_key("", "")).unwrap();
    let shown: toml::Value = toml::from_str(&config.redacted_toml()).unwrap();
    let mut checked = 0;
    for (s, line) in &config_table_rows() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(key), Some(default)) = (cells.get(1), cells.get(3)) else {
            continue;
        };
        let Some(key) = key.strip_prefix('`').and_then(|k| k.strip_suffix('`')) else {
            continue;
        };
        // Only a default written as one TOML value (`"24h"`, `100`, `1.0`).
        let Some(written) = default
            .strip_prefix('`')
            .and_then(|d| d.strip_suffix('`'))
            .filter(|d| !d.contains('`'))
        else {
            continue;
        };
        let Ok(doc) = toml::from_str::<toml::Value>(&format!("v = {written}")) else {
            continue;
        };
        // A secret is never shown.
        let Some(got) = toml_at(&shown, s, key).filter(|v| v.as_str() != Some("<redacted>")) else {
            continue;
        };
        let want = &doc["v"];
        let same = match (got, want) {
            (toml::Value::Float(a), toml::Value::Integer(b)) => *a == *b as f64,
            (a, b) => a == b,
        };
        assert!(
            same,
            "CONFIG.md gives `{s}.{key}` the default {written}, but the shown configuration has {got}"
        );
        checked += 1;
    }
    assert!(checked > 40, "the audit compared the defaults ({checked})");
}

/// The restart-only keys: config/tokentap.toml's comment and CONFIG.md's
/// table name each one the loader treats so.
#[test]
fn restart_only_lists_are_whole() {
    let comment: String = EXAMPLE
        .split("Restart-only (a reload")
        .nth(1)
        .and_then(|rest| rest.split("#reloading").next())
        .expect("config/tokentap.toml lists the restart-only keys")
        .to_owned();
    let table = DOCS[1]
        .1
        .split("Keys that need a restart")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").nth(1))
        .expect("CONFIG.md has the table of restart-only keys");
    for key in tokentap::config::RESTART_ONLY {
        let named = comment
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .any(|w| w == *key);
        assert!(
            named,
            "config/tokentap.toml's restart-only comment leaves out `{key}`: {comment}"
        );
        assert!(
            table.contains(&format!("`{key}`"))
                || table.contains(&format!("`[{key}]`"))
                || table.contains(&format!("`[[{key}]]`")),
            "CONFIG.md's table of restart-only keys leaves out `{key}`"
        );
    }
}
