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
const ALLOWED_UPWARD: [(&str, &str); 0] = [];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `path` relative to the store's `src/` (as the lists above name files).
fn rel(path: &Path) -> String {
    path.strip_prefix(src())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
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
            let rel = rel(&path);
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

/// The store's layer types: the façade, the change stream's side it owns and the engine
/// that one owns.
const LAYER_TYPES: [&str; 3] = ["Store", "Derived", "Engine"];

/// The feature services: views over the layer below that the façade hands out.
const SERVICES: [&str; 15] = [
    "Lifecycle",
    "Wakeups",
    "Workers",
    "Admin",
    "Cron",
    "PushEndpoints",
    "Workflows",
    "ApiKeys",
    "Checkpoints",
    "DeadLetter",
    "IdempotencyKeys",
    "RateLimits",
    "Schemas",
    "Webhooks",
    "Admission",
];

/// Whether `line` opens an `impl` block of one of the [`LAYER_TYPES`] or [`SERVICES`].
fn opens_layer_impl(line: &str) -> bool {
    LAYER_TYPES
        .iter()
        .any(|t| line.starts_with(&format!("impl {t} {{")))
        || SERVICES
            .iter()
            .any(|t| line.starts_with(&format!("impl {t}<'_> {{")))
}

/// The methods of the store's layer types each file defines (`fn` lines inside
/// `impl Store {` or `impl Engine {` blocks, which rustfmt opens and closes at the
/// line's start), outside its tests.
fn store_methods(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in code_lines(text) {
        if opens_layer_impl(line) {
            inside = true;
        } else if inside && line.starts_with('}') {
            inside = false;
        } else if inside {
            let t = line.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or_else(|| t.strip_prefix("pub(super) "))
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
        let Some(mut after_dot) = rest.trim_start().strip_prefix('.') else {
            continue;
        };
        // Through the layer below: `self.engine.x(`, `self.derived().engine.x(`, ...
        while let Some(next) = ["engine", "derived"].iter().find_map(|layer| {
            let r = after_dot.strip_prefix(layer)?;
            let r = r.strip_prefix("()").unwrap_or(r);
            r.trim_start().strip_prefix('.')
        }) {
            after_dot = next;
        }
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
const ALLOWED_UPWARD_CALLS: &[(&str, &str)] = &[];

fn all_upward_calls() -> Vec<(String, String, String)> {
    let mut by_file = Vec::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        let mut paths = Vec::new();
        files(&src().join(layer), &mut paths);
        for path in paths {
            let rel = rel(&path);
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
    let new: Vec<String> = found
        .iter()
        .filter(|(f, m, _)| !ALLOWED_UPWARD_CALLS.contains(&(f.as_str(), m.as_str())))
        .map(|(f, m, def)| format!("{f} calls {m} (defined in {def})"))
        .collect();
    let gone: Vec<String> = ALLOWED_UPWARD_CALLS
        .iter()
        .filter(|(f, m)| {
            !found
                .iter()
                .any(|(file, method, _)| file == f && method == m)
        })
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
    let below = "impl Store {\n    fn a(&self) {\n        self.engine().b();\n        self.derived.engine\n            .c();\n        self.engineer();\n    }\n}\n";
    assert_eq!(method_calls(below), ["b", "c", "engineer"]);
    let engine = "impl Engine {\n    fn x(&self) {}\n}\nimpl Other {\n    fn y(&self) {}\n}\nimpl Webhooks<'_> {\n    fn z(&self) {}\n}\n";
    assert_eq!(store_methods(engine), ["x", "z"]);
}

/// The DynamoDB layer, the engine and the change stream's side never name the façade
/// (`Store`): they are methods of `Engine` and `Derived`, which hold nothing above them,
/// so a call from the engine up into the change stream's side or a feature, or from the
/// change stream's side into a feature, does not compile.
#[test]
fn the_layers_below_the_features_never_name_the_facade() {
    let mut found = Vec::new();
    for layer in ["dynamo", "engine", "derived"] {
        let mut paths = Vec::new();
        files(&src().join(layer), &mut paths);
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for (n, line) in code_lines(&text).iter().enumerate() {
                if names_store(line) {
                    found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a layer below the features names the façade:\n{}",
        found.join("\n")
    );
}

/// Whether `line` names the type `Store` (not `StoreError`, `StoreConfig`, `MyStore`, nor
/// a variant `Store(..)` of an error of the engine's).
fn names_store(line: &str) -> bool {
    line.match_indices("Store").any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + "Store".len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '(')
    })
}

#[test]
fn the_facade_checker_sees_the_type_and_only_it() {
    assert!(names_store("use crate::Store;"));
    assert!(names_store("impl Store {"));
    assert!(names_store("fn f(s: &Store) {}"));
    assert!(!names_store("Err(StoreError::Conflict)"));
    assert!(!names_store("let c: StoreConfig = x;"));
    assert!(!names_store("Err(BatchError::Store(e))"));
    assert!(!names_store("struct MyStore;"));
}

/// What a file does with follow-ups that only their owners may: take the finished jobs
/// out of a `FollowUps` (the lifecycle loop runs them), build one from finished jobs (the
/// effects of a write), drop the ones a `split()` answered by binding them to `_`, or
/// answer a `Moved` from a public method (outside the crate nobody could run them).
fn follow_up_misuse(rel: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in code_lines(text) {
        let l = line.trim();
        if l.contains(".into_finished(") && rel != "features/follow_ups.rs" {
            found.push(format!("{rel}: runs follow-ups: {l}"));
        }
        if l.contains("FollowUps(") && rel != "engine/effects.rs" {
            found.push(format!("{rel}: builds follow-ups: {l}"));
        }
        if l.contains(".split()") && (l.contains(", _)") || l.contains(", _owed)")) {
            found.push(format!("{rel}: drops follow-ups: {l}"));
        }
        if l.starts_with("pub ") && l.contains("-> Result<Moved<") {
            found.push(format!("{rel}: answers follow-ups outside the crate: {l}"));
        }
    }
    found
}

/// Follow-ups travel as values (issue #30): a transition answers what it owes in a
/// `#[must_use]` `Moved`, every caller hands it on, and only the lifecycle loop
/// (`features/follow_ups.rs`, `follow`) runs them. The compiler holds the hand-over; this
/// holds what it cannot: nobody else runs or forges them, or drops them silently.
#[test]
fn follow_ups_are_run_only_by_the_lifecycle_loop() {
    let mut paths = Vec::new();
    files(&src(), &mut paths);
    let mut misuse = Vec::new();
    let mut loop_found = false;
    for path in paths {
        let rel = rel(&path);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        loop_found |= rel == "features/follow_ups.rs" && text.contains(".into_finished(");
        misuse.extend(follow_up_misuse(&rel, &text));
    }
    assert!(loop_found, "the lifecycle loop was not found");
    assert!(
        misuse.is_empty(),
        "follow-ups misused:\n{}",
        misuse.join("\n")
    );
}

#[test]
fn the_follow_up_checker_sees_each_misuse_but_not_the_owners() {
    let text = "fn a() {\n    let (job, _) = moved.split();\n    for f in owed.into_finished() {}\n    FollowUps(vec![])\n}\npub async fn b() -> Result<Moved<Job>, E> {}\n// owed.into_finished()\n";
    assert_eq!(follow_up_misuse("engine/x.rs", text).len(), 4);
    let owners = "    for f in owed.into_finished() {}\n";
    assert!(follow_up_misuse("features/follow_ups.rs", owners).is_empty());
    let fine = "    let (job, owed) = moved.split();\n    pub(crate) async fn c() -> Result<Moved<Job>, E> {}\n";
    assert!(follow_up_misuse("engine/x.rs", fine).is_empty());
}

/// For each file, the other files whose `Store` methods it calls (a method defined in two
/// files is left out, as for the upward calls).
fn file_calls(files: &[(String, String)]) -> HashMap<String, Vec<String>> {
    let mut owner: HashMap<String, Option<String>> = HashMap::new();
    for (rel, text) in files {
        for m in store_methods(text) {
            owner
                .entry(m)
                .and_modify(|o| *o = None)
                .or_insert(Some(rel.clone()));
        }
    }
    let mut calls = HashMap::new();
    for (rel, text) in files {
        let mut to: Vec<String> = method_calls(text)
            .into_iter()
            .filter_map(|m| owner.get(&m).cloned().flatten())
            .filter(|f| f != rel)
            .collect();
        to.sort();
        to.dedup();
        calls.insert(rel.clone(), to);
    }
    calls
}

/// The files that call each other round a cycle: each file from which some call path
/// comes back to it, as "a -> b -> ... -> a".
fn call_cycles(calls: &HashMap<String, Vec<String>>) -> Vec<String> {
    let mut found = Vec::new();
    let mut names: Vec<&String> = calls.keys().collect();
    names.sort();
    for start in names {
        // Breadth-first from `start`, keeping each file's predecessor.
        let mut before: HashMap<&String, &String> = HashMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(at) = queue.pop_front() {
            for next in calls.get(at).into_iter().flatten() {
                if next == start {
                    let mut path = vec![start.clone()];
                    let mut cur = at;
                    while cur != start {
                        path.push(cur.clone());
                        cur = before[cur];
                    }
                    path[1..].reverse();
                    path.push(start.clone());
                    found.push(path.join(" -> "));
                    queue.clear();
                    break;
                }
                if !before.contains_key(next) {
                    before.insert(next, at);
                    queue.push_back(next);
                }
            }
        }
    }
    found
}

/// No two store files call each other's methods round a cycle (issue #30: the 8-file
/// cycle settle -> dead_letter -> jobs -> settle ... is gone, and stays gone): each
/// file can be read knowing only the files it calls.
#[test]
fn no_method_cycle_between_store_files() {
    let mut paths = Vec::new();
    files(&src(), &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|p| (rel(p), std::fs::read_to_string(p).unwrap_or_default()))
        .collect();
    let calls = file_calls(&files);
    assert!(
        calls.values().map(Vec::len).sum::<usize>() > 50,
        "calls between files found: {calls:?}"
    );
    let cycles = call_cycles(&calls);
    assert!(
        cycles.is_empty(),
        "store files calling each other round a cycle:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_cycle_checker_finds_a_planted_cycle() {
    let file = |name: &str, defines: &str, calls: &str| {
        (
            name.to_owned(),
            format!(
                "impl Store {{\n    fn {defines}(&self) {{\n        self.{calls}();\n    }}\n}}\n"
            ),
        )
    };
    let calls = file_calls(&[
        file("a.rs", "a", "b"),
        file("b.rs", "b", "c"),
        file("c.rs", "c", "x"),
    ]);
    assert!(call_cycles(&calls).is_empty());
    let calls = file_calls(&[
        file("a.rs", "a", "b"),
        file("b.rs", "b", "c"),
        file("c.rs", "c", "a"),
    ]);
    assert_eq!(
        call_cycles(&calls),
        [
            "a.rs -> b.rs -> c.rs -> a.rs",
            "b.rs -> c.rs -> a.rs -> b.rs",
            "c.rs -> a.rs -> b.rs -> c.rs"
        ]
    );
}

/// Files that may turn a `JobWrite` into a request (`.parts()`): the writer, which applies
/// every transition's effects, and the claim, whose transition (available to active) sets
/// off none and may go out in one transaction with its rate windows.
const SENDS_JOB_WRITES: [&str; 2] = ["engine/writer.rs", "engine/claim_attempt.rs"];

/// The places in `text` that turn a write into a request outside the writer.
fn sends_write(text: &str) -> bool {
    code_lines(text).iter().any(|l| l.contains(".parts()"))
}

#[test]
fn every_transition_goes_through_the_writer() {
    let mut paths = Vec::new();
    files(&src(), &mut paths);
    let mut found = Vec::new();
    for path in paths {
        let rel = rel(&path);
        if rel.starts_with("engine/transition/") || SENDS_JOB_WRITES.contains(&rel.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if sends_write(&text) {
            found.push(rel);
        }
    }
    assert!(
        found.is_empty(),
        "a job write sent outside Engine::transition skips its effects: {found:?}"
    );
    for allowed in SENDS_JOB_WRITES {
        let text = std::fs::read_to_string(src().join(allowed)).unwrap_or_default();
        assert!(
            sends_write(&text),
            "{allowed} no longer sends: take it off the list"
        );
    }
}

#[test]
fn the_writer_checker_sees_a_sent_write_but_not_a_comment() {
    assert!(sends_write("let p = write.parts()?;"));
    assert!(sends_write("let p = write\n    .parts()?;"));
    assert!(!sends_write("// write.parts() is the writer's"));
    assert!(!sends_write("let p = job_parts(x);"));
}
