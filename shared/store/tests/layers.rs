//! The store's layer rule, checked: a module names only modules of its own layer or of
//! the layers before it (`dynamo` <- `engine` <- `derived` <- `features`, as
//! `docs/architecture.md` orders them). Methods of the one `Store` type can still call
//! upward (the documented follow-ups); module paths cannot, except the one listed here.

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
