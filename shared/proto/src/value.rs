//! JSON values <-> `google.protobuf.Value`.
//!
//! `Value` has a single number kind, an IEEE 754 double, so numbers follow the JSON
//! wire format's integer-safety rule (ojs-json-format 4.2 and 13.4): integers in
//! +-(2^53 - 1) travel as exact doubles and come back as JSON integers; integers
//! beyond that range travel (and come back) as decimal strings, the form the JSON
//! format requires for them; other numbers are doubles both ways.

use std::collections::BTreeMap;

use prost_types::value::Kind;
use prost_types::{ListValue, Struct};
use serde_json::{Map, Number, Value};

use crate::ProtoError;

/// 2^53 - 1, the largest integer every JSON reader represents exactly.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A JSON value as a `google.protobuf.Value`. Never fails.
pub fn to_proto(v: &Value) -> prost_types::Value {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => number_to_proto(n),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(to_proto).collect(),
        }),
        Value::Object(fields) => Kind::StructValue(object_to_struct(fields)),
    };
    prost_types::Value { kind: Some(kind) }
}

/// A JSON object as a `google.protobuf.Struct`.
pub fn object_to_struct(fields: &Map<String, Value>) -> Struct {
    Struct {
        fields: fields
            .iter()
            .map(|(k, v)| (k.clone(), to_proto(v)))
            .collect(),
    }
}

fn number_to_proto(n: &Number) -> Kind {
    if let Some(i) = n.as_i64() {
        if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&i) {
            // Exact: |i| < 2^53.
            return Kind::NumberValue(i as f64);
        }
        return Kind::StringValue(i.to_string());
    }
    if n.is_u64() {
        // A u64 that is not an i64 is above 2^63, far beyond the safe range.
        return Kind::StringValue(n.to_string());
    }
    // serde_json holds only finite doubles.
    Kind::NumberValue(n.as_f64().unwrap_or(0.0))
}

/// A `google.protobuf.Value` as JSON; fails on a value with no kind or a NaN/infinite
/// number (JSON has neither). The error's field is relative to this value.
pub fn to_json(v: &prost_types::Value) -> Result<Value, ProtoError> {
    Ok(match &v.kind {
        None => {
            return Err(ProtoError::field(
                "",
                "google.protobuf.Value has no kind set (null must be null_value)",
            ))
        }
        Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(f)) => Value::Number(double_to_json(*f)?),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::ListValue(list)) => Value::Array(
            list.values
                .iter()
                .enumerate()
                .map(|(i, item)| to_json(item).map_err(|e| e.within(&format!("[{i}]"))))
                .collect::<Result<_, _>>()?,
        ),
        Some(Kind::StructValue(s)) => Value::Object(struct_to_object(&s.fields)?),
    })
}

/// A `google.protobuf.Struct`'s fields as a JSON object.
pub fn struct_to_object(
    fields: &BTreeMap<String, prost_types::Value>,
) -> Result<Map<String, Value>, ProtoError> {
    fields
        .iter()
        .map(|(k, v)| Ok((k.clone(), to_json(v).map_err(|e| e.within(k))?)))
        .collect()
}

/// A double as a JSON number: integral values in the safe range become JSON integers
/// (so `3` survives JSON -> proto -> JSON as `3`); `-0.0` stays a double.
pub fn double_to_json(f: f64) -> Result<Number, ProtoError> {
    let safe = MAX_SAFE_INTEGER as f64;
    if f.fract() == 0.0 && f.abs() <= safe && !(f == 0.0 && f.is_sign_negative()) {
        return Ok(Number::from(f as i64));
    }
    Number::from_f64(f)
        .ok_or_else(|| ProtoError::field("", format!("the number {f} has no JSON representation")))
}
