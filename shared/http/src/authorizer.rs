//! The API Gateway (HTTP API) Lambda authorizer: the same API key check as
//! [`Authenticator::check`], answered as a simple response (payload format 2.0), so an
//! invalid key is refused by the gateway before any endpoint function runs. The gateway
//! caches each verdict by the `Authorization` header value (`ReauthorizeEvery` in
//! `infra/template.yaml`), so a valid key costs no lookup per request.

use axum::http::{header, HeaderMap, HeaderValue, Method};
use ojs_core::{ErrorCode, OjsError};
use serde_json::{json, Value};

use crate::auth::{Authenticator, Principal};

/// The `Authorization` header of an authorizer event (payload 2.0: header names are
/// lower case; a repeated header arrives as one comma-joined value, which the key check
/// then refuses as malformed).
fn headers_of(event: &Value) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let value = event["headers"]
        .as_object()
        .and_then(|h| {
            h.iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        })
        .and_then(|(_, v)| v.as_str())
        .and_then(|v| HeaderValue::from_str(v).ok());
    if let Some(v) = value {
        headers.insert(header::AUTHORIZATION, v);
    }
    headers
}

/// The method and path of the request, whose route in `crate::scopes::ROUTES` decides
/// the scope it needs. The gateway caches a verdict per key and route key
/// (`infra/template.yaml`), so every request one gateway route takes must need the same
/// (the scope table's tests hold the template to that). The path is `rawPath` less the
/// stage name, which a named stage puts in front of it.
fn request_of(event: &Value) -> (Method, String) {
    let http = &event["requestContext"]["http"];
    // Without the request's own (an event not from the gateway), its route key's: a
    // `{name}` segment stands for any one segment.
    let route_key = event["routeKey"].as_str().and_then(|k| k.split_once(' '));
    let method = http["method"]
        .as_str()
        .or(route_key.map(|k| k.0))
        .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
        .unwrap_or(Method::GET);
    let raw = event["rawPath"]
        .as_str()
        .or_else(|| http["path"].as_str())
        .or(route_key.map(|k| k.1))
        .unwrap_or("/");
    // `$default` never prefixes a path, so only a named stage is taken off.
    let path = match event["requestContext"]["stage"].as_str() {
        Some(stage) => raw
            .strip_prefix('/')
            .and_then(|r| r.strip_prefix(stage))
            .filter(|r| r.starts_with('/'))
            .unwrap_or(raw),
        None => raw,
    };
    (method, path.to_owned())
}

/// The answer for a verified key: allowed when the route of `event`'s request needs what
/// its scopes grant. A route the table does not know is refused: the gateway only calls
/// the authorizer for its own routes, so that is a template the code lags behind.
fn verdict(p: &Principal, event: &Value) -> Value {
    let (method, path) = request_of(event);
    let tenant = p.tenant.as_ref().map(|t| t.as_str());
    let allowed = crate::scopes::route(&method, &path)
        .is_some_and(|route| p.scopes.allow(route.need))
        && crate::scopes::check_tenant(tenant, &method, &path).is_ok();
    if !allowed {
        tracing::warn!(event = "auth.forbidden", key_id = %p.key_id, %method, %path, "API key lacks the scope");
        return json!({"isAuthorized": false});
    }
    // A key bound to a tenant naming another: refused here, and by the function too (the
    // gateway caches a verdict per key and route, not per tenant header).
    let named = event["headers"].as_object().and_then(|h| {
        h.iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(ojs_core::tenant::TENANT_HEADER))
            .and_then(|(_, v)| v.as_str())
    });
    if !p.may_act_for(named) {
        tracing::warn!(event = "auth.forbidden", key_id = %p.key_id, %method, %path, "API key bound to another tenant");
        return json!({"isAuthorized": false});
    }
    let mut context = json!({
        "key_id": p.key_id,
        "scopes": p.scopes.names().join(" "),
    });
    if let Some(t) = &p.tenant {
        context["tenant"] = json!(t.as_str());
    }
    json!({"isAuthorized": true, "context": context})
}

/// The authorizer's answer to `event`: `{"isAuthorized": true, "context": {"key_id",
/// "scopes"}}` for a valid key with the scope its route needs (`crate::scopes`),
/// `{"isAuthorized": false}` (the gateway answers 403) for a missing, malformed, unknown
/// or revoked key, or one without that scope. A failure to read the key records is an
/// error, which the gateway answers with 500 and does not cache.
pub async fn authorize_request(auth: &Authenticator, event: &Value) -> Result<Value, OjsError> {
    match auth.check(&headers_of(event)).await {
        Ok(Some(p)) => Ok(verdict(&p, event)),
        Ok(None) => Ok(json!({"isAuthorized": true, "context": {}})),
        Err(e) if e.code == ErrorCode::Unauthenticated => Ok(json!({"isAuthorized": false})),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthMode;
    use crate::test_support::unreachable_store;

    fn event(authorization: Option<&str>) -> Value {
        let mut headers = json!({"content-type": "application/json"});
        if let Some(a) = authorization {
            headers["authorization"] = a.into();
        }
        json!({
            "version": "2.0",
            "type": "REQUEST",
            "routeArn": "arn:aws:execute-api:us-east-1:123456789012:abcdef123/$default/POST/ojs/v1/jobs",
            "identitySource": [authorization.unwrap_or_default()],
            "routeKey": "POST /ojs/v1/jobs",
            "headers": headers,
        })
    }

    #[tokio::test]
    async fn keys_not_in_their_shape_are_refused_without_a_lookup() -> Result<(), OjsError> {
        let auth = Authenticator::new(AuthMode::ApiKey, unreachable_store());
        for bad in [
            None,
            Some("Bearer"),
            Some("Basic b2pzOm9qcw=="),
            Some("Bearer ojs_0123456789ab_short"),
            Some("Bearer sk_live_0123"),
        ] {
            let answer = authorize_request(&auth, &event(bad)).await?;
            assert_eq!(answer, json!({"isAuthorized": false}), "{bad:?}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_well_formed_key_is_looked_up_and_a_lookup_failure_is_not_a_verdict() {
        let auth = Authenticator::new(AuthMode::ApiKey, unreachable_store());
        let key = format!("Bearer ojs_0123456789ab_{}", "ab".repeat(32));
        let answer = authorize_request(&auth, &event(Some(&key))).await;
        assert_eq!(
            answer.map_err(|e| e.code),
            Err(ErrorCode::BackendError),
            "an unreadable key table must not be cached as a refusal"
        );
    }

    #[tokio::test]
    async fn with_auth_off_everyone_is_authorized() -> Result<(), OjsError> {
        let auth = Authenticator::new(AuthMode::Off, unreachable_store());
        assert_eq!(
            authorize_request(&auth, &event(None)).await?["isAuthorized"],
            true
        );
        Ok(())
    }

    #[test]
    fn the_scope_is_decided_on_the_request_as_the_table_routes_it() {
        let e = json!({
            "routeKey": "POST /ojs/v1/workers/{proxy+}",
            "rawPath": "/ojs/v1/workers/ack",
            "requestContext": {"http": {"method": "POST", "path": "/ojs/v1/workers/ack"}, "stage": "$default"},
        });
        assert_eq!(
            request_of(&e),
            (Method::POST, "/ojs/v1/workers/ack".to_owned())
        );
        // A named stage's prefix is not part of the route.
        let e = json!({
            "rawPath": "/prod/ojs/v1/admin/stats",
            "requestContext": {"http": {"method": "GET"}, "stage": "prod"},
        });
        assert_eq!(
            request_of(&e),
            (Method::GET, "/ojs/v1/admin/stats".to_owned())
        );
        let e = json!({"routeKey": "DELETE /ojs/v1/jobs/{id}", "rawPath": "/ojs/v1/jobs/x"});
        assert_eq!(
            request_of(&e),
            (Method::DELETE, "/ojs/v1/jobs/x".to_owned())
        );
        let e = json!({"routeKey": "POST /ojs/v1/queues/{name}/pause"});
        assert_eq!(
            request_of(&e),
            (Method::POST, "/ojs/v1/queues/{name}/pause".to_owned())
        );
        assert_eq!(request_of(&json!({})), (Method::GET, "/".to_owned()));
    }

    #[test]
    fn a_verified_key_is_let_through_only_the_routes_its_scopes_grant() {
        use crate::scopes::{Scope, Scopes};
        let worker = Principal {
            tenant: None,
            key_id: "0123456789ab".into(),
            scopes: Scopes::of(&[Scope::DataProcess]),
        };
        let on = |method: &str, path: &str| json!({"rawPath": path, "requestContext": {"http": {"method": method}, "stage": "$default"}});
        let yes = verdict(&worker, &on("POST", "/ojs/v1/workers/ack"));
        assert_eq!(
            yes,
            json!({"isAuthorized": true, "context": {"key_id": "0123456789ab", "scopes": "ojs:data:process"}})
        );
        for (method, path) in [
            ("POST", "/ojs/v1/push/endpoints"),
            ("POST", "/ojs/v1/jobs"),
            ("GET", "/ojs/v1/unknown"),
        ] {
            assert_eq!(
                verdict(&worker, &on(method, path)),
                json!({"isAuthorized": false}),
                "{method} {path}"
            );
        }
    }

    #[test]
    fn a_key_bound_to_a_tenant_is_let_through_for_that_tenant_only() {
        use crate::scopes::Scopes;
        let acme = Principal {
            tenant: ojs_core::tenant::TenantId::parse("acme").ok().flatten(),
            key_id: "0123456789ab".into(),
            scopes: Scopes::DATA,
        };
        let on = |method: &str, path: &str, tenant: Option<&str>| {
            let mut e = json!({"rawPath": path, "requestContext": {"http": {"method": method}, "stage": "$default"}});
            if let Some(t) = tenant {
                e["headers"] = json!({"x-ojs-tenant": t});
            }
            e
        };
        for tenant in [None, Some("acme")] {
            let yes = verdict(&acme, &on("POST", "/ojs/v1/jobs", tenant));
            assert_eq!(yes["isAuthorized"], true, "{tenant:?}");
            assert_eq!(yes["context"]["tenant"], "acme");
        }
        for (method, path, tenant) in [
            ("POST", "/ojs/v1/jobs", Some("beta")),
            ("POST", "/ojs/v1/jobs", Some("_default")),
            ("GET", "/ojs/v1/admin/dead-letter", None),
            ("GET", "/ojs/v1/queues", Some("acme")),
        ] {
            assert_eq!(
                verdict(&acme, &on(method, path, tenant)),
                json!({"isAuthorized": false}),
                "{method} {path} {tenant:?}"
            );
        }
    }

    #[test]
    fn the_header_is_found_whatever_its_case() {
        let e = json!({"headers": {"Authorization": "Bearer x"}});
        assert_eq!(
            headers_of(&e).get(header::AUTHORIZATION),
            Some(&HeaderValue::from_static("Bearer x"))
        );
        assert!(headers_of(&json!({})).is_empty());
    }
}
