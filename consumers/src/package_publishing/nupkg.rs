//! `.nupkg` files, packed and read; shared by both adapters.
//!
//! # Packing
//!
//! A package packed from a content tar is a ZIP ([`crate::delivery::archive::zip`], stored
//! entries, fixed timestamps) holding, in this order:
//!
//! 1. `_rels/.rels` — the OPC relationship naming the manifest;
//! 2. `<id>.nuspec` — `id`, `version`, `authors`, `description`;
//! 3. the content files, sorted by path;
//! 4. `[Content_Types].xml` — one default per file extension (`rels` as
//!    relationships, everything else `application/octet`), an override for
//!    files without one.
//!
//! Where content goes: when the tar's top level has a NuGet convention
//! folder (`lib`, `ref`, `runtimes`, `content`, `contentFiles`, `build`,
//! `buildTransitive`, `buildMultiTargeting`, `tools`, `analyzers`,
//! `native`, `embed`), paths are kept as they are (so a build can lay out
//! `lib/net8.0/Foo.dll` itself); otherwise every file goes under
//! `content/`. Part names are percent-encoded as NuGet writes them. Folder
//! entries are skipped; symbolic links, and files that would collide with
//! the package's own parts, are refused. The same content, id, version and
//! metadata always give the same bytes, hence the same SHA-512.
//!
//! # Ready packages
//!
//! A `.nupkg` the build made (artifact kind `Package`) is published as is,
//! after checking that its `.nuspec` names the module's package id
//! (case-insensitively) and version (compared normalized: build metadata
//! dropped, lower case, as NuGet compares versions).

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use bosun_contracts::validate;
use sha2::{Digest, Sha512};

use super::port::{PackageSource, PackageSpec, PublishError};
use crate::delivery::archive::tar::{self, EntryKind, TarEntry};
use crate::delivery::archive::zip::{self, ZipWriter};
use crate::delivery::blob::{BlobStore, sha256_hex};

/// The nuspec XML namespace bosun writes.
pub const NUSPEC_NAMESPACE: &str = "http://schemas.microsoft.com/packaging/2013/05/nuspec.xsd";

/// Top-level folders NuGet gives a meaning to.
const CONVENTION_FOLDERS: &[&str] = &[
    "lib",
    "ref",
    "runtimes",
    "content",
    "contentfiles",
    "build",
    "buildtransitive",
    "buildmultitargeting",
    "tools",
    "analyzers",
    "native",
    "embed",
];

/// A package ready to publish.
#[derive(Clone, PartialEq, Eq)]
pub struct Nupkg {
    /// The `.nupkg` bytes.
    pub bytes: Vec<u8>,
    /// Its `.nuspec`.
    pub nuspec: Vec<u8>,
    /// SHA-512 of `bytes`, 128 lowercase hex digits.
    pub sha512: String,
}

impl fmt::Debug for Nupkg {
    /// Shows the size and hash, never the content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nupkg")
            .field("bytes", &self.bytes.len())
            .field("sha512", &self.sha512)
            .finish()
    }
}

impl Nupkg {
    fn new(bytes: Vec<u8>, nuspec: Vec<u8>) -> Self {
        let sha512 = sha512_hex(&bytes);
        Self { bytes, nuspec, sha512 }
    }

    /// The SHA-512 in base64, as `<id>.<version>.nupkg.sha512` holds it.
    pub fn sha512_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(Sha512::digest(&self.bytes))
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// Lowercase hex SHA-512 of `bytes`.
pub fn sha512_hex(bytes: &[u8]) -> String {
    Sha512::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A version as NuGet compares it and as feed paths use it: build metadata
/// dropped, lower case.
pub fn normalized_version(version: &str) -> String {
    version.split('+').next().unwrap_or(version).to_ascii_lowercase()
}

/// Checks the spec's names before anything is read.
pub fn check_spec(spec: &PackageSpec) -> Result<(), PublishError> {
    let invalid = |err: validate::FieldError| PublishError::Invalid(format!("{}: {}", err.field, err.reason));
    validate::tenant_id("tenant", &spec.tenant).map_err(invalid)?;
    validate::nuget_package_id("packageId", &spec.package_id).map_err(invalid)?;
    validate::semantic_version("version", &spec.version).map_err(invalid)?;
    validate::identifier("feed", &spec.feed).map_err(invalid)?;
    validate::text("authors", &spec.authors, 4000).map_err(invalid)?;
    validate::text("description", &spec.description, 4000).map_err(invalid)?;
    Ok(())
}

/// Reads the spec's source from the blob store and packs (or checks) the
/// package: the first half of both adapters.
pub async fn prepare(blobs: &dyn BlobStore, spec: &PackageSpec) -> Result<Nupkg, PublishError> {
    check_spec(spec)?;
    let (blob, ready) = match &spec.source {
        PackageSource::Content(blob) => (blob, false),
        PackageSource::Nupkg(blob) => (blob, true),
    };
    let bytes = blobs.get(blob).await?;
    let spec = spec.clone();
    tokio::task::spawn_blocking(move || {
        if ready {
            open(&spec, bytes)
        } else {
            let entries = tar::read_archive(&bytes).map_err(PublishError::ContentArchive)?;
            pack(&spec, &entries)
        }
    })
    .await
    .map_err(|err| PublishError::storage("running the packing task", err))?
}

/// The `.nuspec` of a packed package.
pub fn nuspec(spec: &PackageSpec) -> String {
    nuspec_document(&spec.package_id, &spec.version, &spec.authors, &spec.description)
}

/// The `.nuspec` document bosun writes for these metadata.
fn nuspec_document(package_id: &str, version: &str, authors: &str, description: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n\
         <package xmlns=\"{NUSPEC_NAMESPACE}\">\n  \
         <metadata>\n    \
         <id>{}</id>\n    \
         <version>{}</version>\n    \
         <authors>{}</authors>\n    \
         <description>{}</description>\n  \
         </metadata>\n\
         </package>\n",
        xml_escape(package_id),
        xml_escape(version),
        xml_escape(authors),
        xml_escape(description),
    )
}

/// The tenant that published a package bosun packed, read from its
/// `.nuspec`: bosun packs with the tenant as `<authors>`, in exactly the
/// document [`nuspec`] writes. `None` for any other `.nuspec` (a ready
/// package a build made names its own authors, which say nothing about
/// the tenant).
pub fn packed_tenant(nuspec: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(nuspec).ok()?;
    let id = xml_element(text, "id")?;
    let version = xml_element(text, "version")?;
    let authors = xml_element(text, "authors")?;
    let description = xml_element(text, "description")?;
    validate::tenant_id("authors", &authors).ok()?;
    (nuspec_document(&id, &version, &authors, &description) == text).then_some(authors)
}

/// The `.nuspec` inside a `.nupkg` (the one file at its root ending in
/// `.nuspec`), if it has exactly one.
pub fn nuspec_of(bytes: &[u8]) -> Option<Vec<u8>> {
    let entries = zip::read_central_directory(bytes).ok()?;
    let mut manifests = entries
        .iter()
        .filter(|e| !e.name.contains('/') && e.name.to_ascii_lowercase().ends_with(".nuspec"));
    match (manifests.next(), manifests.next()) {
        (Some(manifest), None) => zip::extract(bytes, manifest).ok(),
        _ => None,
    }
}

/// Packs `content` (the entries of the content tar) into a `.nupkg`.
pub fn pack(spec: &PackageSpec, content: &[TarEntry]) -> Result<Nupkg, PublishError> {
    let mut files: BTreeMap<String, &[u8]> = BTreeMap::new();
    for entry in content {
        match &entry.kind {
            EntryKind::Directory => {}
            EntryKind::Symlink(_) => {
                return Err(PublishError::Content(format!(
                    "`{}` is a symbolic link; packages hold files only",
                    entry.path
                )));
            }
            EntryKind::File => {
                files.insert(entry.path.clone(), &entry.data);
            }
        }
    }
    if files.is_empty() {
        return Err(PublishError::Content(
            "the content archive has no files to pack".to_owned(),
        ));
    }
    let conventional = files.keys().any(|path| {
        let top = path.split('/').next().unwrap_or_default().to_ascii_lowercase();
        path.contains('/') && CONVENTION_FOLDERS.contains(&top.as_str())
    });
    let nuspec_name = format!("{}.nuspec", spec.package_id);
    let mut parts: BTreeMap<String, &[u8]> = BTreeMap::new();
    for (path, data) in &files {
        let path = if conventional {
            path.clone()
        } else {
            format!("content/{path}")
        };
        let lower = path.to_ascii_lowercase();
        let reserved = lower == "[content_types].xml"
            || lower.starts_with("_rels/")
            || lower.starts_with("package/")
            || (!lower.contains('/') && lower.ends_with(".nuspec"));
        if reserved {
            return Err(PublishError::Content(format!(
                "`{path}` collides with a part of the package itself ([Content_Types].xml, _rels/, package/, *.nuspec)"
            )));
        }
        let part = part_name(&path);
        if parts.insert(part.clone(), data).is_some() {
            return Err(PublishError::Content(format!("`{path}` is in the content twice")));
        }
    }

    let nuspec = nuspec(spec).into_bytes();
    let relationship_id = format!(
        "R{}",
        &sha256_hex(spec.package_id.to_ascii_lowercase().as_bytes())[..16]
    );
    let rels = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n\
         <Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\">\
         <Relationship Type=\"http://schemas.microsoft.com/packaging/2010/07/manifest\" Target=\"/{}\" Id=\"{relationship_id}\" />\
         </Relationships>\n",
        xml_escape(&part_name(&nuspec_name))
    );

    let mut defaults: BTreeMap<String, &str> = BTreeMap::new();
    defaults.insert(
        "rels".to_owned(),
        "application/vnd.openxmlformats-package.relationships+xml",
    );
    defaults.insert("nuspec".to_owned(), "application/octet");
    let mut overrides: Vec<String> = Vec::new();
    for part in parts.keys() {
        let file = part.rsplit('/').next().unwrap_or(part);
        match file.rsplit_once('.') {
            Some((stem, extension)) if !stem.is_empty() && !extension.is_empty() => {
                defaults
                    .entry(extension.to_ascii_lowercase())
                    .or_insert("application/octet");
            }
            _ => overrides.push(part.clone()),
        }
    }
    let mut content_types = String::from(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n\
         <Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\">",
    );
    for (extension, content_type) in &defaults {
        content_types.push_str(&format!(
            "<Default Extension=\"{}\" ContentType=\"{content_type}\" />",
            xml_escape(extension)
        ));
    }
    for part in &overrides {
        content_types.push_str(&format!(
            "<Override PartName=\"/{}\" ContentType=\"application/octet\" />",
            xml_escape(part)
        ));
    }
    content_types.push_str("</Types>\n");

    let zip_error = |source| PublishError::Nupkg {
        context: "packing the .nupkg",
        source,
    };
    let mut writer = ZipWriter::new();
    writer.add("_rels/.rels", rels.as_bytes()).map_err(zip_error)?;
    writer.add(&part_name(&nuspec_name), &nuspec).map_err(zip_error)?;
    for (part, data) in &parts {
        writer.add(part, data).map_err(zip_error)?;
    }
    writer
        .add("[Content_Types].xml", content_types.as_bytes())
        .map_err(zip_error)?;
    Ok(Nupkg::new(writer.finish().map_err(zip_error)?, nuspec))
}

/// Reads a ready `.nupkg` and checks it is `spec`'s id and version.
pub fn open(spec: &PackageSpec, bytes: Vec<u8>) -> Result<Nupkg, PublishError> {
    let content = |reason: String| PublishError::Content(reason);
    let entries = zip::read_central_directory(&bytes).map_err(|source| PublishError::Nupkg {
        context: "not a .nupkg",
        source,
    })?;
    let mut manifests = entries
        .iter()
        .filter(|e| !e.name.contains('/') && e.name.to_ascii_lowercase().ends_with(".nuspec"));
    let manifest = match (manifests.next(), manifests.next()) {
        (Some(manifest), None) => manifest,
        (None, _) => return Err(content("the .nupkg has no .nuspec at its root".to_owned())),
        (Some(_), Some(_)) => return Err(content("the .nupkg has more than one .nuspec".to_owned())),
    };
    let nuspec = zip::extract(&bytes, manifest).map_err(|source| PublishError::Nupkg {
        context: "reading its .nuspec",
        source,
    })?;
    let text = String::from_utf8_lossy(&nuspec);
    let id = xml_element(&text, "id").ok_or_else(|| content("the .nuspec has no <id>".to_owned()))?;
    let version = xml_element(&text, "version").ok_or_else(|| content("the .nuspec has no <version>".to_owned()))?;
    if !id.eq_ignore_ascii_case(&spec.package_id) || normalized_version(&version) != normalized_version(&spec.version) {
        return Err(content(format!(
            "the .nupkg is {id} {version}, but the module publishes {} {}",
            spec.package_id, spec.version
        )));
    }
    Ok(Nupkg::new(bytes, nuspec))
}

/// The text of the first `<name>` element (entities decoded, trimmed).
fn xml_element(text: &str, name: &str) -> Option<String> {
    let open = format!("<{name}");
    let mut search = 0;
    while let Some(found) = text[search..].find(&open) {
        let start = search + found + open.len();
        let next = text[start..].chars().next()?;
        if next == '>' || next.is_whitespace() {
            let body_start = start + text[start..].find('>')? + 1;
            let body_end = body_start + text[body_start..].find(&format!("</{name}>"))?;
            return Some(xml_unescape(text[body_start..body_end].trim()));
        }
        search = start;
    }
    None
}

fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

fn xml_unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// A path as an OPC part name: every byte but unreserved characters and
/// `/` percent-encoded.
pub fn part_name(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::archive::tar::TarWriter;
    use bosun_contracts::messages::BlobRef;

    fn spec() -> PackageSpec {
        PackageSpec {
            tenant: "contoso".into(),
            feed: "contoso-internal".into(),
            package_id: "Contoso.Payments.Client".into(),
            version: "1.4.0".into(),
            authors: "contoso".into(),
            description: "Payments <API> & client".into(),
            source: PackageSource::Content(BlobRef {
                container: "artifacts".into(),
                key: "k".into(),
                size_bytes: 1,
                sha256: "0".repeat(64),
                content_type: "application/x-tar".into(),
            }),
        }
    }

    fn entries(files: &[(&str, &[u8])]) -> Vec<TarEntry> {
        let mut writer = TarWriter::new();
        for (path, data) in files {
            writer.file(path, 0o644, 0, 0, data).unwrap();
        }
        tar::read_archive(&writer.finish().unwrap()).unwrap()
    }

    fn names(nupkg: &Nupkg) -> Vec<String> {
        zip::read_central_directory(&nupkg.bytes)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect()
    }

    #[test]
    fn packing_is_deterministic_and_complete() {
        let files = entries(&[
            ("readme.md", b"# Client"),
            ("data/my file.json", b"{}"),
            ("LICENSE", b"MIT"),
        ]);
        let first = pack(&spec(), &files).unwrap();
        let second = pack(&spec(), &files).unwrap();
        assert_eq!(first.bytes, second.bytes);
        assert_eq!(first.sha512, sha512_hex(&first.bytes));
        assert_eq!(first.sha512.len(), 128);
        assert_eq!(
            names(&first),
            vec![
                "_rels/.rels",
                "Contoso.Payments.Client.nuspec",
                "content/LICENSE",
                "content/data/my%20file.json",
                "content/readme.md",
                "[Content_Types].xml",
            ]
        );
        let text = String::from_utf8(first.nuspec.clone()).unwrap();
        assert!(text.contains("<id>Contoso.Payments.Client</id>"), "{text}");
        assert!(text.contains("<version>1.4.0</version>"), "{text}");
        assert!(
            text.contains("<description>Payments &lt;API&gt; &amp; client</description>"),
            "{text}"
        );

        let entries = zip::read_central_directory(&first.bytes).unwrap();
        let types = String::from_utf8(zip::extract(&first.bytes, &entries[5]).unwrap()).unwrap();
        assert!(types.contains("<Default Extension=\"json\""), "{types}");
        assert!(types.contains("<Override PartName=\"/content/LICENSE\""), "{types}");
        let rels = String::from_utf8(zip::extract(&first.bytes, &entries[0]).unwrap()).unwrap();
        assert!(rels.contains("Target=\"/Contoso.Payments.Client.nuspec\""), "{rels}");

        let mut changed = spec();
        changed.version = "1.4.1".into();
        assert_ne!(pack(&changed, &files).unwrap().sha512, first.sha512);
    }

    #[test]
    fn convention_folders_are_kept_and_reserved_names_refused() {
        let nupkg = pack(
            &spec(),
            &entries(&[("lib/net8.0/Client.dll", b"MZ"), ("README.md", b"r")]),
        )
        .unwrap();
        assert!(names(&nupkg).contains(&"lib/net8.0/Client.dll".to_owned()));
        assert!(names(&nupkg).contains(&"README.md".to_owned()));

        for reserved in [
            "lib/x.dll\0_rels/.rels",
            "lib/x.dll\0other.nuspec",
            "lib/x.dll\0[Content_Types].xml",
        ] {
            let paths: Vec<&str> = reserved.split('\0').collect();
            let files: Vec<(&str, &[u8])> = paths.iter().map(|p| (*p, &b"x"[..])).collect();
            let err = pack(&spec(), &entries(&files)).unwrap_err();
            assert!(matches!(err, PublishError::Content(_)), "{err}");
        }
        assert!(matches!(pack(&spec(), &[]), Err(PublishError::Content(_))));
    }

    #[test]
    fn python_reads_the_package() {
        let nupkg = pack(&spec(), &entries(&[("a.txt", b"hello")])).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.nupkg");
        std::fs::write(&path, &nupkg.bytes).unwrap();
        let script = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\nprint(z.read('content/a.txt').decode())";
        match std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&path)
            .output()
        {
            Ok(output) => {
                assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
                assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "hello");
            }
            Err(err) => panic!("python3 is needed for this cross-check (scripts/test requires it): {err}"),
        }
    }

    #[test]
    fn ready_packages_must_match_the_module() {
        let packed = pack(&spec(), &entries(&[("a.txt", b"a")])).unwrap();
        let opened = open(&spec(), packed.bytes.clone()).unwrap();
        assert_eq!(opened.sha512, packed.sha512);
        assert_eq!(opened.nuspec, packed.nuspec);

        let mut other = spec();
        other.package_id = "contoso.payments.CLIENT".into();
        other.version = "1.4.0+build.9".into();
        assert!(
            open(&other, packed.bytes.clone()).is_ok(),
            "id case and build metadata do not matter"
        );
        other.version = "1.5.0".into();
        assert!(matches!(
            open(&other, packed.bytes.clone()),
            Err(PublishError::Content(_))
        ));
        let not_a_zip = open(&spec(), b"PK not really".to_vec()).unwrap_err();
        assert!(
            matches!(
                &not_a_zip,
                PublishError::Nupkg {
                    context: "not a .nupkg",
                    source: zip::ZipError::Malformed { .. },
                }
            ),
            "{not_a_zip}"
        );
        assert!(!not_a_zip.is_retryable(), "the same bytes fail again");
    }

    #[test]
    fn names_and_versions() {
        assert_eq!(normalized_version("1.4.0-Beta.1+sha.abc"), "1.4.0-beta.1");
        assert_eq!(part_name("a b/c+d.txt"), "a%20b/c%2Bd.txt");
        assert_eq!(
            xml_element("<metadata><idx>no</idx><id >\n Foo &amp; Bar </id></metadata>", "id").as_deref(),
            Some("Foo & Bar")
        );
    }

    #[test]
    fn a_packed_nuspec_names_its_tenant_and_a_foreign_one_does_not() {
        let packed = pack(&spec(), &entries(&[("readme.md", b"# Client")])).unwrap();
        assert_eq!(packed_tenant(&packed.nuspec).as_deref(), Some("contoso"));
        assert_eq!(nuspec_of(&packed.bytes), Some(packed.nuspec.clone()));
        // The same metadata in a document bosun did not write.
        let foreign = String::from_utf8(packed.nuspec.clone())
            .unwrap()
            .replace("\n    <", "\n  <");
        assert_eq!(packed_tenant(foreign.as_bytes()), None);
        // Authors that are no tenant id.
        let mut named = spec();
        named.authors = "Contoso Ltd".into();
        assert_eq!(packed_tenant(nuspec(&named).as_bytes()), None);
    }
}
