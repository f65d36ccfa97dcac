//! `infra/template.yaml` must declare the table exactly as `ojs_store::schema` defines it
//! (the local stack creates its table from the latter), and every function must build a
//! binary that exists. Reads files only: no AWS endpoint needed.

use std::collections::BTreeSet;
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
            "rust-cargolambda",
            "BuildMethod of {name}"
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
