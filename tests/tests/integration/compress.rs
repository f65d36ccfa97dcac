//! Request bodies in the codings the API decodes (`Content-Encoding: gzip`, `zstd`), for
//! the suites that send them.

use std::io::Write;

/// `data` gzip-compressed.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// `data` as one zstd frame.
pub fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}
