//! A tiny module and a local Git host, blob store and pipeline runner in a
//! temporary folder, shared by the tests of the runner and of the consumers
//! that queue and follow runs.
//!
//! The module (`hello-api`, language `other`, in `services/hello`) builds
//! with a shell script and tests with another that writes a JUnit file:
//! two passing tests, or — in its failing variant — one passing and one
//! failing test and a non-zero exit. It has a container (a Dockerfile) and
//! a package (a `.nuspec` in `client/`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use bosun_contracts::messages::{ContainerSettings, GitIdentity, ModuleLanguage, ModuleMetadata, PackageSettings};
use time::OffsetDateTime;
use time::macros::datetime;

use super::{LocalPipelines, RunnerSettings};
use crate::delivery::blob::{BlobStore, FilesystemBlobStore};
use crate::delivery::git::LocalGitHost;
use crate::delivery::git::commit::{CommitSpec, CommitWriter, FileWrite, LocalCommitWriter};
use crate::delivery::testing::provision;

/// The tenant of the fixture.
pub(crate) const TENANT: &str = "contoso";
/// The repository of the fixture.
pub(crate) const REPOSITORY: &str = "hello";
/// The pipeline of the fixture's module, `services/hello/azure-pipelines.yml`:
/// what pipeline generation renders for [`module`] (its tests keep the two
/// the same).
pub(crate) const HELLO_PIPELINE: &str = include_str!("testdata/hello-api.azure-pipelines.yml");

/// The date of the fixture's commits.
pub(crate) const DATE: OffsetDateTime = datetime!(2026-11-29 10:00:00 UTC);

/// Everything a local pipeline test needs, in one temporary folder.
pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) git: Arc<LocalGitHost>,
    pub(crate) blobs: Arc<FilesystemBlobStore>,
    pub(crate) pipelines: Arc<LocalPipelines>,
    /// The bare repository of [`REPOSITORY`].
    pub(crate) repo: PathBuf,
}

impl Fixture {
    /// A fresh fixture with an empty repository `contoso/hello`.
    pub(crate) async fn new(settings: RunnerSettings) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let git = Arc::new(LocalGitHost::new(dir.path().join("git")));
        provision(&git, TENANT, REPOSITORY, 0).await;
        let blobs = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
        let pipelines = Arc::new(LocalPipelines::with_host(
            dir.path().join("pipelines"),
            Arc::clone(&git),
            Arc::clone(&blobs) as Arc<dyn BlobStore>,
            settings,
        ));
        Self {
            repo: dir.path().join("git/contoso/contoso/hello.git"),
            dir,
            git,
            blobs,
            pipelines,
        }
    }

    /// A second runner over the same folders: another process after a
    /// restart.
    pub(crate) fn restarted_runner(&self, settings: RunnerSettings) -> Arc<LocalPipelines> {
        Arc::new(LocalPipelines::with_host(
            self.dir.path().join("pipelines"),
            Arc::clone(&self.git),
            Arc::clone(&self.blobs) as Arc<dyn BlobStore>,
            settings,
        ))
    }

    /// Commits `files` onto `branch` (from `main` when missing); returns the
    /// head commit.
    pub(crate) async fn commit(&self, branch: &str, files: Vec<FileWrite>) -> String {
        LocalCommitWriter::with_host(Arc::clone(&self.git))
            .commit(&CommitSpec {
                tenant: TENANT.into(),
                repository: REPOSITORY.into(),
                branch: branch.into(),
                base_branch: None,
                message: "Add the hello module".into(),
                author: GitIdentity {
                    name: "Test".into(),
                    email: "test@example.com".into(),
                },
                date: DATE,
                files,
                delete: Vec::new(),
            })
            .await
            .expect("commit")
            .commit_sha
    }

    /// How many run records the tenant has (temporary files of a record
    /// being rewritten are not records).
    pub(crate) fn run_records(&self) -> usize {
        std::fs::read_dir(self.pipelines.root().join("runs").join(TENANT))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|entry| {
                        let name = entry.file_name().to_string_lossy().into_owned();
                        name.ends_with(".json") && !name.starts_with('.')
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// Runs git on the fixture's repository and returns its trimmed output.
    pub(crate) fn git_output(&self, args: &[&str]) -> String {
        let output = std::process::Command::new("git")
            .env("GIT_DIR", &self.repo)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(args)
            .output()
            .expect("git");
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

/// Settings that make tests quick: heartbeat every 100 ms, stale after
/// 500 ms, job timeout 60 s.
pub(crate) fn quick_settings() -> RunnerSettings {
    RunnerSettings {
        heartbeat_interval: std::time::Duration::from_millis(100),
        stale_after: std::time::Duration::from_millis(500),
        job_timeout: std::time::Duration::from_secs(60),
    }
}

/// The tiny module's metadata.
pub(crate) fn module() -> ModuleMetadata {
    ModuleMetadata {
        module_id: "hello-api".into(),
        name: "Hello API".into(),
        language: ModuleLanguage::Other,
        version: "1.0.0".into(),
        path: Some("services/hello".into()),
        build_command: "sh build.sh \"$(Build.SourceVersion)\"".into(),
        test_command: Some("sh test.sh".into()),
        test_results: Some("TestResults/*.xml".into()),
        package: Some(PackageSettings {
            package_id: "Contoso.Hello.Client".into(),
            feed: "local".into(),
            project: Some("client/Hello.Client.nuspec".into()),
        }),
        container: Some(ContainerSettings {
            registry: "localhost".into(),
            image: "contoso/hello-api".into(),
            dockerfile: "Dockerfile".into(),
            context: None,
            platform: "linux/amd64".into(),
            build_args: BTreeMap::new(),
        }),
    }
}

fn file(path: &str, content: &str) -> FileWrite {
    FileWrite {
        path: path.into(),
        content: content.as_bytes().to_vec(),
        executable: false,
    }
}

const BUILD_SH: &str = r#"set -e
mkdir -p out
echo "built $BOSUN_MODULE_ID at $1 (env $BUILD_SOURCEVERSION)" | tee out/build.txt
"#;

const PASSING_TEST_SH: &str = r#"set -e
mkdir -p TestResults
test -f out/build.txt
cat > TestResults/hello.xml <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="2" failures="0">
  <testsuite name="hello" tests="2" failures="0" errors="0" skipped="0">
    <testcase classname="hello" name="builds" time="0.01"/>
    <testcase classname="hello" name="greets" time="0.01"/>
  </testsuite>
</testsuites>
XML
echo "2 tests passed"
"#;

const FAILING_TEST_SH: &str = r#"set -e
mkdir -p TestResults
cat > TestResults/hello.xml <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="2" failures="1">
  <testsuite name="hello" tests="2" failures="1" errors="0" skipped="0">
    <testcase classname="hello" name="builds" time="0.01"/>
    <testcase classname="hello" name="greets" time="0.01">
      <failure message="expected hello, got bye">assertion failed</failure>
    </testcase>
  </testsuite>
</testsuites>
XML
echo "1 of 2 tests failed: hello.greets" >&2
exit 1
"#;

/// The module's files, `bosun.module.json` included; the failing variant's
/// test script reports a failing test and exits 1.
pub(crate) fn module_files(passing: bool) -> Vec<FileWrite> {
    let metadata = serde_json::to_string_pretty(&module()).expect("module JSON");
    vec![
        file("bosun.module.json", &metadata),
        file("services/hello/build.sh", BUILD_SH),
        file(
            "services/hello/test.sh",
            if passing { PASSING_TEST_SH } else { FAILING_TEST_SH },
        ),
        file(
            "services/hello/Dockerfile",
            "FROM scratch\nCOPY out/build.txt /build.txt\n",
        ),
        file(
            "services/hello/client/Hello.Client.nuspec",
            "<?xml version=\"1.0\"?>\n<package><metadata><id>Contoso.Hello.Client</id></metadata></package>\n",
        ),
        file("services/hello/client/README.md", "# Hello client\n"),
    ]
}
