//! The store's layer rule, checked: a module names only modules of its own layer or of
//! the layers before it (`dynamo` <- `engine` <- `derived` <- `features`, as
//! `docs/architecture.md` orders them). Methods of the one `Store` type can still call
//! upward (the documented follow-ups); module paths cannot, except the one listed here.
//! Those method calls are listed too, exactly (issue #30 counts them down to zero): a new
//! upward call fails, and so does a listed one that is gone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

const LAYERS: [&str; 4] = ["dynamo", "engine", "derived", "features"];

/// Module paths allowed to point upward, as (file, module named): a finished job's
/// workflow follow-up needs the workflow's step outcome type.
const ALLOWED_UPWARD: [(&str, &str); 1] = [("engine/effects.rs", "workflow")];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every module of the store, by its crate-root name, with its layer's rank.
fn module_ranks() -> HashMap<String, usize> {
    let mut ranks = HashMap::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        ranks.insert((*layer).to_owned(), rank);
        let Ok(entries) = std::fs::read_dir(src().join(layer)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned();
            if name != "mod" {
                ranks.insert(name, rank);
            }
        }
    }
    ranks
}

/// The crate-root module names `text` refers to (`crate::<name>`, and each item of a
/// `crate::{...}` group, over as many lines as it spans), outside comments.
fn named_modules(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.push(ident(rest));
            continue;
        };
        // The group's top-level items: the first name of each, nested groups skipped.
        let mut depth = 0;
        let mut item_start = true;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => item_start = true,
                c if item_start && !c.is_whitespace() => {
                    out.push(ident(&group[i..]));
                    item_start = false;
                }
                _ => {}
            }
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

#[test]
fn no_module_path_points_to_a_later_layer() {
    let ranks = module_ranks();
    assert!(ranks.len() > 20, "modules found: {ranks:?}");
    let mut found = Vec::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        let mut paths = Vec::new();
        files(&src().join(layer), &mut paths);
        assert!(!paths.is_empty(), "no file in {layer}");
        for path in paths {
            let rel = path
                .strip_prefix(src())
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for name in named_modules(&text) {
                let Some(&target) = ranks.get(&name) else {
                    continue; // the crate root's own items (`Store`, `StoreConfig`, ...)
                };
                if target > rank && !ALLOWED_UPWARD.contains(&(rel.as_str(), name.as_str())) {
                    found.push(format!(
                        "{rel} ({layer}) names crate::{name} ({})",
                        LAYERS[target]
                    ));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    assert!(
        found.is_empty(),
        "upward module paths:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_sees_paths_and_groups_but_not_comments() {
    let text = "use crate::claim::Candidate;\nuse crate::{\n    item,\n    keys::{a, b},\n    usage::Kind, // crate::cron\n};\n// crate::workflow\nlet x = crate::push::f(); // crate::admin";
    assert_eq!(
        named_modules(text),
        ["claim", "item", "keys", "usage", "push"]
    );
}

/// The `Store` methods each file defines (`fn` lines inside `impl Store {` blocks, which
/// rustfmt opens and closes at the line's start), outside its tests.
fn store_methods(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in code_lines(text) {
        if line.starts_with("impl Store {") {
            inside = true;
        } else if inside && line.starts_with('}') {
            inside = false;
        } else if inside {
            let t = line.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or_else(|| t.strip_prefix("pub "))
                .unwrap_or(t);
            let t = t.strip_prefix("async ").unwrap_or(t);
            if let Some(rest) = t.strip_prefix("fn ") {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.push(name);
            }
        }
    }
    out
}

/// `text`'s lines of code: comments cut, nothing from its `#[cfg(test)]` module on.
fn code_lines(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect()
}

/// The methods `text` calls on `self` (`self.name(` or `self.name::<`, also with the
/// call on the next line as rustfmt breaks chains), outside comments and tests: in a
/// file of `impl Store` blocks, the store's own methods.
fn method_calls(text: &str) -> Vec<String> {
    let code = code_lines(text).join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("self") {
        let before = code.len() - rest.len() + at;
        rest = &rest[at + "self".len()..];
        // `self` alone, not the end of a longer name (`myself`).
        let prev = code[..before].chars().next_back();
        if prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let Some(after_dot) = rest.trim_start().strip_prefix('.') else {
            continue;
        };
        let name: String = after_dot
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let after = &after_dot[name.len()..];
        if !name.is_empty() && (after.starts_with('(') || after.starts_with("::<")) {
            out.push(name);
        }
    }
    out
}

/// Calls of a `Store` method defined in a later layer than the caller, as (caller file,
/// method): the follow-ups and settings reads `docs/architecture.md` names, to be moved
/// out as the store becomes owned layers (issue #30). The list is exact: a new upward
/// call fails the test below, and so does one that is gone but still listed.
const ALLOWED_UPWARD_CALLS: &[(&str, &str)] = &[
    // A finished job's workflow follow-up.
    ("engine/effects.rs", "after_terminal"),
];

fn all_upward_calls() -> Vec<(String, String, String)> {
    let mut by_file = Vec::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        let mut paths = Vec::new();
        files(&src().join(layer), &mut paths);
        for path in paths {
            let rel = path
                .strip_prefix(src())
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            by_file.push((
                rel,
                rank,
                std::fs::read_to_string(&path).unwrap_or_default(),
            ));
        }
    }
    // Each method with the file and layer defining it; a name defined twice is left out.
    let mut defined: HashMap<String, Option<(String, usize)>> = HashMap::new();
    for (rel, rank, text) in &by_file {
        for m in store_methods(text) {
            defined
                .entry(m)
                .and_modify(|d| *d = None)
                .or_insert(Some((rel.clone(), *rank)));
        }
    }
    let mut found = Vec::new();
    for (rel, rank, text) in &by_file {
        for call in method_calls(text) {
            if let Some(Some((def, def_rank))) = defined.get(&call) {
                if def_rank > rank {
                    found.push((rel.clone(), call.clone(), def.clone()));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn store_methods_are_called_upward_only_where_listed() {
    let found = all_upward_calls();
    let listed: Vec<(String, String)> = found
        .iter()
        .map(|(f, m, _)| (f.clone(), m.clone()))
        .collect();
    let new: Vec<String> = found
        .iter()
        .filter(|(f, m, _)| !ALLOWED_UPWARD_CALLS.contains(&(f.as_str(), m.as_str())))
        .map(|(f, m, def)| format!("{f} calls {m} (defined in {def})"))
        .collect();
    let gone: Vec<String> = ALLOWED_UPWARD_CALLS
        .iter()
        .filter(|(f, m)| !listed.contains(&((*f).to_owned(), (*m).to_owned())))
        .map(|(f, m)| format!("{f} -> {m}"))
        .collect();
    assert!(
        new.is_empty(),
        "upward calls not listed:\n{}",
        new.join("\n")
    );
    assert!(
        gone.is_empty(),
        "listed upward calls that are gone (remove them):\n{}",
        gone.join("\n")
    );
}

#[test]
fn the_call_checker_sees_methods_of_impl_store_blocks_and_their_calls() {
    let text = "impl Store {\n    pub async fn a(&self) {\n        self.b().await; // self.c()\n        self.h::<u8>(); v.iter().count(); myself.k();\n        Ok(self\n            .m())\n    }\n    pub(crate) fn d() {}\n}\nfn e() {}\n#[cfg(test)]\nmod tests { fn f() { self.g(); } }";
    assert_eq!(store_methods(text), ["a", "d"]);
    assert_eq!(method_calls(text), ["b", "h", "m"]);
}
