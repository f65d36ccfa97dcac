//! The fuzz driver of the fuzz suites (core's envelope parser, proto's decoders), included
//! by path: a property over a strategy for a round of inputs, or, with `OJS_FUZZ_SECONDS`
//! set (`make fuzz`), round after round of fresh inputs until that long has passed.

use std::str::FromStr;
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

/// Runs `property` over `strategy` in rounds of `config` (with `PROPTEST_CASES` cases
/// when that is set); returns how many inputs were tried, or the failure with its
/// minimal input.
pub fn fuzz<S: Strategy>(
    name: &str,
    config: &Config,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Result<u64, String>
where
    S::Value: std::fmt::Debug,
{
    let config = Config {
        cases: env_number("PROPTEST_CASES").unwrap_or(config.cases),
        failure_persistence: None,
        ..config.clone()
    };
    let budget = env_number("OJS_FUZZ_SECONDS").map(Duration::from_secs);
    let started = Instant::now();
    let mut tried = 0u64;
    loop {
        let mut runner = TestRunner::new(config.clone());
        match runner.run(&strategy, &property) {
            Ok(()) => tried += u64::from(config.cases),
            Err(TestError::Fail(why, input)) => {
                return Err(format!("{name}: {why}\nminimal failing input: {input:?}"))
            }
            Err(TestError::Abort(why)) => return Err(format!("{name}: aborted: {why}")),
        }
        if budget.is_none_or(|b| started.elapsed() >= b) {
            break;
        }
    }
    println!(
        "{name}: {tried} inputs in {:.1?}, no failure",
        started.elapsed()
    );
    Ok(tried)
}

fn env_number<T: FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}
