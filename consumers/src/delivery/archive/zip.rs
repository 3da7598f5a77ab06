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
//! [`read_central_directory`] and [`extract`] read ready-made packages
//! (`dotnet pack` output): stored and deflated entries, CRC-checked, with
//! a size limit against decompression bombs. ZIP64 archives (over 4 GiB or
//! 65,535 entries) are refused.

use std::fmt;

/// Largest entry [`extract`] inflates.
pub const MAX_ENTRY_BYTES: usize = 256 * 1024 * 1024;

/// DOS date of 1980-01-01 (day 1, month 1, year 0).
const DOS_DATE: u16 = (1 << 5) | 1;

const LOCAL_HEADER: u32 = 0x0403_4b50;
const CENTRAL_HEADER: u32 = 0x0201_4b50;
const END_OF_CENTRAL_DIRECTORY: u32 = 0x0605_4b50;

/// Why an archive could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZipError {
    /// Too large for a plain ZIP (4 GiB, 65,535 entries).
    #[error("zip archive too large: {0}")]
    TooLarge(String),
    /// Not a ZIP, or a damaged one.
    #[error("malformed zip archive: {0}")]
    Malformed(String),
    /// A compression method other than stored or deflate, or ZIP64.
    #[error("unsupported zip archive: {0}")]
    Unsupported(String),
}

/// CRC-32 (IEEE, as ZIP uses it).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc = CRC_TABLE[usize::from((crc as u8) ^ byte)] ^ (crc >> 8);
    }
    !crc
}

const CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
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
        let crc = crc32(data);

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
    /// The entry's name.
    pub name: String,
    /// 0 (stored) or 8 (deflate).
    method: u16,
    crc: u32,
    compressed_size: usize,
    /// Size of the content.
    pub size: usize,
    local_offset: usize,
}

fn u16_at(bytes: &[u8], at: usize) -> Result<u16, ZipError> {
    bytes
        .get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or_else(|| ZipError::Malformed("cut short".to_owned()))
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32, ZipError> {
    bytes
        .get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| ZipError::Malformed("cut short".to_owned()))
}

fn usize_of(value: u32) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// Lists the entries of an archive.
pub fn read_central_directory(bytes: &[u8]) -> Result<Vec<ZipEntry>, ZipError> {
    if bytes.len() < 22 {
        return Err(ZipError::Malformed("too short for a zip archive".to_owned()));
    }
    // The end record is in the last 22 + 65,535 (comment) bytes.
    let earliest = bytes.len().saturating_sub(22 + usize::from(u16::MAX));
    let end = (earliest..=bytes.len() - 22)
        .rev()
        .find(|at| u32_at(bytes, *at).is_ok_and(|sig| sig == END_OF_CENTRAL_DIRECTORY))
        .ok_or_else(|| ZipError::Malformed("no end of central directory: not a zip archive".to_owned()))?;
    let count = usize::from(u16_at(bytes, end + 10)?);
    let size = u32_at(bytes, end + 12)?;
    let offset = u32_at(bytes, end + 16)?;
    if count == usize::from(u16::MAX) || size == u32::MAX || offset == u32::MAX {
        return Err(ZipError::Unsupported("ZIP64 archives are not supported".to_owned()));
    }
    let mut at = usize_of(offset);
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        if u32_at(bytes, at)? != CENTRAL_HEADER {
            return Err(ZipError::Malformed("bad central directory entry".to_owned()));
        }
        let method = u16_at(bytes, at + 10)?;
        let crc = u32_at(bytes, at + 16)?;
        let compressed_size = u32_at(bytes, at + 20)?;
        let size = u32_at(bytes, at + 24)?;
        let name_len = usize::from(u16_at(bytes, at + 28)?);
        let extra_len = usize::from(u16_at(bytes, at + 30)?);
        let comment_len = usize::from(u16_at(bytes, at + 32)?);
        let local_offset = u32_at(bytes, at + 42)?;
        if compressed_size == u32::MAX || size == u32::MAX || local_offset == u32::MAX {
            return Err(ZipError::Unsupported("ZIP64 entries are not supported".to_owned()));
        }
        let name = bytes
            .get(at + 46..at + 46 + name_len)
            .ok_or_else(|| ZipError::Malformed("entry name cut short".to_owned()))?;
        entries.push(ZipEntry {
            name: String::from_utf8_lossy(name).into_owned(),
            method,
            crc,
            compressed_size: usize_of(compressed_size),
            size: usize_of(size),
            local_offset: usize_of(local_offset),
        });
        at += 46 + name_len + extra_len + comment_len;
    }
    Ok(entries)
}

/// The content of one entry, inflated and CRC-checked.
pub fn extract(bytes: &[u8], entry: &ZipEntry) -> Result<Vec<u8>, ZipError> {
    let at = entry.local_offset;
    if u32_at(bytes, at)? != LOCAL_HEADER {
        return Err(ZipError::Malformed(format!("bad local header of `{}`", entry.name)));
    }
    let name_len = usize::from(u16_at(bytes, at + 26)?);
    let extra_len = usize::from(u16_at(bytes, at + 28)?);
    let start = at + 30 + name_len + extra_len;
    let data = start
        .checked_add(entry.compressed_size)
        .and_then(|end| bytes.get(start..end))
        .ok_or_else(|| ZipError::Malformed(format!("`{}` is cut short", entry.name)))?;
    if entry.size > MAX_ENTRY_BYTES {
        return Err(ZipError::TooLarge(format!(
            "`{}` is over {MAX_ENTRY_BYTES} bytes",
            entry.name
        )));
    }
    let content = match entry.method {
        0 => data.to_vec(),
        8 => miniz_oxide::inflate::decompress_to_vec_with_limit(data, entry.size.max(1))
            .map_err(|err| ZipError::Malformed(format!("`{}` does not inflate: {err:?}", entry.name)))?,
        other => {
            return Err(ZipError::Unsupported(format!(
                "`{}` uses compression method {other} (only stored and deflate are read)",
                entry.name
            )));
        }
    };
    if content.len() != entry.size || crc32(&content) != entry.crc {
        return Err(ZipError::Malformed(format!(
            "`{}` fails its size or CRC check",
            entry.name
        )));
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_reference_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
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

    #[test]
    fn deflated_entries_are_read() {
        let content = b"deflate me ".repeat(100);
        let compressed = miniz_oxide::deflate::compress_to_vec(&content, 6);
        // A one-entry archive with a deflated entry, built by hand.
        let mut bytes = Vec::new();
        let name = b"x.nuspec";
        let sizes = |b: &mut Vec<u8>| {
            b.extend_from_slice(&crc32(&content).to_le_bytes());
            b.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
            b.extend_from_slice(&(content.len() as u32).to_le_bytes());
            b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        };
        bytes.extend_from_slice(&LOCAL_HEADER.to_le_bytes());
        bytes.extend_from_slice(&[20, 0, 0, 0, 8, 0, 0, 0, 0x21, 0]);
        sizes(&mut bytes);
        bytes.extend_from_slice(&[0, 0]);
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(&compressed);
        let central_at = bytes.len() as u32;
        bytes.extend_from_slice(&CENTRAL_HEADER.to_le_bytes());
        bytes.extend_from_slice(&[20, 0, 20, 0, 0, 0, 8, 0, 0, 0, 0x21, 0]);
        sizes(&mut bytes);
        bytes.extend_from_slice(&[0; 16]); // extra, comment, disk, attributes, offset 0
        bytes.extend_from_slice(name);
        let central_size = bytes.len() as u32 - central_at;
        bytes.extend_from_slice(&END_OF_CENTRAL_DIRECTORY.to_le_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
        bytes.extend_from_slice(&central_size.to_le_bytes());
        bytes.extend_from_slice(&central_at.to_le_bytes());
        bytes.extend_from_slice(&[0, 0]);

        let entries = read_central_directory(&bytes).unwrap();
        assert_eq!(extract(&bytes, &entries[0]).unwrap(), content);
        let mut damaged = bytes.clone();
        let at = 30 + name.len() + 3;
        damaged[at] ^= 0xff;
        assert!(extract(&damaged, &read_central_directory(&damaged).unwrap()[0]).is_err());
    }

    #[test]
    fn other_bytes_are_not_a_zip() {
        assert!(read_central_directory(b"not a zip archive, just text").is_err());
        assert!(read_central_directory(b"").is_err());
    }
}
