//! Finding files the way Azure Pipelines tasks do: newline-separated
//! minimatch-style patterns (`**`, `*`, `?`, `[...]`, `!` to exclude).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::step_error::StepError;

/// Files under `base` matching the newline-separated minimatch-style
/// patterns (`**`, `*`, `?`, `[...]`; `!` excludes; `#` comments), as
/// (path relative to `base` with `/`, full path), sorted.
pub(super) async fn find_files(base: &Path, patterns: &str) -> Result<Vec<(String, PathBuf)>, StepError> {
    let base = base.to_owned();
    let patterns = patterns.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut include = Vec::new();
        let mut exclude = Vec::new();
        for pattern in patterns.lines().flat_map(|line| line.split(';')) {
            let pattern = pattern.trim();
            if pattern.is_empty() || pattern.starts_with('#') {
                continue;
            }
            match pattern.strip_prefix('!') {
                Some(negated) => exclude.push(negated.trim().to_owned()),
                None => include.push(pattern.to_owned()),
            }
        }
        let mut files = Vec::new();
        walk(&base, &base, &mut files).map_err(|err| StepError::file("listing", &base, err))?;
        let matches = |pattern: &str, relative: &str, full: &Path| {
            if pattern.starts_with('/') {
                glob_match(pattern, &full.to_string_lossy())
            } else {
                glob_match(pattern.trim_start_matches("./"), relative)
            }
        };
        let mut found: Vec<(String, PathBuf)> = files
            .into_iter()
            .filter(|(relative, full)| {
                include.iter().any(|p| matches(p, relative, full))
                    && !exclude.iter().any(|p| matches(p, relative, full))
            })
            .collect();
        found.sort();
        Ok(found)
    })
    .await
    .map_err(|source| StepError::Task {
        action: "searching for files".to_owned(),
        source,
    })?
}

/// Every regular file under `dir` (symlinked folders not followed).
pub(super) fn walk(base: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound && dir == base => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            walk(base, &path, files)?;
        } else if kind.is_file()
            && let Ok(relative) = path.strip_prefix(base)
        {
            let relative = relative
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            files.push((relative, path));
        }
    }
    Ok(())
}

/// Whether a `/`-separated path matches a glob (`**` spans folders).
pub(crate) fn glob_match(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').filter(|part| !part.is_empty()).collect();
    let path: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    match_segments(&pattern, &path)
}

pub(super) fn match_segments(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| match_segments(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((name, others)) => {
                let pattern: Vec<char> = first.chars().collect();
                let name: Vec<char> = name.chars().collect();
                match_name(&pattern, &name) && match_segments(rest, others)
            }
            None => false,
        },
    }
}

/// One path segment against one glob segment (`*`, `?`, `[a-z]`, `[!x]`).
pub(super) fn match_name(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| match_name(rest, &name[skip..])),
        Some(('?', rest)) => !name.is_empty() && match_name(rest, &name[1..]),
        Some(('[', rest)) => {
            let Some(close) = rest.iter().skip(1).position(|c| *c == ']').map(|i| i + 1) else {
                return name.first() == Some(&'[') && match_name(rest, &name[1..]);
            };
            let Some(c) = name.first() else {
                return false;
            };
            let (negated, set) = match rest[..close].split_first() {
                Some(('!' | '^', set)) => (true, set),
                _ => (false, &rest[..close]),
            };
            let mut hit = false;
            let mut index = 0;
            while index < set.len() {
                if index + 2 < set.len() && set[index + 1] == '-' {
                    hit |= (set[index]..=set[index + 2]).contains(c);
                    index += 3;
                } else {
                    hit |= set[index] == *c;
                    index += 1;
                }
            }
            hit != negated && match_name(&rest[close + 1..], &name[1..])
        }
        Some((literal, rest)) => name.first() == Some(literal) && match_name(rest, &name[1..]),
    }
}
