//! CORS for browser clients: an explicit allowlist of origins, answered by echoing the
//! origin (never `*` while API keys are required).

use axum::http::{header, HeaderMap, HeaderValue, Method};

use crate::auth::AuthMode;

const ALLOW_METHODS: &str = "GET, POST, PUT, PATCH, DELETE, OPTIONS";
const ALLOW_HEADERS: &str =
    "authorization, content-type, accept, x-request-id, ojs-version, idempotency-key";
const EXPOSE_HEADERS: &str = "x-request-id, ojs-version, location, retry-after, \
x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset, idempotent-replayed, \
x-ojs-queue-depth, x-ojs-queue-bound, x-ojs-queue-pressure";
const MAX_AGE_SECONDS: &str = "600";

/// Which browser origins may call the API.
#[derive(Debug, Clone, Default)]
pub struct CorsPolicy {
    origins: Vec<String>,
    any: bool,
}

impl CorsPolicy {
    /// A policy allowing `origins` (exact `scheme://host[:port]`, compared without case).
    /// `*` allows every origin only when auth is off; with API keys it is dropped (and
    /// logged), so a misconfiguration closes the API to browsers rather than opening it.
    pub fn new(origins: &[String], auth: AuthMode) -> Self {
        let mut any = false;
        let mut list = Vec::new();
        for o in origins.iter().map(|o| o.trim().trim_end_matches('/')) {
            if o.is_empty() {
                continue;
            }
            if o == "*" {
                if auth == AuthMode::Off {
                    any = true;
                } else {
                    tracing::error!("CORS origin '*' refused while API keys are required");
                }
                continue;
            }
            list.push(o.to_ascii_lowercase());
        }
        Self { origins: list, any }
    }

    /// The `Access-Control-Allow-Origin` value for a request from `origin`, if allowed.
    fn allow_origin(&self, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
        let origin = origin?.to_str().ok()?;
        if self.any {
            return Some(HeaderValue::from_static("*"));
        }
        let lower = origin.to_ascii_lowercase();
        self.origins
            .contains(&lower)
            .then(|| HeaderValue::from_str(origin).ok())
            .flatten()
    }

    /// Whether a request is a CORS preflight.
    pub(crate) fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
        method == Method::OPTIONS
            && headers.contains_key(header::ORIGIN)
            && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    }

    /// Adds the preflight answer headers (nothing for an origin not on the list).
    pub(crate) fn preflight_headers(&self, request: &HeaderMap, response: &mut HeaderMap) {
        if let Some(v) = self.allow_origin(request.get(header::ORIGIN)) {
            response.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
            response.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(ALLOW_METHODS),
            );
            response.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static(ALLOW_HEADERS),
            );
            response.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static(MAX_AGE_SECONDS),
            );
        }
        response.append(header::VARY, HeaderValue::from_static("origin"));
    }

    /// Adds the headers of an actual (non-preflight) response.
    pub(crate) fn response_headers(
        &self,
        request_origin: Option<&HeaderValue>,
        response: &mut HeaderMap,
    ) {
        if let Some(v) = self.allow_origin(request_origin) {
            response.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
            response.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSE_HEADERS),
            );
        }
        if !self.origins.is_empty() {
            response.append(header::VARY, HeaderValue::from_static("origin"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(v: &'static str) -> HeaderValue {
        HeaderValue::from_static(v)
    }

    #[test]
    fn only_listed_origins_are_echoed() {
        let p = CorsPolicy::new(
            &[
                "https://app.example.com/".into(),
                " http://localhost:3000".into(),
            ],
            AuthMode::ApiKey,
        );
        assert_eq!(
            p.allow_origin(Some(&origin("https://App.example.com"))),
            Some(origin("https://App.example.com"))
        );
        assert!(p
            .allow_origin(Some(&origin("http://localhost:3000")))
            .is_some());
        assert!(p
            .allow_origin(Some(&origin("https://evil.example.com")))
            .is_none());
        assert!(p
            .allow_origin(Some(&origin("https://app.example.com.evil")))
            .is_none());
        assert!(p.allow_origin(None).is_none());
    }

    #[test]
    fn a_wildcard_never_applies_while_keys_are_required() {
        let with_auth = CorsPolicy::new(&["*".into()], AuthMode::ApiKey);
        assert!(with_auth
            .allow_origin(Some(&origin("https://x.example")))
            .is_none());
        let without = CorsPolicy::new(&["*".into()], AuthMode::Off);
        assert_eq!(
            without.allow_origin(Some(&origin("https://x.example"))),
            Some(origin("*"))
        );
    }
}
