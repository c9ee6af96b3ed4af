//! The docs against the binary: every `tokentap …` command in README.md
//! and docs/CONFIG.md names a subcommand that exists and flags its
//! `--help` lists; every key in CONFIG.md's key tables is a key the config
//! loader knows; the shipped TOML names every provider.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

const DOCS: [(&str, &str); 2] = [
    ("README.md", include_str!("../README.md")),
    ("docs/CONFIG.md", include_str!("../docs/CONFIG.md")),
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
            let sub = match words.first() {
                Some(w) if !w.starts_with('-') => w.to_string(),
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
    let subs = ["run", "check", "simulate", "demo", "price"];
    for s in subs {
        assert!(top.contains(&format!("  {s} ")), "`{s}` in --help:\n{top}");
    }
    let mut helps: BTreeMap<String, String> = BTreeMap::new();
    helps.insert(String::new(), top.clone());
    for s in subs {
        helps.insert(s.to_owned(), help(&[s]));
    }
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

#[test]
fn documented_config_keys_exist() {
    let doc = DOCS[1].1;
    let mut section: Option<String> = None;
    let mut key_table = false;
    let mut checked = 0;
    for line in doc.lines() {
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
        let key = cell.split('`').next().unwrap();
        let known = known_keys(s);
        assert!(
            known.contains(key),
            "docs/CONFIG.md documents `{key}` in [{s}], which the loader does not know (knows: {known:?})"
        );
        checked += 1;
    }
    assert!(checked > 40, "the audit saw the key tables ({checked})");
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
