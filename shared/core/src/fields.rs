//! A reader of a JSON object's members for the request parsers. Each getter refuses a
//! member of the wrong shape with the error the parsers have always given: the catalogue
//! code, a message naming the member (`"name must be a string"`) and the member's JSON
//! path in `details.validation_errors`. The wording lives here once, so the many parsers
//! (and the conformance suite that pins their messages) cannot drift apart.
//!
//! A member that is absent and one that is `null` read the same: not given.

use serde_json::{Map, Value};

use crate::error::{ErrorCode, OjsError};

/// A request body that must be a JSON object: `"the {what} must be a JSON object"`
/// (no path: the body is the whole of it).
pub fn body(value: Value, what: &str) -> Result<Map<String, Value>, OjsError> {
    match value {
        Value::Object(m) => Ok(m),
        _ => Err(OjsError::invalid_request(format!(
            "the {what} must be a JSON object"
        ))),
    }
}

/// The members of one JSON object, known by the object's path.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
    label: String,
    code: ErrorCode,
}

impl<'a> Fields<'a> {
    /// The members of `map`, the object at `path` (`$` for a whole body). Messages name a
    /// member by its key alone; refusals are `invalid_request`.
    pub fn new(map: &'a Map<String, Value>, path: &str) -> Self {
        Self {
            map,
            path: path.to_owned(),
            label: String::new(),
            code: ErrorCode::InvalidRequest,
        }
    }

    /// Messages name a member `{label}{key}`: `config.` gives `config.timeout_ms`.
    pub fn labelled(mut self, label: &str) -> Self {
        label.clone_into(&mut self.label);
        self
    }

    /// Refusals carry `code` instead.
    pub fn with_code(mut self, code: ErrorCode) -> Self {
        self.code = code;
        self
    }

    /// The object read.
    pub fn map(&self) -> &'a Map<String, Value> {
        self.map
    }

    /// The JSON path of member `key`.
    pub fn path_of(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// The member `key`, unless it is absent or `null`.
    pub fn get(&self, key: &str) -> Option<Field<'a>> {
        self.member(key).filter(|f| !f.value.is_null())
    }

    /// The member `key` as sent, `null` included: for the parsers that refuse a `null`
    /// like any other value of the wrong type.
    pub fn member(&self, key: &str) -> Option<Field<'a>> {
        Some(Field {
            value: self.map.get(key)?,
            path: self.path_of(key),
            name: format!("{}{key}", self.label),
            code: self.code,
        })
    }

    /// The refusal of member `key`: `"{name} {what}"` at its path.
    pub fn refuse(&self, key: &str, what: &str) -> OjsError {
        OjsError::new(self.code, format!("{}{key} {what}", self.label))
            .with_path(&self.path_of(key))
    }

    /// A member that must be given: `"{name} is required"` when it is not.
    pub fn required(&self, key: &str) -> Result<Field<'a>, OjsError> {
        self.get(key).ok_or_else(|| self.refuse(key, "is required"))
    }

    /// The value of member `key` as sent, `null` included: `"{name} is required"` when
    /// the member is absent. For members whose `null` is refused like any other value.
    pub fn present(&self, key: &str) -> Result<&'a Value, OjsError> {
        self.map
            .get(key)
            .ok_or_else(|| self.refuse(key, "is required"))
    }

    /// An optional string.
    pub fn str(&self, key: &str) -> Result<Option<&'a str>, OjsError> {
        self.get(key).map(|f| f.str()).transpose()
    }

    /// An optional string, owned.
    pub fn string(&self, key: &str) -> Result<Option<String>, OjsError> {
        Ok(self.str(key)?.map(str::to_owned))
    }

    /// An optional boolean.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, OjsError> {
        self.get(key).map(|f| f.bool()).transpose()
    }

    /// An optional object.
    pub fn object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, OjsError> {
        self.get(key).map(|f| f.object()).transpose()
    }

    /// An optional integer from `min` to `max`.
    pub fn u64_in(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>, OjsError> {
        self.get(key).map(|f| f.u64_in(min, max)).transpose()
    }

    /// An optional array of strings.
    pub fn strings(&self, key: &str) -> Result<Option<Vec<String>>, OjsError> {
        self.get(key).map(|f| f.strings()).transpose()
    }
}

/// One given (not `null`) member: its value, path and name as messages spell it.
#[derive(Debug, Clone)]
pub struct Field<'a> {
    value: &'a Value,
    path: String,
    name: String,
    code: ErrorCode,
}

impl<'a> Field<'a> {
    /// `value` at `path`, named `name` in messages; refusals are `invalid_request`. For a
    /// member found some other way than [`Fields::get`] (a job's `options` or top level).
    pub fn new(value: &'a Value, path: &str, name: &str) -> Self {
        Self {
            value,
            path: path.to_owned(),
            name: name.to_owned(),
            code: ErrorCode::InvalidRequest,
        }
    }

    /// Refusals carry `code` instead.
    pub fn with_code(mut self, code: ErrorCode) -> Self {
        self.code = code;
        self
    }

    /// The value.
    pub fn value(&self) -> &'a Value {
        self.value
    }

    /// The member's JSON path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The refusal of this member: `"{name} {what}"` at its path.
    pub fn refuse(&self, what: &str) -> OjsError {
        OjsError::new(self.code, format!("{} {what}", self.name)).with_path(&self.path)
    }

    /// The value as `read` takes it; refused with `"{name} {what}"` when it does not.
    pub fn expect<T>(
        &self,
        read: impl FnOnce(&'a Value) -> Option<T>,
        what: &str,
    ) -> Result<T, OjsError> {
        read(self.value).ok_or_else(|| self.refuse(what))
    }

    /// A string.
    pub fn str(&self) -> Result<&'a str, OjsError> {
        self.expect(Value::as_str, "must be a string")
    }

    /// A boolean.
    pub fn bool(&self) -> Result<bool, OjsError> {
        self.expect(Value::as_bool, "must be a boolean")
    }

    /// An object.
    pub fn object(&self) -> Result<&'a Map<String, Value>, OjsError> {
        self.expect(Value::as_object, "must be an object")
    }

    /// An array.
    pub fn array(&self) -> Result<&'a Vec<Value>, OjsError> {
        self.expect(Value::as_array, "must be an array")
    }

    /// An integer from `min` to `max`.
    pub fn u64_in(&self, min: u64, max: u64) -> Result<u64, OjsError> {
        self.value
            .as_u64()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| self.refuse(&format!("must be an integer from {min} to {max}")))
    }

    /// An array of strings.
    pub fn strings(&self) -> Result<Vec<String>, OjsError> {
        self.expect(
            |v| {
                v.as_array()?
                    .iter()
                    .map(|s| s.as_str().map(str::to_owned))
                    .collect()
            },
            "must be an array of strings",
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("a test body is an object"),
        }
    }

    /// The one `validation_errors` entry of `e`: its path and message.
    fn entry(e: &OjsError) -> (String, String) {
        let list = e.details["validation_errors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(list.len(), 1, "{e:?}");
        let path = list[0]["path"].as_str().unwrap_or_default().to_owned();
        assert_eq!(
            list[0]["message"], e.message,
            "the entry repeats the message"
        );
        (path, e.message.clone())
    }

    fn err<T: std::fmt::Debug>(r: Result<T, OjsError>) -> OjsError {
        match r {
            Ok(v) => panic!("accepted as {v:?}"),
            Err(e) => e,
        }
    }

    fn refused(r: Result<impl std::fmt::Debug, OjsError>) -> (ErrorCode, String, String) {
        let e = err(r);
        let (path, message) = entry(&e);
        (e.code, path, message)
    }

    fn invalid(path: &str, message: &str) -> (ErrorCode, String, String) {
        (
            ErrorCode::InvalidRequest,
            path.to_owned(),
            message.to_owned(),
        )
    }

    #[test]
    fn absent_and_null_are_not_given() {
        let m = object(json!({"a": null}));
        let f = Fields::new(&m, "$");
        assert!(f.get("a").is_none());
        assert!(f.get("b").is_none());
        assert_eq!(f.str("a"), Ok(None));
        assert_eq!(f.string("b"), Ok(None));
        assert_eq!(f.bool("a"), Ok(None));
        assert_eq!(f.object("a"), Ok(None));
        assert_eq!(f.u64_in("a", 1, 2), Ok(None));
        assert_eq!(f.strings("a"), Ok(None));
        assert_eq!(refused(f.required("a")), invalid("$.a", "a is required"));
        assert_eq!(refused(f.required("b")), invalid("$.b", "b is required"));
    }

    #[test]
    fn getters_take_their_type() {
        let m = object(json!({
            "s": "x", "b": false, "o": {"k": 1}, "n": 5, "l": ["p", "q"], "e": []
        }));
        let f = Fields::new(&m, "$");
        assert_eq!(f.str("s"), Ok(Some("x")));
        assert_eq!(f.string("s"), Ok(Some("x".to_owned())));
        assert_eq!(f.bool("b"), Ok(Some(false)));
        assert_eq!(f.object("o"), Ok(m["o"].as_object()));
        assert_eq!(f.u64_in("n", 5, 5), Ok(Some(5)));
        assert_eq!(f.u64_in("n", 1, 9), Ok(Some(5)));
        assert_eq!(
            f.strings("l"),
            Ok(Some(vec!["p".to_owned(), "q".to_owned()]))
        );
        assert_eq!(f.strings("e"), Ok(Some(Vec::new())));
        let r = f.required("s").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.value(), r.path()), (&json!("x"), "$.s"));
        assert!(std::ptr::eq(f.map(), &m));
    }

    #[test]
    fn getters_refuse_other_types_by_name_and_path() {
        let m = object(json!({"v": 1.5, "neg": -1, "big": 10, "mixed": ["a", 1]}));
        let f = Fields::new(&m, "$.config").labelled("config.");
        let at_v = |what: &str| invalid("$.config.v", &format!("config.v {what}"));
        for (got, what) in [
            (refused(f.str("v")), "must be a string"),
            (refused(f.string("v")), "must be a string"),
            (refused(f.bool("v")), "must be a boolean"),
            (refused(f.object("v")), "must be an object"),
            (refused(f.strings("v")), "must be an array of strings"),
            (
                refused(f.required("v").and_then(|v| v.array())),
                "must be an array",
            ),
        ] {
            assert_eq!(got, at_v(what));
        }
        assert_eq!(
            refused(f.strings("mixed")),
            invalid("$.config.mixed", "config.mixed must be an array of strings")
        );
        for key in ["v", "neg", "big"] {
            assert_eq!(
                refused(f.u64_in(key, 2, 9)),
                invalid(
                    &format!("$.config.{key}"),
                    &format!("config.{key} must be an integer from 2 to 9")
                )
            );
        }
        // The bounds are inclusive on both ends, and only just.
        assert_eq!(f.u64_in("big", 10, 10), Ok(Some(10)));
        assert!(f.u64_in("big", 11, 20).is_err());
        assert!(f.u64_in("big", 0, 9).is_err());
    }

    #[test]
    fn a_body_must_be_an_object() {
        assert_eq!(body(json!({"a": 1}), "x"), Ok(object(json!({"a": 1}))));
        for v in [json!(null), json!([]), json!("s")] {
            let e = err(body(v, "cron registration"));
            assert_eq!(e.code, ErrorCode::InvalidRequest);
            assert_eq!(e.message, "the cron registration must be a JSON object");
            assert!(e.details.is_empty(), "the body has no path: {e:?}");
        }
    }

    #[test]
    fn member_and_present_keep_a_null() {
        let m = object(json!({"n": null, "s": "x"}));
        let f = Fields::new(&m, "$");
        assert_eq!(f.present("n"), Ok(&Value::Null));
        assert_eq!(f.present("s"), Ok(&json!("x")));
        assert_eq!(refused(f.present("z")), invalid("$.z", "z is required"));
        let n = f.member("n").unwrap_or_else(|| panic!("n is a member"));
        assert_eq!(refused(n.str()), invalid("$.n", "n must be a string"));
        assert!(f.member("z").is_none());
    }

    #[test]
    fn expect_reads_or_refuses_with_its_words() {
        let v = json!(3);
        let f = Field::new(&v, "$.a", "a");
        assert_eq!(f.expect(Value::as_u64, "must be odd"), Ok(3));
        assert_eq!(
            refused(f.expect(Value::as_str, "must be a job type string")),
            invalid("$.a", "a must be a job type string")
        );
        let list = json!(["x"]);
        let l = Field::new(&list, "$.l", "l");
        assert_eq!(l.array(), Ok(&vec![json!("x")]));
    }

    #[test]
    fn the_code_and_label_carry_to_every_refusal() {
        let m = object(json!({"x": "s"}));
        let f = Fields::new(&m, "$.retry")
            .labelled("$.retry.")
            .with_code(ErrorCode::ValidationError);
        let e = err(f.bool("x"));
        assert_eq!(e.code, ErrorCode::ValidationError);
        assert_eq!(
            entry(&e),
            ("$.retry.x".into(), "$.retry.x must be a boolean".into())
        );
        let e = f.refuse("y", "is odd");
        assert_eq!(e.code, ErrorCode::ValidationError);
        assert_eq!(entry(&e), ("$.retry.y".into(), "$.retry.y is odd".into()));
        let x = f.get("x").unwrap_or_else(|| panic!("x is given"));
        let e = err(x.u64_in(0, 1));
        assert_eq!(e.code, ErrorCode::ValidationError);
        // Without a label, a member is named by its key; the path keeps the prefix.
        let plain = Fields::new(&m, "$.options.unique");
        assert_eq!(
            refused(plain.bool("x")),
            invalid("$.options.unique.x", "x must be a boolean")
        );
        assert_eq!(plain.path_of("k"), "$.options.unique.k");
    }

    #[test]
    fn a_field_made_by_hand_is_named_apart_from_its_path() {
        let v = json!(7);
        let f = Field::new(&v, "$.options.metadata", "meta");
        assert_eq!(
            refused(f.object()),
            invalid("$.options.metadata", "meta must be an object")
        );
        assert_eq!(
            refused(f.str()),
            invalid("$.options.metadata", "meta must be a string")
        );
        let e = f.clone().with_code(ErrorCode::Unsupported).refuse("is off");
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert_eq!(entry(&e).1, "meta is off");
        assert_eq!(f.u64_in(7, 7), Ok(7));
        assert_eq!(f.value(), &v);
    }
}
