//! `infra/template.yaml` must declare the table exactly as `ojs_store::schema` defines it
//! (the local stack creates its table from the latter), and every function must build a
//! binary that exists. Reads files only: no AWS endpoint needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use ojs_store::schema::{IndexDef, KeyDef, Projection, INDEXES, PRIMARY, TTL_ATTRIBUTE};
use serde_yaml::{Mapping, Value};

const TABLE_RESOURCE: &str = "JobsTable";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The template with CloudFormation short tags rewritten to their long form
/// (`!Ref X` -> `{Ref: X}`, `!GetAtt A.B` -> `{Fn::GetAtt: A.B}`), so the rest of the
/// test deals with plain YAML values only.
fn template() -> Result<Value> {
    let path = workspace_root().join("infra/template.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value =
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(long_form(value))
}

fn long_form(value: Value) -> Value {
    match value {
        Value::Tagged(tagged) => {
            let name = tagged.tag.to_string();
            let name = name.trim_start_matches('!');
            let key = if name == "Ref" || name == "Condition" {
                name.to_owned()
            } else {
                format!("Fn::{name}")
            };
            let mut map = Mapping::new();
            map.insert(Value::from(key), long_form(tagged.value));
            Value::Mapping(map)
        }
        Value::Mapping(map) => Value::Mapping(
            map.into_iter()
                .map(|(k, v)| (long_form(k), long_form(v)))
                .collect(),
        ),
        Value::Sequence(items) => Value::Sequence(items.into_iter().map(long_form).collect()),
        other => other,
    }
}

fn field<'a>(value: &'a Value, key: &str) -> Result<&'a Value> {
    value.get(key).with_context(|| format!("missing `{key}`"))
}

fn text<'a>(value: &'a Value, key: &str) -> Result<&'a str> {
    field(value, key)?
        .as_str()
        .with_context(|| format!("`{key}` is not a plain string"))
}

fn list<'a>(value: &'a Value, key: &str) -> Result<&'a [Value]> {
    field(value, key)?
        .as_sequence()
        .map(Vec::as_slice)
        .with_context(|| format!("`{key}` is not a list"))
}

fn resources(template: &Value) -> Result<&Mapping> {
    field(template, "Resources")?
        .as_mapping()
        .context("`Resources` is not a mapping")
}

fn table_properties(template: &Value) -> Result<&Value> {
    let table = field(field(template, "Resources")?, TABLE_RESOURCE)?;
    assert_eq!(text(table, "Type")?, "AWS::DynamoDB::Table");
    field(table, "Properties")
}

/// A `KeySchema` list as (attribute, key type) pairs, in order.
fn key_schema(value: &Value) -> Result<Vec<(String, String)>> {
    list(value, "KeySchema")?
        .iter()
        .map(|k| Ok((text(k, "AttributeName")?.into(), text(k, "KeyType")?.into())))
        .collect()
}

fn expected_keys(keys: KeyDef) -> Vec<(String, String)> {
    vec![
        (keys.partition.into(), "HASH".into()),
        (keys.sort.into(), "RANGE".into()),
    ]
}

#[test]
fn table_primary_key_and_billing_match_schema() -> Result<()> {
    let template = template()?;
    let table = table_properties(&template)?;

    assert_eq!(
        key_schema(table)?,
        expected_keys(PRIMARY),
        "table KeySchema"
    );
    assert_eq!(text(table, "BillingMode")?, "PAY_PER_REQUEST");
    Ok(())
}

#[test]
fn attribute_definitions_are_exactly_the_key_attributes() -> Result<()> {
    let template = template()?;
    let table = table_properties(&template)?;

    let declared = list(table, "AttributeDefinitions")?
        .iter()
        .map(|a| Ok((text(a, "AttributeName")?, text(a, "AttributeType")?)))
        .collect::<Result<Vec<_>>>()?;
    let unique: BTreeSet<_> = declared.iter().copied().collect();
    ensure!(
        unique.len() == declared.len(),
        "duplicate AttributeDefinitions: {declared:?}"
    );

    let expected: BTreeSet<_> = std::iter::once(PRIMARY)
        .chain(INDEXES.iter().map(|index| index.keys))
        .flat_map(|keys| [keys.partition, keys.sort])
        .map(|name| (name, "S"))
        .collect();
    assert_eq!(unique, expected, "AttributeDefinitions");
    Ok(())
}

#[test]
fn global_secondary_indexes_match_schema() -> Result<()> {
    let template = template()?;
    let table = table_properties(&template)?;
    let declared = list(table, "GlobalSecondaryIndexes")?;

    let declared_names = declared
        .iter()
        .map(|gsi| text(gsi, "IndexName"))
        .collect::<Result<Vec<_>>>()?;
    let expected_names: Vec<_> = INDEXES.iter().map(|index| index.name).collect();
    assert_eq!(
        declared_names.iter().copied().collect::<BTreeSet<_>>(),
        expected_names.iter().copied().collect::<BTreeSet<_>>(),
        "GSI names"
    );
    assert_eq!(declared.len(), INDEXES.len(), "GSI count (duplicates?)");

    for index in INDEXES {
        let gsi = declared
            .iter()
            .find(|gsi| gsi.get("IndexName").and_then(Value::as_str) == Some(index.name))
            .with_context(|| format!("GSI `{}` not declared", index.name))?;
        check_index(gsi, index).with_context(|| format!("GSI `{}`", index.name))?;
    }
    Ok(())
}

fn check_index(gsi: &Value, index: &IndexDef) -> Result<()> {
    assert_eq!(
        key_schema(gsi)?,
        expected_keys(index.keys),
        "KeySchema of GSI `{}`",
        index.name
    );

    let projection = field(gsi, "Projection")?;
    let kind = text(projection, "ProjectionType")?;
    let non_key: Option<BTreeSet<&str>> = projection
        .get("NonKeyAttributes")
        .map(|attrs| {
            attrs
                .as_sequence()
                .context("`NonKeyAttributes` is not a list")?
                .iter()
                .map(|a| a.as_str().context("non-string NonKeyAttributes entry"))
                .collect()
        })
        .transpose()?;

    match index.projection {
        Projection::KeysOnly => {
            assert_eq!(kind, "KEYS_ONLY", "ProjectionType of GSI `{}`", index.name);
            assert_eq!(non_key, None, "NonKeyAttributes of GSI `{}`", index.name);
        }
        Projection::Include(attrs) => {
            assert_eq!(kind, "INCLUDE", "ProjectionType of GSI `{}`", index.name);
            assert_eq!(
                non_key,
                Some(attrs.iter().copied().collect()),
                "NonKeyAttributes of GSI `{}`",
                index.name
            );
        }
    }
    Ok(())
}

#[test]
fn ttl_attribute_matches_schema() -> Result<()> {
    let template = template()?;
    let ttl = field(table_properties(&template)?, "TimeToLiveSpecification")?;

    assert_eq!(text(ttl, "AttributeName")?, TTL_ATTRIBUTE, "TTL attribute");
    assert_eq!(field(ttl, "Enabled")?.as_bool(), Some(true), "TTL enabled");
    Ok(())
}

/// Binary names cargo builds from `functions/*/Cargo.toml`: every `[[bin]]` name, or the
/// package name for a package with `src/main.rs` and no `[[bin]]` section.
fn function_binaries() -> Result<BTreeSet<String>> {
    let name_line = regex::Regex::new(r#"^name\s*=\s*"([^"]+)""#)?;
    let mut binaries = BTreeSet::new();

    let dir = workspace_root().join("functions");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let package = entry?.path();
        let manifest = package.join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&manifest)
            .with_context(|| format!("reading {}", manifest.display()))?;

        let (mut section, mut package_name, mut bins) = (String::new(), None, Vec::new());
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_owned();
            } else if let Some(name) = name_line.captures(line).map(|c| c[1].to_owned()) {
                match section.as_str() {
                    "[[bin]]" => bins.push(name),
                    "[package]" => package_name = Some(name),
                    _ => {}
                }
            }
        }
        if bins.is_empty() && package.join("src/main.rs").is_file() {
            bins.extend(package_name);
        }
        binaries.extend(bins);
    }
    Ok(binaries)
}

#[test]
fn every_function_builds_an_existing_binary() -> Result<()> {
    let template = template()?;
    let binaries = function_binaries()?;
    let mut used = BTreeSet::new();

    for (name, resource) in resources(&template)? {
        if resource.get("Type").and_then(Value::as_str) != Some("AWS::Serverless::Function") {
            continue;
        }
        let name = name.as_str().unwrap_or("?");
        let metadata = field(resource, "Metadata").with_context(|| name.to_owned())?;
        assert_eq!(
            text(metadata, "BuildMethod")?,
            "makefile",
            "BuildMethod of {name} (infra/lambda/lambda.mk builds every bin in one cargo run)"
        );
        let binary = text(field(metadata, "BuildProperties")?, "Binary")
            .with_context(|| format!("{name}: Metadata.BuildProperties"))?;
        ensure!(
            binaries.contains(binary),
            "{name} builds `{binary}`, but functions/*/Cargo.toml only define {binaries:?}"
        );
        ensure!(
            used.insert(binary),
            "{name}: binary `{binary}` is already built by another function"
        );
    }
    ensure!(!used.is_empty(), "the template declares no function");
    Ok(())
}

#[test]
fn function_policies_name_every_action() -> Result<()> {
    let template = template()?;

    for (name, resource) in resources(&template)? {
        let name = name.as_str().unwrap_or("?");
        let Some(policies) = resource
            .get("Properties")
            .and_then(|p| p.get("Policies"))
            .and_then(Value::as_sequence)
        else {
            continue;
        };
        for statement in policies
            .iter()
            .filter_map(|p| p.get("Statement").and_then(Value::as_sequence))
            .flatten()
        {
            let actions = match field(statement, "Action")? {
                Value::String(action) => vec![action.as_str()],
                Value::Sequence(actions) => actions.iter().filter_map(Value::as_str).collect(),
                other => bail!("{name}: unexpected Action {other:?}"),
            };
            for action in actions {
                ensure!(!action.contains('*'), "{name}: wildcard action `{action}`");
            }
        }
    }
    Ok(())
}

/// One route of an axum router: method (upper case) and path, e.g. `GET /ojs/v1/jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Route {
    method: String,
    path: String,
}

/// Routes declared by `shared/http/src/routes/<group>.rs`, keyed by the binary that
/// serves the group (`dead_letter.rs` -> `dead-letter`). Reads each file's `fn router()`
/// body: `.route("<path>", get(..).delete(..))`.
fn code_routes() -> Result<Vec<(String, Route)>> {
    let route_call = regex::Regex::new(r#"\.route\(\s*"([^"]+)"\s*,"#)?;
    let method_call = regex::Regex::new(r"\b(get|post|put|patch|delete)\(")?;
    let merge_call = regex::Regex::new(r"\bsuper::([a-z_]+)::router\(\)")?;
    let mut routes = Vec::new();

    let dir = workspace_root().join("shared/http/src/routes");
    // A module whose router another one merges is served by that one's function
    // (checkpoints by the workers function, versioned schemas by the schemas function).
    let mut merged_into: BTreeMap<String, String> = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let file = entry?.path();
        let Some(stem) = file.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let Some(start) = text.find("fn router()") else {
            continue;
        };
        let body = &text[start..];
        let body = &body[..body.find("\n}").unwrap_or(body.len())];
        for m in merge_call.captures_iter(body) {
            merged_into.insert(m[1].to_owned(), stem.to_owned());
        }
    }
    for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let file = entry?.path();
        let Some(stem) = file.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if stem == "mod" || file.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let Some(start) = text.find("fn router()") else {
            continue;
        };
        let body = &text[start..];
        let body = &body[..body.find("\n}").unwrap_or(body.len())];

        let calls: Vec<_> = route_call.captures_iter(body).collect();
        ensure!(
            !calls.is_empty(),
            "{}: router() declares no route",
            file.display()
        );
        for (i, call) in calls.iter().enumerate() {
            let whole = call.get(0).context("regex match")?;
            let end = calls
                .get(i + 1)
                .and_then(|next| next.get(0))
                .map_or(body.len(), |m| m.start());
            let methods: Vec<_> = method_call
                .captures_iter(&body[whole.end()..end])
                .map(|m| m[1].to_uppercase())
                .collect();
            ensure!(
                !methods.is_empty(),
                "{}: no method for route {}",
                file.display(),
                &call[1]
            );
            // Push endpoint registrations and webhook subscriptions are served by the
            // queues function.
            let mut owner = stem;
            while let Some(into) = merged_into.get(owner) {
                owner = into;
            }
            let binary = match owner {
                "push" | "webhooks" => "queues".to_owned(),
                other => other.replace('_', "-"),
            };
            for method in methods {
                routes.push((
                    binary.clone(),
                    Route {
                        method,
                        path: call[1].to_owned(),
                    },
                ));
            }
        }
    }
    Ok(routes)
}

/// Whether an HTTP API route (`ANY` method, `{param}` and trailing `{proxy+}` segments)
/// matches a concrete axum route (whose `{param}` segments stand for any value).
fn http_api_matches(api_method: &str, api_path: &str, route: &Route) -> bool {
    if api_method != "ANY" && !api_method.eq_ignore_ascii_case(&route.method) {
        return false;
    }
    let api: Vec<_> = api_path.trim_matches('/').split('/').collect();
    let code: Vec<_> = route.path.trim_matches('/').split('/').collect();
    for (i, segment) in api.iter().enumerate() {
        if segment.starts_with('{') && segment.ends_with("+}") {
            return code.len() > i;
        }
        let Some(actual) = code.get(i) else {
            return false;
        };
        let api_param = segment.starts_with('{') && segment.ends_with('}');
        let code_param = actual.starts_with('{') && actual.ends_with('}');
        if !(api_param || (!code_param && segment == actual)) {
            return false;
        }
    }
    api.len() == code.len()
}

#[test]
fn every_http_route_reaches_the_function_that_serves_it() -> Result<()> {
    let template = template()?;
    let routes = code_routes()?;
    ensure!(
        !routes.is_empty(),
        "no route found under shared/http/src/routes"
    );

    // (binary, method, path) of every HttpApi event.
    let mut events = Vec::new();
    for (name, resource) in resources(&template)? {
        if resource.get("Type").and_then(Value::as_str) != Some("AWS::Serverless::Function") {
            continue;
        }
        let name = name.as_str().unwrap_or("?");
        let binary = text(
            field(field(resource, "Metadata")?, "BuildProperties")?,
            "Binary",
        )
        .with_context(|| name.to_owned())?;
        let Some(fn_events) = resource
            .get("Properties")
            .and_then(|p| p.get("Events"))
            .and_then(Value::as_mapping)
        else {
            continue;
        };
        for event in fn_events.values() {
            if event.get("Type").and_then(Value::as_str) != Some("HttpApi") {
                continue;
            }
            let props = field(event, "Properties").with_context(|| name.to_owned())?;
            events.push((
                binary.to_owned(),
                text(props, "Method")?.to_owned(),
                text(props, "Path")?.to_owned(),
            ));
        }
    }

    // API Gateway takes the most specific route that matches: the one whose leading
    // segments are literal the longest (`GET /health` over `GET /{queue}`), a method over
    // ANY.
    let rank = |method: &str, path: &str| {
        let literal = path
            .trim_matches('/')
            .split('/')
            .take_while(|seg| !seg.starts_with('{'))
            .count();
        (literal, method != "ANY")
    };
    for (binary, route) in &routes {
        let matching: Vec<_> = events
            .iter()
            .filter(|(_, method, path)| http_api_matches(method, path, route))
            .collect();
        let best = matching.iter().map(|(_, m, p)| rank(m, p)).max();
        let targets: BTreeSet<_> = matching
            .iter()
            .filter(|(_, m, p)| Some(rank(m, p)) == best)
            .map(|(target, _, _)| target.as_str())
            .collect();
        ensure!(
            targets == BTreeSet::from([binary.as_str()]),
            "{} {}: served by the `{binary}` binary, but the template routes it to {targets:?}",
            route.method,
            route.path
        );
    }
    Ok(())
}
