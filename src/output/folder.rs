//! What `--out` holds before a build, and whether the build may write there.
//!
//! Invariant: a build never replaces a set under review, nor files qrelgen did not write, unless
//! told to (`--force`); a plain rerun into a set qrelgen built (or into what a killed build left)
//! goes ahead, so a rerun resumes.

use super::layout::{BUILD_FILES, BUILD_STATE, MANIFEST, REVIEW_DIR, VERSIONS_DIR};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::path::Path;

/// Files of a foreign folder named in a message, at most.
const LISTED: usize = 10;

/// What the output folder holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Occupant {
    /// Nothing, or only what a killed build left (index, reply cache, staging): build.
    Nothing,
    /// A set qrelgen built and nobody reviewed: a rerun replaces it (and resumes from the cache).
    Set,
    /// A set under review (`versions/` or `review/`): `--force` keeps its current version under
    /// `versions/` and makes the build the next one.
    Reviewed,
    /// A folder that is not a qrelgen set.
    Foreign {
        /// The files the build would replace.
        replaced: Vec<String>,
        /// The files (or folders, with a `/`) the build does not write and would leave beside its
        /// own.
        left: Vec<String>,
    },
}

/// The part of `manifest.json` that says qrelgen wrote it.
#[derive(Deserialize)]
struct Signature {
    tool: String,
    #[expect(dead_code, reason = "only its presence is checked")]
    format_version: u32,
}

/// Looks at what `out` holds.
///
/// # Errors
/// [`Error::Input`] if the folder exists but cannot be listed.
pub fn inspect(out: &Path) -> Result<Occupant> {
    let entries = match fs_err::read_dir(out) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Occupant::Nothing),
        Err(source) => return Err(Error::Input { path: out.to_owned(), source }),
    };
    if is_set(out) {
        let reviewed = out.join(VERSIONS_DIR).exists() || out.join(REVIEW_DIR).exists();
        return Ok(if reviewed { Occupant::Reviewed } else { Occupant::Set });
    }
    let mut names: Vec<(String, bool)> = entries
        .filter_map(std::result::Result::ok)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path().is_dir()))
        .collect();
    names.sort();
    let (mut replaced, mut left) = (Vec::new(), Vec::new());
    for (name, is_dir) in names {
        if BUILD_STATE.contains(&name.as_str()) {
            continue;
        }
        if is_dir && BUILD_FILES.iter().any(|f| f.starts_with(&format!("{name}/"))) {
            // A folder the build writes into (qrels/): name what is in it.
            let inside = walkdir::WalkDir::new(out.join(&name)).sort_by_file_name().into_iter().flatten();
            for entry in inside.filter(|e| !e.file_type().is_dir()) {
                let relative = entry.path().strip_prefix(out).unwrap_or(entry.path());
                let relative = relative.to_string_lossy().replace('\\', "/");
                if BUILD_FILES.contains(&relative.as_str()) { &mut replaced } else { &mut left }
                    .push(relative);
            }
        } else if !is_dir && BUILD_FILES.contains(&name.as_str()) {
            replaced.push(name);
        } else {
            left.push(if is_dir { format!("{name}/") } else { name });
        }
    }
    if replaced.is_empty() && left.is_empty() {
        return Ok(Occupant::Nothing);
    }
    replaced.sort();
    Ok(Occupant::Foreign { replaced, left })
}

/// Whether `out/manifest.json` is one qrelgen wrote.
fn is_set(out: &Path) -> bool {
    let Ok(text) = fs_err::read_to_string(out.join(MANIFEST)) else { return false };
    serde_json::from_str::<Signature>(&text).is_ok_and(|s| s.tool.starts_with("qrelgen"))
}

impl Occupant {
    /// The error that refuses a build into the folder without `--force`, if any.
    #[must_use]
    pub fn refusal(&self, out: &Path) -> Option<Error> {
        let (message, hint) = match self {
            Self::Nothing | Self::Set => return None,
            Self::Reviewed => (
                format!(
                    "holds a test set under review ({}): a build would replace its reviewed files",
                    [VERSIONS_DIR, REVIEW_DIR]
                        .into_iter()
                        .filter(|name| out.join(name).exists())
                        .map(|name| format!("{name}/"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "pass --force to keep the set as it is under versions/ and make this build its next version \
                 (nothing reviewed is deleted), or use qrelgen refresh (coming) to update the set for a changed \
                 corpus, or choose another --out"
                    .to_owned(),
            ),
            Self::Foreign { replaced, left } => {
                let mut parts = vec!["is not empty and is not a qrelgen test set".to_owned()];
                if !replaced.is_empty() {
                    parts.push(format!("the build would replace {}", list(replaced)));
                }
                if !left.is_empty() {
                    parts.push(format!("it would leave {} beside the set, which the build does not write", list(left)));
                }
                let message = parts.join("; ");
                let hint = "choose an empty or new --out, or pass --force to write the set there anyway (files \
                            the build does not write are left as they are)";
                (message, hint.to_owned())
            }
        };
        Some(Error::OutOccupied { path: out.to_owned(), message, hint })
    }

    /// The files a forced build leaves beside the set it writes.
    #[must_use]
    pub fn left(&self) -> &[String] {
        match self {
            Self::Foreign { left, .. } => left,
            Self::Nothing | Self::Set | Self::Reviewed => &[],
        }
    }
}

/// The first few names, and how many more.
#[must_use]
pub fn list(names: &[String]) -> String {
    let shown = names.iter().take(LISTED).map(String::as_str).collect::<Vec<_>>().join(", ");
    match names.len().checked_sub(LISTED) {
        Some(more) if more > 0 => format!("{shown} and {more} more"),
        _ => shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_nothing_a_set_reviewed_or_foreign() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let out = dir.path().join("out");
        assert_eq!(inspect(&out).ok(), Some(Occupant::Nothing), "a missing folder");
        fs_err::create_dir_all(out.join("index")).unwrap_or_else(|e| panic!("{e}"));
        fs_err::write(out.join("llm-cache.sqlite"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inspect(&out).ok(), Some(Occupant::Nothing), "what a killed build left");
        fs_err::create_dir_all(out.join("qrels")).unwrap_or_else(|e| panic!("{e}"));
        for name in ["qrels/test.tsv", "qrels/dev.tsv", "queries.jsonl", "notes.txt"] {
            fs_err::write(out.join(name), "x").unwrap_or_else(|e| panic!("{e}"));
        }
        let foreign = inspect(&out).unwrap_or_else(|e| panic!("{e}"));
        let expected = Occupant::Foreign {
            replaced: vec!["qrels/test.tsv".into(), "queries.jsonl".into()],
            left: vec!["notes.txt".into(), "qrels/dev.tsv".into()],
        };
        assert_eq!(foreign, expected);
        let message = foreign.refusal(&out).map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("leave notes.txt, qrels/dev.tsv beside the set"), "{message}");
        fs_err::write(out.join(MANIFEST), r#"{"format_version": 3, "tool": "qrelgen 0.1.0"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inspect(&out).ok(), Some(Occupant::Set));
        fs_err::create_dir_all(out.join(REVIEW_DIR)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inspect(&out).ok(), Some(Occupant::Reviewed));
        fs_err::write(out.join(MANIFEST), r#"{"name": "someone else's"}"#).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(inspect(&out), Ok(Occupant::Foreign { .. })));
    }

    #[test]
    fn long_lists_are_cut() {
        let names: Vec<String> = (0..13).map(|i| format!("f{i}")).collect();
        assert_eq!(list(&names), "f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 and 3 more");
    }
}
