//! Tar archives, both ways: a reader for the artifacts a build stores (the
//! container build context, the package content) and a deterministic ustar
//! writer for image layers.
//!
//! The reader understands what common writers produce: POSIX ustar (with
//! the `prefix` field), GNU long names and long link targets (`L`/`K`
//! entries), PAX extended headers (`path`, `linkpath`, `size`), base-256
//! sizes, hard links (resolved to the earlier file's content) and archives
//! that end without the two zero blocks. Paths are normalized (`./` and
//! trailing `/` removed); an absolute path or one that climbs out with `..`
//! is refused, so nothing in an archive can name a file outside it.
//!
//! The writer produces the same bytes for the same input: the caller adds
//! entries in the order it wants (image layers sort them), every header has
//! mtime 0, empty user and group names, and the uid, gid and mode it is
//! given. Paths longer than ustar's 100 + 155 bytes get a PAX `path` record.
//!
//! The package content tar of package publishing is read with the same
//! reader.

use std::collections::HashMap;
use std::fmt;

/// Size of a tar block.
pub const BLOCK: usize = 512;

/// Largest size an octal ustar size field holds (11 octal digits).
const MAX_OCTAL_SIZE: u64 = 0o777_7777_7777;

/// What an archive entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file (hard links are resolved to files).
    File,
    /// A directory.
    Directory,
    /// A symbolic link to the given target (kept as written).
    Symlink(String),
}

/// One entry of an archive.
#[derive(Clone, PartialEq, Eq)]
pub struct TarEntry {
    /// Normalized relative path, `/`-separated, without `./` or a trailing
    /// `/`.
    pub path: String,
    /// What the entry is.
    pub kind: EntryKind,
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
    /// Content of a file; empty for other kinds.
    pub data: Vec<u8>,
}

impl fmt::Debug for TarEntry {
    /// Shows the size, never the content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TarEntry")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("mode", &format_args!("{:o}", self.mode))
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl TarEntry {
    /// Whether any execute bit is set.
    pub fn is_executable(&self) -> bool {
        self.mode & 0o111 != 0
    }
}

/// Why an archive could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TarError {
    /// The bytes are not a tar archive, or it is cut short.
    #[error("malformed tar archive: {0}")]
    Malformed(String),
    /// An entry names a path outside the archive (absolute, or with `..`).
    #[error("tar entry `{0}` has an unsafe path (absolute or with '..')")]
    UnsafePath(String),
    /// An entry cannot be written as asked.
    #[error("cannot write tar entry `{path}`: {reason}")]
    Unwritable {
        /// The entry.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Reads every entry of an archive, in archive order. Device nodes and
/// FIFOs are skipped; the root entry (`.` or `./`) is skipped.
pub fn read_archive(bytes: &[u8]) -> Result<Vec<TarEntry>, TarError> {
    let mut entries: Vec<TarEntry> = Vec::new();
    let mut files: HashMap<String, usize> = HashMap::new();
    let mut offset = 0usize;
    let mut long_name: Option<String> = None;
    let mut long_link: Option<String> = None;
    let mut pax = PaxOverrides::default();
    while offset < bytes.len() {
        let header = bytes
            .get(offset..offset + BLOCK)
            .ok_or_else(|| TarError::Malformed(format!("truncated header at byte {offset}")))?;
        if header.iter().all(|b| *b == 0) {
            break;
        }
        verify_checksum(header, offset)?;
        let typeflag = header[156];
        let is_extension = matches!(typeflag, b'x' | b'g' | b'L' | b'K');
        let mut size = parse_numeric(&header[124..136])
            .ok_or_else(|| TarError::Malformed(format!("bad size field in the header at byte {offset}")))?;
        if !is_extension && let Some(pax_size) = pax.size.take() {
            size = pax_size;
        }
        let size = usize::try_from(size).map_err(|_| TarError::Malformed("entry too large".to_owned()))?;
        let data_start = offset + BLOCK;
        let data_end = data_start
            .checked_add(size)
            .filter(|end| *end <= bytes.len())
            .ok_or_else(|| TarError::Malformed(format!("entry at byte {offset} is cut short")))?;
        let data = &bytes[data_start..data_end];
        offset = data_start + size.div_ceil(BLOCK) * BLOCK;

        match typeflag {
            b'x' => {
                pax.parse(data)?;
                continue;
            }
            b'g' => continue,
            b'L' => {
                long_name = Some(c_string(data));
                continue;
            }
            b'K' => {
                long_link = Some(c_string(data));
                continue;
            }
            _ => {}
        }

        let raw_name = pax.path.take().or_else(|| long_name.take()).unwrap_or_else(|| {
            let name = c_string(&header[0..100]);
            let prefix = if &header[257..263] == b"ustar\0" {
                c_string(&header[345..500])
            } else {
                String::new()
            };
            if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            }
        });
        let link = pax
            .linkpath
            .take()
            .or_else(|| long_link.take())
            .unwrap_or_else(|| c_string(&header[157..257]));
        let mode = u32::try_from(parse_numeric(&header[100..108]).unwrap_or(0o644) & 0o7777).unwrap_or(0o644);
        let Some(path) = normalize_path(&raw_name)? else {
            continue;
        };
        let entry = match typeflag {
            b'0' | 0 | b'7' => TarEntry {
                path,
                kind: EntryKind::File,
                mode,
                data: data.to_vec(),
            },
            b'5' => TarEntry {
                path,
                kind: EntryKind::Directory,
                mode,
                data: Vec::new(),
            },
            b'2' => TarEntry {
                path,
                kind: EntryKind::Symlink(link),
                mode,
                data: Vec::new(),
            },
            b'1' => {
                let target = normalize_path(&link)?.unwrap_or_default();
                let source = files
                    .get(&target)
                    .and_then(|index| entries.get(*index))
                    .ok_or_else(|| {
                        TarError::Malformed(format!("hard link `{path}` points to `{target}`, not an earlier file"))
                    })?;
                TarEntry {
                    path,
                    kind: EntryKind::File,
                    mode: source.mode,
                    data: source.data.clone(),
                }
            }
            // Character and block devices, FIFOs, and vendor extensions:
            // nothing a build context or a package needs.
            _ => continue,
        };
        if entry.kind == EntryKind::File {
            files.insert(entry.path.clone(), entries.len());
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// PAX values that apply to the next entry.
#[derive(Debug, Default)]
struct PaxOverrides {
    path: Option<String>,
    linkpath: Option<String>,
    size: Option<u64>,
}

impl PaxOverrides {
    /// Parses `"<len> <key>=<value>\n"` records.
    fn parse(&mut self, mut data: &[u8]) -> Result<(), TarError> {
        let bad = || TarError::Malformed("bad PAX extended header".to_owned());
        while !data.is_empty() {
            if data.iter().all(|b| *b == 0) {
                break;
            }
            let space = data.iter().position(|b| *b == b' ').ok_or_else(bad)?;
            let length: usize = std::str::from_utf8(&data[..space])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(bad)?;
            if length <= space + 1 || length > data.len() {
                return Err(bad());
            }
            let record = &data[space + 1..length];
            let record = record.strip_suffix(b"\n").unwrap_or(record);
            let equals = record.iter().position(|b| *b == b'=').ok_or_else(bad)?;
            let key = &record[..equals];
            let value = String::from_utf8_lossy(&record[equals + 1..]).into_owned();
            match key {
                b"path" => self.path = Some(value),
                b"linkpath" => self.linkpath = Some(value),
                b"size" => self.size = Some(value.parse().map_err(|_| bad())?),
                _ => {}
            }
            data = &data[length..];
        }
        Ok(())
    }
}

fn verify_checksum(header: &[u8], offset: usize) -> Result<(), TarError> {
    let stored = parse_numeric(&header[148..156])
        .ok_or_else(|| TarError::Malformed(format!("bad checksum field in the header at byte {offset}")))?;
    let unsigned: u64 = header
        .iter()
        .enumerate()
        .map(|(i, b)| if (148..156).contains(&i) { 32 } else { u64::from(*b) })
        .sum();
    // Some old writers summed signed bytes.
    let signed: i64 = header
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if (148..156).contains(&i) {
                32
            } else {
                i64::from(*b as i8)
            }
        })
        .sum();
    if stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed) {
        Ok(())
    } else {
        Err(TarError::Malformed(format!(
            "header checksum mismatch at byte {offset}: not a tar archive, or a damaged one"
        )))
    }
}

/// An octal field (NUL or space terminated) or a GNU base-256 field.
fn parse_numeric(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut value: u64 = u64::from(field[0] & 0x7f);
        for byte in &field[1..] {
            value = value.checked_mul(256)?.checked_add(u64::from(*byte))?;
        }
        return Some(value);
    }
    let text: String = field
        .iter()
        .map(|b| char::from(*b))
        .skip_while(|c| *c == ' ')
        .take_while(|c| c.is_digit(8))
        .collect();
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(&text, 8).ok()
}

fn c_string(field: &[u8]) -> String {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// Normalizes an archive path: `None` for the root, an error for a path
/// outside the archive.
fn normalize_path(raw: &str) -> Result<Option<String>, TarError> {
    if raw.starts_with('/') {
        return Err(TarError::UnsafePath(raw.to_owned()));
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(TarError::UnsafePath(raw.to_owned())),
            part => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    Ok(Some(parts.join("/")))
}

/// Writes a tar archive with fixed metadata, so the same entries in the
/// same order always give the same bytes.
#[derive(Debug, Default)]
pub struct TarWriter {
    out: Vec<u8>,
}

impl TarWriter {
    /// An empty archive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a directory (`path` without a trailing `/`).
    pub fn directory(&mut self, path: &str, mode: u32, uid: u32, gid: u32) -> Result<(), TarError> {
        self.entry(&format!("{path}/"), b'5', mode, (uid, gid), "", &[])
    }

    /// Adds a regular file.
    pub fn file(&mut self, path: &str, mode: u32, uid: u32, gid: u32, data: &[u8]) -> Result<(), TarError> {
        self.entry(path, b'0', mode, (uid, gid), "", data)
    }

    /// Adds a symbolic link.
    pub fn symlink(&mut self, path: &str, target: &str, uid: u32, gid: u32) -> Result<(), TarError> {
        self.entry(path, b'2', 0o777, (uid, gid), target, &[])
    }

    /// Ends the archive (two zero blocks) and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(&[0u8; BLOCK * 2]);
        self.out
    }

    fn entry(
        &mut self,
        path: &str,
        typeflag: u8,
        mode: u32,
        (uid, gid): (u32, u32),
        link: &str,
        data: &[u8],
    ) -> Result<(), TarError> {
        let unwritable = |reason: &str| TarError::Unwritable {
            path: path.to_owned(),
            reason: reason.to_owned(),
        };
        if path.is_empty() || path.starts_with('/') || path.contains('\0') || link.contains('\0') {
            return Err(unwritable("empty, absolute, or containing NUL"));
        }
        let size = data.len() as u64;
        if size > MAX_OCTAL_SIZE {
            return Err(unwritable("larger than 8 GiB"));
        }
        if uid > 0o777_7777 || gid > 0o777_7777 {
            return Err(unwritable("uid or gid too large"));
        }
        let (name, prefix) = split_ustar_name(path);
        let mut pax = Vec::new();
        if name.is_none() {
            pax_record(&mut pax, "path", path);
        }
        if link.len() > 100 {
            pax_record(&mut pax, "linkpath", link);
        }
        if !pax.is_empty() {
            let short = format!("PaxHeaders/{}", fallback_name(path));
            let header = ustar_header(short.as_bytes(), b"", 0o644, 0, 0, pax.len() as u64, b'x', b"");
            self.out.extend_from_slice(&header);
            self.push_data(&pax);
        }
        let (name, prefix) = match name {
            Some(name) => (name, prefix),
            None => (fallback_name(path).as_bytes().to_vec(), Vec::new()),
        };
        let link_field = if link.len() > 100 {
            &link.as_bytes()[..100]
        } else {
            link.as_bytes()
        };
        let header = ustar_header(&name, &prefix, mode & 0o7777, uid, gid, size, typeflag, link_field);
        self.out.extend_from_slice(&header);
        self.push_data(data);
        Ok(())
    }

    fn push_data(&mut self, data: &[u8]) {
        self.out.extend_from_slice(data);
        let padding = data.len().div_ceil(BLOCK) * BLOCK - data.len();
        self.out.extend(std::iter::repeat_n(0u8, padding));
    }
}

/// Splits a path into ustar `name` (≤ 100 bytes) and `prefix` (≤ 155
/// bytes); `None` when it cannot be split.
fn split_ustar_name(path: &str) -> (Option<Vec<u8>>, Vec<u8>) {
    let bytes = path.as_bytes();
    if bytes.len() <= 100 {
        return (Some(bytes.to_vec()), Vec::new());
    }
    // The name part keeps a trailing '/' of a directory, so split at a '/'
    // before the last byte.
    for (index, byte) in bytes.iter().enumerate().take(bytes.len().saturating_sub(1)) {
        if *byte == b'/' && index <= 155 && bytes.len() - index - 1 <= 100 && index > 0 {
            return (Some(bytes[index + 1..].to_vec()), bytes[..index].to_vec());
        }
    }
    (None, Vec::new())
}

/// A stand-in name for readers without PAX support: the last 99 bytes, cut
/// at a character boundary.
fn fallback_name(path: &str) -> String {
    let mut start = path.len().saturating_sub(99);
    while !path.is_char_boundary(start) {
        start += 1;
    }
    path[start..].to_owned()
}

fn pax_record(out: &mut Vec<u8>, key: &str, value: &str) {
    let base = key.len() + value.len() + 3;
    let mut length = base + 1;
    while length != base + length.to_string().len() {
        length = base + length.to_string().len();
    }
    out.extend_from_slice(format!("{length} {key}={value}\n").as_bytes());
}

#[allow(clippy::too_many_arguments)]
fn ustar_header(
    name: &[u8],
    prefix: &[u8],
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    typeflag: u8,
    link: &[u8],
) -> [u8; BLOCK] {
    let mut header = [0u8; BLOCK];
    let put = |header: &mut [u8; BLOCK], at: usize, value: &[u8]| {
        header[at..at + value.len()].copy_from_slice(value);
    };
    put(&mut header, 0, &name[..name.len().min(100)]);
    put(&mut header, 100, format!("{mode:07o}\0").as_bytes());
    put(&mut header, 108, format!("{uid:07o}\0").as_bytes());
    put(&mut header, 116, format!("{gid:07o}\0").as_bytes());
    put(&mut header, 124, format!("{size:011o}\0").as_bytes());
    put(&mut header, 136, b"00000000000\0");
    put(&mut header, 148, b"        ");
    header[156] = typeflag;
    put(&mut header, 157, &link[..link.len().min(100)]);
    put(&mut header, 257, b"ustar\0");
    put(&mut header, 263, b"00");
    put(&mut header, 329, b"0000000\0");
    put(&mut header, 337, b"0000000\0");
    put(&mut header, 345, &prefix[..prefix.len().min(155)]);
    let checksum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    put(&mut header, 148, format!("{checksum:06o}\0 ").as_bytes());
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_archives_read_back() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        let very_long = "x/".repeat(200) + "file.txt";
        let mut writer = TarWriter::new();
        writer.directory("app", 0o755, 0, 0).unwrap();
        writer.file("app/run.sh", 0o755, 0, 0, b"#!/bin/sh\necho hi\n").unwrap();
        writer.file(&long, 0o644, 1000, 1000, b"long").unwrap();
        writer.file(&very_long, 0o644, 0, 0, &[7u8; 1000]).unwrap();
        writer.symlink("app/link", &"t".repeat(150), 0, 0).unwrap();
        let bytes = writer.finish();
        assert_eq!(bytes.len() % BLOCK, 0);

        let entries = read_archive(&bytes).unwrap();
        let paths: Vec<_> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec!["app", "app/run.sh", long.as_str(), very_long.as_str(), "app/link"]
        );
        assert_eq!(entries[0].kind, EntryKind::Directory);
        assert!(entries[1].is_executable());
        assert_eq!(entries[1].data, b"#!/bin/sh\necho hi\n");
        assert_eq!(entries[3].data.len(), 1000);
        assert_eq!(entries[4].kind, EntryKind::Symlink("t".repeat(150)));
    }

    #[test]
    fn the_same_entries_give_the_same_bytes() {
        let build = || {
            let mut writer = TarWriter::new();
            writer.file("a.txt", 0o644, 0, 0, b"a").unwrap();
            writer.finish()
        };
        assert_eq!(build(), build());
    }

    #[test]
    fn unsafe_and_broken_archives_are_refused() {
        let mut writer = TarWriter::new();
        writer.file("ok/../../etc/passwd", 0o644, 0, 0, b"x").unwrap();
        assert!(matches!(read_archive(&writer.finish()), Err(TarError::UnsafePath(_))));

        let mut writer = TarWriter::new();
        writer.file("a.txt", 0o644, 0, 0, b"hello").unwrap();
        let mut bytes = writer.finish();
        bytes[10] ^= 0x55;
        assert!(matches!(read_archive(&bytes), Err(TarError::Malformed(_))));
        assert!(matches!(read_archive(&[1u8; 100]), Err(TarError::Malformed(_))));
        assert!(read_archive(&[]).unwrap().is_empty());
    }

    #[test]
    fn gnu_tar_archives_are_read() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let long = "n".repeat(130);
        std::fs::create_dir_all(dir.path().join("ctx/sub")).unwrap();
        std::fs::write(dir.path().join("ctx/sub").join(&long), b"long name").unwrap();
        std::fs::write(dir.path().join("ctx/Dockerfile"), b"FROM scratch\n").unwrap();
        for format in ["gnu", "posix", "ustar"] {
            let archive = dir.path().join(format!("{format}.tar"));
            let status = std::process::Command::new("tar")
                .arg(format!("--format={format}"))
                .arg("-cf")
                .arg(&archive)
                .arg("-C")
                .arg(dir.path().join("ctx"))
                .arg(".")
                .stderr(std::process::Stdio::null())
                .status();
            let status = status.expect("GNU tar is needed for this cross-check (scripts/test requires it)");
            if !status.success() {
                // ustar cannot hold the 130-byte file name.
                assert_eq!(format, "ustar");
                continue;
            }
            let entries = read_archive(&std::fs::read(&archive).unwrap()).unwrap();
            let file = entries.iter().find(|e| e.path == format!("sub/{long}")).unwrap();
            assert_eq!(file.data, b"long name", "{format}");
            assert!(entries.iter().any(|e| e.path == "Dockerfile"), "{format}");
            assert!(
                entries
                    .iter()
                    .any(|e| e.path == "sub" && e.kind == EntryKind::Directory)
            );
        }
    }
}
