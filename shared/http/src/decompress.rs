//! Compressed request bodies (ojs-payload-limits.md §6): a body sent with
//! `Content-Encoding: gzip` or `zstd` is inflated here, before anything parses it, and
//! never past the limit of the route: the size limits apply to the decompressed body
//! (§6.2, PL-010), and a decompression bomb costs at most that much output. An unknown
//! coding is `415 unsupported_compression` (§9.3); a body that is not what its coding
//! says is `400 invalid_payload`; one that inflates past the limit `413
//! envelope_too_large`.

use std::io::Read;

use axum::body::Body;
use axum::http::{header, HeaderMap, Request};
use ojs_core::{ErrorCode, OjsError};
use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

use crate::extract::{declared_length, read_limited};

/// The content codings a request body may have besides `identity`, as the manifest
/// lists them (`limits.supported_compression`).
pub const SUPPORTED_COMPRESSION: [&str; 2] = ["gzip", "zstd"];

/// Largest zstd window a frame may declare. The decoder allocates the window before it
/// produces anything and keeps that much output back while a frame is decoded, so this
/// bounds both. 8 MiB is the window of `zstd -19` on input of unknown size; compressors
/// that know the size (the CLI, one-shot APIs) shrink the window to it.
const MAX_ZSTD_WINDOW: u64 = 8 * 1024 * 1024;

/// A request body's content coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    /// Sent as it is.
    Identity,
    /// RFC 1952 (`gzip`, or its old name `x-gzip`), one member or several.
    Gzip,
    /// RFC 8878 (`zstd`), one frame or several.
    Zstd,
}

impl Coding {
    /// The coding `Content-Encoding` names. None, or only `identity`, is
    /// [`Coding::Identity`]; an unknown coding, or two stacked, is 415.
    pub(crate) fn of(headers: &HeaderMap) -> Result<Self, OjsError> {
        let mut named = Vec::new();
        for value in headers.get_all(header::CONTENT_ENCODING) {
            let value = value
                .to_str()
                .map_err(|_| unsupported("a Content-Encoding that is not ASCII"))?;
            named.extend(
                value
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .filter(|c| !c.is_empty() && c != "identity"),
            );
        }
        match named.as_slice() {
            [] => Ok(Self::Identity),
            [one] => match one.as_str() {
                "gzip" | "x-gzip" => Ok(Self::Gzip),
                "zstd" => Ok(Self::Zstd),
                other => Err(unsupported(&format!("Content-Encoding {other:?}"))),
            },
            _ => Err(unsupported(&format!(
                "Content-Encoding {:?} (one coding at most)",
                named.join(", ")
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        }
    }
}

fn unsupported(what: &str) -> OjsError {
    OjsError::new(
        ErrorCode::UnsupportedCompression,
        format!("{what} is not supported; send gzip, zstd or identity"),
    )
    .with_detail("supported_compression", SUPPORTED_COMPRESSION.to_vec())
}

fn too_large(limit: usize) -> OjsError {
    OjsError::new(
        ErrorCode::EnvelopeTooLarge,
        format!(
            "the request body inflates past {limit} bytes (the limit of the decompressed body)"
        ),
    )
    .with_detail("max_bytes", limit)
}

fn corrupt(coding: Coding, cause: impl std::fmt::Display) -> OjsError {
    OjsError::new(
        ErrorCode::InvalidPayload,
        format!(
            "the request body is not valid {} (its Content-Encoding): {cause}",
            coding.name()
        ),
    )
}

/// `input` decoded from `coding`, refused once its output passes `limit` bytes (the
/// rest is never inflated). An empty body stays empty whatever its coding.
pub(crate) fn decompress(coding: Coding, input: &[u8], limit: usize) -> Result<Vec<u8>, OjsError> {
    if input.is_empty() {
        return Ok(Vec::new());
    }
    match coding {
        Coding::Identity if input.len() > limit => Err(too_large(limit)),
        Coding::Identity => Ok(input.to_vec()),
        Coding::Gzip => gunzip(input, limit),
        Coding::Zstd => unzstd(input, limit),
    }
}

fn gunzip(input: &[u8], limit: usize) -> Result<Vec<u8>, OjsError> {
    let mut out = Vec::new();
    // One byte past the limit tells an oversized body from one of exactly the limit.
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    flate2::read::MultiGzDecoder::new(input)
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(Coding::Gzip, e))?;
    if out.len() > limit {
        return Err(too_large(limit));
    }
    Ok(out)
}

fn unzstd(mut input: &[u8], limit: usize) -> Result<Vec<u8>, OjsError> {
    let bad = |e: FrameDecoderError| corrupt(Coding::Zstd, e);
    let mut decoder = FrameDecoder::new();
    decoder.set_max_window_size(MAX_ZSTD_WINDOW);
    let mut out = Vec::new();
    while !input.is_empty() {
        match decoder.reset(&mut input) {
            Ok(()) => {}
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                length,
                ..
            })) => {
                input = usize::try_from(length)
                    .ok()
                    .and_then(|n| input.get(n..))
                    .ok_or_else(|| corrupt(Coding::Zstd, "a skippable frame runs past the end"))?;
                continue;
            }
            Err(FrameDecoderError::WindowSizeTooBig { requested, max }) => {
                return Err(OjsError::new(
                    ErrorCode::EnvelopeTooLarge,
                    format!(
                        "the zstd frame asks for a {requested}-byte window; the limit is {max} \
                         (compress with a smaller window, e.g. a level up to 19 without --long)"
                    ),
                )
                .with_detail("max_window_bytes", max))
            }
            Err(e) => return Err(bad(e)),
        }
        loop {
            let finished = decoder
                // One block (at most 128 KiB of output) between two checks of the limit.
                .decode_blocks(&mut input, BlockDecodingStrategy::UptoBlocks(1))
                .map_err(bad)?;
            decoder
                .collect_to_writer(&mut out)
                .map_err(|e| corrupt(Coding::Zstd, e))?;
            if out.len() > limit {
                return Err(too_large(limit));
            }
            if finished {
                break;
            }
        }
        if let (Some(sent), Some(computed)) = (
            decoder.get_checksum_from_data(),
            decoder.get_calculated_checksum(),
        ) {
            if sent != computed {
                return Err(corrupt(Coding::Zstd, "content checksum mismatch"));
            }
        }
    }
    Ok(out)
}

/// The most compressed input read for a decoded `limit`: incompressible input packs a
/// little larger than itself (stored gzip blocks, raw zstd blocks: a few bytes per block
/// of 64 or 128 KiB), and 1/64 more covers that. Beyond it the body is refused unread,
/// whatever it would decode to (zstd skippable frames decode to nothing).
fn compressed_limit(limit: usize) -> usize {
    limit.saturating_add(limit / 64)
}

/// The request with its body decoded when `Content-Encoding` names gzip or zstd, and
/// without that header (or `Content-Length`) since the body is no longer what they
/// described. Requests without a coding pass untouched: their body is read, and limited,
/// where it is parsed.
pub(crate) async fn decode_request(
    req: Request<Body>,
    limit: usize,
) -> Result<Request<Body>, OjsError> {
    let coding = Coding::of(req.headers())?;
    if coding == Coding::Identity {
        return Ok(req);
    }
    let (mut parts, body) = req.into_parts();
    let declared = declared_length(&parts.headers);
    let packed = read_limited(body, declared, compressed_limit(limit)).await?;
    let plain = decompress(coding, &packed, limit)?;
    parts.headers.remove(header::CONTENT_ENCODING);
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Request::from_parts(parts, Body::from(plain)))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use axum::http::HeaderValue;

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let _ = enc.write_all(data);
        enc.finish().unwrap_or_default()
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
    }

    /// Text that compresses, of `len` bytes.
    fn text(len: usize) -> Vec<u8> {
        let json = br#"{"type":"email.send","args":["alice@example.com",42,{"k":true}]}"#;
        json.iter().copied().cycle().take(len).collect()
    }

    fn code(r: Result<Vec<u8>, OjsError>) -> Option<ErrorCode> {
        r.err().map(|e| e.code)
    }

    fn headers(values: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::CONTENT_ENCODING, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn content_encoding_names_one_supported_coding() {
        assert_eq!(Coding::of(&headers(&[])), Ok(Coding::Identity));
        assert_eq!(Coding::of(&headers(&["identity"])), Ok(Coding::Identity));
        assert_eq!(Coding::of(&headers(&["gzip"])), Ok(Coding::Gzip));
        assert_eq!(Coding::of(&headers(&["x-gzip"])), Ok(Coding::Gzip));
        assert_eq!(Coding::of(&headers(&[" GZip "])), Ok(Coding::Gzip));
        assert_eq!(Coding::of(&headers(&["zstd"])), Ok(Coding::Zstd));
        assert_eq!(Coding::of(&headers(&["identity, zstd"])), Ok(Coding::Zstd));
        assert_eq!(
            Coding::of(&headers(&["identity", "gzip"])),
            Ok(Coding::Gzip)
        );
        for unknown in [
            &["br"][..],
            &["deflate"],
            &["compress"],
            &["gzip, zstd"],
            &["gzip", "gzip"],
        ] {
            let e = Coding::of(&headers(unknown)).err();
            assert_eq!(
                e.as_ref().map(|e| e.code),
                Some(ErrorCode::UnsupportedCompression),
                "{unknown:?}"
            );
            assert_eq!(e.map(|e| e.code.http_status()), Some(415), "{unknown:?}");
        }
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(b"gz\xffip") {
            h.insert(header::CONTENT_ENCODING, v);
        }
        assert_eq!(
            Coding::of(&h).err().map(|e| e.code),
            Some(ErrorCode::UnsupportedCompression)
        );
    }

    #[test]
    fn gzip_and_zstd_bodies_decode_to_what_was_sent() {
        for len in [1, 1000, 300_000] {
            let plain = text(len);
            assert_eq!(
                decompress(Coding::Gzip, &gzip(&plain), len).ok(),
                Some(plain.clone())
            );
            assert_eq!(
                decompress(Coding::Zstd, &zstd(&plain), len).ok(),
                Some(plain.clone())
            );
            assert_eq!(decompress(Coding::Identity, &plain, len).ok(), Some(plain));
        }
        assert_eq!(decompress(Coding::Gzip, b"", 10).ok(), Some(Vec::new()));
        assert_eq!(decompress(Coding::Zstd, b"", 10).ok(), Some(Vec::new()));
    }

    /// Streams written by the reference tools (zstd 1.5.4, GNU gzip): 100,000 bytes of
    /// text packed with `zstd -19 --check` twice, a skippable frame between the two frames,
    /// and with `gzip -9` twice (`cat a.gz a.gz`); and 29,442 bytes of numbers packed
    /// with `zstd -19 --check`, `zstd -1 --no-check` and a streamed `zstd -3` (2 MiB
    /// window, no content size), one frame after the other, and with `gzip -9`.
    #[test]
    fn streams_of_the_reference_tools_decode() {
        let half = text(100_000);
        let both = [half.clone(), half].concat();
        let zst = include_bytes!("testdata/two-frames.zst");
        assert_eq!(
            decompress(Coding::Zstd, zst, 200_000).ok(),
            Some(both.clone())
        );
        let gz = include_bytes!("testdata/two-members.gz");
        assert_eq!(decompress(Coding::Gzip, gz, 200_000).ok(), Some(both));
        let numbers: String = (0..5000u64)
            .map(|i| format!("{},", i * 7919 % 100_003))
            .collect();
        assert_eq!(numbers.len(), 29_442);
        let thrice = numbers.repeat(3).into_bytes();
        let zst = include_bytes!("testdata/varied-3frames.zst");
        assert_eq!(
            decompress(Coding::Zstd, zst, thrice.len()).ok(),
            Some(thrice)
        );
        let gz = include_bytes!("testdata/varied.gz");
        assert_eq!(
            decompress(Coding::Gzip, gz, numbers.len()).ok(),
            Some(numbers.into_bytes())
        );
    }

    #[test]
    fn output_of_exactly_the_limit_passes_and_one_byte_more_is_413() {
        let plain = text(10_000);
        for (coding, packed) in [(Coding::Gzip, gzip(&plain)), (Coding::Zstd, zstd(&plain))] {
            assert!(decompress(coding, &packed, 10_000).is_ok(), "{coding:?}");
            let over = decompress(coding, &packed, 9_999).err();
            assert_eq!(
                over.as_ref().map(|e| e.code),
                Some(ErrorCode::EnvelopeTooLarge)
            );
            assert_eq!(
                over.and_then(|e| e.details.get("max_bytes").cloned()),
                Some(9_999.into())
            );
        }
        assert_eq!(
            code(decompress(Coding::Identity, &plain, 9_999)),
            Some(ErrorCode::EnvelopeTooLarge)
        );
    }

    /// 50 MB of zeros in fifty gzip members (or zstd frames) of a MB each, about 50 KB,
    /// then bytes that are neither: inflated whole, it would end in a 400 for the tail.
    /// A 413 says decoding stopped at the limit (1 MiB, plus for zstd at most a window).
    /// That the rest was never inflated shows in time spent, measured against the whole
    /// bomb's on the same machine (about 50 times as much work, so at least 5 times as
    /// long however loaded the machine is), not against a clock.
    #[test]
    fn a_bomb_stops_at_the_limit() {
        let mb = vec![0u8; 1_000_000];
        for (coding, member) in [(Coding::Gzip, gzip(&mb)), (Coding::Zstd, zstd(&mb))] {
            let mut bomb = member.repeat(50);
            bomb.extend_from_slice(b"not compressed");
            assert!(bomb.len() < 100_000, "{coding:?}: {}", bomb.len());
            let started = std::time::Instant::now();
            let whole = decompress(coding, &bomb, usize::MAX);
            let whole_took = started.elapsed();
            assert_eq!(code(whole), Some(ErrorCode::InvalidPayload), "{coding:?}");
            let started = std::time::Instant::now();
            let r = decompress(coding, &bomb, 1024 * 1024);
            let limited_took = started.elapsed();
            assert_eq!(code(r), Some(ErrorCode::EnvelopeTooLarge), "{coding:?}");
            assert!(
                limited_took * 5 < whole_took,
                "{coding:?}: stopped at the limit in {limited_took:?}, the whole bomb took {whole_took:?}"
            );
        }
    }

    #[test]
    fn a_zstd_frame_asking_for_a_huge_window_is_refused_before_decoding() {
        // Magic, a descriptor without single segment, content size or checksum, and a
        // window descriptor of 2^(10+20) = 1 GiB: no block follows.
        let frame = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xa0];
        let e = decompress(Coding::Zstd, &frame, 1024).err();
        assert_eq!(
            e.as_ref().map(|e| e.code),
            Some(ErrorCode::EnvelopeTooLarge)
        );
        assert!(e.is_some_and(|e| e.message.contains("window")));
    }

    #[test]
    fn corrupt_bodies_are_400_invalid_payload() {
        let plain = text(5_000);
        let gz = gzip(&plain);
        let zst = zstd(&plain);
        let mut flipped_gz = gz.clone();
        // The CRC-32 of the content (the trailer's first four bytes).
        let at = flipped_gz.len() - 6;
        flipped_gz[at] ^= 0xff;
        let mut flipped_zst = zstd(&plain);
        let mid = flipped_zst.len() / 2;
        flipped_zst[mid] ^= 0xff;
        let cases: [(Coding, Vec<u8>); 10] = [
            (Coding::Gzip, b"{\"type\":\"a\"}".to_vec()),
            (Coding::Gzip, gz[..gz.len() / 2].to_vec()),
            (Coding::Gzip, flipped_gz),
            (Coding::Gzip, [gz.clone(), b"trailing".to_vec()].concat()),
            (Coding::Gzip, zst.clone()),
            (Coding::Zstd, b"{\"type\":\"a\"}".to_vec()),
            (Coding::Zstd, zst[..zst.len() / 2].to_vec()),
            (Coding::Zstd, flipped_zst),
            (Coding::Zstd, [zst.clone(), b"trailing".to_vec()].concat()),
            (Coding::Zstd, gz),
        ];
        for (n, (coding, body)) in cases.into_iter().enumerate() {
            let e = decompress(coding, &body, 1 << 20).err();
            assert_eq!(
                e.as_ref().map(|e| e.code),
                Some(ErrorCode::InvalidPayload),
                "case {n}: {e:?}"
            );
            let name = if coding == Coding::Gzip {
                "gzip"
            } else {
                "zstd"
            };
            assert!(e.is_some_and(|e| e.message.contains(name)), "case {n}");
        }
    }

    #[test]
    fn a_zstd_checksum_that_does_not_match_is_refused() {
        // `zstd --check` of "hello\n": the last four bytes are the checksum.
        let mut frame = include_bytes!("testdata/hello-checked.zst").to_vec();
        assert_eq!(
            decompress(Coding::Zstd, &frame, 100).ok(),
            Some(b"hello\n".to_vec())
        );
        let last = frame.len() - 1;
        frame[last] ^= 0x01;
        let e = decompress(Coding::Zstd, &frame, 100).err();
        assert!(e.is_some_and(|e| e.message.contains("checksum")));
    }

    fn request(coding: Option<&'static str>, body: Vec<u8>) -> Request<Body> {
        let mut req = Request::builder().method("POST").uri("/ojs/v1/jobs");
        if let Some(c) = coding {
            req = req.header(header::CONTENT_ENCODING, c);
        }
        req = req.header(header::CONTENT_LENGTH, body.len());
        req.body(Body::from(body)).unwrap_or_default()
    }

    async fn body_of(req: Request<Body>) -> Vec<u8> {
        axum::body::to_bytes(req.into_body(), usize::MAX)
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_request_is_decoded_and_loses_its_coding_headers() {
        let plain = text(2_000);
        let req = decode_request(request(Some("gzip"), gzip(&plain)), 2_000).await;
        let req = req.unwrap_or_else(|e| panic!("{e}"));
        assert!(req.headers().get(header::CONTENT_ENCODING).is_none());
        assert!(req.headers().get(header::CONTENT_LENGTH).is_none());
        assert_eq!(body_of(req).await, plain);
        // Without a coding, the request is untouched (its body is limited where it is read).
        let req = decode_request(request(None, plain.clone()), 10).await;
        let req = req.unwrap_or_else(|e| panic!("{e}"));
        assert!(req.headers().get(header::CONTENT_LENGTH).is_some());
        assert_eq!(body_of(req).await, plain);
        let req = decode_request(request(Some("br"), plain), 10).await;
        assert_eq!(
            req.err().map(|e| e.code),
            Some(ErrorCode::UnsupportedCompression)
        );
    }

    #[tokio::test]
    async fn incompressible_input_of_the_limit_passes_though_it_packs_larger() {
        // Stored blocks: the packed body is a little larger than the limit.
        const LIMIT: usize = 102_400;
        let mut noise = Vec::with_capacity(LIMIT);
        let mut x: u32 = 0x9e37_79b9;
        for _ in 0..LIMIT {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            noise.push(x.to_le_bytes()[0]);
        }
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
        let _ = enc.write_all(&noise);
        let packed = enc.finish().unwrap_or_default();
        assert!(packed.len() > noise.len());
        let req = decode_request(request(Some("gzip"), packed), LIMIT).await;
        let req = req.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(body_of(req).await, noise);
    }

    #[tokio::test]
    async fn a_packed_body_over_its_share_is_refused_whatever_it_decodes_to() {
        // Twice the limit of skippable frames, then "{}": it would decode to 2 bytes.
        let mut padded = Vec::new();
        for _ in 0..4 {
            padded.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18]);
            padded.extend_from_slice(&50_000u32.to_le_bytes());
            padded.extend(std::iter::repeat_n(0u8, 50_000));
        }
        padded.extend(zstd(b"{}"));
        assert_eq!(
            decompress(Coding::Zstd, &padded, 100_000).ok(),
            Some(b"{}".to_vec())
        );
        let req = decode_request(request(Some("zstd"), padded), 100_000).await;
        assert_eq!(req.err().map(|e| e.code), Some(ErrorCode::EnvelopeTooLarge));
    }
}
