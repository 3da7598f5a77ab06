//! A deterministic gzip writer (RFC 1952), by `flate2`: one member, no file
//! name, modification time 0, operating system "unknown", deflate level 6
//! on flate2's Rust backend (miniz_oxide). ACR Tasks takes its build
//! context as a `.tar.gz`, as `az acr build` uploads it.

use std::io::Write as _;

use flate2::{Compression, GzBuilder};

/// The deflate level: the one zlib calls the default.
const LEVEL: u32 = 6;

/// RFC 1952's "unknown" operating system, so the header does not depend on
/// the machine.
const OS_UNKNOWN: u8 = 255;

/// `bytes` as a gzip stream; the same input always gives the same output.
/// It fails only if the compressor does (writing to memory cannot).
pub fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = GzBuilder::new()
        .mtime(0)
        .operating_system(OS_UNKNOWN)
        .write(Vec::with_capacity(bytes.len() / 2 + 64), Compression::new(LEVEL));
    encoder.write_all(bytes)?;
    encoder.finish()
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use sha2::{Digest, Sha256};

    use super::*;

    fn input() -> Vec<u8> {
        (0..70_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect()
    }

    #[test]
    fn a_gzip_stream_inflates_back_and_carries_its_crc_and_size() {
        let input = input();
        let stream = gzip(&input).unwrap();
        assert_eq!(
            &stream[..10],
            &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255],
            "gzip magic, deflate, no flags, mtime 0, OS unknown"
        );
        let mut inflated = Vec::new();
        flate2::read::GzDecoder::new(stream.as_slice())
            .read_to_end(&mut inflated)
            .unwrap();
        assert_eq!(inflated, input);
        let trailer = &stream[stream.len() - 8..];
        assert_eq!(trailer[..4], crc32fast::hash(&input).to_le_bytes());
        assert_eq!(trailer[4..], (input.len() as u32).to_le_bytes());
        assert_eq!(gzip(&input).unwrap(), stream, "deterministic");
        assert!(stream.len() < input.len(), "compressed");
    }

    /// The bytes bosun's own gzip writer produced before flate2 did: a
    /// context uploaded again after an upgrade is the same blob.
    #[test]
    fn the_stream_is_byte_for_byte_what_earlier_releases_wrote() {
        let digest = Sha256::digest(gzip(&input()).unwrap());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "7a309075397f16108f8503e163f49df0b8ad3218d5498b48b0bcf880769eee82");
    }
}
