//! The AWS-strict DynamoDB layer as a standalone proxy, e.g. for `make dev`:
//!
//! ```text
//! cargo run -p ojs-tests --bin strict-ddb-proxy -- --listen 127.0.0.1:8001 --upstream http://127.0.0.1:8000
//! AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8001 make dev
//! ```
//!
//! Configured by the `OJS_STRICT_*` environment variables (see
//! `ojs_tests::strict_proxy::StrictConfig::from_env`). Prints a summary of what it did
//! every 30 s when something changed.

use std::time::Duration;

use ojs_tests::strict_proxy::{StrictConfig, StrictProxy};

fn usage() -> ! {
    eprintln!(
        "usage: strict-ddb-proxy [--listen 127.0.0.1:8001] [--upstream http://127.0.0.1:8000]"
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut listen = "127.0.0.1:8001".to_owned();
    let mut upstream = "http://127.0.0.1:8000".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().unwrap_or_else(|| usage()),
            "--upstream" => upstream = args.next().unwrap_or_else(|| usage()),
            _ => usage(),
        }
    }
    let config = StrictConfig::from_env();
    let described = config.describe();
    let proxy = StrictProxy::start_on(&listen, &upstream, config).await?;
    eprintln!(
        "strict-ddb-proxy: {} -> {upstream} ({described})",
        proxy.url
    );
    let mut last = String::new();
    let mut tick = tokio::time::interval(Duration::from_secs(30));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let summary = proxy.report().summary();
                if summary != last {
                    eprintln!("strict-ddb-proxy: {summary}");
                    last = summary;
                }
            }
            _ = tokio::signal::ctrl_c() => {
                eprintln!("strict-ddb-proxy: {}", proxy.report().summary());
                return Ok(());
            }
        }
    }
}
