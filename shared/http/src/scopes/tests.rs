use std::collections::{BTreeMap, BTreeSet};

use super::*;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// `(method, path, need)` rows, one a line: a request and what its route needs.
macro_rules! cases {
    ($($method:ident $path:literal $need:ident;)*) => {
        [$((Method::$method, $path, Need::$need)),*]
    };
}

#[test]
fn each_request_needs_what_its_route_does() {
    let cases = cases! {
        GET    "/ojs/manifest"                               Public;
        GET    "/ojs/v1/admin/queues"                        AdminRead;
        HEAD   "/ojs/v1/admin/jobs"                          AdminRead;
        POST   "/ojs/v1/admin/queues/q/pause"                ConfigWrite;
        PUT    "/ojs/v1/admin/queues/q/config"               ConfigWrite;
        PUT    "/ojs/v1/admin/queues/q/rate-limit"           ConfigWrite;
        DELETE "/ojs/v1/admin/workers/w"                     AdminWrite;
        POST   "/ojs/v1/admin/workers/w/quiet"               ConfigWrite;
        DELETE "/ojs/v1/admin/dead-letter/x"                 AdminWrite;
        POST   "/ojs/v1/admin/jobs/bulk/retry"               AdminWrite;
        POST   "/ojs/v1/admin/jobs/bulk/delete"              AdminPurge;
        DELETE "/ojs/v1/admin/queues/q/jobs"                 AdminPurge;
        DELETE "/ojs/v1/admin/dead-letter"                   AdminPurge;
        GET    "/ojs/v1/jobs/x"                              DataRead;
        POST   "/ojs/v1/jobs"                                Enqueue;
        POST   "/ojs/v1/jobs/batch"                          Enqueue;
        DELETE "/ojs/v1/jobs/x"                              Enqueue;
        POST   "/ojs/v1/workers/fetch"                       Process;
        POST   "/ojs/v1/workers/heartbeat"                   Process;
        GET    "/cloudq/q"                                   Process;
        POST   "/cloudq/q"                                   Enqueue;
        GET    "/archive_queue"                              Process;
        POST   "/archive_queue"                              Enqueue;
        DELETE "/archive_queue/123"                          Process;
        GET    "/health"                                     Public;
        GET    "/metrics"                                    AdminRead;
        POST   "/ojs/v1/push/endpoints"                      ConfigWrite;
        GET    "/ojs/v1/push/endpoints"                      ConfigRead;
        DELETE "/ojs/v1/push/endpoints/p"                    ConfigWrite;
        POST   "/ojs/v1/webhooks/subscriptions"              ConfigWrite;
        PATCH  "/ojs/v1/webhooks/subscriptions/s"            ConfigWrite;
        GET    "/ojs/v1/webhooks/subscriptions/s/deliveries" ConfigRead;
        POST   "/ojs/v1/cron"                                ConfigWrite;
        GET    "/ojs/v1/cron"                                DataRead;
        DELETE "/ojs/v1/cron/c"                              ConfigWrite;
        POST   "/ojs/v1/schemas"                             ConfigWrite;
        GET    "/ojs/v1/schemas/urn%3Aa/b"                   DataRead;
        DELETE "/ojs/v1/schemas/urn%3Aa"                     ConfigWrite;
        POST   "/ojs/v1/queues/q/pause"                      ConfigWrite;
        POST   "/ojs/v1/queues/q/resume"                     ConfigWrite;
    };
    for (method, path, want) in cases {
        assert_eq!(
            route(&method, path).map(|r| r.need),
            Some(want),
            "{method} {path}"
        );
    }
}

#[test]
fn paths_and_methods_the_api_does_not_serve_have_no_route() {
    for (method, path) in [
        (Method::GET, "/ojs/v1/administrator"),
        (Method::POST, "/ojs/v1/jobs/x"),
        (Method::GET, "/ojs/v1/jobs/"),
        (Method::GET, "/ojs/v1/schemas/"),
        (Method::PUT, "/ojs/v1/jobs"),
        (Method::GET, "/ojs/v1/jobs/x/y"),
        (Method::GET, "/"),
        (Method::GET, "/a/b"),
        (Method::PUT, "/a"),
    ] {
        assert_eq!(route(&method, path), None, "{method} {path}");
    }
}

/// `keys method path verdict` rows, one a line: a request a key makes and whether
/// [`check`] lets it through (`allowed`) or answers the 403 (`refused`). Each row is
/// `(key name, keys, method, path, allowed)`.
macro_rules! access {
    (@allowed) => {
        true
    };
    (@refused) => {
        false
    };
    ($($keys:ident $method:ident $path:literal $verdict:ident;)*) => {
        [$((stringify!($keys), $keys, Method::$method, $path, access!(@$verdict))),*]
    };
}

#[test]
fn each_key_makes_the_requests_its_scopes_grant_and_no_others() {
    let data = Scopes::DATA;
    let producer = Scopes::of(&[Scope::DataEnqueue, Scope::DataRead]);
    let worker = Scopes::of(&[Scope::DataProcess]);
    let config = Scopes::of(&[Scope::ConfigWrite]);
    let admin = Scopes::of(&[Scope::AdminWrite]);
    let reader = Scopes::of(&[Scope::AdminRead]);
    let cases = access! {
        // A data key enqueues and works but configures nothing.
        data     POST   "/ojs/v1/jobs"                      allowed;
        data     POST   "/ojs/v1/workers/fetch"             allowed;
        data     POST   "/ojs/v1/workers/ack"               allowed;
        data     GET    "/ojs/v1/jobs/x"                    allowed;
        data     POST   "/ojs/v1/push/endpoints"            refused;
        data     GET    "/ojs/v1/push/endpoints"            refused;
        data     POST   "/ojs/v1/webhooks/subscriptions"    refused;
        data     POST   "/ojs/v1/cron"                      refused;
        data     DELETE "/ojs/v1/cron/x"                    refused;
        data     POST   "/ojs/v1/schemas"                   refused;
        data     POST   "/ojs/v1/queues/q/pause"            refused;
        data     POST   "/ojs/v1/queues/q/resume"           refused;
        data     POST   "/ojs/v1/admin/workers/w/terminate" refused;
        // Producer and worker keys hold only their side.
        producer POST   "/ojs/v1/jobs"                      allowed;
        producer GET    "/ojs/v1/jobs/x"                    allowed;
        producer POST   "/ojs/v1/workers/fetch"             refused;
        worker   POST   "/ojs/v1/workers/fetch"             allowed;
        worker   POST   "/ojs/v1/workers/nack"              allowed;
        worker   POST   "/ojs/v1/jobs"                      refused;
        worker   GET    "/ojs/v1/jobs/x"                    refused;
        worker   POST   "/ojs/v1/push/endpoints"            refused;
        // Configuration is granted by the config scope or admin write alone.
        config   POST   "/ojs/v1/push/endpoints"            allowed;
        config   POST   "/ojs/v1/cron"                      allowed;
        config   PUT    "/ojs/v1/admin/queues/q/config"     allowed;
        config   POST   "/ojs/v1/jobs"                      refused;
        admin    POST   "/ojs/v1/push/endpoints"            allowed;
        admin    POST   "/ojs/v1/cron"                      allowed;
        admin    PUT    "/ojs/v1/admin/queues/q/config"     allowed;
        admin    POST   "/ojs/v1/jobs"                      refused;
        config   GET    "/ojs/v1/webhooks/subscriptions"    allowed;
        config   POST   "/ojs/v1/admin/jobs/x/retry"        refused;
        config   GET    "/ojs/v1/admin/stats"               refused;
        reader   GET    "/ojs/v1/push/endpoints"            allowed;
        reader   POST   "/ojs/v1/push/endpoints"            refused;
        admin    DELETE "/ojs/v1/admin/queues/q/jobs"       refused;
    };
    for (name, keys, method, path, allowed) in cases {
        let code = check(keys, &method, path).err().map(|e| e.code);
        let want = (!allowed).then_some(ErrorCode::Forbidden);
        assert_eq!(code, want, "{name} key: {method} {path}");
    }
}

#[test]
fn every_need_is_granted_by_its_named_scope_and_only_by_its_grantors() {
    let needs = [
        Need::DataRead,
        Need::Enqueue,
        Need::Process,
        Need::ConfigRead,
        Need::ConfigWrite,
        Need::AdminRead,
        Need::AdminWrite,
        Need::AdminPurge,
    ];
    let want: BTreeMap<&str, Vec<&str>> = [
        ("DataRead", vec!["ojs:data:read"]),
        ("Enqueue", vec!["ojs:data:write", "ojs:data:enqueue"]),
        ("Process", vec!["ojs:data:write", "ojs:data:process"]),
        ("ConfigRead", vec!["ojs:admin:read", "ojs:config:write"]),
        ("ConfigWrite", vec!["ojs:admin:write", "ojs:config:write"]),
        ("AdminRead", vec!["ojs:admin:read"]),
        ("AdminWrite", vec!["ojs:admin:write"]),
        ("AdminPurge", vec!["ojs:admin:purge"]),
    ]
    .into_iter()
    .collect();
    for need in needs {
        let named = need.scope().map(Scope::as_str);
        let granted = need.granted_by();
        assert!(
            named.is_some_and(|n| granted.contains(&n)),
            "{need:?}: {named:?}"
        );
        assert_eq!(granted, want[format!("{need:?}").as_str()], "{need:?}");
        for scope in Scope::ALL {
            assert_eq!(Scopes::of(&[scope]).allow(need), scope.grants(need));
        }
    }
    assert!(Scopes::default().allow(Need::Public));
    assert!(!Scopes::default().allow(Need::DataRead));
}

#[test]
fn stored_keys_without_scopes_are_data_keys() {
    assert_eq!(Scopes::of_stored(None), Scopes::DATA);
    assert!(Scopes::DATA.has(Scope::DataRead) && Scopes::DATA.has(Scope::DataWrite));
    assert!(!Scopes::DATA.has(Scope::AdminRead) && !Scopes::DATA.has(Scope::ConfigWrite));
    let admin = vec!["ojs:admin:read".to_owned(), "nonsense".to_owned()];
    let s = Scopes::of_stored(Some(&admin));
    assert!(s.has(Scope::AdminRead));
    assert!(!s.has(Scope::DataRead));
    assert_eq!(s.names(), ["ojs:admin:read"]);
    assert_eq!(Scopes::of_stored(Some(&[])), Scopes::default());
}

#[test]
fn lists_parse_and_unknown_names_are_refused() {
    let s =
        Scopes::parse_list("ojs:admin:read, ojs:data:read ojs:config:write").unwrap_or_default();
    assert_eq!(
        s.names(),
        ["ojs:admin:read", "ojs:data:read", "ojs:config:write"]
    );
    assert!(Scopes::parse_list("ojs:admin:all").is_err());
    let twice = Scopes::parse_list("ojs:admin:read,ojs:admin:read").unwrap_or_default();
    assert!(twice.has(Scope::AdminRead));
    assert_eq!(Scopes::parse_list(""), Ok(Scopes::default()));
    for scope in Scope::ALL {
        assert_eq!(Scope::parse(scope.as_str()), Some(scope));
        assert_eq!(Scopes::of(&[scope]).names(), [scope.as_str()]);
    }
}

#[test]
fn a_missing_scope_is_a_403_naming_it_and_its_grantors() {
    let err = check(Scopes::DATA, &Method::POST, "/ojs/v1/push/endpoints").err();
    let err = err.map(|e| {
        (
            e.code,
            e.details["required_scope"].clone(),
            e.details["granted_by"].clone(),
        )
    });
    assert_eq!(
        err,
        Some((
            ErrorCode::Forbidden,
            "ojs:config:write".into(),
            serde_json::json!(["ojs:admin:write", "ojs:config:write"])
        ))
    );
    // A path the API does not serve is the router's to answer (404/405). (A path of one
    // segment is a Cloudq queue's, `GET /{queue}`.)
    assert!(check(Scopes::default(), &Method::GET, "/no/where/else").is_ok());
    assert!(check(Scopes::default(), &Method::GET, "/nowhere").is_err());
}

/// (method, pattern) of every `.route(...)` in the routers' source.
fn router_routes() -> BTreeSet<(String, String)> {
    let call = regex::Regex::new(r#"\.route\(\s*"([^"]+)""#).unwrap_or_else(|e| panic!("{e}"));
    let method = regex::Regex::new(r"(?:^|[^A-Za-z0-9_])(get|post|put|patch|delete)\(")
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = format!("{ROOT}/shared/http/src/routes");
    let mut out = BTreeSet::new();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    for entry in entries.flatten() {
        let src = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for m in call.captures_iter(&src) {
            let (Some(whole), Some(path)) = (m.get(0), m.get(1)) else {
                continue;
            };
            // The call's arguments: up to the parenthesis that closes `.route(`.
            let rest = &src[whole.start() + ".route".len()..];
            let mut depth = 0;
            let mut end = rest.len();
            for (i, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let args = &rest[..end];
            let before = out.len();
            for m in method.captures_iter(args) {
                if let Some(verb) = m.get(1) {
                    out.insert((verb.as_str().to_uppercase(), path.as_str().to_owned()));
                }
            }
            assert!(out.len() > before, "no method found in {args}");
        }
    }
    assert!(out.len() > 50, "the source scan found only {out:?}");
    out
}

#[test]
fn every_route_of_the_router_is_in_the_table_and_nothing_else() {
    let routes = router_routes();
    let table: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect();
    let missing: Vec<_> = routes.difference(&table).collect();
    assert!(missing.is_empty(), "routes without a scope: {missing:?}");
    // Rows the router does not serve as written must at least reach one of its routes
    // (`bulk/delete` is a case of `bulk/{action}` that needs more).
    for row in ROUTES {
        if routes.contains(&(row.method.to_owned(), row.path.to_owned())) {
            continue;
        }
        assert!(
            routes
                .iter()
                .any(|(m, p)| m == row.method && specificity(p, row.path).is_some()),
            "{} {} is in the table but no route serves it",
            row.method,
            row.path
        );
    }
    assert_eq!(
        ROUTES.len(),
        ROUTES
            .iter()
            .map(|r| (r.method, r.path))
            .collect::<BTreeSet<_>>()
            .len(),
        "a route listed twice"
    );
}

/// (method, path) of every route of the HTTP API in the SAM template.
fn gateway_routes() -> Vec<(String, String)> {
    gateway_routes_with_auth()
        .into_iter()
        .map(|(r, _)| r)
        .collect()
}

/// Each route of the template with whether it is public (`Auth: Authorizer: NONE`).
fn gateway_routes_with_auth() -> Vec<((String, String), bool)> {
    let raw = std::fs::read_to_string(format!("{ROOT}/infra/template.yaml"))
        .unwrap_or_else(|e| panic!("template: {e}"));
    // CloudFormation's tags are not YAML that serde reads: drop them.
    let tags = regex::Regex::new(r"!(Ref|GetAtt|Sub|Join|If|Equals|Not|Select|Split)\b")
        .unwrap_or_else(|e| panic!("{e}"));
    let doc: serde_yaml::Value = serde_yaml::from_str(&tags.replace_all(&raw, ""))
        .unwrap_or_else(|e| panic!("template: {e}"));
    let mut out = Vec::new();
    for (_, res) in doc["Resources"].as_mapping().into_iter().flatten() {
        for (_, event) in res["Properties"]["Events"]
            .as_mapping()
            .into_iter()
            .flatten()
        {
            if event["Type"].as_str() != Some("HttpApi") {
                continue;
            }
            let p = &event["Properties"];
            if let (Some(m), Some(path)) = (p["Method"].as_str(), p["Path"].as_str()) {
                let public = p["Auth"]["Authorizer"].as_str() == Some("NONE");
                out.push(((m.to_uppercase(), path.to_owned()), public));
            }
        }
    }
    assert!(out.len() > 50, "found only {out:?}");
    out
}

/// The gateway route API Gateway picks for a request (the most specific path whose
/// method is the request's or ANY; `{x+}` takes the rest).
fn gateway_route<'a>(
    routes: &'a [(String, String)],
    method: &str,
    path: &str,
) -> Option<&'a (String, String)> {
    routes
        .iter()
        .filter(|(m, _)| m == method || m == "ANY")
        .filter_map(|route| {
            // `{x+}` takes the rest of the path, as the router's `{*x}`.
            let pattern = route
                .1
                .split('/')
                .map(|seg| match seg.strip_suffix("+}") {
                    Some(name) => format!("{{*{}}}", name.trim_start_matches('{')),
                    None => seg.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("/");
            specificity(&pattern, path).map(|rank| (rank, route.0 != "ANY", route))
        })
        .max_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)))
        .map(|(_, _, route)| route)
}

/// A path the pattern matches, for the gateway lookup.
fn example_path(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|seg| {
            if seg.starts_with("{*") {
                "urn%3Aexample/v1".to_owned()
            } else if seg.starts_with('{') {
                "x1".to_owned()
            } else {
                seg.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[test]
fn every_gateway_route_needs_one_scope_and_names_its_method() {
    // The gateway caches an authorizer's verdict by the key and the route key, so every
    // request one gateway route takes must need the same: an ANY route (GET and POST
    // sharing a verdict) or a `{proxy+}` over routes of different needs would let a
    // verdict stand for a request the key may not make.
    let public_routes: Vec<(String, String)> = gateway_routes_with_auth()
        .into_iter()
        .filter(|(_, public)| *public)
        .map(|(r, _)| r)
        .collect();
    let gateway = gateway_routes();
    let any: Vec<_> = gateway.iter().filter(|(m, _)| m == "ANY").collect();
    assert!(any.is_empty(), "ANY routes: {any:?}");
    let mut needs: BTreeMap<&(String, String), BTreeSet<String>> = BTreeMap::new();
    for row in ROUTES {
        let path = example_path(row.path);
        let Some(via) = gateway_route(&gateway, row.method, &path) else {
            panic!("no gateway route takes {} {}", row.method, row.path);
        };
        needs
            .entry(via)
            .or_default()
            .insert(format!("{:?}", row.need));
        // Public at the gateway (no authorizer) exactly when the table says so.
        let public = public_routes.contains(via);
        assert_eq!(
            public,
            row.need == Need::Public,
            "{} {}",
            row.method,
            row.path
        );
    }
    for (via, set) in &needs {
        assert_eq!(
            set.len(),
            1,
            "gateway route {via:?} takes routes needing {set:?}"
        );
    }
    // And no gateway route leads nowhere.
    for route in &gateway {
        assert!(
            needs.contains_key(route),
            "gateway route {route:?} serves no route"
        );
    }
}

#[test]
fn the_readme_lists_every_route_with_the_scopes_that_grant_it() {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md"))
        .unwrap_or_else(|e| panic!("README: {e}"));
    let row = regex::Regex::new(r"(?m)^\| (GET|POST|PUT|PATCH|DELETE) \| `([^`]+)` \| (.+) \|$")
        .unwrap_or_else(|e| panic!("{e}"));
    let listed: Vec<(String, String, String)> = row
        .captures_iter(&readme)
        .map(|c| (c[1].to_owned(), c[2].to_owned(), c[3].to_owned()))
        .collect();
    let want: Vec<(String, String, String)> = ROUTES
        .iter()
        .map(|r| {
            let grants = if r.need == Need::Public {
                "none (no key)".to_owned()
            } else {
                // The narrowest scope first, then the others that grant it.
                let named = r.need.scope().map(Scope::as_str).unwrap_or_default();
                let mut names = vec![named];
                names.extend(r.need.granted_by().into_iter().filter(|n| *n != named));
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            (r.method.to_owned(), r.path.to_owned(), grants)
        })
        .collect();
    assert_eq!(listed, want, "README.md, \"API keys and scopes\"");
}
