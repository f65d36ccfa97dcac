//! One attempt's signed POST (ojs-webhooks.md §5.3, §8.1) and the client it goes
//! through: no proxy, every host name resolved through the push crate's address guard,
//! at most [`MAX_REDIRECTS`] redirects, each judged as a subscription URL would be (§7.1).

use std::time::{Duration, Instant};

use ojs_core::push::{signature, PushTarget};
use ojs_store::WebhookEntry;
use serde_json::Value;

use super::{Delivery, WebhookDispatcher};

/// Most bytes of an endpoint's answer read (the rest is not read: a delivery's outcome is
/// its status).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// What one attempt came to.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    /// The endpoint's status, if it answered.
    pub status: Option<u16>,
    /// How long it took.
    pub duration_ms: u64,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// The start of the answer (at most [`MAX_RESPONSE_BYTES`]), lossily as text.
    pub body: String,
    /// A 429's `Retry-After`, in seconds.
    pub(super) retry_after: Option<Duration>,
}

/// Most redirects one attempt follows (§7.1).
const MAX_REDIRECTS: usize = 3;

/// Why a redirect to `next` is not followed, after `followed` redirects already were
/// (`None`: it is followed). It is followed only to a URL a subscription could name: an
/// IP literal never reaches the guarded resolver, so it is judged here (a host name is
/// judged by the resolver at the redirect's connection).
fn redirect_refusal(followed: usize, next: &url::Url, allow_private: bool) -> Option<String> {
    if followed >= MAX_REDIRECTS {
        return Some(format!("more than {MAX_REDIRECTS} redirects"));
    }
    PushTarget::parse(next.as_str(), allow_private)
        .err()
        .map(|e| {
            format!(
                "redirect refused: {}",
                e.message.replace("endpoint", "location")
            )
        })
}

/// The HTTP client of webhook deliveries: at most [`MAX_REDIRECTS`] redirects, each
/// judged by [`redirect_refusal`]; no proxy (a proxy would resolve names itself); every
/// host name resolved through the address guard, which keeps only allowed addresses.
pub(super) fn http_client(allow_private: bool) -> Result<reqwest::Client, String> {
    let redirects = reqwest::redirect::Policy::custom(move |attempt| {
        // `previous` holds the URLs requested so far, the first one among them.
        let followed = attempt.previous().len().saturating_sub(1);
        match redirect_refusal(followed, attempt.url(), allow_private) {
            Some(why) => attempt.error(why),
            None => attempt.follow(),
        }
    });
    reqwest::Client::builder()
        .redirect(redirects)
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .dns_resolver(crate::guard::resolver(allow_private))
        .user_agent("OJS-Webhook/1.0 (ojs-serverless)")
        .build()
        .map_err(|e| e.to_string())
}

impl WebhookDispatcher {
    /// The signed POST of one attempt (§5.3, §8.1).
    pub(super) async fn send(
        &self,
        sub: &WebhookEntry,
        d: &Delivery<'_>,
        timeout: Duration,
    ) -> AttemptResult {
        let _permit = self.inner.permits.acquire().await;
        let started = Instant::now();
        let done = |status, error: Option<String>, body: String, retry_after| AttemptResult {
            status,
            duration_ms: started.elapsed().as_millis() as u64,
            error,
            body,
            retry_after,
        };
        // Rules may have changed since it was created (OJS_PUSH_ALLOW_PRIVATE turned off).
        if let Err(e) = PushTarget::parse(&sub.subscription.url, self.inner.config.allow_private) {
            return done(None, Some(e.message), String::new(), None);
        }
        let sent = self.signed_request(sub, d, timeout).send().await;
        let mut response = match sent {
            Ok(r) => r,
            Err(e) => return done(None, Some(transport_error(&e)), String::new(), None),
        };
        let status = response.status().as_u16();
        let retry_after = retry_after(&response);
        match answer_start(&mut response).await {
            Ok(answer) => {
                let error = (!(200..300).contains(&status)).then(|| format!("HTTP {status}"));
                done(
                    Some(status),
                    error,
                    String::from_utf8_lossy(&answer).into_owned(),
                    retry_after,
                )
            }
            Err(e) => done(
                Some(status),
                Some(transport_error(&e)),
                String::new(),
                retry_after,
            ),
        }
    }

    /// The POST of `d` to `sub`, signed with each of the subscription's current secrets,
    /// with the event's trace.
    fn signed_request(
        &self,
        sub: &WebhookEntry,
        d: &Delivery<'_>,
        timeout: Duration,
    ) -> reqwest::RequestBuilder {
        let now_secs = crate::deliver::unix_seconds();
        let timestamp = now_secs.to_string();
        let signed: Vec<String> = sub
            .signing_secrets(i64::try_from(now_secs).unwrap_or(i64::MAX))
            .into_iter()
            .map(|secret| signature(secret.as_bytes(), &timestamp, d.body.as_bytes()))
            .collect();
        with_trace(self.inner.http.post(&sub.subscription.url), d.body)
            .timeout(timeout)
            .header("content-type", "application/json")
            .header("x-ojs-event-type", d.event_type)
            .header("x-ojs-delivery-id", &d.id)
            .header("x-ojs-subscription-id", &sub.id)
            .header("x-ojs-timestamp", &timestamp)
            .header("x-ojs-signature", signed.join(","))
            .body(d.body.to_owned())
    }
}

/// `request` with the event's trace (CloudEvents' distributed tracing extension, from the
/// job's meta), as the W3C headers a receiver's tracing reads.
fn with_trace(mut request: reqwest::RequestBuilder, body: &str) -> reqwest::RequestBuilder {
    // Only a traced job's event names one: the others are not parsed again.
    if body.contains("\"traceparent\"") {
        let event: Value = serde_json::from_str(body).unwrap_or_default();
        for key in ["traceparent", "tracestate"] {
            if let Some(v) = event.get(key).and_then(Value::as_str) {
                request = request.header(key, v);
            }
        }
    }
    request
}

/// A 429's `Retry-After`, when it is a number of seconds.
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// The first [`MAX_RESPONSE_BYTES`] of the answer.
async fn answer_start(response: &mut reqwest::Response) -> Result<Vec<u8>, reqwest::Error> {
    let mut answer = Vec::new();
    while let Some(c) = response.chunk().await? {
        let room = MAX_RESPONSE_BYTES.saturating_sub(answer.len());
        answer.extend_from_slice(&c[..c.len().min(room)]);
        // The rest is not read: the status decides the outcome.
        if answer.len() >= MAX_RESPONSE_BYTES {
            break;
        }
    }
    Ok(answer)
}

/// A transport failure's message.
fn transport_error(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timeout".into();
    }
    crate::deliver::error_chain(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loopback;

    fn url(raw: &str) -> url::Url {
        url::Url::parse(raw).unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    /// A redirect is judged like a subscription URL: every spelling of a forbidden
    /// address is refused (the URL reqwest hands the policy is already parsed, numeric
    /// forms normalised), plain HTTP too, and a fourth redirect.
    #[test]
    fn redirects_to_forbidden_addresses_are_not_followed() {
        for bad in [
            "https://127.0.0.1/",
            "https://2130706433/",
            "https://0x7f.1/",
            "https://0177.0.0.1/",
            "https://10.1/",
            "https://0.0.0.0/",
            "https://169.254.169.254/latest/meta-data/",
            "https://100.100.100.200/",
            "https://[::1]/",
            "https://[::]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:a9fe:a9fe]/",
            "https://[64:ff9b::a9fe:a9fe]/",
            "https://[2002:7f00:1::]/",
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "https://[fd00:ec2::254]/",
            "https://[fe80::1]/",
            "https://public.example@127.0.0.1/",
            "https://user:pw@public.example/",
            "http://public.example/",
            "http://127.0.0.1/",
            "ftp://public.example/",
        ] {
            assert!(
                redirect_refusal(0, &url(bad), false).is_some(),
                "{bad} followed"
            );
        }
        let public = url("https://hooks.example.com/next");
        assert_eq!(redirect_refusal(0, &public, false), None);
        assert_eq!(redirect_refusal(2, &public, false), None);
        assert!(redirect_refusal(3, &public, false).is_some_and(|w| w.contains("more than 3")));
        // Private targets allowed (development): loopback over plain HTTP, but never
        // plain HTTP to a name or a public address.
        assert_eq!(
            redirect_refusal(0, &url("http://127.0.0.1:8080/"), true),
            None
        );
        assert!(redirect_refusal(0, &url("http://localhost:8080/"), true).is_some());
        assert!(redirect_refusal(0, &url("http://8.8.8.8/"), true).is_some());
    }

    /// The client applies the policy: a chain of redirects stops after the third, and a
    /// redirect the policy refuses is not requested (loopback only, private targets
    /// allowed).
    #[tokio::test]
    async fn the_client_follows_at_most_3_redirects_and_only_allowed_ones() {
        let client = http_client(true).unwrap_or_else(|e| panic!("{e}"));
        let endless = loopback::Server::start(|base, _| (302, format!("{base}/again")));
        let sent = client.get(format!("{}/", endless.base)).send().await;
        let why = sent
            .map(|_| String::new())
            .unwrap_or_else(|e| crate::deliver::error_chain(&e));
        assert!(why.contains("more than 3 redirects"), "{why}");
        // The first request and 3 redirects.
        assert_eq!(endless.hits(), 4);

        let outward = loopback::Server::start(|_, _| (307, "http://public.example/".into()));
        let sent = outward.base.clone() + "/";
        let sent = client.get(sent).send().await;
        let why = sent
            .map(|_| String::new())
            .unwrap_or_else(|e| crate::deliver::error_chain(&e));
        assert!(why.contains("redirect refused"), "{why}");
        assert_eq!(outward.hits(), 1);

        let short = loopback::Server::start(|base, path| match path {
            "/" => (302, format!("{base}/two")),
            "/two" => (301, "/three".into()),
            _ => (204, String::new()),
        });
        let sent = client.get(format!("{}/", short.base)).send().await;
        assert_eq!(sent.map(|r| r.status().as_u16()).ok(), Some(204));
        assert_eq!(short.hits(), 3);
    }
}
