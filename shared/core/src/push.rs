//! Push delivery (ojs-serverless.md §2): the registration of an endpoint, the signature of
//! a delivery (ojs-webhooks.md §8.1), the reading of an endpoint's answer (§2.3, §7.1)
//! and which addresses an outbound call may reach. Pure rules; the store keeps the
//! registrations and `shared/push` makes the calls.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::failure::Failure;
use crate::fields::{Field, Fields};
use crate::time::Timestamp;
use crate::{ErrorCode, JobType, OjsError, QueueName};

/// Longest endpoint URL or ARN.
pub const MAX_ENDPOINT_LEN: usize = 2048;
/// Most job types one endpoint takes.
pub const MAX_JOB_TYPES: usize = 50;
/// Most queues one endpoint serves (each is one item written at registration, in one
/// transaction with the registration itself).
pub const MAX_QUEUES: usize = 10;
/// Largest `max_concurrency`: the in-flight deliveries of an endpoint are held in one
/// item like a rate limit's concurrency holders ([`crate::rate_limit::MAX_CONCURRENCY`]).
pub const MAX_CONCURRENCY: u32 = crate::rate_limit::MAX_CONCURRENCY;
/// Default `max_concurrency`.
pub const DEFAULT_CONCURRENCY: u32 = 10;
/// Shortest and longest `timeout_ms` (Lambda's own limit is 15 minutes).
pub const TIMEOUT_RANGE_MS: (u64, u64) = (100, 900_000);
/// Default `timeout_ms`.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Shortest and longest signing secret, in bytes.
pub const SECRET_LEN: (usize, usize) = (16, 512);
/// Largest answer body read from an endpoint; a longer one is an invalid response.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Where a delivery goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushTarget {
    /// An HTTPS URL (a Lambda Function URL or any server); plain HTTP only to a loopback
    /// or private address when private targets are allowed (local development, tests).
    Url(String),
    /// A Lambda function, invoked directly (RequestResponse).
    Lambda(String),
}

impl PushTarget {
    /// The target as registered.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Url(u) | Self::Lambda(u) => u,
        }
    }

    /// Parses an endpoint: an `https://` URL (or `http://` when `allow_private`) with a
    /// host and no credentials, or a Lambda function ARN. An IP literal host is checked
    /// here; a host name is resolved and checked by the caller, at registration and at
    /// every delivery.
    pub fn parse(raw: &str, allow_private: bool) -> Result<Self, OjsError> {
        let bad = |m: String| OjsError::new(ErrorCode::ValidationError, m).with_path("$.endpoint");
        if raw.is_empty() || raw.len() > MAX_ENDPOINT_LEN {
            return Err(bad(format!(
                "endpoint must be 1 to {MAX_ENDPOINT_LEN} characters"
            )));
        }
        if raw.starts_with("arn:") {
            return if is_lambda_arn(raw) {
                Ok(Self::Lambda(raw.to_owned()))
            } else {
                Err(bad(
                    "endpoint ARN must be a Lambda function ARN (arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>])".into(),
                ))
            };
        }
        let url = url::Url::parse(raw).map_err(|e| bad(format!("endpoint is not a URL: {e}")))?;
        match url.scheme() {
            "https" => {}
            "http" if allow_private => {}
            _ => {
                return Err(bad(
                    "endpoint must be an https:// URL or a Lambda function ARN".into(),
                ))
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("endpoint must not carry credentials".into()));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) if !d.is_empty() => None,
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => return Err(bad("endpoint URL has no host".into())),
        };
        if let Some(ip) = host {
            if !allow_private && !is_public(ip) {
                return Err(bad(format!(
                    "endpoint address {ip} is loopback, private, link-local or reserved"
                )));
            }
        }
        if url.scheme() == "http" && host.is_none_or(is_public) {
            // Plain HTTP only inside the machine or the private network (local development).
            return Err(bad(
                "plain http:// endpoints are allowed only at a loopback or private IP address"
                    .into(),
            ));
        }
        Ok(Self::Url(raw.to_owned()))
    }
}

fn is_lambda_arn(raw: &str) -> bool {
    let parts: Vec<&str> = raw.split(':').collect();
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 64
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    let qualifier_ok = |q: &str| {
        !q.is_empty()
            && q.len() <= 128
            && q.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '$')
    };
    // A partition (`aws`, `aws-cn`, `aws-us-gov`, ...) and a region (`us-east-1`) of
    // lowercase letters, digits and hyphens: the ARN is only a name in the Invoke call's
    // path (the call goes to the client's own regional endpoint), but nothing else is an
    // ARN of a function the stack's policy could list.
    let partition_ok = |p: &str| {
        p == "aws"
            || p.strip_prefix("aws-").is_some_and(|rest| {
                !rest.is_empty() && rest.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            })
    };
    let region_ok = |r: &str| {
        !r.is_empty()
            && r.len() <= 32
            && r.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    matches!(parts.len(), 7 | 8)
        && parts[0] == "arn"
        && partition_ok(parts[1])
        && parts[2] == "lambda"
        && region_ok(parts[3])
        && parts[4].len() == 12
        && parts[4].chars().all(|c| c.is_ascii_digit())
        && parts[5] == "function"
        && name_ok(parts[6])
        && parts.get(7).is_none_or(|q| qualifier_ok(q))
}

/// Whether an outbound call may reach `ip` when private targets are not allowed.
///
/// IPv4: not "this network" (0/8, 0.0.0.0 among them), loopback, private (RFC 1918),
/// shared (100.64/10, carrier-grade NAT), link-local (169.254/16, which holds the
/// instance metadata service 169.254.169.254), the IETF protocol block (192.0.0/24), the
/// deprecated 6to4 relay anycast (192.88.99/24), benchmarking (198.18/15), documentation
/// (192.0.2/24, 198.51.100/24, 203.0.113/24), multicast, reserved (240/4) or broadcast.
///
/// IPv6: only global unicast (2000::/3), which leaves out the unspecified and loopback
/// addresses, IPv4-compatible (::/96) and IPv4-translated (::ffff:0:0:0/96) ones,
/// local-use NAT64 (64:ff9b:1::/48), discard (100::/64), unique local (fc00::/7, with
/// fd00:ec2::254, the metadata service), link-local (fe80::/10), site-local (fec0::/10)
/// and multicast (ff00::/8); and within it not the IETF protocol block (2001::/23: Teredo
/// 2001::/32, benchmarking 2001:2::/48, ORCHID), 6to4 (2002::/16: the packet goes to
/// the IPv4 address inside it, whatever that is) or documentation (2001:db8::/32,
/// 3fff::/20). An address that names an IPv4 address, IPv4-mapped (::ffff:0:0/96) or
/// through the NAT64 well-known prefix (64:ff9b::/96, DNS64 in IPv6-only subnets), is
/// judged as that IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let o = v4.octets();
    !(o[0] == 0
        || v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_documentation()
        || v4.is_multicast()
        || o[0] >= 240 // reserved, 255.255.255.255 among them
        || (o[0] == 100 && (o[1] & 0xc0) == 64)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || (o[0] == 192 && o[1] == 88 && o[2] == 99)
        || (o[0] == 198 && (o[1] & 0xfe) == 18))
}

fn is_public_v6(v6: Ipv6Addr) -> bool {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = v6.segments();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., a, b, c, d] = v6.octets();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    (s[0] & 0xe000) == 0x2000
        && !(s[0] == 0x2001 && s[1] < 0x0200)
        && !(s[0] == 0x2001 && s[1] == 0x0db8)
        && s[0] != 0x2002
        && !(s[0] == 0x3fff && s[1] < 0x1000)
}

/// A validated registration (§2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushEndpoint {
    /// Where deliveries go.
    pub target: PushTarget,
    /// Job types delivered there.
    pub job_types: Vec<JobType>,
    /// Queues whose jobs are delivered there.
    pub queues: Vec<QueueName>,
    /// Most deliveries in flight at once.
    pub max_concurrency: u32,
    /// How long a delivery may take before it counts as timed out (and retried).
    pub timeout_ms: u64,
    /// The HMAC key of every delivery's signature. Never rendered.
    pub signing_secret: String,
}

fn invalid(path: &str, message: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::ValidationError, message).with_path(path)
}

/// The list of names `field`, each read by `parse`: `None` when not given.
fn names<T>(
    f: &Fields,
    field: &str,
    max: usize,
    parse: impl Fn(&str) -> Result<T, OjsError>,
) -> Result<Option<Vec<T>>, OjsError> {
    let Some(v) = f.get(field) else {
        return Ok(None);
    };
    let list = v.array()?;
    let path = v.path();
    if list.is_empty() || list.len() > max {
        return Err(invalid(path, format!("{field} must list 1 to {max} names")));
    }
    let mut out: Vec<T> = Vec::with_capacity(list.len());
    let mut seen: Vec<&str> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let raw = Field::new(item, &at, &format!("{field}[{i}]")).str()?;
        if seen.contains(&raw) {
            return Err(invalid(path, format!("{field} lists {raw:?} twice")));
        }
        seen.push(raw);
        out.push(parse(raw).map_err(|e| e.with_path(&at))?);
    }
    Ok(Some(out))
}

/// `config.signing_secret`. §10.1.1: every delivery is signed, so a registration
/// without a key is refused.
fn signing_secret(config: &Fields) -> Result<String, OjsError> {
    let Some(secret) = config.get("signing_secret") else {
        return Err(OjsError::invalid_request(
            "config.signing_secret is required: every push delivery is signed",
        )
        .with_path("$.config.signing_secret"));
    };
    match secret.value() {
        Value::String(s) if (SECRET_LEN.0..=SECRET_LEN.1).contains(&s.len()) => Ok(s.clone()),
        _ => Err(secret.refuse(&format!(
            "must be a string of {} to {} bytes",
            SECRET_LEN.0, SECRET_LEN.1
        ))),
    }
}

impl PushEndpoint {
    /// Parses and validates a registration body. `allow_private`: accept loopback and
    /// private addresses and plain HTTP to them (`OJS_PUSH_ALLOW_PRIVATE=on`).
    pub fn from_json(body: &Value, allow_private: bool) -> Result<Self, OjsError> {
        let body = body
            .as_object()
            .ok_or_else(|| OjsError::invalid_request("the body must be a JSON object"))?;
        let f = Fields::new(body, "$");
        let target = PushTarget::parse(f.required("endpoint")?.str()?, allow_private)?;
        let job_types = names(&f, "job_types", MAX_JOB_TYPES, JobType::parse)?
            .ok_or_else(|| f.refuse("job_types", "is required"))?;
        let queues = names(&f, "queues", MAX_QUEUES, QueueName::parse)?
            .unwrap_or_else(|| vec![QueueName::default_queue()]);
        let empty = Map::new();
        let config = Fields::new(f.object("config")?.unwrap_or(&empty), "$.config")
            .labelled("config.")
            .with_code(ErrorCode::ValidationError);
        let max_concurrency = config
            .u64_in("max_concurrency", 1, u64::from(MAX_CONCURRENCY))?
            .unwrap_or(u64::from(DEFAULT_CONCURRENCY));
        let timeout_ms = config
            .u64_in("timeout_ms", TIMEOUT_RANGE_MS.0, TIMEOUT_RANGE_MS.1)?
            .unwrap_or(DEFAULT_TIMEOUT_MS);
        Ok(Self {
            target,
            job_types,
            queues,
            max_concurrency: u32::try_from(max_concurrency).unwrap_or(MAX_CONCURRENCY),
            timeout_ms,
            signing_secret: signing_secret(&config)?,
        })
    }

    /// Whether jobs of `job_type` on `queue` are delivered here.
    pub fn takes(&self, queue: &QueueName, job_type: &JobType) -> bool {
        self.queues.contains(queue) && self.job_types.contains(job_type)
    }

    /// The registration as the API shows it: never the secret.
    pub fn view(&self, id: &str, created_at: &str) -> Value {
        json!({
            "id": id,
            "endpoint": self.target.as_str(),
            "job_types": self.job_types.iter().map(JobType::as_str).collect::<Vec<_>>(),
            "queues": self.queues.iter().map(QueueName::as_str).collect::<Vec<_>>(),
            "config": {
                "max_concurrency": self.max_concurrency,
                "timeout_ms": self.timeout_ms,
                "signing_secret_set": true,
            },
            "created_at": created_at,
        })
    }
}

/// `sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>` (ojs-webhooks.md §8.1).
pub fn signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut message = Vec::with_capacity(timestamp.len() + 1 + body.len());
    message.extend_from_slice(timestamp.as_bytes());
    message.push(b'.');
    message.extend_from_slice(body);
    let mac = hmac_sha256(secret, &message);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in mac {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// HMAC (RFC 2104) over SHA-256, with the `sha2` the crate already has.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// What a delivery came to (§2.3, §7.1).
#[derive(Debug, Clone, PartialEq)]
pub enum PushAnswer {
    /// ACK with the handler's result, if it sent one.
    Completed(Option<Value>),
    /// NACK: the failure recorded on the job, retryable or not.
    Failed(Failure),
}

/// A delivery error (§7.2.1: the transport, not the handler): `error_type` names the
/// class (`push_timeout`, `push_connection`, `push_http_<status>`, ...).
pub fn delivery_error(error_type: &str, message: impl Into<String>, retryable: bool) -> Failure {
    let message = message.into();
    let mut reported = Map::new();
    reported.insert("code".into(), json!(error_type));
    reported.insert("message".into(), json!(message));
    reported.insert("retryable".into(), json!(retryable));
    reported.insert("error_class".into(), json!("delivery_error"));
    Failure {
        error_type: error_type.to_owned(),
        message,
        retryable,
        reported,
        retry_after: None,
    }
}

/// An HTTP `Retry-After` value (delta-seconds, or an HTTP date, RFC 9110 §10.2.3) as a
/// delay from `now`; `None` when it does not read. A date already past is no delay.
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<std::time::Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(std::time::Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or_default(),
    )
}

/// Reads an endpoint's answer: `status` and the body it sent. 2xx with `completed` is an
/// ACK; 2xx with `failed` a NACK honouring `retryable` (the error may be an object, as
/// §2.3 shows, or a string, as the SDKs' direct handlers send); 4xx is not retryable
/// except 408 and 429; 5xx is; anything else is an invalid response (retryable, §7.1).
/// A 429 or 503 with `retry_after` (its `Retry-After`) delays the next attempt that long.
pub fn read_answer(
    status: u16,
    retry_after: Option<std::time::Duration>,
    body: &[u8],
) -> PushAnswer {
    let excerpt = || excerpt_of(body);
    if !(200..=299).contains(&status) {
        return http_failure(status, retry_after, &excerpt());
    }
    let parsed: Option<Map<String, Value>> = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.as_object().cloned());
    let Some(answer) = parsed else {
        return PushAnswer::Failed(delivery_error(
            "push_invalid_response",
            format!("the endpoint's answer is not a JSON object{}", excerpt()),
            true,
        ));
    };
    match answer.get("status").and_then(Value::as_str) {
        Some("completed") => {
            PushAnswer::Completed(answer.get("result").filter(|r| !r.is_null()).cloned())
        }
        Some("failed") => {
            let failure = Failure::from_json(answer.get("error")).unwrap_or_else(|_| {
                delivery_error(
                    "handler_error",
                    "the handler failed (its error is unreadable)",
                    true,
                )
            });
            PushAnswer::Failed(failure)
        }
        _ => PushAnswer::Failed(delivery_error(
            "push_invalid_response",
            format!(
                "the endpoint's answer has no status completed or failed{}",
                excerpt()
            ),
            true,
        )),
    }
}

/// The start of an answer's body for a message: `": <text>"`, or nothing when empty.
fn excerpt_of(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// A non-2xx answer: 4xx is not retryable except 408 and 429, anything else is; a 429
/// or 503 with `retry_after` delays the next attempt that long.
fn http_failure(
    status: u16,
    retry_after: Option<std::time::Duration>,
    excerpt: &str,
) -> PushAnswer {
    let error_type = format!("push_http_{status}");
    if (400..=499).contains(&status) && !matches!(status, 408 | 429) {
        let why = match status {
            401 | 403 => {
                " (authentication: does the endpoint's signing secret match the registration's?)"
            }
            404 => " (no such function or path)",
            _ => "",
        };
        return PushAnswer::Failed(delivery_error(
            &error_type,
            format!("the endpoint refused the delivery with HTTP {status}{why}{excerpt}"),
            false,
        ));
    }
    let mut failure = delivery_error(
        &error_type,
        format!("the endpoint answered HTTP {status}{excerpt}"),
        true,
    );
    if matches!(status, 429 | 503) {
        if let Some(after) = retry_after {
            failure
                .reported
                .insert("retry_after_ms".into(), json!(after.as_millis() as u64));
            failure.retry_after = Some(after);
        }
    }
    PushAnswer::Failed(failure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // A key longer than the block is hashed first (RFC 4231 case 6).
        let mac = hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn signature_covers_timestamp_and_body() {
        let a = signature(b"k", "1700000000", b"{}");
        assert!(a.starts_with("sha256=") && a.len() == 71);
        assert_ne!(a, signature(b"k", "1700000001", b"{}"));
        assert_ne!(a, signature(b"k", "1700000000", b"{ }"));
        assert_ne!(a, signature(b"j", "1700000000", b"{}"));
    }

    fn body(endpoint: &str) -> Value {
        json!({"endpoint": endpoint, "job_types": ["email.send"], "config": {"signing_secret": "0123456789abcdef"}})
    }

    #[test]
    fn endpoints_public_https_or_lambda_arns() {
        assert!(
            PushEndpoint::from_json(&body("https://abc.lambda-url.us-east-1.on.aws/"), false)
                .is_ok()
        );
        assert!(PushEndpoint::from_json(
            &body("arn:aws:lambda:us-east-1:123456789012:function:worker"),
            false
        )
        .is_ok());
        assert!(PushEndpoint::from_json(
            &body("arn:aws:lambda:us-east-1:123456789012:function:worker:live"),
            false
        )
        .is_ok());
        for bad in [
            "http://example.com/",
            "https://127.0.0.1/",
            "https://10.1.2.3/",
            "https://169.254.169.254/latest/meta-data/",
            "https://[::1]/",
            "https://[fd00:ec2::254]/",
            "https://[::ffff:127.0.0.1]/",
            "https://user:pw@example.com/",
            "ftp://example.com/",
            "arn:aws:s3:::bucket",
            "arn:aws:lambda:us-east-1:1234:function:worker",
            "not a url",
        ] {
            assert!(PushEndpoint::from_json(&body(bad), false).is_err(), "{bad}");
        }
        // Allowed privately: loopback over plain HTTP (local development), never plain
        // HTTP to a public host.
        assert!(PushEndpoint::from_json(&body("http://127.0.0.1:9000/"), true).is_ok());
        assert!(PushEndpoint::from_json(&body("http://example.com/"), true).is_err());
    }

    /// Every way a URL can spell a forbidden address: numeric IPv4 forms (the URL
    /// parser, WHATWG's, reads them as the address they name), IPv6 forms that carry an
    /// IPv4 address, the IPv6 ranges outside global unicast, and userinfo tricks.
    #[test]
    fn every_spelling_of_a_forbidden_address_is_refused() {
        for bad in [
            // IPv4: decimal, hex, octal, short and trailing-dot forms.
            "https://2130706433/",
            "http://2130706433/",
            "https://0x7f000001/",
            "https://0x7f.0.0.1/",
            "https://0x7f.1/",
            "https://0177.0.0.1/",
            "https://017700000001/",
            "https://127.1/",
            "https://10.1/",
            "https://127.0.0.1./",
            "https://0.0.0.0/",
            "https://0/",
            "https://169.254.169.254/latest/meta-data/",
            "https://2852039166/",
            "https://100.64.0.1/",
            "https://192.0.0.8/",
            "https://192.88.99.1/",
            "https://198.18.0.1/",
            "https://198.19.255.255/",
            "https://192.0.2.1/",
            "https://198.51.100.1/",
            "https://203.0.113.1/",
            "https://224.0.0.1/",
            "https://240.0.0.1/",
            "https://255.255.255.255/",
            // Percent-encoded and full-width or ideographic spellings of an IP literal.
            "https://%31%32%37.0.0.1/",
            "https://%31%36%39.254.169.254/",
            "https://\u{ff11}\u{ff12}\u{ff17}\u{ff0e}\u{ff10}\u{ff0e}\u{ff10}\u{ff0e}\u{ff11}/",
            "https://127\u{3002}0\u{3002}0\u{3002}1/",
            // IPv6: unspecified, loopback, IPv4-mapped (both spellings), IPv4-compatible,
            // IPv4-translated, NAT64 (well-known and local-use), 6to4, Teredo.
            "https://[::]/",
            "https://[::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:7f00:1]/",
            "https://[::ffff:a9fe:a9fe]/",
            "https://[::ffff:10.0.0.1]/",
            "https://[::127.0.0.1]/",
            "https://[::a9fe:a9fe]/",
            "https://[::ffff:0:7f00:1]/",
            "https://[64:ff9b::a9fe:a9fe]/",
            "https://[64:ff9b::169.254.169.254]/",
            "https://[64:ff9b::7f00:1]/",
            "https://[64:ff9b:1::808:808]/",
            "https://[2002:7f00:1::]/",
            "https://[2002:a9fe:a9fe::1]/",
            "https://[2002:808:808::1]/",
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "https://[2001::1]/",
            // IPv6: unique local (the metadata service's fd00:ec2::254 among them),
            // link-local, site-local, multicast, discard, benchmarking, documentation.
            "https://[fc00::1]/",
            "https://[fd00:ec2::254]/",
            "https://[fe80::1]/",
            "https://[febf::1]/",
            "https://[fec0::1]/",
            "https://[ff02::1]/",
            "https://[100::1]/",
            "https://[2001:2::1]/",
            "https://[2001:db8::1]/",
            "https://[3fff::1]/",
            // Zone ids are not URL syntax (refused as unparseable).
            "https://[fe80::1%25eth0]/",
            "https://[fe80::1%eth0]/",
            // Userinfo: the host is what follows the @, and credentials are refused anyway.
            "https://public.example@127.0.0.1/",
            "https://public.example:443@169.254.169.254/",
            "https://127.0.0.1#@public.example/",
            "https://127.0.0.1\\@public.example/",
            "https://user@public.example/",
        ] {
            assert!(PushTarget::parse(bad, false).is_err(), "{bad} was accepted");
            assert!(
                parse_webhook_url(bad).is_err(),
                "{bad} was accepted as a webhook URL"
            );
        }
    }

    fn parse_webhook_url(raw: &str) -> Result<String, OjsError> {
        crate::webhook::parse_url(raw, false)
    }

    /// A host name is left to resolution (checked at registration and by the guarded
    /// resolver at every connection): these forms parse to the name `localhost`, which
    /// the resolver's filter refuses (shared/push's guard tests).
    #[test]
    fn names_are_normalised_before_resolution() {
        for (raw, host) in [
            ("https://localhost./", "localhost."),
            ("https://LOCALHOST/", "localhost"),
            ("https://%6c%6f%63%61%6c%68%6f%73%74/", "localhost"),
            (
                "https://\u{24db}\u{24de}\u{24d2}\u{24d0}\u{24db}\u{24d7}\u{24de}\u{24e2}\u{24e3}/",
                "localhost",
            ),
        ] {
            assert!(PushTarget::parse(raw, false).is_ok(), "{raw}");
            let parsed = url::Url::parse(raw).map_err(|e| e.to_string());
            assert_eq!(
                parsed.map(|u| u.host_str().map(str::to_owned)),
                Ok(Some(host.to_owned())),
                "{raw}"
            );
        }
    }

    #[test]
    fn public_addresses_stay_reachable() {
        for ok in [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "192.0.1.1",
            "198.17.255.255",
            "198.20.0.1",
            "223.255.255.255",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2606:4700:4700::1111",
            "2001:200::1",
            "2600:1f18::1",
            "3fff:1000::1",
        ] {
            let ip: IpAddr = ok.parse().unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(is_public(ip), "{ok} was refused");
        }
        for ok in [
            "https://8.8.8.8/",
            "https://134744072/",
            "https://[64:ff9b::8.8.8.8]/",
            "https://[2606:4700:4700::1111]/",
        ] {
            assert!(PushTarget::parse(ok, false).is_ok(), "{ok}");
        }
    }

    /// A Lambda target is only a function ARN: no other partition spelling, region
    /// spelling, account or resource. Which functions may be invoked is the stack's IAM
    /// policy (`PushFunctionArns`), not this check.
    #[test]
    fn lambda_targets_are_function_arns_only() {
        for ok in [
            "arn:aws:lambda:us-east-1:123456789012:function:worker",
            "arn:aws-cn:lambda:cn-north-1:123456789012:function:worker",
            "arn:aws-us-gov:lambda:us-gov-west-1:123456789012:function:worker:$LATEST",
        ] {
            assert!(
                matches!(PushTarget::parse(ok, false), Ok(PushTarget::Lambda(_))),
                "{ok}"
            );
        }
        for bad in [
            "arn:awsx:lambda:us-east-1:123456789012:function:worker",
            "arn:aws-:lambda:us-east-1:123456789012:function:worker",
            "arn:AWS:lambda:us-east-1:123456789012:function:worker",
            "arn:aws:lambda:US-EAST-1:123456789012:function:worker",
            "arn:aws:lambda:us-east-1/..:123456789012:function:worker",
            "arn:aws:lambda:169.254.169.254:123456789012:function:worker",
            "arn:aws:lambda::123456789012:function:worker",
            "arn:aws:lambda:us-east-1:12345678901a:function:worker",
            "arn:aws:lambda:us-east-1:123456789012:layer:worker",
            "arn:aws:lambda:us-east-1:123456789012:function:worker/x",
            "arn:aws:lambda:us-east-1:123456789012:function:worker:live:x",
            "arn:aws:lambda:us-east-1:123456789012:function:",
            "arn:aws:iam::123456789012:role/x",
        ] {
            assert!(PushTarget::parse(bad, false).is_err(), "{bad}");
        }
    }

    #[test]
    fn registration_bounds() {
        let mut b = body("https://example.com/");
        let e = PushEndpoint::from_json(&b, false).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(e.queues, vec![QueueName::default_queue()]);
        assert_eq!(
            (e.max_concurrency, e.timeout_ms),
            (DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT_MS)
        );
        assert!(!e.view("pe_1", "t").to_string().contains("0123456789abcdef"));
        b["config"]["max_concurrency"] = json!(101);
        assert!(PushEndpoint::from_json(&b, false).is_err());
        b["config"]["max_concurrency"] = json!(5);
        b["config"]["timeout_ms"] = json!(900_001);
        assert!(PushEndpoint::from_json(&b, false).is_err());
        b["config"]["timeout_ms"] = json!(1000);
        b["config"]["signing_secret"] = json!("short");
        assert!(PushEndpoint::from_json(&b, false).is_err());
        b["config"]["signing_secret"] = json!("0123456789abcdef");
        b["job_types"] = json!([]);
        assert!(PushEndpoint::from_json(&b, false).is_err());
        b["job_types"] = json!(["a", "a"]);
        assert!(PushEndpoint::from_json(&b, false).is_err());
        b["job_types"] = json!(["a"]);
        b["queues"] = json!((0..11).map(|i| format!("q{i}")).collect::<Vec<_>>());
        assert!(PushEndpoint::from_json(&b, false).is_err());
    }

    #[test]
    fn answers_map_per_section_2_3() {
        let ok = read_answer(200, None, br#"{"status":"completed","result":{"n":1}}"#);
        assert_eq!(ok, PushAnswer::Completed(Some(json!({"n": 1}))));
        let failed = |status, body: &[u8]| match read_answer(status, None, body) {
            PushAnswer::Failed(f) => f,
            other => panic!("{other:?}"),
        };
        let f = failed(
            200,
            br#"{"status":"failed","error":{"code":"boom","message":"m","retryable":false}}"#,
        );
        assert!(!f.retryable && f.error_type == "boom");
        let f = failed(
            200,
            br#"{"status":"failed","job_id":"x","error":"ValueError"}"#,
        );
        assert!(f.retryable && f.message == "ValueError");
        assert!(!failed(401, b"").retryable);
        assert!(failed(401, b"").message.contains("signing secret"));
        assert!(!failed(404, b"").retryable);
        assert!(failed(404, b"")
            .message
            .contains("no such function or path"));
        assert!(failed(429, b"").retryable);
        assert!(failed(503, b"").retryable);
        assert!(failed(200, b"not json").retryable);
        assert!(failed(200, br#"{"status":"weird"}"#).retryable);
    }

    #[test]
    fn retry_after_delays_the_next_attempt_of_a_429_or_503_only() {
        let after = Some(std::time::Duration::from_secs(7));
        let asked = |status| match read_answer(status, after, b"") {
            PushAnswer::Failed(f) => f,
            other => panic!("{other:?}"),
        };
        for status in [429, 503] {
            let f = asked(status);
            assert_eq!(f.retry_after, after);
            assert_eq!(f.reported["retry_after_ms"], 7000);
        }
        for status in [408, 500, 502] {
            let f = asked(status);
            assert_eq!(f.retry_after, None, "{status}");
            assert!(f.reported.get("retry_after_ms").is_none());
        }
        assert_eq!(
            read_answer(200, after, br#"{"status":"completed"}"#),
            PushAnswer::Completed(None)
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = crate::time::parse("2026-11-24T12:00:00Z", "$").unwrap_or_else(|e| panic!("{e}"));
        let secs = std::time::Duration::from_secs;
        assert_eq!(parse_retry_after("120", now), Some(secs(120)));
        assert_eq!(parse_retry_after(" 5 ", now), Some(secs(5)));
        assert_eq!(
            parse_retry_after("Tue, 24 Nov 2026 12:00:30 GMT", now),
            Some(secs(30))
        );
        assert_eq!(
            parse_retry_after("Tue, 24 Nov 2026 11:00:00 GMT", now),
            Some(secs(0))
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }
}
