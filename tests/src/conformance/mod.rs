//! OJS conformance-suite engine.
//!
//! Executes the official JSON test cases (`ojs-conformance` `suites/`, levels 0-4)
//! against a running OJS HTTP server and evaluates their assertions as the DSL
//! reference (`test-case-reference.md`) describes, following the upstream Go runner
//! where the reference is silent. Each submodule documents the choices it makes.
//! The extension suites' `expect`, `capture` and `${name}` forms are evaluated too
//! (see the `runner` module); SDK-style steps (`request`, `store`) fail as unsupported.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use ojs_tests::conformance::{load_cases, run_case};
//! let cases = load_cases(std::path::Path::new("suites"))?;
//! let client = reqwest::Client::new();
//! for case in &cases {
//!     let report = run_case(&client, "http://127.0.0.1:43121", case).await;
//!     println!("{} {}", case.test_id, if report.passed { "PASS" } else { "FAIL" });
//! }
//! # Ok(())
//! # }
//! ```

mod assertions;
mod case;
mod cross;
mod expect;
mod gofmt;
mod jsonpath;
mod matcher;
mod operators;
mod patterns;
mod runner;
mod template;

#[cfg(test)]
mod tests;

pub use case::{load_cases, Case, Step, EXT};
pub use runner::{run_case, CaseReport};
