//! DynamoDB's JSON form of items (`{"S": "..."}`, `{"N": "1"}`, ...), as Lambda's stream
//! events carry them, read into SDK attribute values.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use serde_json::Value;

use crate::item::Item;

/// An item (a JSON object of attribute values).
pub(super) fn item_from_json(v: &Value) -> Result<Item, String> {
    let map = v.as_object().ok_or("an image is not an object")?;
    map.iter()
        .map(|(k, v)| Ok((k.clone(), value_from_json(v)?)))
        .collect()
}

fn value_from_json(v: &Value) -> Result<AttributeValue, String> {
    let obj = v.as_object().filter(|o| o.len() == 1);
    let Some((tag, inner)) = obj.and_then(|o| o.iter().next()) else {
        return Err(format!("not a typed attribute value: {v}"));
    };
    let text = || {
        inner
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{tag} is not a string"))
    };
    let list = || {
        inner
            .as_array()
            .ok_or_else(|| format!("{tag} is not an array"))
    };
    let strings = || -> Result<Vec<String>, String> {
        list()?
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{tag} holds a non-string"))
            })
            .collect()
    };
    let blob = |s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map(Blob::new)
            .map_err(|e| format!("{tag}: {e}"))
    };
    Ok(match tag.as_str() {
        "S" => AttributeValue::S(text()?),
        "N" => AttributeValue::N(text()?),
        "B" => AttributeValue::B(blob(&text()?)?),
        "BOOL" => AttributeValue::Bool(inner.as_bool().ok_or("BOOL is not a boolean")?),
        "NULL" => AttributeValue::Null(true),
        "SS" => AttributeValue::Ss(strings()?),
        "NS" => AttributeValue::Ns(strings()?),
        "BS" => AttributeValue::Bs(
            strings()?
                .iter()
                .map(|s| blob(s))
                .collect::<Result<_, _>>()?,
        ),
        "L" => AttributeValue::L(
            list()?
                .iter()
                .map(value_from_json)
                .collect::<Result<_, _>>()?,
        ),
        "M" => AttributeValue::M(
            inner
                .as_object()
                .ok_or("M is not an object")?
                .iter()
                .map(|(k, v)| Ok((k.clone(), value_from_json(v)?)))
                .collect::<Result<HashMap<_, _>, String>>()?,
        ),
        other => return Err(format!("unknown attribute type {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_attribute_type_reads() {
        let item = item_from_json(&json!({
            "s": {"S": "x"}, "n": {"N": "12.5"}, "b": {"B": "AQID"}, "t": {"BOOL": true},
            "z": {"NULL": true}, "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1"]},
            "bs": {"BS": ["AQ=="]}, "l": {"L": [{"S": "y"}, {"N": "2"}]},
            "m": {"M": {"k": {"S": "v"}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(item["s"], AttributeValue::S("x".into()));
        assert_eq!(item["n"], AttributeValue::N("12.5".into()));
        assert_eq!(item["b"], AttributeValue::B(Blob::new(vec![1, 2, 3])));
        assert_eq!(item["t"], AttributeValue::Bool(true));
        assert_eq!(item["z"], AttributeValue::Null(true));
        assert_eq!(item["ss"], AttributeValue::Ss(vec!["a".into(), "b".into()]));
        assert_eq!(item["ns"], AttributeValue::Ns(vec!["1".into()]));
        assert_eq!(item["bs"], AttributeValue::Bs(vec![Blob::new(vec![1])]));
        assert_eq!(
            item["l"],
            AttributeValue::L(vec![
                AttributeValue::S("y".into()),
                AttributeValue::N("2".into())
            ])
        );
        assert_eq!(
            item["m"],
            AttributeValue::M(HashMap::from([("k".into(), AttributeValue::S("v".into()))]))
        );
    }

    #[test]
    fn malformed_values_are_refused() {
        for bad in [
            json!({"a": "plain"}),
            json!({"a": {"S": 1}}),
            json!({"a": {"S": "x", "N": "1"}}),
            json!({"a": {"X": "1"}}),
            json!({"a": {"B": "not base64!"}}),
            json!({"a": {"L": "x"}}),
            json!({"a": {"SS": [1]}}),
            json!([]),
        ] {
            assert!(item_from_json(&bad).is_err(), "{bad}");
        }
    }
}
