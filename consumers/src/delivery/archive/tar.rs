//! Tar archives, both ways, by the `tar` crate: a reader for the artifacts
//! a build stores (the container build context, the package content),
//! which are untrusted input, and a deterministic ustar writer for image
//! layers.
//!
//! The reader takes what the `tar` crate reads: POSIX ustar (with the
//! `prefix` field), GNU long names and long link targets, PAX extended
//! headers (`path`, `linkpath`, `size`), base-256 numbers, and archives
//! that end without the two zero blocks; a header whose checksum does not
//! match is refused. On top of it, bosun resolves hard links to the earlier
//! file's content, normalizes paths (`./` and trailing `/` removed) and
//! refuses an absolute path or one that climbs out with `..`, so nothing in
//! an archive can name a file outside it; an entry whose data is cut short
//! is refused too. Device nodes, FIFOs and GNU sparse files are skipped.
//!
//! The writer produces the same bytes for the same input: the caller adds
//! entries in the order it wants (image layers sort them), every header is
//! ustar with mtime 0, empty user and group names, device numbers 0, and
//! the uid, gid and mode it is given. A path ustar cannot hold (over 100
//! bytes and not splittable into its 155-byte prefix and 100-byte name)
//! gets a PAX `path` record, and a link target over 100 bytes a PAX
//! `linkpath` record.
//!
//! The package content tar of package publishing is read with the same
//! reader.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read as _};

use tar::{Builder, EntryType, Header};

/// Size of a tar block.
pub const BLOCK: usize = 512;

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

/// Why an archive could not be read or written. Every variant is
/// permanent: the same bytes or entries fail the same way again.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// The bytes are not a tar archive, or a damaged one, as the `tar`
    /// crate reads them (a bad checksum, a header cut short, ...).
    #[error("malformed tar archive: {source}")]
    Malformed {
        /// What the reader found.
        #[source]
        source: io::Error,
    },
    /// An entry's data ends before the size its header says: the archive
    /// is cut short.
    #[error("malformed tar archive: `{path}` is cut short ({read} of {size} bytes)")]
    CutShort {
        /// The entry.
        path: String,
        /// Bytes there.
        read: u64,
        /// Bytes its header says.
        size: u64,
    },
    /// A hard link that does not name an earlier file of the archive.
    #[error("malformed tar archive: hard link `{path}` points to `{target}`, not an earlier file")]
    DanglingHardLink {
        /// The link.
        path: String,
        /// What it names.
        target: String,
    },
    /// An entry names a path outside the archive (absolute, or with `..`).
    #[error("tar entry `{0}` has an unsafe path (absolute or with '..')")]
    UnsafePath(String),
    /// An entry cannot be written as asked.
    #[error("cannot write tar entry `{path}`: {source}")]
    Unwritable {
        /// The entry.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

fn malformed(source: io::Error) -> TarError {
    TarError::Malformed { source }
}

/// Reads every entry of an archive, in archive order. Device nodes, FIFOs
/// and GNU sparse files are skipped; the root entry (`.` or `./`) is
/// skipped.
pub fn read_archive(bytes: &[u8]) -> Result<Vec<TarEntry>, TarError> {
    let mut entries: Vec<TarEntry> = Vec::new();
    let mut files: HashMap<String, usize> = HashMap::new();
    let mut archive = tar::Archive::new(bytes);
    for entry in archive.entries().map_err(malformed)? {
        let mut entry = entry.map_err(malformed)?;
        let header = entry.header();
        let entry_type = header.entry_type();
        if entry_type.is_pax_global_extensions() {
            continue;
        }
        let raw_name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let link = entry
            .link_name_bytes()
            .map(|link| String::from_utf8_lossy(&link).into_owned())
            .unwrap_or_default();
        let mode = header.mode().map_or(0o644, |mode| mode & 0o7777);
        let Some(path) = normalize_path(&raw_name)? else {
            continue;
        };
        let entry = match entry_type {
            EntryType::Regular | EntryType::Continuous => {
                let size = entry.size();
                let mut data = Vec::new();
                entry.read_to_end(&mut data).map_err(malformed)?;
                if data.len() as u64 != size {
                    return Err(TarError::CutShort {
                        path,
                        read: data.len() as u64,
                        size,
                    });
                }
                TarEntry {
                    path,
                    kind: EntryKind::File,
                    mode,
                    data,
                }
            }
            EntryType::Directory => TarEntry {
                path,
                kind: EntryKind::Directory,
                mode,
                data: Vec::new(),
            },
            EntryType::Symlink => TarEntry {
                path,
                kind: EntryKind::Symlink(link),
                mode,
                data: Vec::new(),
            },
            EntryType::Link => {
                let target = normalize_path(&link)?.unwrap_or_default();
                let Some(source) = files.get(&target).and_then(|index| entries.get(*index)) else {
                    return Err(TarError::DanglingHardLink { path, target });
                };
                TarEntry {
                    path,
                    kind: EntryKind::File,
                    mode: source.mode,
                    data: source.data.clone(),
                }
            }
            // Character and block devices, FIFOs, sparse files and vendor
            // extensions: nothing a build context or a package needs.
            _ => continue,
        };
        if entry.kind == EntryKind::File {
            files.insert(entry.path.clone(), entries.len());
        }
        entries.push(entry);
    }
    Ok(entries)
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
pub struct TarWriter {
    builder: Builder<Vec<u8>>,
}

impl fmt::Debug for TarWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TarWriter")
            .field("bytes", &self.builder.get_ref().len())
            .finish()
    }
}

impl Default for TarWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl TarWriter {
    /// An empty archive.
    pub fn new() -> Self {
        Self {
            builder: Builder::new(Vec::new()),
        }
    }

    /// Adds a directory (`path` without a trailing `/`).
    pub fn directory(&mut self, path: &str, mode: u32, uid: u32, gid: u32) -> Result<(), TarError> {
        self.entry(&format!("{path}/"), EntryType::Directory, mode, (uid, gid), None, &[])
    }

    /// Adds a regular file.
    pub fn file(&mut self, path: &str, mode: u32, uid: u32, gid: u32, data: &[u8]) -> Result<(), TarError> {
        self.entry(path, EntryType::Regular, mode, (uid, gid), None, data)
    }

    /// Adds a symbolic link.
    pub fn symlink(&mut self, path: &str, target: &str, uid: u32, gid: u32) -> Result<(), TarError> {
        self.entry(path, EntryType::Symlink, 0o777, (uid, gid), Some(target), &[])
    }

    /// Ends the archive (two zero blocks) and returns its bytes.
    pub fn finish(self) -> Result<Vec<u8>, TarError> {
        self.builder.into_inner().map_err(|source| TarError::Unwritable {
            path: "(the end of the archive)".to_owned(),
            source,
        })
    }

    fn entry(
        &mut self,
        path: &str,
        entry_type: EntryType,
        mode: u32,
        (uid, gid): (u32, u32),
        link: Option<&str>,
        data: &[u8],
    ) -> Result<(), TarError> {
        let unwritable = |source: io::Error| TarError::Unwritable {
            path: path.to_owned(),
            source,
        };
        let invalid = |reason: &str| unwritable(io::Error::new(io::ErrorKind::InvalidInput, reason.to_owned()));
        if path.is_empty() || path.starts_with('/') || path.split('/').any(|part| part == "..") {
            return Err(invalid("a path must be relative and stay inside the archive"));
        }
        if path.contains('\0') || link.is_some_and(|link| link.contains('\0')) {
            return Err(invalid("a path or link target must not contain NUL"));
        }
        // What ustar cannot hold goes in PAX records: the full path or link
        // target there, a stand-in in the header for readers without PAX.
        let path_fits = Header::new_ustar().set_path(path).is_ok();
        let link_fits = link.is_none_or(|link| Header::new_ustar().set_link_name(link).is_ok());
        let mut header = Header::new_ustar();
        header.set_entry_type(entry_type);
        header.set_mode(mode & 0o7777);
        header.set_uid(u64::from(uid));
        header.set_gid(u64::from(gid));
        header.set_mtime(0);
        header.set_size(data.len() as u64);
        header.set_device_major(0).map_err(unwritable)?;
        header.set_device_minor(0).map_err(unwritable)?;
        let mut pax: Vec<(&str, &[u8])> = Vec::new();
        if path_fits {
            header.set_path(path).map_err(unwritable)?;
        } else {
            pax.push(("path", path.as_bytes()));
            header.set_path(fallback_name(path)).map_err(unwritable)?;
        }
        if let Some(link) = link {
            if link_fits {
                header.set_link_name(link).map_err(unwritable)?;
            } else {
                pax.push(("linkpath", link.as_bytes()));
                header.set_link_name(truncated(link, 100)).map_err(unwritable)?;
            }
        }
        if !pax.is_empty() {
            self.builder.append_pax_extensions(pax).map_err(unwritable)?;
        }
        set_checksum(&mut header).map_err(unwritable)?;
        self.builder.append(&header, data).map_err(unwritable)
    }
}

/// Sets the header's checksum as bosun has always written it: six octal
/// digits, NUL, space (GNU tar's form; the `tar` crate writes seven digits
/// and NUL, which readers take alike). Same value, same bytes as earlier
/// releases, so a layer built again keeps its digest.
fn set_checksum(header: &mut Header) -> io::Result<()> {
    header.set_cksum();
    let checksum = header.cksum()?;
    header
        .as_old_mut()
        .cksum
        .copy_from_slice(format!("{checksum:06o}\0 ").as_bytes());
    Ok(())
}

/// A stand-in name for readers without PAX support: the last component of
/// `path`, cut to its last 99 bytes at a character boundary, with the
/// trailing `/` of a directory.
fn fallback_name(path: &str) -> String {
    let (trimmed, slash) = match path.strip_suffix('/') {
        Some(trimmed) => (trimmed, "/"),
        None => (path, ""),
    };
    let last = trimmed.rsplit('/').next().unwrap_or(trimmed);
    let mut start = last.len().saturating_sub(99);
    while !last.is_char_boundary(start) {
        start += 1;
    }
    format!("{}{slash}", &last[start..])
}

/// The first `limit` bytes of `text` at most, cut at a character boundary.
fn truncated(text: &str, limit: usize) -> &str {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    /// A one-entry archive with exactly this name in its header, as a
    /// hostile writer would make it (the writer here refuses such names).
    fn raw_archive(name: &[u8], entry_type: EntryType, link: &[u8], data: &[u8]) -> Vec<u8> {
        let mut header = Header::new_ustar();
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        header.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        header.set_entry_type(entry_type);
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        header.set_cksum();
        let mut builder = Builder::new(Vec::new());
        builder.append(&header, data).unwrap();
        builder.into_inner().unwrap()
    }

    #[test]
    fn written_archives_read_back() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        let very_long = "x/".repeat(200) + "file.txt";
        let long_dir = "y".repeat(130);
        let mut writer = TarWriter::new();
        writer.directory("app", 0o755, 0, 0).unwrap();
        writer.file("app/run.sh", 0o755, 0, 0, b"#!/bin/sh\necho hi\n").unwrap();
        writer.file(&long, 0o644, 1000, 1000, b"long").unwrap();
        writer.file(&very_long, 0o644, 0, 0, &[7u8; 1000]).unwrap();
        writer.symlink("app/link", &"t".repeat(150), 0, 0).unwrap();
        writer.directory(&long_dir, 0o755, 0, 0).unwrap();
        let bytes = writer.finish().unwrap();
        assert_eq!(bytes.len() % BLOCK, 0);

        let entries = read_archive(&bytes).unwrap();
        let paths: Vec<_> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "app",
                "app/run.sh",
                long.as_str(),
                very_long.as_str(),
                "app/link",
                long_dir.as_str()
            ]
        );
        assert_eq!(entries[0].kind, EntryKind::Directory);
        assert!(entries[1].is_executable());
        assert_eq!(entries[1].data, b"#!/bin/sh\necho hi\n");
        assert_eq!(entries[3].data.len(), 1000);
        assert_eq!(entries[4].kind, EntryKind::Symlink("t".repeat(150)));
        assert_eq!(entries[5].kind, EntryKind::Directory);
    }

    #[test]
    fn the_same_entries_give_the_same_bytes() {
        let build = || {
            let mut writer = TarWriter::new();
            writer.file("a.txt", 0o644, 0, 0, b"a").unwrap();
            writer.file(&"p/".repeat(200), 0o644, 0, 0, b"b").unwrap();
            writer.finish().unwrap()
        };
        assert_eq!(build(), build());
    }

    /// What earlier releases wrote, byte for byte, for paths and link
    /// targets that fit ustar: an image built again from the same context
    /// after an upgrade keeps its layer digests.
    #[test]
    fn written_archives_are_byte_for_byte_what_earlier_releases_wrote() {
        let mut writer = TarWriter::new();
        writer.directory("app", 0o755, 0, 0).unwrap();
        writer.file("app/run.sh", 0o755, 0, 0, b"#!/bin/sh\necho hi\n").unwrap();
        writer.file("app/config.json", 0o600, 1000, 1000, b"{}").unwrap();
        writer.symlink("app/link", "run.sh", 0, 0).unwrap();
        writer.file("empty", 0o644, 0, 0, b"").unwrap();
        let bytes = writer.finish().unwrap();
        let hex: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "275441eddf7c88d41267c1b4be62d134eea77e8a3898b1c6deeef9847a3a1468");
    }

    #[test]
    fn unsafe_paths_are_refused_both_ways() {
        for name in [&b"ok/../../etc/passwd"[..], b"/etc/passwd", b".."] {
            let archive = raw_archive(name, EntryType::Regular, b"", b"x");
            assert!(
                matches!(read_archive(&archive), Err(TarError::UnsafePath(_))),
                "{}",
                String::from_utf8_lossy(name)
            );
        }
        // A hard link cannot reach outside either.
        let mut archive = raw_archive(b"a.txt", EntryType::Regular, b"", b"x");
        archive.truncate(archive.len() - 2 * BLOCK);
        archive.extend(raw_archive(b"b.txt", EntryType::Link, b"../a.txt", b""));
        assert!(matches!(read_archive(&archive), Err(TarError::UnsafePath(_))));

        let mut writer = TarWriter::new();
        for path in ["../x", "a/../../x", "/etc/passwd", "", "a\0b"] {
            assert!(
                matches!(writer.file(path, 0o644, 0, 0, b"x"), Err(TarError::Unwritable { .. })),
                "{path:?}"
            );
        }
        assert!(writer.symlink("l", "a\0b", 0, 0).is_err());
        assert!(
            read_archive(&writer.finish().unwrap()).unwrap().is_empty(),
            "nothing was written"
        );
    }

    #[test]
    fn hard_links_are_resolved_to_an_earlier_file_or_refused() {
        let mut archive = raw_archive(b"a.txt", EntryType::Regular, b"", b"content");
        archive.truncate(archive.len() - 2 * BLOCK);
        archive.extend(raw_archive(b"b.txt", EntryType::Link, b"./a.txt", b""));
        let entries = read_archive(&archive).unwrap();
        assert_eq!(entries[1].path, "b.txt");
        assert_eq!(
            (&entries[1].kind, entries[1].data.as_slice()),
            (&EntryKind::File, &b"content"[..])
        );

        let dangling = raw_archive(b"b.txt", EntryType::Link, b"a.txt", b"");
        assert!(matches!(
            read_archive(&dangling),
            Err(TarError::DanglingHardLink { .. })
        ));
    }

    #[test]
    fn broken_truncated_and_oversized_archives_are_refused() {
        let mut writer = TarWriter::new();
        writer.file("a.txt", 0o644, 0, 0, &[7u8; 2000]).unwrap();
        writer.file("b.txt", 0o644, 0, 0, b"hello").unwrap();
        let bytes = writer.finish().unwrap();

        let mut damaged = bytes.clone();
        damaged[10] ^= 0x55;
        assert!(matches!(read_archive(&damaged), Err(TarError::Malformed { .. })));
        // Cut in the first entry's data, in the second header, and in the
        // second entry's data.
        assert!(matches!(
            read_archive(&bytes[..BLOCK + 1000]),
            Err(TarError::CutShort {
                read: 1000,
                size: 2000,
                ..
            })
        ));
        assert!(matches!(
            read_archive(&bytes[..5 * BLOCK + 100]),
            Err(TarError::Malformed { .. })
        ));
        assert!(matches!(
            read_archive(&bytes[..6 * BLOCK + 2]),
            Err(TarError::CutShort { read: 2, size: 5, .. })
        ));
        // An archive without its two zero blocks is whole.
        assert_eq!(read_archive(&bytes[..7 * BLOCK]).unwrap().len(), 2);

        // A header claiming 8 GiB over 10 bytes: refused, nothing that size
        // is allocated.
        let mut oversized = raw_archive(b"big.bin", EntryType::Regular, b"", &[1u8; 10]);
        let mut header = Header::new_ustar();
        header.as_mut_bytes().copy_from_slice(&oversized[..BLOCK]);
        header.set_size(8 << 30);
        header.set_cksum();
        oversized[..BLOCK].copy_from_slice(header.as_bytes());
        assert!(matches!(
            read_archive(&oversized),
            Err(TarError::CutShort { size, .. }) if size == 8 << 30
        ));

        assert!(matches!(read_archive(&[1u8; 100]), Err(TarError::Malformed { .. })));
        assert!(read_archive(&[]).unwrap().is_empty());
    }

    #[test]
    fn gnu_tar_archives_are_read_and_written_ones_are_listed_by_gnu_tar() {
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

        // What the writer makes, GNU tar lists with the full paths.
        let very_long = "x/".repeat(200) + "file.txt";
        let mut writer = TarWriter::new();
        writer.file("short.txt", 0o644, 0, 0, b"a").unwrap();
        writer.file(&very_long, 0o644, 0, 0, b"b").unwrap();
        writer.symlink("link", &"t".repeat(150), 0, 0).unwrap();
        let archive = dir.path().join("written.tar");
        std::fs::write(&archive, writer.finish().unwrap()).unwrap();
        let listing = std::process::Command::new("tar")
            .arg("-tf")
            .arg(&archive)
            .output()
            .unwrap();
        assert!(listing.status.success(), "{}", String::from_utf8_lossy(&listing.stderr));
        let names: Vec<String> = String::from_utf8_lossy(&listing.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(names, ["short.txt", very_long.as_str(), "link"]);
    }
}
