//! NuGet's rules as a NuGet server applies them to a pushed package: the
//! package id's syntax, version parsing, normalization and order, the
//! `.nuspec`'s required metadata, and the `multipart/form-data` body of a
//! push.
//!
//! Sources: "Package versioning" (learn.microsoft.com/nuget/concepts/package-versioning,
//! sections *Version basics* and *Normalized version numbers*), the
//! ".nuspec reference" (learn.microsoft.com/nuget/reference/nuspec,
//! *Required metadata elements*: `id`, `version`, `description`,
//! `authors`; an id is at most 100 characters) and "Push and Delete"
//! (learn.microsoft.com/nuget/api/package-publish-resource: the package is
//! the file of a multipart form).

use std::cmp::Ordering;
use std::io::{Cursor, Read};

/// The longest package id NuGet accepts (".nuspec reference", `id`).
pub const MAX_ID_LENGTH: usize = 100;

/// Why a pushed package is not a valid NuGet package; the push answers 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackageProblem {
    /// The request body is not a multipart form holding a file.
    #[error("the request body is not a multipart/form-data form with the package as a file: {0}")]
    NotMultipart(String),
    /// The file is not a ZIP archive.
    #[error("the package is not a ZIP archive: {0}")]
    NotZip(String),
    /// The archive has no `.nuspec` at its root, or more than one.
    #[error("the package must hold exactly one .nuspec at its root, it holds {0}")]
    Manifests(usize),
    /// The `.nuspec` is not well-formed XML with a `package/metadata` element.
    #[error("the .nuspec is not valid: {0}")]
    Nuspec(String),
    /// A required metadata element is missing or empty.
    #[error("the .nuspec has no {0} (required metadata)")]
    Missing(&'static str),
    /// The id does not follow NuGet's id rules.
    #[error("`{0}` is not a valid package id")]
    Id(String),
    /// The version is not a NuGet version.
    #[error("`{0}` is not a valid NuGet version")]
    Version(String),
}

/// A NuGet version, parsed: up to four numbers, pre-release labels and
/// build metadata (kept only as written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NuGetVersion {
    /// Major, minor, patch and the legacy fourth number (0 when absent).
    numbers: [u64; 4],
    /// The pre-release labels, as written; empty for a release.
    release: Vec<String>,
}

impl NuGetVersion {
    /// Parses a version as NuGet does ("Version basics": `Major.Minor.Patch`
    /// with an optional fourth number for legacy versions, an optional
    /// `-prerelease` of dot-separated labels of letters, digits and `-`,
    /// and optional `+metadata`; `1` and `1.0` are accepted and mean
    /// `1.0.0`).
    pub fn parse(text: &str) -> Option<Self> {
        let (rest, metadata) = match text.split_once('+') {
            Some((rest, metadata)) => (rest, Some(metadata)),
            None => (text, None),
        };
        if let Some(metadata) = metadata
            && !labels_ok(metadata)
        {
            return None;
        }
        let (numbers_text, release) = match rest.split_once('-') {
            Some((numbers, release)) => (numbers, Some(release)),
            None => (rest, None),
        };
        let mut numbers = [0u64; 4];
        let parts: Vec<&str> = numbers_text.split('.').collect();
        if parts.is_empty() || parts.len() > 4 {
            return None;
        }
        for (slot, part) in numbers.iter_mut().zip(&parts) {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            *slot = part.parse().ok().filter(|n| *n <= i32::MAX as u64)?;
        }
        let release = match release {
            Some(release) if labels_ok(release) => release.split('.').map(str::to_owned).collect(),
            Some(_) => return None,
            None => Vec::new(),
        };
        Some(Self { numbers, release })
    }

    /// The normalized string ("Normalized version numbers": leading zeroes
    /// removed, a zero fourth number omitted, build metadata removed),
    /// keeping the labels' case.
    pub fn normalized(&self) -> String {
        let [major, minor, patch, revision] = self.numbers;
        let mut text = format!("{major}.{minor}.{patch}");
        if revision != 0 {
            text.push_str(&format!(".{revision}"));
        }
        if !self.release.is_empty() {
            text.push('-');
            text.push_str(&self.release.join("."));
        }
        text
    }

    /// The normalized string in lower case: the version's identity on a
    /// feed and its `LOWER_VERSION` in flat-container URLs ("Package
    /// Content": "lowercased, normalized version").
    pub fn identity(&self) -> String {
        self.normalized().to_lowercase()
    }

    /// NuGet's version order: the numbers, then a release above its
    /// pre-releases, then pre-release labels one by one (numbers
    /// numerically and below letters, letters case-insensitively), a
    /// shorter list of equal labels first.
    pub fn compare(&self, other: &Self) -> Ordering {
        self.numbers
            .cmp(&other.numbers)
            .then_with(|| match (self.release.is_empty(), other.release.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_labels(&self.release, &other.release),
            })
    }
}

fn labels_ok(labels: &str) -> bool {
    labels
        .split('.')
        .all(|label| !label.is_empty() && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

fn compare_labels(left: &[String], right: &[String]) -> Ordering {
    for (a, b) in left.iter().zip(right) {
        let numeric = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| s.parse::<u64>().ok())
                .flatten()
        };
        let order = match (numeric(a), numeric(b)) {
            (Some(a), Some(b)) => a.cmp(&b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => a.to_lowercase().cmp(&b.to_lowercase()),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    left.len().cmp(&right.len())
}

/// Whether `id` is a NuGet package id: at most 100
/// characters of words (letters, digits, `_`) joined by single `.` or `-`
/// (NuGet's `PackageIdValidator`, `^\w+([.-]\w+)*$`).
pub fn id_ok(id: &str) -> bool {
    if id.is_empty() || id.chars().count() > MAX_ID_LENGTH {
        return false;
    }
    id.split(['.', '-'])
        .all(|word| !word.is_empty() && word.chars().all(|c| c.is_alphanumeric() || c == '_'))
}

/// What a pushed package says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// `<id>` as written.
    pub id: String,
    /// `<version>` as written.
    pub version_text: String,
    /// `<version>` parsed.
    pub version: NuGetVersion,
    /// The `.nuspec` file's bytes.
    pub nuspec: Vec<u8>,
}

/// Reads a `.nupkg`: its one root `.nuspec`, which must name a valid id and
/// version and have the other required metadata.
pub fn read_package(bytes: &[u8]) -> Result<Manifest, PackageProblem> {
    let mut archive =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|err| PackageProblem::NotZip(err.to_string()))?;
    let mut manifests = Vec::new();
    for index in 0..archive.len() {
        let mut file = archive
            .by_index(index)
            .map_err(|err| PackageProblem::NotZip(err.to_string()))?;
        let name = file
            .name()
            .map_err(|err| PackageProblem::NotZip(err.to_string()))?
            .into_owned();
        if name.contains('/') || !name.to_ascii_lowercase().ends_with(".nuspec") {
            continue;
        }
        let mut content = Vec::new();
        file.read_to_end(&mut content)
            .map_err(|err| PackageProblem::NotZip(format!("{name}: {err}")))?;
        manifests.push(content);
    }
    if manifests.len() != 1 {
        return Err(PackageProblem::Manifests(manifests.len()));
    }
    let nuspec = manifests.remove(0);
    let text = std::str::from_utf8(&nuspec).map_err(|_| PackageProblem::Nuspec("not UTF-8".to_owned()))?;
    let metadata = super::xml::metadata(text).map_err(PackageProblem::Nuspec)?;
    let field = |name: &'static str| {
        metadata
            .iter()
            .find(|(element, _)| element == name)
            .map(|(_, value)| value.trim().to_owned())
            .filter(|value| !value.is_empty())
            .ok_or(PackageProblem::Missing(name))
    };
    let id = field("id")?;
    let version_text = field("version")?;
    field("authors")?;
    field("description")?;
    if !id_ok(&id) {
        return Err(PackageProblem::Id(id));
    }
    let version = NuGetVersion::parse(&version_text).ok_or_else(|| PackageProblem::Version(version_text.clone()))?;
    Ok(Manifest {
        id,
        version_text,
        version,
        nuspec,
    })
}

/// The first file of a `multipart/form-data` body (the part whose
/// `Content-Disposition` names a `filename`), as NuGet servers read a
/// push.
pub fn first_file<'a>(content_type: &str, body: &'a [u8]) -> Result<&'a [u8], PackageProblem> {
    let problem = |what: &str| PackageProblem::NotMultipart(what.to_owned());
    let (kind, params) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return Err(problem("the Content-Type is not multipart/form-data"));
    }
    let boundary = params
        .split(';')
        .filter_map(|param| param.split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, value)| value.trim().trim_matches('"'))
        .filter(|boundary| !boundary.is_empty())
        .ok_or_else(|| problem("the Content-Type has no boundary"))?;
    let delimiter = format!("--{boundary}");
    let mut rest = body;
    let start = find(rest, delimiter.as_bytes()).ok_or_else(|| problem("no part starts"))?;
    rest = &rest[start + delimiter.len()..];
    loop {
        if rest.starts_with(b"--") {
            return Err(problem("the form holds no file"));
        }
        rest = rest
            .strip_prefix(b"\r\n")
            .ok_or_else(|| problem("a delimiter is not followed by CRLF"))?;
        let headers_end = find(rest, b"\r\n\r\n").ok_or_else(|| problem("a part's headers do not end"))?;
        let headers = String::from_utf8_lossy(&rest[..headers_end]).to_ascii_lowercase();
        let content = &rest[headers_end + 4..];
        let close = format!("\r\n{delimiter}");
        let end = find(content, close.as_bytes()).ok_or_else(|| problem("a part does not end with the boundary"))?;
        let is_file = headers
            .lines()
            .any(|line| line.starts_with("content-disposition:") && line.contains("filename"));
        if is_file {
            return Ok(&content[..end]);
        }
        rest = &content[end + close.len()..];
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn versions_normalize_as_the_package_versioning_page_shows() {
        // Every pair is an example of "Normalized version numbers".
        for (written, normalized) in [
            ("1.00", "1.0.0"),
            ("1.01.1", "1.1.1"),
            ("1.00.0.1", "1.0.0.1"),
            ("1.0.0.0", "1.0.0"),
            ("1.0.01.0", "1.0.1"),
            ("1.0.7+r3456", "1.0.7"),
            ("1", "1.0.0"),
            ("2.1.0-Beta.1", "2.1.0-Beta.1"),
        ] {
            assert_eq!(
                NuGetVersion::parse(written).unwrap().normalized(),
                normalized,
                "{written}"
            );
        }
        assert_eq!(NuGetVersion::parse("2.1.0-Beta.1").unwrap().identity(), "2.1.0-beta.1");
        for bad in ["", "a.b", "1.2.3.4.5", "1..2", "1.0-", "1.0+", "1.0-be_ta", "-1.0"] {
            assert!(NuGetVersion::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn versions_order_as_nuget_orders_them() {
        let ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0",
            "1.0.0.1",
            "1.2.0",
        ];
        for pair in ordered.windows(2) {
            let (a, b) = (
                NuGetVersion::parse(pair[0]).unwrap(),
                NuGetVersion::parse(pair[1]).unwrap(),
            );
            assert_eq!(a.compare(&b), Ordering::Less, "{} < {}", pair[0], pair[1]);
        }
        let upper = NuGetVersion::parse("1.0.0-RC").unwrap();
        assert_eq!(
            upper.compare(&NuGetVersion::parse("1.0.0-rc").unwrap()),
            Ordering::Equal
        );
    }

    #[test]
    fn ids_follow_the_id_rules() {
        assert!(id_ok("Contoso.Payments-Api_2"));
        for bad in ["", ".a", "a.", "a..b", "a b", "a/b", &"x".repeat(101)] {
            assert!(!id_ok(bad), "{bad}");
        }
    }

    #[test]
    fn the_first_file_of_a_form_is_the_package() {
        let body = b"--b\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n--b\r\n\
                     Content-Disposition: form-data; name=\"package\"; filename=\"p.nupkg\"\r\n\r\nPK\r\nzip\r\n--b--\r\n";
        assert_eq!(
            first_file("multipart/form-data; boundary=\"b\"", body).unwrap(),
            b"PK\r\nzip"
        );
        assert!(first_file("application/octet-stream", body).is_err());
        assert!(first_file("multipart/form-data; boundary=b", b"--b\r\n\r\nno end").is_err());
    }
}
