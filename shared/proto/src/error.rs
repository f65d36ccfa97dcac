//! The one error type of the crate.

/// Why a conversion between JSON and the Protobuf wire format failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtoError {
    /// The bytes are not a valid Protobuf encoding of the expected message.
    #[error("invalid protobuf {message}: {reason}")]
    Decode {
        /// The message being decoded, e.g. `JobEnvelope`.
        message: &'static str,
        /// What the decoder found wrong.
        reason: String,
    },
    /// The JSON document does not have the shape the conversion needs.
    #[error("{what} must be {expected}")]
    Shape {
        /// The document or member, e.g. `the job envelope`.
        what: String,
        /// What it must be, e.g. `a JSON object`.
        expected: &'static str,
    },
    /// One field's value cannot be represented in the target format.
    #[error("{field}: {reason}")]
    Field {
        /// Where the field is, e.g. `args[2].price` or `created_at`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ProtoError {
    pub(crate) fn decode(message: &'static str, reason: impl ToString) -> Self {
        Self::Decode {
            message,
            reason: reason.to_string(),
        }
    }

    pub(crate) fn field(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Field {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The same error for item `index` of the list `list` (`jobs[3]: ...`).
    pub(crate) fn in_item(self, list: &str, index: usize) -> Self {
        let item = format!("{list}[{index}]");
        match self {
            Self::Decode { message, reason } => Self::Decode {
                message,
                reason: format!("{item}: {reason}"),
            },
            Self::Shape { what, expected } => Self::Shape {
                what: format!("{item} ({what})"),
                expected,
            },
            field => field.within(&item),
        }
    }

    /// The same error for a field nested under `outer` (`args[1]` + `x` = `args[1].x`).
    pub(crate) fn within(self, outer: &str) -> Self {
        match self {
            Self::Field { field, reason } if field.is_empty() => Self::field(outer, reason),
            Self::Field { field, reason } if field.starts_with('[') => {
                Self::field(format!("{outer}{field}"), reason)
            }
            Self::Field { field, reason } => Self::field(format!("{outer}.{field}"), reason),
            other => other,
        }
    }
}
