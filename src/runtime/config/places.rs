//! Where the settings put things: the files under the data directory and
//! which store holds bosun's state.

use std::path::PathBuf;

use super::{Settings, StoreKind};

impl Settings {
    /// The embedded transport's database file.
    pub fn transport_path(&self) -> PathBuf {
        self.data_dir.join("transport.db")
    }

    /// Which store these settings choose (see [`StoreKind`]). Asked here,
    /// never by testing `database_url` again elsewhere.
    pub fn store_kind(&self) -> StoreKind<'_> {
        match &self.database_url {
            Some(url) => StoreKind::Postgres(url),
            None => StoreKind::Sqlite(self.store_path()),
        }
    }

    /// The SQLite store's database file.
    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join("state.db")
    }

    /// Root of the local Git host's bare repositories.
    pub fn git_root(&self) -> PathBuf {
        self.data_dir.join("git")
    }

    /// Root of the filesystem blob store.
    pub fn blob_root(&self) -> PathBuf {
        self.data_dir.join("blobs")
    }
}
