//! Validated identifiers. Parse at the boundary; everything inside holds these types.

use std::fmt;

use crate::error::OjsError;

/// `as_str` (documented `$doc`) and `Display` for a name held as a validated `String`.
macro_rules! string_newtype {
    ($name:ident, $doc:literal) => {
        impl $name {
            #[doc = $doc]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}
pub(crate) use string_newtype;

/// A job id: a UUIDv7 in lowercase hyphenated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(uuid::Uuid);

impl JobId {
    /// A fresh, time-ordered UUIDv7.
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7())
    }

    /// Parses a client-supplied id: exactly 36 lowercase hex-and-hyphen characters, version 7,
    /// RFC 4122 variant.
    pub fn parse(raw: &str) -> Result<Self, OjsError> {
        let well_formed = raw.len() == 36
            && raw.char_indices().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => c == '-',
                _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
            });
        let uuid = uuid::Uuid::parse_str(raw).ok().filter(|_| well_formed);
        match uuid {
            Some(u) if u.get_version_num() == 7 && u.get_variant() == uuid::Variant::RFC4122 => {
                Ok(Self(u))
            }
            _ => Err(OjsError::invalid_request(format!(
                "id must be a lowercase UUIDv7 (8-4-4-4-12 hex), got {raw:?}"
            ))
            .with_path("$.id")),
        }
    }

    /// The underlying UUID.
    pub fn as_uuid(&self) -> uuid::Uuid {
        self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// A dot-namespaced job type: segments of `[a-z][a-z0-9_-]*`, at most 255 characters.
///
/// The core spec's segment pattern has no hyphen, but the conformance suite's own job
/// types use them (`retry.test.max-attempts`), so hyphens are accepted inside a segment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobType(String);

impl JobType {
    /// Longest accepted type name.
    pub const MAX_LEN: usize = 255;

    /// Validates a job type.
    pub fn parse(raw: &str) -> Result<Self, OjsError> {
        let valid_segment = |s: &str| {
            let mut chars = s.chars();
            matches!(chars.next(), Some('a'..='z'))
                && chars
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        };
        let valid =
            !raw.is_empty() && raw.len() <= Self::MAX_LEN && raw.split('.').all(valid_segment);
        let rule = "be dot-separated segments matching [a-z][a-z0-9_-]*";
        checked_name(raw, valid, "type", rule, Self::MAX_LEN).map(Self)
    }
}

string_newtype!(JobType, "The type as a string.");

/// A queue name: `[a-z0-9][a-z0-9\-.]*`, at most 255 characters (the JSON format's
/// recommendation; `ojs-payload-limits.md` PL-003's 255 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueName(String);

impl QueueName {
    /// Longest accepted queue name.
    pub const MAX_LEN: usize = 255;

    /// The queue used when a job names none.
    pub fn default_queue() -> Self {
        Self("default".to_owned())
    }

    /// Validates a queue name.
    pub fn parse(raw: &str) -> Result<Self, OjsError> {
        let mut chars = raw.chars();
        let valid = matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && raw.len() <= Self::MAX_LEN;
        let rule = "match [a-z0-9][a-z0-9-.]*";
        checked_name(raw, valid, "queue", rule, Self::MAX_LEN).map(Self)
    }
}

string_newtype!(QueueName, "The name as a string.");

/// `raw`, owned, if it is `valid`; else the refusal of the member `field`, which must
/// `rule` and be at most `max` characters long.
fn checked_name(
    raw: &str,
    valid: bool,
    field: &str,
    rule: &str,
    max: usize,
) -> Result<String, OjsError> {
    if !valid {
        return Err(OjsError::invalid_request(format!(
            "{field} must {rule} (max {max} chars), got {raw:?}"
        ))
        .with_path(&format!("$.{field}")));
    }
    Ok(raw.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_id_accepts_lowercase_v7_only() {
        assert!(JobId::parse("019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f").is_ok());
        assert!(JobId::parse("019461A8-1A2B-7C3D-8E4F-5A6B7C8D9E0F").is_err());
        assert!(JobId::parse("550e8400-e29b-41d4-a716-446655440000").is_err());
        assert!(JobId::parse("019461a8-1a2b-7c3d-cE4f-5a6b7c8d9e0f").is_err());
        assert!(JobId::parse("019461a81a2b7c3d8e4f5a6b7c8d9e0f").is_err());
        assert!(JobId::parse("").is_err());
        assert!(JobId::parse("not-a-uuid").is_err());
    }

    #[test]
    fn generated_ids_are_v7_and_round_trip() {
        let id = JobId::generate();
        assert_eq!(JobId::parse(&id.to_string()).ok(), Some(id));
    }

    #[test]
    fn job_type_rules() {
        for ok in [
            "email.send",
            "a",
            "data.etl.transform_2",
            "cleanup.old_data",
        ] {
            assert!(JobType::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Email.Send",
            "email send",
            "1email.send",
            "email@send!",
            "a..b",
            ".a",
            "a.",
        ] {
            assert!(JobType::parse(bad).is_err(), "{bad}");
        }
        assert!(JobType::parse(&"a".repeat(256)).is_err());
    }

    #[test]
    fn queue_rules() {
        for ok in ["default", "conformance-multi-low", "a.b-c", "0queue"] {
            assert!(QueueName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Default", "my_queue!", "-invalid", "my queue", ".a"] {
            assert!(QueueName::parse(bad).is_err(), "{bad}");
        }
        assert!(QueueName::parse(&"q".repeat(255)).is_ok());
        assert!(QueueName::parse(&"q".repeat(256)).is_err());
    }
}
