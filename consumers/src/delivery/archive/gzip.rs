//! A deterministic gzip writer (RFC 1952): one member, no file name, no
//! modification time, deflate from `miniz_oxide` (already the workspace's
//! inflater for ZIP), the CRC-32 of [`super::zip::crc32`]. ACR Tasks takes
//! its build context as a `.tar.gz`, as `az acr build` uploads it.

use super::zip::crc32;

/// The deflate level: the one zlib calls the default.
const LEVEL: u8 = 6;

/// `bytes` as a gzip stream; the same input always gives the same output.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let deflated = miniz_oxide::deflate::compress_to_vec(bytes, LEVEL);
    let mut out = Vec::with_capacity(deflated.len() + 18);
    // ID1 ID2, CM = deflate, FLG = none, MTIME = 0, XFL = 0, OS = unknown.
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
    out.extend_from_slice(&deflated);
    out.extend_from_slice(&crc32(bytes).to_le_bytes());
    // ISIZE is the input length modulo 2^32 (RFC 1952, 2.3.1).
    out.extend_from_slice(&((bytes.len() & 0xffff_ffff) as u32).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gzip_stream_inflates_back_and_carries_its_crc_and_size() {
        let input: Vec<u8> = (0..70_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let stream = gzip(&input);
        assert_eq!(&stream[..4], &[0x1f, 0x8b, 8, 0], "gzip magic, deflate, no flags");
        let body = &stream[10..stream.len() - 8];
        let inflated = miniz_oxide::inflate::decompress_to_vec(body).unwrap();
        assert_eq!(inflated, input);
        let trailer = &stream[stream.len() - 8..];
        assert_eq!(trailer[..4], crc32(&input).to_le_bytes());
        assert_eq!(trailer[4..], (input.len() as u32).to_le_bytes());
        assert_eq!(gzip(&input), stream, "deterministic");
        assert!(stream.len() < input.len(), "compressed");
    }
}
