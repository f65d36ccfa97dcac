//! DynamoDB item sizes, by the rules of the developer guide ("DynamoDB item sizes and
//! formats", CapacityUnitCalculations.html):
//!
//! - String: UTF-8 bytes of the name + UTF-8 bytes of the value.
//! - Number: name + 1 byte per two significant digits (leading and trailing zeroes
//!   trimmed) + 1 byte.
//! - Binary: name + raw (base64-decoded) bytes.
//! - Null, Boolean: name + 1 byte.
//! - List, Map: name + 3 bytes + the nested elements (a map element counts its key name)
//!   + 1 byte per element.
//! - Sets: name + the sum of the elements' sizes.

use serde_json::{Map, Value};

/// The size in bytes of an item in the JSON wire format (`{"name": {"S": "..."}, ...}`).
pub fn item_size(item: &Map<String, Value>) -> usize {
    item.iter()
        .map(|(name, v)| name.len() + value_size(v))
        .sum()
}

/// The size of one attribute value (without its name).
pub fn value_size(v: &Value) -> usize {
    let Some((kind, inner)) = v.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, str::len),
        "N" => inner.as_str().map_or(0, number_size),
        "B" => inner.as_str().map_or(0, base64_len),
        "BOOL" | "NULL" => 1,
        "SS" => strings(inner).map(str::len).sum(),
        "NS" => strings(inner).map(number_size).sum(),
        "BS" => strings(inner).map(base64_len).sum(),
        "L" => {
            3 + inner
                .as_array()
                .map_or(0, |l| l.iter().map(|e| 1 + value_size(e)).sum())
        }
        "M" => {
            3 + inner.as_object().map_or(0, |m| {
                m.iter().map(|(k, e)| 1 + k.len() + value_size(e)).sum()
            })
        }
        _ => 0,
    }
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

/// 1 byte per two significant digits, plus 1.
pub fn number_size(n: &str) -> usize {
    let mantissa = n
        .trim_start_matches(['-', '+'])
        .split(['e', 'E'])
        .next()
        .unwrap_or("");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.max(1).div_ceil(2) + 1
}

/// The decoded length of a base64 string.
pub fn base64_len(b: &str) -> usize {
    let b = b.trim_end();
    let pad = b.bytes().rev().take_while(|c| *c == b'=').count();
    ((b.len() / 4) * 3
        + match b.len() % 4 {
            2 => 1,
            3 => 2,
            _ => 0,
        })
    .saturating_sub(pad.min(2))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure
mod tests {
    use super::*;
    use serde_json::json;

    fn size(v: Value) -> usize {
        item_size(v.as_object().unwrap())
    }

    #[test]
    fn strings_count_utf8_bytes_of_name_and_value() {
        assert_eq!(size(json!({"name": {"S": "hello"}})), 4 + 5);
        // "é" is two bytes in UTF-8, "€" three.
        assert_eq!(size(json!({"é": {"S": "€"}})), 2 + 3);
        assert_eq!(size(json!({"a": {"S": ""}})), 1);
    }

    #[test]
    fn numbers_take_one_byte_per_two_significant_digits_plus_one() {
        assert_eq!(number_size("123"), 3);
        assert_eq!(number_size("12"), 2);
        assert_eq!(number_size("1"), 2);
        // Leading and trailing zeroes are trimmed.
        assert_eq!(number_size("000120000"), 2);
        assert_eq!(number_size("0.00012"), 2);
        assert_eq!(number_size("-1.5E+10"), 2);
        assert_eq!(number_size("0"), 2);
        // 38 significant digits: 19 bytes + 1.
        assert_eq!(number_size(&"9".repeat(38)), 20);
        assert_eq!(size(json!({"Id": {"N": "123"}})), 2 + 3);
    }

    #[test]
    fn binary_counts_raw_bytes() {
        assert_eq!(base64_len("aGVsbG8="), 5);
        assert_eq!(base64_len("aGVsbG8h"), 6);
        assert_eq!(base64_len("aGk="), 2);
        assert_eq!(base64_len(""), 0);
        assert_eq!(size(json!({"b": {"B": "aGVsbG8="}})), 1 + 5);
    }

    #[test]
    fn null_and_boolean_are_one_byte() {
        assert_eq!(
            size(json!({"flag": {"BOOL": true}, "n": {"NULL": true}})),
            4 + 1 + 1 + 1
        );
    }

    #[test]
    fn lists_and_maps_take_three_bytes_plus_one_per_element() {
        assert_eq!(size(json!({"l": {"L": []}})), 1 + 3);
        assert_eq!(size(json!({"m": {"M": {}}})), 1 + 3);
        // ["ab", "c"]: 3 + (1 + 2) + (1 + 1)
        assert_eq!(
            size(json!({"l": {"L": [{"S": "ab"}, {"S": "c"}]}})),
            1 + 3 + 3 + 2
        );
        // {"k": "v", "kk": 12}: 3 + (1 + 1 + 1) + (1 + 2 + 2)
        assert_eq!(
            size(json!({"m": {"M": {"k": {"S": "v"}, "kk": {"N": "12"}}}})),
            1 + 3 + 3 + 5
        );
    }

    #[test]
    fn sets_sum_their_elements() {
        assert_eq!(size(json!({"ss": {"SS": ["a", "bcd"]}})), 2 + 4);
        assert_eq!(size(json!({"ns": {"NS": ["1", "123"]}})), 2 + 2 + 3);
        assert_eq!(size(json!({"bs": {"BS": ["aGk="]}})), 2 + 2);
    }

    #[test]
    fn a_400_kb_item_is_the_limit() {
        // One string attribute whose name and value fill exactly 400 KB.
        let value = "x".repeat(400 * 1024 - 4);
        assert_eq!(size(json!({"data": {"S": value}})), 400 * 1024);
    }
}
