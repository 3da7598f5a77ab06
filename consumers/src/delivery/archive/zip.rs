//! ZIP archives, the container format of a `.nupkg`.
//!
//! [`ZipWriter`] writes *stored* (uncompressed) entries with a fixed
//! timestamp (1980-01-01 00:00, the earliest a ZIP can say) and no extra
//! fields, so the same entries in the same order always give the same
//! bytes: independent of the machine, the clock, and of any compression
//! library's version. That is what makes a package's SHA-512 a function of
//! its content, which the feed's immutability check relies on. NuGet reads
//! stored entries like deflated ones.
//!
//! The writer stays bosun's own, on purpose: the `zip` crate writes a
//! stored entry as "version needed 1.0" made by Unix 4.5, where bosun has
//! always written 2.0 made by MS-DOS; with it, every package packed again
//! after an upgrade would get another SHA-512, and a feed that already has
//! that version (a retried or replayed publish) would refuse it as a
//! version conflict. The bytes are pinned by a test.
//!
//! [`read_central_directory`] and [`extract`] read ready-made packages
//! (`dotnet pack` output), which are untrusted input, with the `zip` crate:
//! stored and deflated entries (ZIP64 included), CRC-checked, and never
//! more than [`MAX_ENTRY_BYTES`] inflated per entry, whatever the archive
//! declares, against decompression bombs.

use std::fmt;
use std::io::{Cursor, Read as _};

/// Largest entry [`extract`] inflates.
pub const MAX_ENTRY_BYTES: usize = 256 * 1024 * 1024;

/// DOS date of 1980-01-01 (day 1, month 1, year 0).
const DOS_DATE: u16 = (1 << 5) | 1;

const LOCAL_HEADER: u32 = 0x0403_4b50;
const CENTRAL_HEADER: u32 = 0x0201_4b50;
const END_OF_CENTRAL_DIRECTORY: u32 = 0x0605_4b50;

/// Why an archive could not be written or read. Every variant is
/// permanent: the same bytes fail the same way again.
#[derive(Debug, thiserror::Error)]
pub enum ZipError {
    /// Too large: to write as a plain ZIP (4 GiB, 65,535 entries), or an
    /// entry to extract (over [`MAX_ENTRY_BYTES`]).
    #[error("zip archive too large: {0}")]
    TooLarge(String),
    /// Not a ZIP, or a damaged one, as the `zip` crate reads it.
    #[error("malformed zip archive ({what}): {source}")]
    Malformed {
        /// What was being read.
        what: String,
        /// What the reader found.
        #[source]
        source: zip::result::ZipError,
    },
    /// A compression method other than stored or deflate, or encryption.
    #[error("unsupported zip archive ({what}): {source}")]
    Unsupported {
        /// What was being read.
        what: String,
        /// What the reader found.
        #[source]
        source: zip::result::ZipError,
    },
    /// An entry inflates to another size than the archive says.
    #[error("malformed zip archive: `{name}` does not inflate to the {size} bytes its header says")]
    WrongSize {
        /// The entry.
        name: String,
        /// The size its header declares.
        size: u64,
    },
}

impl ZipError {
    /// A reading error of the `zip` crate, by kind.
    fn reading(what: impl Into<String>, source: zip::result::ZipError) -> Self {
        let what = what.into();
        match &source {
            zip::result::ZipError::UnsupportedArchive(_)
            | zip::result::ZipError::CompressionMethodNotSupported(_)
            | zip::result::ZipError::InvalidPassword => Self::Unsupported { what, source },
            // A method it cannot inflate shows when the entry is read.
            zip::result::ZipError::Io(err) if err.kind() == std::io::ErrorKind::Unsupported => {
                Self::Unsupported { what, source }
            }
            _ => Self::Malformed { what, source },
        }
    }
}

/// Writes a ZIP of stored entries, deterministically.
#[derive(Default)]
pub struct ZipWriter {
    out: Vec<u8>,
    central: Vec<u8>,
    entries: usize,
}

impl fmt::Debug for ZipWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZipWriter")
            .field("entries", &self.entries)
            .field("bytes", &self.out.len())
            .finish()
    }
}

impl ZipWriter {
    /// An empty archive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry named `name` (`/`-separated) holding `data`.
    pub fn add(&mut self, name: &str, data: &[u8]) -> Result<(), ZipError> {
        let too_large = |what: &str| ZipError::TooLarge(what.to_owned());
        let offset = u32::try_from(self.out.len()).map_err(|_| too_large("over 4 GiB"))?;
        let size = u32::try_from(data.len()).map_err(|_| too_large("an entry over 4 GiB"))?;
        let name_len = u16::try_from(name.len()).map_err(|_| too_large("an entry name over 64 KiB"))?;
        if self.entries >= usize::from(u16::MAX) {
            return Err(too_large("over 65,535 entries"));
        }
        // Bit 11: the name is UTF-8.
        let flags: u16 = if name.is_ascii() { 0 } else { 0x0800 };
        let crc = crc32fast::hash(data);

        let local = &mut self.out;
        local.extend_from_slice(&LOCAL_HEADER.to_le_bytes());
        local.extend_from_slice(&20u16.to_le_bytes()); // version needed
        local.extend_from_slice(&flags.to_le_bytes());
        local.extend_from_slice(&0u16.to_le_bytes()); // stored
        local.extend_from_slice(&0u16.to_le_bytes()); // time 00:00
        local.extend_from_slice(&DOS_DATE.to_le_bytes());
        local.extend_from_slice(&crc.to_le_bytes());
        local.extend_from_slice(&size.to_le_bytes()); // compressed
        local.extend_from_slice(&size.to_le_bytes()); // uncompressed
        local.extend_from_slice(&name_len.to_le_bytes());
        local.extend_from_slice(&0u16.to_le_bytes()); // extra
        local.extend_from_slice(name.as_bytes());
        local.extend_from_slice(data);

        let central = &mut self.central;
        central.extend_from_slice(&CENTRAL_HEADER.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // made by: MS-DOS, 2.0
        central.extend_from_slice(&20u16.to_le_bytes()); // version needed
        central.extend_from_slice(&flags.to_le_bytes());
        central.extend_from_slice(&0u16.to_le_bytes()); // stored
        central.extend_from_slice(&0u16.to_le_bytes());
        central.extend_from_slice(&DOS_DATE.to_le_bytes());
        central.extend_from_slice(&crc.to_le_bytes());
        central.extend_from_slice(&size.to_le_bytes());
        central.extend_from_slice(&size.to_le_bytes());
        central.extend_from_slice(&name_len.to_le_bytes());
        central.extend_from_slice(&0u16.to_le_bytes()); // extra
        central.extend_from_slice(&0u16.to_le_bytes()); // comment
        central.extend_from_slice(&0u16.to_le_bytes()); // disk
        central.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
        self.entries += 1;
        Ok(())
    }

    /// Writes the central directory and returns the archive.
    pub fn finish(mut self) -> Result<Vec<u8>, ZipError> {
        let too_large = || ZipError::TooLarge("over 4 GiB".to_owned());
        let offset = u32::try_from(self.out.len()).map_err(|_| too_large())?;
        let size = u32::try_from(self.central.len()).map_err(|_| too_large())?;
        let entries = u16::try_from(self.entries).map_err(|_| ZipError::TooLarge("over 65,535 entries".to_owned()))?;
        self.out.extend_from_slice(&self.central);
        self.out.extend_from_slice(&END_OF_CENTRAL_DIRECTORY.to_le_bytes());
        self.out.extend_from_slice(&0u16.to_le_bytes()); // this disk
        self.out.extend_from_slice(&0u16.to_le_bytes()); // central directory disk
        self.out.extend_from_slice(&entries.to_le_bytes());
        self.out.extend_from_slice(&entries.to_le_bytes());
        self.out.extend_from_slice(&size.to_le_bytes());
        self.out.extend_from_slice(&offset.to_le_bytes());
        self.out.extend_from_slice(&0u16.to_le_bytes()); // comment
        u32::try_from(self.out.len()).map_err(|_| too_large())?;
        Ok(self.out)
    }
}

/// One entry of a central directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZipEntry {
    /// The entry's name, as written (UTF-8, invalid bytes replaced).
    pub name: String,
    /// Size of the content, as the archive declares it.
    pub size: u64,
    /// Its place in the central directory.
    index: usize,
}

fn open(bytes: &[u8]) -> Result<zip::ZipArchive<Cursor<&[u8]>>, ZipError> {
    zip::ZipArchive::new(Cursor::new(bytes)).map_err(|err| ZipError::reading("central directory", err))
}

/// Lists the entries of an archive.
pub fn read_central_directory(bytes: &[u8]) -> Result<Vec<ZipEntry>, ZipError> {
    let mut archive = open(bytes)?;
    (0..archive.len())
        .map(|index| {
            let file = archive
                .by_index_raw(index)
                .map_err(|err| ZipError::reading(format!("entry {index}"), err))?;
            Ok(ZipEntry {
                name: String::from_utf8_lossy(file.name_raw()).into_owned(),
                size: file.size(),
                index,
            })
        })
        .collect()
}

/// The content of one entry, inflated and CRC-checked; never more than
/// [`MAX_ENTRY_BYTES`], whatever the archive declares.
pub fn extract(bytes: &[u8], entry: &ZipEntry) -> Result<Vec<u8>, ZipError> {
    let too_large = || ZipError::TooLarge(format!("`{}` is over {MAX_ENTRY_BYTES} bytes", entry.name));
    if entry.size > MAX_ENTRY_BYTES as u64 {
        return Err(too_large());
    }
    let mut archive = open(bytes)?;
    let file = archive
        .by_index(entry.index)
        .map_err(|err| ZipError::reading(format!("`{}`", entry.name), err))?;
    let declared = file.size();
    if declared != entry.size {
        return Err(ZipError::WrongSize {
            name: entry.name.clone(),
            size: entry.size,
        });
    }
    // One byte more than declared tells a lying header without inflating
    // further; the CRC is checked when the entry is read to its end.
    let mut content = Vec::new();
    file.take(declared + 1)
        .read_to_end(&mut content)
        .map_err(|err| ZipError::reading(format!("`{}`", entry.name), err.into()))?;
    if content.len() as u64 != declared {
        return Err(ZipError::WrongSize {
            name: entry.name.clone(),
            size: declared,
        });
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use sha2::{Digest, Sha256};

    use super::*;

    /// A one-entry archive built by hand: `method` 0 (stored) or 8
    /// (deflate), with the CRC and sizes its headers declare.
    fn one_entry(name: &[u8], method: u16, stored: &[u8], crc: u32, declared_size: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        let fields = |b: &mut Vec<u8>| {
            b.extend_from_slice(&method.to_le_bytes());
            b.extend_from_slice(&[0, 0, 0x21, 0]); // time, date
            b.extend_from_slice(&crc.to_le_bytes());
            b.extend_from_slice(&(stored.len() as u32).to_le_bytes());
            b.extend_from_slice(&declared_size.to_le_bytes());
            b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        };
        bytes.extend_from_slice(&LOCAL_HEADER.to_le_bytes());
        bytes.extend_from_slice(&[20, 0, 0, 0]); // version, flags
        fields(&mut bytes);
        bytes.extend_from_slice(&[0, 0]);
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(stored);
        let central_at = bytes.len() as u32;
        bytes.extend_from_slice(&CENTRAL_HEADER.to_le_bytes());
        bytes.extend_from_slice(&[20, 0, 20, 0, 0, 0]); // made by, version, flags
        fields(&mut bytes);
        bytes.extend_from_slice(&[0; 16]); // extra, comment, disk, attributes, offset 0
        bytes.extend_from_slice(name);
        let central_size = bytes.len() as u32 - central_at;
        bytes.extend_from_slice(&END_OF_CENTRAL_DIRECTORY.to_le_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
        bytes.extend_from_slice(&central_size.to_le_bytes());
        bytes.extend_from_slice(&central_at.to_le_bytes());
        bytes.extend_from_slice(&[0, 0]);
        bytes
    }

    fn deflate(content: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
        encoder.write_all(content).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn written_archives_read_back_and_are_deterministic() {
        let build = || {
            let mut writer = ZipWriter::new();
            writer.add("a.txt", b"hello").unwrap();
            writer.add("dir/b.bin", &[0, 1, 2, 255]).unwrap();
            writer.add("empty", b"").unwrap();
            writer.finish().unwrap()
        };
        let bytes = build();
        assert_eq!(bytes, build());
        let entries = read_central_directory(&bytes).unwrap();
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, vec!["a.txt", "dir/b.bin", "empty"]);
        assert_eq!(extract(&bytes, &entries[0]).unwrap(), b"hello");
        assert_eq!(extract(&bytes, &entries[1]).unwrap(), vec![0, 1, 2, 255]);
        assert_eq!(extract(&bytes, &entries[2]).unwrap(), b"");
    }

    /// What earlier releases wrote, byte for byte: a package packed again
    /// must keep its SHA-512, or the feed refuses the version as changed.
    #[test]
    fn written_archives_are_byte_for_byte_what_earlier_releases_wrote() {
        let mut writer = ZipWriter::new();
        writer.add("_rels/.rels", b"<Relationships/>").unwrap();
        writer.add("content/caf\u{e9}.txt", b"hello").unwrap();
        writer.add("empty", b"").unwrap();
        let bytes = writer.finish().unwrap();
        let hex: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "b87f067f7dc5909fa2e57e73c9598ebdafe44f0cdc82c39a58bec8446c6bb334");
        let entries = read_central_directory(&bytes).unwrap();
        assert_eq!(entries[1].name, "content/caf\u{e9}.txt", "a UTF-8 name");
    }

    #[test]
    fn deflated_entries_are_read_and_checked() {
        let content = b"deflate me ".repeat(100);
        let compressed = deflate(&content);
        let crc = crc32fast::hash(&content);
        let bytes = one_entry(b"x.nuspec", 8, &compressed, crc, content.len() as u32);
        let entries = read_central_directory(&bytes).unwrap();
        assert_eq!(entries[0].size, content.len() as u64);
        assert_eq!(extract(&bytes, &entries[0]).unwrap(), content);

        let mut damaged = bytes.clone();
        damaged[30 + 8 + 3] ^= 0xff;
        assert!(extract(&damaged, &read_central_directory(&damaged).unwrap()[0]).is_err());
        let wrong_crc = one_entry(b"x.nuspec", 8, &compressed, crc ^ 1, content.len() as u32);
        assert!(extract(&wrong_crc, &read_central_directory(&wrong_crc).unwrap()[0]).is_err());
    }

    #[test]
    fn a_decompression_bomb_is_stopped_at_its_declared_size_or_the_limit() {
        // 10 MiB of zeros deflates to a few KiB.
        let content = vec![0u8; 10 * 1024 * 1024];
        let compressed = deflate(&content);
        let crc = crc32fast::hash(&content);
        // A header that understates the size: reading stops past it.
        let lying = one_entry(b"bomb.bin", 8, &compressed, crc, 1024);
        let entries = read_central_directory(&lying).unwrap();
        let refused = extract(&lying, &entries[0]);
        assert!(
            matches!(refused, Err(ZipError::WrongSize { .. } | ZipError::Malformed { .. })),
            "{refused:?}"
        );
        // A header that declares more than the limit: nothing is inflated.
        let huge = one_entry(b"bomb.bin", 8, &compressed, crc, (MAX_ENTRY_BYTES + 1) as u32);
        let entries = read_central_directory(&huge).unwrap();
        assert!(matches!(extract(&huge, &entries[0]), Err(ZipError::TooLarge(_))));
    }

    #[test]
    fn other_methods_truncated_archives_and_other_bytes_are_refused() {
        let bzip2 = one_entry(b"x.bin", 12, b"BZh9", 0, 4);
        let entries = read_central_directory(&bzip2).unwrap();
        assert!(matches!(
            extract(&bzip2, &entries[0]),
            Err(ZipError::Unsupported { .. })
        ));

        let mut writer = ZipWriter::new();
        writer.add("a.txt", &[7u8; 1000]).unwrap();
        let bytes = writer.finish().unwrap();
        for cut in [bytes.len() - 1, bytes.len() / 2, 30, 4] {
            let truncated = &bytes[..cut];
            let read = read_central_directory(truncated).and_then(|entries| {
                entries
                    .iter()
                    .map(|e| extract(truncated, e))
                    .collect::<Result<Vec<_>, _>>()
            });
            assert!(read.is_err(), "cut at {cut}");
        }
        assert!(read_central_directory(b"not a zip archive, just text").is_err());
        assert!(read_central_directory(b"").is_err());
    }
}
