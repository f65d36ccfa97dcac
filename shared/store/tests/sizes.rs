//! The size limits of issue #30 over every crate in `shared/`, tests left out (`tests/`
//! folders, `tests.rs` files, a file's `#[cfg(test)]` module): no function over 80
//! lines, no file over 600. A function that outgrows them is split by what it does
//! before it lands, not after.

use std::path::{Path, PathBuf};

const MAX_FN_LINES: usize = 80;
const MAX_FILE_LINES: usize = 600;

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "tests" && name != "target" {
                sources(&p, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(p);
        }
    }
}

/// The lines of `text` before its `#[cfg(test)]` module, if any.
fn without_tests(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .collect()
}

/// Whether `line` opens a function's definition (not a trait's declaration of one).
fn opens_fn(line: &str) -> bool {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.peek() {
        if w.starts_with("pub") || matches!(*w, "async" | "const" | "unsafe") {
            words.next();
        } else {
            break;
        }
    }
    words.next() == Some("fn") && !line.trim_end().ends_with(';')
}

/// Each function of `lines` longer than `max` lines, as (first line, length): from its
/// `fn` line to the first closing brace at the same indent.
fn long_fns(lines: &[&str], max: usize) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !opens_fn(line) {
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let close = format!("{indent}}}");
        let end = lines[i + 1..]
            .iter()
            .position(|l| l.starts_with(&close))
            .map_or(lines.len(), |k| i + 1 + k);
        let n = end - i + 1;
        if n > max {
            found.push((i + 1, n));
        }
    }
    found
}

#[test]
fn no_function_over_80_lines_and_no_file_over_600_in_shared() {
    let mut paths = Vec::new();
    sources(&shared(), &mut paths);
    assert!(paths.len() > 100, "shared/ not found: {}", paths.len());
    let mut over = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let lines = without_tests(&text);
        let name = p.strip_prefix(shared()).unwrap_or(&p).display().to_string();
        if lines.len() > MAX_FILE_LINES {
            over.push(format!("{name}: {} lines", lines.len()));
        }
        for (at, n) in long_fns(&lines, MAX_FN_LINES) {
            over.push(format!("{name}:{at}: a function of {n} lines"));
        }
    }
    assert!(over.is_empty(), "over the limits:\n{}", over.join("\n"));
}

#[test]
fn the_size_checker_measures_functions_to_their_own_closing_brace() {
    let body = "        x();\n".repeat(3);
    let text = format!(
        "pub(crate) async fn a() {{\n{body}}}\n    fn b(&self);\n    fn c() {{\n{body}    }}\n#[cfg(test)]\nfn d() {{}}\n"
    );
    let lines = without_tests(&text);
    assert_eq!(lines.len(), 11, "the test module is left out");
    assert_eq!(long_fns(&lines, 4), [(1, 5), (7, 5)]);
    assert!(long_fns(&lines, 5).is_empty());
    assert!(!opens_fn("    fn declared(&self) -> u8;"));
    assert!(opens_fn("    pub const fn k() -> u8 {"));
}
