//! placeholder
pub mod schema;
