//! The raw Protobuf wire format: enough of it to keep fields the generated types do not
//! know (spec 9.2), to split batches, and to frame length-delimited streams.

use crate::ProtoError;

/// Groups nested deeper than this are rejected (prost's own recursion limit).
const MAX_GROUP_DEPTH: u32 = 100;

/// One top-level field as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawField<'a> {
    /// Field number.
    pub number: u32,
    /// Wire type (0 varint, 1 fixed64, 2 length-delimited, 3 group, 5 fixed32).
    pub wire_type: u8,
    /// The payload: a varint's bytes, fixed bytes, a length-delimited field's content, or
    /// a group's content.
    pub payload: &'a [u8],
    /// The whole field, key included, exactly as encoded.
    pub raw: &'a [u8],
}

/// Reads a varint at the start of `buf`: (value, bytes used).
pub fn read_varint(buf: &[u8]) -> Result<(u64, usize), String> {
    let mut value = 0u64;
    for (i, byte) in buf.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            if i == 9 && *byte > 1 {
                return Err("varint overflows 64 bits".into());
            }
            return Ok((value, i + 1));
        }
    }
    Err(if buf.len() < 10 {
        "truncated varint".into()
    } else {
        "varint longer than 10 bytes".into()
    })
}

/// Appends `value` as a varint.
pub fn write_varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Splits a message into its top-level fields, checking that every field is complete.
pub fn split_fields(buf: &[u8]) -> Result<Vec<RawField<'_>>, String> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let (field, used) = read_field(&buf[at..], 0)?;
        match field {
            Some(f) => fields.push(f),
            None => return Err("end-group tag without a start-group".into()),
        }
        at += used;
    }
    Ok(fields)
}

/// Reads one field; `None` for an end-group tag (whose bytes are counted in `usize`).
fn read_field(buf: &[u8], depth: u32) -> Result<(Option<RawField<'_>>, usize), String> {
    let (key, mut at) = read_varint(buf)?;
    let number = u32::try_from(key >> 3)
        .ok()
        .filter(|n| (1..1 << 29).contains(n))
        .ok_or_else(|| format!("invalid field number {}", key >> 3))?;
    let wire_type = (key & 7) as u8;
    let payload_start;
    let payload_end;
    match wire_type {
        0 => {
            let (_, used) = read_varint(&buf[at..])?;
            payload_start = at;
            at += used;
            payload_end = at;
        }
        1 | 5 => {
            let size = if wire_type == 1 { 8 } else { 4 };
            if buf.len() - at < size {
                return Err(format!("field {number}: truncated fixed-width value"));
            }
            payload_start = at;
            at += size;
            payload_end = at;
        }
        2 => {
            let (len, used) = read_varint(&buf[at..])?;
            at += used;
            let len = usize::try_from(len)
                .ok()
                .filter(|len| *len <= buf.len() - at)
                .ok_or_else(|| format!("field {number}: length {len} runs past the end"))?;
            payload_start = at;
            at += len;
            payload_end = at;
        }
        3 => {
            if depth >= MAX_GROUP_DEPTH {
                return Err("groups nested too deeply".into());
            }
            payload_start = at;
            loop {
                if at >= buf.len() {
                    return Err(format!("field {number}: group without an end"));
                }
                let (inner, used) = read_field(&buf[at..], depth + 1)?;
                match inner {
                    Some(_) => at += used,
                    None => {
                        let (end_key, _) = read_varint(&buf[at..])?;
                        if end_key >> 3 != u64::from(number) {
                            return Err(format!("field {number}: group ends with another number"));
                        }
                        payload_end = at;
                        at += used;
                        break;
                    }
                }
            }
        }
        4 => return Ok((None, at)),
        other => return Err(format!("field {number}: unknown wire type {other}")),
    }
    Ok((
        Some(RawField {
            number,
            wire_type,
            payload: &buf[payload_start..payload_end],
            raw: &buf[..at],
        }),
        at,
    ))
}

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// base64url without padding (RFC 4648 section 5), the JSON format's binary encoding.
pub fn base64url_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(BASE64URL[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// Inverse of [`base64url_encode`]; `None` for anything else (padding included).
pub fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let sextet = |c: u8| BASE64URL.iter().position(|x| *x == c).map(|p| p as u32);
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    for chunk in text.as_bytes().chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= sextet(*c)? << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let keep = chunk.len() - 1;
        // Non-zero trailing bits would let two texts decode to the same bytes.
        if keep < 3 && n & ((1 << (8 * (3 - keep))) - 1) != 0 {
            return None;
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Some(out)
}

/// Splits a stream of varint-length-prefixed messages (the standard Protobuf delimited
/// format) into the messages.
pub fn split_delimited(mut buf: &[u8]) -> Result<Vec<&[u8]>, ProtoError> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let index = out.len();
        let bad = |reason: String| {
            ProtoError::decode("delimited stream", format!("message {index}: {reason}"))
        };
        let (len, used) = read_varint(buf).map_err(bad)?;
        let rest = &buf[used..];
        let len = usize::try_from(len)
            .ok()
            .filter(|len| *len <= rest.len())
            .ok_or_else(|| bad(format!("length {len} runs past the end of the stream")))?;
        out.push(&rest[..len]);
        buf = &rest[len..];
    }
    Ok(out)
}

/// Appends `message` to a delimited stream.
pub fn push_delimited(message: &[u8], out: &mut Vec<u8>) {
    write_varint(message.len() as u64, out);
    out.extend_from_slice(message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_round_trips_and_rejects_non_canonical_text() {
        for len in 0..40u8 {
            let bytes: Vec<u8> = (0..len)
                .map(|i| i.wrapping_mul(37).wrapping_add(200))
                .collect();
            let text = base64url_encode(&bytes);
            assert!(!text.contains('='));
            assert_eq!(base64url_decode(&text), Some(bytes));
        }
        assert_eq!(base64url_encode(b"\xfb\xff"), "-_8");
        assert_eq!(base64url_decode("-_9"), None);
        assert_eq!(base64url_decode("AAA="), None);
        assert_eq!(base64url_decode("A"), None);
        assert_eq!(base64url_decode("A+8"), None);
    }

    #[test]
    fn splits_fields_and_rejects_broken_ones() -> Result<(), String> {
        // field 1 varint 150, field 2 "hi", field 3 group { field 1 varint 1 }, field 4 fixed32
        let buf = [
            0x08, 0x96, 0x01, 0x12, 0x02, b'h', b'i', 0x1b, 0x08, 0x01, 0x1c, 0x25, 1, 2, 3, 4,
        ];
        let fields = split_fields(&buf)?;
        let numbers: Vec<u32> = fields.iter().map(|f| f.number).collect();
        assert_eq!(numbers, [1, 2, 3, 4]);
        assert_eq!(fields[1].payload, b"hi");
        assert_eq!(fields[2].payload, [0x08, 0x01]);
        assert_eq!(fields.iter().map(|f| f.raw.len()).sum::<usize>(), buf.len());
        for bad in [
            &[0x08][..],
            &[0x12, 0x05, b'h'],
            &[0x1b, 0x08, 0x01],
            &[0x1b, 0x24],
            &[0x0c],
            &[0x0e, 0x00],
            &[0x00, 0x00],
            &[0x25, 1, 2],
            &[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ],
        ] {
            assert!(split_fields(bad).is_err(), "{bad:?}");
        }
        Ok(())
    }
}
