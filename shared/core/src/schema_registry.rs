//! The schema registry (ojs-http-binding.md §15, ojs-core.md `schema`): parsing and
//! validation of `POST /ojs/v1/schemas`, and validation of a job's `args` against a
//! registered JSON Schema (draft 2020-12).
//!
//! The schema describes the whole `args` array ("URI referencing a schema that the `args`
//! array conforms to", ojs-core.md), so a typical schema is `{"type": "array",
//! "prefixItems": [...]}`. Remote `$ref`s are never fetched: a schema must be
//! self-contained.

use jsonschema::paths::LocationSegment;
use jsonschema::{Draft, Validator};
use serde_json::{json, Map, Value};

use crate::error::{ErrorCode, OjsError};
use crate::fields::{self, Fields};
use crate::ids::JobType;

/// Longest accepted schema URI in bytes (the URI is part of a DynamoDB sort key, whose
/// limit is 1024 bytes).
pub const MAX_URI_LEN: usize = 1000;

/// Largest accepted JSON Schema document (serialized). Every PUSH that names the schema
/// reads it, so it is kept well below DynamoDB's item limit.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// At most this many violations are reported for one PUSH.
pub const MAX_VIOLATIONS: usize = 20;

/// The only `$schema` dialect accepted (ojs-http-binding.md §15.2).
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Longest violation message kept (messages may quote the offending value).
const MAX_MESSAGE_LEN: usize = 240;

/// A validated schema registration.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaDoc {
    /// The URI jobs reference in their `schema` field, e.g. `urn:ojs:schema:email.send:v1`.
    pub uri: String,
    /// The job type the schema is for (given, or taken from an `urn:ojs:schema:` URI).
    pub job_type: Option<String>,
    /// The schema version, as given (an integer per the HTTP binding, or a string), or
    /// taken from the `v{n}` suffix of an `urn:ojs:schema:` URI.
    pub version: Option<Value>,
    /// Free text.
    pub description: Option<String>,
    /// The JSON Schema document (draft 2020-12) the `args` array must conform to.
    pub schema: Value,
}

/// One way `args` fails its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSONPath of the offending value, rooted at the envelope: `$.args[0].to`.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// JSON Pointer (fragment form) of the schema keyword that failed: `#/prefixItems/0/format`.
    pub schema_path: String,
}

impl Violation {
    /// The `details.validation_errors` entry.
    pub fn to_json(&self) -> Value {
        json!({ "path": self.path, "message": self.message, "schema_path": self.schema_path })
    }
}

impl SchemaDoc {
    /// Parses and validates a registration body: `uri` (required, a URI), `type`
    /// (optional job type), `version` (optional integer or string), `description`
    /// (optional), and `schema` (required, a valid draft 2020-12 JSON Schema).
    /// Unknown fields are ignored.
    pub fn from_json(body: Value) -> Result<Self, OjsError> {
        let body = fields::body(body, "schema registration")?;
        let f = Fields::new(&body, "$");
        let uri = match f.present("uri")? {
            Value::String(u) if is_valid_uri(u) => u.clone(),
            _ => return Err(f.refuse("uri", &format!(
                "must be an absolute URI (scheme:rest, printable ASCII, at most {MAX_URI_LEN} bytes), e.g. urn:ojs:schema:email.send:v1"
            ))),
        };
        let (urn_type, urn_version) = parse_ojs_urn(&uri);
        let job_type = match f.get("type") {
            None => urn_type,
            Some(t) => {
                let raw = t.expect(Value::as_str, "must be a job type string")?;
                Some(
                    JobType::parse(raw)
                        .map_err(|e| e.with_path("$.type"))?
                        .as_str()
                        .to_owned(),
                )
            }
        };
        let version = match f.get("version").map(|v| v.value()) {
            None => urn_version,
            Some(v @ Value::Number(_)) if v.as_u64().is_some() => Some(v.clone()),
            Some(Value::String(v)) if !v.trim().is_empty() && v.len() <= 64 => {
                Some(Value::String(v.clone()))
            }
            Some(_) => {
                return Err(OjsError::invalid_request(
                    "version must be a non-negative integer or a non-empty string",
                )
                .with_path("$.version"))
            }
        };
        let description = f.string("description")?;
        let schema = match f.present("schema")? {
            s @ (Value::Object(_) | Value::Bool(_)) => s.clone(),
            _ => {
                return Err(f.refuse(
                    "schema",
                    "must be a JSON Schema document (an object or a boolean)",
                ))
            }
        };
        check_schema(&schema)?;
        Ok(Self {
            uri,
            job_type,
            version,
            description,
            schema,
        })
    }

    /// Rebuilds a registration from its stored JSON (written by [`SchemaDoc::to_json`]).
    pub fn from_stored(doc: Value) -> Result<Self, OjsError> {
        let Value::Object(mut doc) = doc else {
            return Err(OjsError::invalid_request("stored schema is not an object"));
        };
        let string = |doc: &mut Map<String, Value>, key: &str| match doc.remove(key) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        Ok(Self {
            uri: string(&mut doc, "uri")
                .ok_or_else(|| OjsError::invalid_request("stored schema without uri"))?,
            job_type: string(&mut doc, "type"),
            version: doc.remove("version").filter(|v| !v.is_null()),
            description: string(&mut doc, "description"),
            schema: doc
                .remove("schema")
                .ok_or_else(|| OjsError::invalid_request("stored schema without document"))?,
        })
    }

    /// The registration without the document: `uri`, `type`, `version`, `description`.
    fn fields(&self) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("uri".into(), self.uri.clone().into());
        if let Some(t) = &self.job_type {
            out.insert("type".into(), t.clone().into());
        }
        if let Some(v) = &self.version {
            out.insert("version".into(), v.clone());
        }
        if let Some(d) = &self.description {
            out.insert("description".into(), d.clone().into());
        }
        out
    }

    /// The stored form: the registration with its document.
    pub fn to_json(&self) -> Value {
        let mut out = self.fields();
        out.insert("schema".into(), self.schema.clone());
        Value::Object(out)
    }

    /// The listing/registration view (ojs-http-binding.md §15.1, §15.2): no document.
    pub fn summary(&self, created_at: &str) -> Value {
        let mut out = self.fields();
        out.insert("created_at".into(), created_at.into());
        Value::Object(out)
    }

    /// The full view of `GET /ojs/v1/schemas/:uri` (§15.3): with the document.
    pub fn view(&self, created_at: &str) -> Value {
        let mut out = self.fields();
        out.insert("schema".into(), self.schema.clone());
        out.insert("created_at".into(), created_at.into());
        Value::Object(out)
    }

    /// Validates a job's `args` against this registration's document.
    pub fn validate_args(&self, args: &[Value]) -> Result<(), Vec<Violation>> {
        validate_args(&self.schema, args)
    }
}

/// Whether `uri` is acceptable as a schema URI: `scheme:rest` (RFC 3986 scheme, non-empty
/// rest) of printable ASCII without characters URIs never contain, at most
/// [`MAX_URI_LEN`] bytes.
pub fn is_valid_uri(uri: &str) -> bool {
    let Some((scheme, rest)) = uri.split_once(':') else {
        return false;
    };
    let mut sc = scheme.chars();
    uri.len() <= MAX_URI_LEN
        && matches!(sc.next(), Some(c) if c.is_ascii_alphabetic())
        && sc.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && rest.chars().all(|c| {
            c.is_ascii_graphic()
                && !matches!(c, '"' | '<' | '>' | '\\' | '^' | '`' | '{' | '|' | '}')
        })
}

/// `(type, version)` from the recommended form `urn:ojs:schema:{job_type}:v{version}`
/// (an integer version as a number, a dotted one such as `2.0` as a string).
fn parse_ojs_urn(uri: &str) -> (Option<String>, Option<Value>) {
    let Some(rest) = uri.strip_prefix("urn:ojs:schema:") else {
        return (None, None);
    };
    let Some((job_type, version)) = rest.rsplit_once(':') else {
        return (None, None);
    };
    let job_type = JobType::parse(job_type).ok().map(|t| t.as_str().to_owned());
    let version = version
        .strip_prefix('v')
        .and_then(|v| parse_version(v).ok());
    match job_type {
        Some(t) => (Some(t), version),
        None => (None, None),
    }
}

/// Checks that `schema` is a self-contained draft 2020-12 JSON Schema within the size
/// limit. Errors are `invalid_request` with `details.schema_error` (§15.2).
fn check_schema(schema: &Value) -> Result<(), OjsError> {
    let invalid = |detail: String, path: String| {
        let message = "The provided JSON Schema is not valid draft 2020-12.";
        OjsError::invalid_request(message)
            .with_detail("schema_error", truncate(&detail))
            .with_detail(
                "validation_errors",
                json!([{ "path": path, "message": truncate(&detail) }]),
            )
    };
    if schema.to_string().len() > MAX_SCHEMA_BYTES {
        return Err(
            OjsError::invalid_request(format!("schema exceeds {MAX_SCHEMA_BYTES} bytes"))
                .with_path("$.schema"),
        );
    }
    if let Some(dialect) = schema.get("$schema") {
        let ok = dialect
            .as_str()
            .is_some_and(|d| d.strip_suffix('#').unwrap_or(d) == DRAFT_2020_12);
        if !ok {
            return Err(invalid(
                "$schema must reference draft 2020-12".into(),
                "$.schema['$schema']".into(),
            ));
        }
    }
    compile(schema).map(|_| ()).map_err(|e| {
        let path = format!("$.schema{}", json_path(e.instance_path().segments()));
        invalid(e.to_string(), path)
    })
}

/// Compiles a validator that asserts `format`, never fetches remote references, and
/// meta-validates the schema first: draft 2020-12, or, for a document that declares no
/// `$schema` and is valid only under draft 2019-09 (the array form of `items`, a tuple
/// there, which 2020-12 spells `prefixItems`), draft 2019-09. A document without
/// `$schema` names no dialect (JSON Schema core §8.1.1); read as 2020-12 such a document
/// is invalid, so this is the only reading under which it means anything. The error is
/// always the 2020-12 one.
fn compile(schema: &Value) -> Result<Validator, jsonschema::ValidationError<'static>> {
    let build = |draft| {
        jsonschema::options()
            .with_draft(draft)
            .should_validate_formats(true)
            .offline()
            .build(schema)
    };
    build(Draft::Draft202012).or_else(|e| {
        if schema.get("$schema").is_none() {
            build(Draft::Draft201909).map_err(|_| e)
        } else {
            Err(e)
        }
    })
}

/// Validates `args` (the whole array) against `schema`. On failure, returns up to
/// [`MAX_VIOLATIONS`] violations with JSONPaths rooted at `$.args`.
pub fn validate_args(schema: &Value, args: &[Value]) -> Result<(), Vec<Violation>> {
    let validator = compile(schema).map_err(|e| {
        vec![Violation {
            path: "$.schema".into(),
            message: truncate(&format!("the registered schema does not compile: {e}")),
            schema_path: "#".into(),
        }]
    })?;
    let instance = Value::Array(args.to_vec());
    let violations: Vec<Violation> = validator
        .iter_errors(&instance)
        .take(MAX_VIOLATIONS)
        .map(|e| Violation {
            path: format!("$.args{}", json_path(e.instance_path().segments())),
            message: truncate(&e.to_string()),
            schema_path: format!("#{}", e.schema_path().as_str()),
        })
        .collect();
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

/// The `schema_validation` (400) error for `args` failing the schema at `uri`.
pub fn violation_error(uri: &str, violations: &[Violation]) -> OjsError {
    OjsError::new(
        ErrorCode::SchemaValidation,
        format!("job args do not conform to schema {uri}"),
    )
    .with_detail("schema", uri)
    .with_detail(
        "validation_errors",
        Value::Array(violations.iter().map(Violation::to_json).collect()),
    )
}

/// The `schema_validation` (400) error for a job naming a schema that is not registered:
/// the args cannot be validated "against the referenced schema before enqueueing", as
/// ojs-core.md requires of implementations that support schema validation.
pub fn unregistered_error(uri: &str) -> OjsError {
    OjsError::new(
        ErrorCode::SchemaValidation,
        format!("schema {uri} is not registered; register it with POST /ojs/v1/schemas first"),
    )
    .with_detail("schema", uri)
    .with_path("$.schema")
}

/// JSONPath suffix of an instance location: `[0].to`, `['odd key']`.
fn json_path<'a>(segments: impl Iterator<Item = LocationSegment<'a>>) -> String {
    let mut out = String::new();
    for segment in segments {
        match segment {
            LocationSegment::Index(i) => out.push_str(&format!("[{i}]")),
            LocationSegment::Property(p) => {
                let mut chars = p.chars();
                let plain = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                    && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
                if plain {
                    out.push('.');
                    out.push_str(&p);
                } else {
                    out.push_str("['");
                    out.push_str(&p.replace('\\', "\\\\").replace('\'', "\\'"));
                    out.push_str("']");
                }
            }
        }
    }
    out
}

fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_LEN {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE_LEN;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// Most dot-separated parts of a registry version (`major.minor.patch`).
const MAX_VERSION_PARTS: usize = 3;

/// Parses a version of the versioned registry (ojs-job-versioning.md §5.1 `2.0`,
/// ojs-schema-registry.md §6.1 `2.0.0`, the suite's `1`): one to three dot-separated
/// decimal numbers without leading zeros. A single number is a JSON number (as the job
/// envelope's `"version": 3` carries it), a dotted version a string.
pub fn parse_version(raw: &str) -> Result<Value, OjsError> {
    let parts: Vec<&str> = raw.split('.').collect();
    let numeric = |p: &&str| {
        !p.is_empty()
            && p.len() <= 9
            && p.bytes().all(|b| b.is_ascii_digit())
            && (*p == "0" || !p.starts_with('0'))
    };
    if parts.len() > MAX_VERSION_PARTS || !parts.iter().all(numeric) {
        return Err(OjsError::invalid_request(format!(
            "a schema version is 1 to {MAX_VERSION_PARTS} dot-separated numbers without leading zeros (1, 2.0, 1.4.2), got {:?}",
            truncate(raw)
        ))
        .with_path("$.version"));
    }
    Ok(match parts.as_slice() {
        [one] => Value::from(one.parse::<u64>().unwrap_or_default()),
        _ => Value::String(raw.to_owned()),
    })
}

/// The version a job's envelope carries in `version` (ojs-job-versioning.md §5.2, kept in
/// its extension fields), if it is one the registry can hold.
pub fn job_version(extensions: &Map<String, Value>) -> Option<Value> {
    match extensions.get("version")? {
        Value::Number(n) => n.as_u64().map(Value::from),
        Value::String(s) => parse_version(s).ok(),
        _ => None,
    }
}

/// A registry version's precedence: its numbers with trailing zeros dropped, so `2`,
/// `2.0` and `2.0.0` are one version (ojs-schema-registry.md §6.3: SemVer precedence).
pub fn version_precedence(version: &Value) -> Option<Vec<u64>> {
    let text = match version {
        Value::Number(n) => n.as_u64()?.to_string(),
        Value::String(s) => s.clone(),
        _ => return None,
    };
    let mut parts = text
        .split('.')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()?;
    while parts.len() > 1 && parts.last() == Some(&0) {
        parts.pop();
    }
    Some(parts)
}

/// The URI the versioned registry keeps `job_type`'s schema `version` under:
/// `urn:ojs:schema:{job_type}:v{version}`, the form ojs-core.md recommends, with the
/// version at its precedence (`2.0` is kept as `v2`), so each version has one key
/// however it is spelled, and a schema registered with `POST /ojs/v1/schemas` under this
/// URI is the same registration.
pub fn versioned_uri(job_type: &str, version: &Value) -> Option<String> {
    let parts = version_precedence(version)?;
    let text: Vec<String> = parts.iter().map(u64::to_string).collect();
    Some(format!("{}{}", versioned_prefix(job_type), text.join(".")))
}

/// The start every versioned URI of `job_type` shares (a job type has no `:`, so no other
/// type's URIs start with it).
pub fn versioned_prefix(job_type: &str) -> String {
    format!("urn:ojs:schema:{job_type}:v")
}

impl SchemaDoc {
    /// A registration of the versioned registry (`PUT /ojs/v1/admin/schemas/{type}/{version}`):
    /// the body's `schema` (required) and `description` (optional), under the URI of
    /// `(job_type, version)`. The body's own `type` and `version`, when given, must agree
    /// with the path.
    pub fn versioned(job_type: &JobType, version: Value, body: Value) -> Result<Self, OjsError> {
        let Value::Object(mut body) = body else {
            return Err(OjsError::invalid_request(
                "the schema registration must be a JSON object",
            ));
        };
        // ojs-job-versioning.md §6.1 names the document `args_schema`.
        if !body.contains_key("schema") {
            if let Some(doc) = body.remove("args_schema") {
                body.insert("schema".into(), doc);
            }
        }
        if let Some(t) = body.get("type").filter(|t| !t.is_null()) {
            if t.as_str() != Some(job_type.as_str()) {
                return Err(OjsError::invalid_request(format!(
                    "type in the body must be the path's {job_type} when given"
                ))
                .with_path("$.type"));
            }
        }
        if let Some(v) = body.get("version").filter(|v| !v.is_null()) {
            let given = match v {
                Value::String(s) => parse_version(s).ok(),
                other => Some(other.clone()),
            };
            let same = given
                .as_ref()
                .and_then(version_precedence)
                .is_some_and(|p| Some(p) == version_precedence(&version));
            if !same {
                return Err(OjsError::invalid_request(
                    "version in the body must be the path's version when given",
                )
                .with_path("$.version"));
            }
        }
        let uri = versioned_uri(job_type.as_str(), &version).ok_or_else(|| {
            OjsError::invalid_request("the version is not a registry version")
                .with_path("$.version")
        })?;
        body.insert("uri".into(), Value::String(uri));
        body.insert("type".into(), Value::String(job_type.as_str().to_owned()));
        body.insert("version".into(), version);
        Self::from_json(Value::Object(body))
    }

    /// The version this registration holds in the versioned registry of `job_type`: its
    /// URI is that type's versioned URI of its version, and its `type` is `job_type`
    /// (a `POST /ojs/v1/schemas` under another URI, or naming another type, is reachable
    /// by its URI only).
    pub fn registry_version(&self, job_type: &str) -> Option<Vec<u64>> {
        let version = self.version.as_ref()?;
        (self.job_type.as_deref() == Some(job_type)
            && versioned_uri(job_type, version).as_deref() == Some(self.uri.as_str()))
        .then(|| version_precedence(version))
        .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn email_schema() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "array",
            "prefixItems": [
                {"type": "string", "format": "email"},
                {"type": "string", "enum": ["welcome", "password_reset", "invoice"]},
                {"type": "object", "properties": {"locale": {"type": "string"}}}
            ],
            "minItems": 2,
            "maxItems": 3
        })
    }

    fn registration() -> Value {
        json!({"uri": "urn:ojs:schema:email.send:v1", "type": "email.send", "version": 1,
            "schema": email_schema()})
    }

    fn ok<T>(r: Result<T, OjsError>) -> T {
        r.unwrap_or_else(|e| panic!("{e} {:?}", e.details))
    }

    #[test]
    fn the_binding_example_registers() {
        let doc = ok(SchemaDoc::from_json(registration()));
        assert_eq!(doc.uri, "urn:ojs:schema:email.send:v1");
        assert_eq!(doc.job_type.as_deref(), Some("email.send"));
        assert_eq!(doc.version, Some(json!(1)));
        let summary = doc.summary("2026-01-01T00:00:00.000Z");
        assert!(summary.get("schema").is_none());
        assert_eq!(summary["created_at"], "2026-01-01T00:00:00.000Z");
        let view = doc.view("t");
        assert_eq!(view["schema"], email_schema());
        let back = ok(SchemaDoc::from_stored(doc.to_json()));
        assert_eq!(back, doc);
    }

    #[test]
    fn type_and_version_default_from_the_recommended_urn() {
        let doc = ok(SchemaDoc::from_json(
            json!({"uri": "urn:ojs:schema:report.generate:v2", "schema": {"type": "array"}}),
        ));
        assert_eq!(doc.job_type.as_deref(), Some("report.generate"));
        assert_eq!(doc.version, Some(json!(2)));
        let other = ok(SchemaDoc::from_json(
            json!({"uri": "https://example.com/schemas/a.json", "schema": true}),
        ));
        assert_eq!((other.job_type, other.version), (None, None));
    }

    #[test]
    fn bad_registrations_are_rejected() {
        let cases = [
            (json!([1]), None),
            (json!({"schema": {"type": "array"}}), Some("$.uri")),
            (json!({"uri": "", "schema": {}}), Some("$.uri")),
            (json!({"uri": "no-scheme", "schema": {}}), Some("$.uri")),
            (json!({"uri": "urn:has space", "schema": {}}), Some("$.uri")),
            (json!({"uri": 7, "schema": {}}), Some("$.uri")),
            (
                json!({"uri": format!("urn:{}", "x".repeat(MAX_URI_LEN)), "schema": {}}),
                Some("$.uri"),
            ),
            (json!({"uri": "urn:a:b"}), Some("$.schema")),
            (
                json!({"uri": "urn:a:b", "schema": "not a schema"}),
                Some("$.schema"),
            ),
            (
                json!({"uri": "urn:a:b", "schema": [1, 2]}),
                Some("$.schema"),
            ),
            (
                json!({"uri": "urn:a:b", "type": "Bad Type", "schema": {}}),
                Some("$.type"),
            ),
            (
                json!({"uri": "urn:a:b", "version": -1, "schema": {}}),
                Some("$.version"),
            ),
            (
                json!({"uri": "urn:a:b", "version": {}, "schema": {}}),
                Some("$.version"),
            ),
            (
                json!({"uri": "urn:a:b", "description": 3, "schema": {}}),
                Some("$.description"),
            ),
        ];
        for (body, path) in cases {
            let e = match SchemaDoc::from_json(body.clone()) {
                Ok(_) => panic!("accepted {body}"),
                Err(e) => e,
            };
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{body}");
            if let Some(path) = path {
                assert_eq!(e.details["validation_errors"][0]["path"], path, "{body}");
            }
        }
    }

    #[test]
    fn invalid_json_schemas_are_rejected_with_schema_error() {
        for schema in [
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array"}),
            json!({"type": "arrayish"}),
            json!({"type": "array", "minItems": -1}),
            json!({"type": "array", "items": {"type": 5}}),
            json!({"type": "string", "pattern": "(unclosed"}),
            json!({"$ref": "https://example.com/remote.json"}),
        ] {
            let body = json!({"uri": "urn:ojs:schema:x.y:v1", "schema": schema});
            let e = match SchemaDoc::from_json(body) {
                Ok(_) => panic!("accepted {schema}"),
                Err(e) => e,
            };
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{schema}");
            assert!(e.details.contains_key("schema_error"), "{schema}: {e:?}");
        }
        let big =
            json!({"uri": "urn:a:b", "schema": {"description": "x".repeat(MAX_SCHEMA_BYTES)}});
        assert!(SchemaDoc::from_json(big).is_err());
    }

    #[test]
    fn conforming_args_pass() {
        let schema = email_schema();
        for args in [
            json!(["a@example.com", "welcome"]),
            json!(["a@example.com", "invoice", {"locale": "fr"}]),
        ] {
            let Value::Array(args) = args else {
                unreachable!()
            };
            assert_eq!(validate_args(&schema, &args), Ok(()));
        }
        assert_eq!(validate_args(&json!(true), &[json!(1)]), Ok(()));
    }

    #[test]
    fn nonconforming_args_report_paths_and_messages() {
        let schema = email_schema();
        let args = [json!("not-an-email"), json!("hello"), json!({"locale": 5})];
        let errs = match validate_args(&schema, &args) {
            Ok(()) => panic!("accepted"),
            Err(e) => e,
        };
        let paths: Vec<&str> = errs.iter().map(|v| v.path.as_str()).collect();
        assert!(paths.contains(&"$.args[0]"), "{errs:?}");
        assert!(paths.contains(&"$.args[1]"), "{errs:?}");
        assert!(paths.contains(&"$.args[2].locale"), "{errs:?}");
        assert!(errs.iter().all(|v| !v.message.is_empty()));
        assert!(
            errs.iter()
                .any(|v| v.schema_path == "#/prefixItems/0/format"),
            "{errs:?}"
        );

        let too_few = match validate_args(&schema, &[json!("a@example.com")]) {
            Ok(()) => panic!("accepted"),
            Err(e) => e,
        };
        assert_eq!(too_few[0].path, "$.args");

        let odd = json!({"type": "array", "items": {"type": "object",
            "properties": {"a b": {"type": "integer"}}}});
        let errs = match validate_args(&odd, &[json!({"a b": "x"})]) {
            Ok(()) => panic!("accepted"),
            Err(e) => e,
        };
        assert_eq!(errs[0].path, "$.args[0]['a b']");
    }

    #[test]
    fn violations_are_capped() {
        let schema = json!({"type": "array", "items": {"type": "integer"}});
        let args: Vec<Value> = (0..100).map(|i| json!(format!("{i}"))).collect();
        let errs = validate_args(&schema, &args).err().unwrap_or_default();
        assert_eq!(errs.len(), MAX_VIOLATIONS);
    }

    #[test]
    fn errors_carry_the_catalogue_code_and_details() {
        let v = Violation {
            path: "$.args[0]".into(),
            message: "bad".into(),
            schema_path: "#/prefixItems/0/type".into(),
        };
        let e = violation_error("urn:ojs:schema:x:v1", &[v]);
        assert_eq!(e.code, ErrorCode::SchemaValidation);
        assert_eq!(e.code.http_status(), 400);
        assert_eq!(e.details["validation_errors"][0]["path"], "$.args[0]");
        assert_eq!(e.details["schema"], "urn:ojs:schema:x:v1");
        let u = unregistered_error("urn:ojs:schema:x:v1");
        assert_eq!(u.code, ErrorCode::SchemaValidation);
        assert_eq!(u.details["validation_errors"][0]["path"], "$.schema");
    }

    #[test]
    fn registry_versions_parse_order_and_key_by_precedence() {
        assert_eq!(parse_version("1").ok(), Some(json!(1)));
        assert_eq!(parse_version("2.0").ok(), Some(json!("2.0")));
        assert_eq!(parse_version("1.4.2").ok(), Some(json!("1.4.2")));
        assert_eq!(parse_version("0").ok(), Some(json!(0)));
        for bad in [
            "",
            "01",
            "1.",
            ".1",
            "1.2.3.4",
            "v1",
            "1.x",
            "-1",
            "1234567890",
        ] {
            assert!(parse_version(bad).is_err(), "{bad:?}");
        }
        assert_eq!(version_precedence(&json!("2.0.0")), Some(vec![2]));
        assert_eq!(version_precedence(&json!("1.10")), Some(vec![1, 10]));
        assert_eq!(version_precedence(&json!(0)), Some(vec![0]));
        assert!(version_precedence(&json!("1.10")) > version_precedence(&json!("1.9")));
        assert!(version_precedence(&json!(2)) > version_precedence(&json!("1.9.9")));
        assert_eq!(
            versioned_uri("a.b", &json!("2.0")).as_deref(),
            Some("urn:ojs:schema:a.b:v2")
        );
        assert_eq!(
            versioned_uri("a.b", &json!("1.1.0")).as_deref(),
            Some("urn:ojs:schema:a.b:v1.1")
        );
        let ext = |v: Value| {
            let mut m = Map::new();
            m.insert("version".into(), v);
            m
        };
        assert_eq!(job_version(&ext(json!(3))), Some(json!(3)));
        assert_eq!(job_version(&ext(json!("2.0"))), Some(json!("2.0")));
        assert_eq!(job_version(&ext(json!("x"))), None);
        assert_eq!(job_version(&Map::new()), None);
    }

    #[test]
    fn a_versioned_registration_is_the_urn_registration() {
        let t = JobType::parse("a.b")
            .map_err(|e| e.message)
            .unwrap_or_else(|m| panic!("{m}"));
        let doc = SchemaDoc::versioned(&t, json!("2.0"), json!({"schema": {"type": "array"}}))
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(doc.uri, "urn:ojs:schema:a.b:v2");
        assert_eq!(doc.registry_version("a.b"), Some(vec![2]));
        assert_eq!(doc.registry_version("a.c"), None);
        let posted = SchemaDoc::from_json(json!({"uri": "urn:ojs:schema:a.b:v2", "schema": {}}))
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(posted.registry_version("a.b"), Some(vec![2]));
        let elsewhere = SchemaDoc::from_json(
            json!({"uri": "https://x.example/a.json", "type": "a.b", "version": 2, "schema": {}}),
        )
        .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(elsewhere.registry_version("a.b"), None);
        for body in [
            json!({}),
            json!({"type": "c.d", "schema": {}}),
            json!({"version": "3", "schema": {}}),
        ] {
            assert!(
                SchemaDoc::versioned(&t, json!(2), body.clone()).is_err(),
                "{body}"
            );
        }
        assert!(
            SchemaDoc::versioned(&t, json!(2), json!({"version": "2.0", "schema": {}})).is_ok()
        );
    }

    #[test]
    fn an_undeclared_dialect_valid_only_as_2019_09_is_read_so() {
        let tuple = json!({"type": "array", "items": [{"type": "string"}, {"type": "integer"}]});
        assert!(check_schema(&tuple).is_ok());
        assert!(validate_args(&tuple, &[json!("a"), json!(1)]).is_ok());
        assert!(validate_args(&tuple, &[json!("a"), json!("b")]).is_err());
        let mut declared = tuple.clone();
        declared["$schema"] = json!(DRAFT_2020_12);
        assert!(check_schema(&declared).is_err());
    }
}
