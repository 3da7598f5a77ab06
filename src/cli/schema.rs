//! `bosun schema export`: the JSON Schemas of the message contracts.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Subcommand;

use super::output::outln;

/// `bosun schema ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum SchemaCommand {
    /// Write every JSON Schema into DIR.
    Export {
        /// Target directory (created if missing).
        dir: PathBuf,
    },
}

/// Runs a schema command; it needs no settings.
pub fn run(command: SchemaCommand) -> Result<()> {
    let SchemaCommand::Export { dir } = command;
    let written = export(&dir)?;
    outln!("wrote {written} schema files to {}", dir.display())?;
    Ok(())
}

/// Writes every schema file into `dir` (created if missing) and returns
/// how many.
fn export(dir: &Path) -> Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = bosun_contracts::schema::schema_files();
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))?;
    }
    Ok(files.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_writes_every_schema_into_a_new_directory() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("schemas/v1");
        let written = export(&target).unwrap();
        assert_eq!(written, bosun_contracts::schema::schema_files().len());
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), written);
    }

    #[test]
    fn export_names_the_directory_it_cannot_create() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let err = export(&file.join("sub")).unwrap_err();
        assert_eq!(err.to_string(), format!("creating {}", file.join("sub").display()));
    }
}
