//! The OJS Protobuf wire format (being written).
