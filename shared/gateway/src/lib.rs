//! Requests as API Gateway hands them to an endpoint function.
//!
//! A deployed stack checks API keys once, at the gateway: its Lambda authorizer
//! (`ojs_http::authorizer`) verifies the key, answers with the key's id and scopes as its
//! context, and the endpoint functions run with `OJS_AUTH=off`. The request's context
//! still says whose key it was, and what records a caller (a registration's
//! `created_by`, an idempotency key's owner: `ojs_http`'s `Caller`) must see that
//! key, as a server that checks keys itself does; otherwise every producer of a stack
//! would share one idempotency key space. A crate of its own so that ojs-http, which
//! every test binary links, does not wait on lambda_http's compilation.

use axum::extract::Request;
use axum::Router;
use lambda_http::request::RequestContext;
use ojs_http::auth::Principal;
use ojs_http::scopes::Scopes;

/// Serves `router` as a Lambda function behind API Gateway, with the key the gateway's
/// authorizer let each request in with as its [`Principal`].
pub async fn run_lambda(router: Router) -> Result<(), lambda_http::Error> {
    let router = router.layer(axum::middleware::map_request(adopt_authorizer_key));
    lambda_http::run(router).await
}

async fn adopt_authorizer_key(mut req: Request) -> Request {
    let principal = req
        .extensions()
        .get::<RequestContext>()
        .and_then(authorizer_principal);
    if let Some(p) = principal {
        req.extensions_mut().insert(p);
    }
    req
}

/// The key of the authorizer's context (`key_id`, and `scopes` as the authorizer writes
/// them), when the request came through it.
fn authorizer_principal(ctx: &RequestContext) -> Option<Principal> {
    let fields = &ctx.authorizer()?.fields;
    let key_id = fields.get("key_id")?.as_str().filter(|id| !id.is_empty())?;
    let scopes = fields
        .get("scopes")
        .and_then(|s| s.as_str())
        .and_then(|s| Scopes::parse_list(s).ok())
        .unwrap_or(Scopes::default());
    // A key bound to a tenant acts for that tenant only; one whose tenant does not read
    // (never written so by the authorizer) is granted nothing rather than every tenant.
    let (scopes, tenant) = match fields.get("tenant").and_then(|t| t.as_str()) {
        None => (scopes, None),
        Some(raw) => match ojs_core::tenant::TenantId::parse(raw) {
            Ok(Some(t)) => (scopes, Some(t)),
            _ => (Scopes::default(), None),
        },
    };
    Some(Principal {
        key_id: key_id.to_owned(),
        scopes,
        tenant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpRequestContext;
    use ojs_http::scopes::Scope;
    use serde_json::{json, Value};

    fn context(authorizer: Value) -> Option<RequestContext> {
        let mut ctx = json!({
            "accountId": "123456789012", "apiId": "api", "requestId": "r",
            "routeKey": "POST /ojs/v1/jobs", "stage": "$default",
            "http": {"method": "POST", "path": "/ojs/v1/jobs", "protocol": "HTTP/1.1",
                     "sourceIp": "127.0.0.1", "userAgent": "t"},
        });
        if !authorizer.is_null() {
            ctx["authorizer"] = authorizer;
        }
        serde_json::from_value::<ApiGatewayV2httpRequestContext>(ctx)
            .ok()
            .map(RequestContext::ApiGatewayV2)
    }

    #[test]
    fn the_authorizer_s_key_and_scopes_become_the_principal() {
        let ctx = context(
            json!({"lambda": {"key_id": "0123456789ab", "scopes": "ojs:data:enqueue ojs:data:read"}}),
        );
        let p = ctx.as_ref().and_then(authorizer_principal);
        assert_eq!(
            p,
            Some(Principal {
                tenant: None,
                key_id: "0123456789ab".into(),
                scopes: Scopes::of(&[Scope::DataEnqueue, Scope::DataRead]),
            })
        );
    }

    #[test]
    fn no_key_in_the_context_is_no_principal() {
        for authorizer in [
            Value::Null,
            json!({"lambda": {}}),
            json!({"lambda": {"key_id": ""}}),
            json!({"lambda": {"key_id": 7}}),
            json!({"jwt": {"claims": {"sub": "x"}, "scopes": []}}),
        ] {
            let ctx = context(authorizer.clone());
            assert!(ctx.is_some(), "{authorizer}");
            assert_eq!(
                ctx.as_ref().and_then(authorizer_principal),
                None,
                "{authorizer}"
            );
        }
    }

    #[test]
    fn the_authorizer_s_tenant_binds_the_principal_and_a_bad_one_grants_nothing() {
        let bound = context(
            json!({"lambda": {"key_id": "k", "scopes": "ojs:data:read", "tenant": "acme"}}),
        )
        .as_ref()
        .and_then(authorizer_principal);
        assert_eq!(
            bound.and_then(|p| p.tenant).map(|t| t.to_string()),
            Some("acme".to_owned())
        );
        let bad =
            context(json!({"lambda": {"key_id": "k", "scopes": "ojs:data:read", "tenant": "a b"}}))
                .as_ref()
                .and_then(authorizer_principal);
        assert_eq!(
            bad.map(|p| (p.scopes, p.tenant)),
            Some((Scopes::default(), None))
        );
    }

    #[test]
    fn scopes_the_code_does_not_know_grant_nothing() {
        let ctx = context(json!({"lambda": {"key_id": "k", "scopes": "ojs:everything"}}));
        let p = ctx.as_ref().and_then(authorizer_principal);
        assert_eq!(p.map(|p| p.scopes), Some(Scopes::default()));
    }
}
