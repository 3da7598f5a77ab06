//! The corpus is fresh, complete, and every file in it reads with this
//! build.

use std::path::{Path, PathBuf};

use bosun_contracts::{CATALOGUE, Envelope};
use bosun_sagas::versioned::{VersionedState, load_state, stored_version};

use super::*;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Every file under `corpus/<sub>`: `(file name, text)`.
fn on_disk(sub: &str) -> Vec<(String, String)> {
    let dir = corpus_dir().join(sub);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{} cannot be read: {err}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{name}: {err}"));
            (name, text)
        })
        .collect();
    files.sort();
    files
}

/// The files of the versions this build writes must equal what it
/// generates; older versions' files are left as they are.
#[test]
fn the_corpus_of_this_version_is_fresh() {
    let dir = corpus_dir();
    if std::env::var_os("BOSUN_UPDATE_CORPUS").is_some() {
        for (path, text) in corpus_files() {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the corpus directory");
            std::fs::write(&path, text).expect("write a corpus file");
        }
    }
    let stale: Vec<String> = corpus_files()
        .into_iter()
        .filter(|(path, text)| std::fs::read_to_string(dir.join(path)).ok().as_ref() != Some(text))
        .map(|(path, _)| path)
        .collect();
    assert!(
        stale.is_empty(),
        "corpus/ is stale or lacks {stale:?}: run `BOSUN_UPDATE_CORPUS=1 cargo test --lib tools::corpus` \
         (it adds this version's files and keeps every older one)"
    );
}

/// Every message ever written to the corpus reads with this build: older
/// versions through their upcasts.
#[test]
fn every_message_of_the_past_reads_with_this_build() {
    let files = on_disk("messages");
    assert!(files.len() >= CATALOGUE.len(), "{} files", files.len());
    for (name, text) in files {
        let (envelope, message) =
            Envelope::parse(text.as_bytes()).unwrap_or_else(|err| panic!("corpus/messages/{name}: {err}"));
        assert_eq!(
            name,
            format!("{}.v{}.json", envelope.message_type, envelope.schema_version),
            "a corpus file is named by the type and version it holds"
        );
        assert_eq!(message.message_type(), envelope.message_type, "{name}");
    }
}

/// Every message type has a sample at every version this build reads:
/// the one it writes, and each older one still read (kept from the
/// release that wrote it).
#[test]
fn every_message_type_is_in_the_corpus_at_every_version_read() {
    let names: Vec<String> = on_disk("messages").into_iter().map(|(name, _)| name).collect();
    for spec in CATALOGUE {
        assert_eq!(
            message_path(spec),
            format!("messages/{}.v{}.json", spec.message_type, spec.schema_version)
        );
        for version in spec.oldest_read..=spec.schema_version {
            let name = format!("{}.v{version}.json", spec.message_type);
            assert!(names.contains(&name), "corpus/messages lacks {name}");
        }
    }
}

fn loads_every<S: VersionedState + std::fmt::Debug>() -> usize {
    let prefix = format!("{}.v", S::KIND);
    let mut versions = std::collections::BTreeSet::new();
    let mut read = 0;
    for (name, text) in on_disk("sagas") {
        if !name.starts_with(&prefix) {
            continue;
        }
        let stored: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("corpus/sagas/{name}: {err}"));
        let version = stored_version(S::KIND, &stored).unwrap_or_else(|err| panic!("corpus/sagas/{name}: {err}"));
        assert!(
            name.starts_with(&format!("{prefix}{version}.")),
            "corpus/sagas/{name} holds version {version}"
        );
        load_state::<S>(&stored).unwrap_or_else(|err| panic!("corpus/sagas/{name}: {err}"));
        versions.insert(version);
        read += 1;
    }
    // Each version this build reads has its samples, kept when a later
    // version is added.
    for version in 1..=S::VERSION {
        assert!(
            versions.contains(&version),
            "corpus/sagas lacks a {} state of version {version}",
            S::KIND
        );
    }
    read
}

/// Every saga state ever written to the corpus loads with this build.
#[test]
fn every_saga_state_of_the_past_loads_with_this_build() {
    assert!(loads_every::<ReleaseState>() >= 3, "a release's phases");
    assert!(loads_every::<GitOpsState>() >= 2);
    assert!(loads_every::<ProbeTally>() >= 1);
}

/// The release samples follow a release to production: among them one
/// waits for its prod approval with the approval timeout pending, the
/// state an upgrade must never strand.
#[test]
fn the_release_samples_include_one_waiting_for_its_prod_approval() {
    let waiting = release_states()
        .into_iter()
        .find(|(_, state)| {
            state
                .pending_timeout
                .as_ref()
                .is_some_and(|pending| pending.message.environment == "prod")
        })
        .map(|(name, _)| name);
    assert!(
        waiting.is_some(),
        "phases: {:?}",
        release_states().keys().collect::<Vec<_>>()
    );
}
