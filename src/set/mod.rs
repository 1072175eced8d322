//! A set folder on disk, as a small database: its layout ([`layout`]), staged writes, publish and
//! recovery ([`publish`]), one writer at a time and readers that never see a publish half done
//! ([`lock`]), no writes into it from outside ([`ensure_outside_set`]) and a review ledger that
//! cannot lose judgments silently ([`ledger`]).
//!
//! Invariants: every command that changes a set holds its [`SetLock`] from before it reads the
//! set until after it publishes; every reader holds a [`ReadGuard`] while it reads; no path a
//! command writes to from a flag lies inside a set folder, but the folders meant for it
//! ([`layout::EVAL_DIR`], [`RUNS_DIR`]).

pub mod guard;
pub mod layout;
pub mod ledger;
pub mod lock;
pub mod pooled;
pub mod publish;

pub use guard::ReadGuard;
pub use lock::{Holder, PublishLock, SetLock, Wait};

use crate::error::{Error, Result};
use crate::record::FORMAT_VERSION;
use std::path::{Path, PathBuf};

/// In a set folder, where `qrelgen run --to` may write runs (nothing of the set lives there).
pub const RUNS_DIR: &str = "runs";

/// Whether `dir` holds a set: a `manifest.json` that qrelgen wrote.
#[must_use]
pub fn is_set(dir: &Path) -> bool {
    #[derive(serde::Deserialize)]
    struct Signature {
        tool: String,
    }
    let Ok(text) = fs_err::read_to_string(dir.join(layout::MANIFEST)) else { return false };
    serde_json::from_str::<Signature>(&text).is_ok_and(|s| s.tool.starts_with("qrelgen"))
}

/// Refuses a set in `dir` whose manifest records another format than [`FORMAT_VERSION`], the
/// one this qrelgen reads and writes: a newer one (a later qrelgen wrote it: its files may hold
/// what this one would misread or drop) and an older one (only pre-release builds wrote one, so
/// no migration exists: the set is built again). A folder without a qrelgen manifest passes
/// (it is no set yet, or [`crate::validate`] reports the damage).
///
/// # Errors
/// [`Error::SetFormat`] with the formats and what to do.
pub fn check_format(dir: &Path) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Signature {
        tool: String,
        format_version: Option<u32>,
    }
    let path = dir.join(layout::MANIFEST);
    let Ok(text) = fs_err::read_to_string(&path) else { return Ok(()) };
    let Ok(found) = serde_json::from_str::<Signature>(&text) else { return Ok(()) };
    if !found.tool.starts_with("qrelgen") || found.format_version == Some(FORMAT_VERSION) {
        return Ok(());
    }
    let ours = concat!("qrelgen ", env!("CARGO_PKG_VERSION"));
    let (message, hint) = match found.format_version {
        Some(v) if v > FORMAT_VERSION => (
            format!("the set is in format {v} (written by {}); {ours} reads format {FORMAT_VERSION}", found.tool),
            "update qrelgen (cargo install qrelgen, or pip install -U qrelgen) and run the command again".to_owned(),
        ),
        v => (
            format!(
                "the set is in format {} (written by {}, a pre-release build); {ours} reads format \
                 {FORMAT_VERSION} and has no migration from it",
                v.map_or_else(|| "1".to_owned(), |v| v.to_string()),
                found.tool
            ),
            "build the set again from its corpus with this qrelgen; copy review/decisions.jsonl out first and \
             `qrelgen review apply` it to the new set"
                .to_owned(),
        ),
    };
    Err(Error::SetFormat { path, message, hint })
}

/// The set folder `path` lies in (itself included), if any: the nearest folder above it that
/// holds a set, compared with symlinks resolved, so `set/../set/queries.jsonl` and a link into
/// the set are found too.
#[must_use]
pub fn set_around(path: &Path) -> Option<PathBuf> {
    let resolved = resolve(path);
    resolved.ancestors().find(|dir| is_set(dir)).map(Path::to_owned)
}

/// The set folder that holds the folder `dir` (not `dir` itself), if any: a build's `--out`
/// there would write a set inside another.
#[must_use]
pub fn enclosing_set(dir: &Path) -> Option<PathBuf> {
    resolve(dir).ancestors().skip(1).find(|up| is_set(up)).map(Path::to_owned)
}

/// `path` made absolute with its existing part's symlinks resolved (the rest, not yet made, kept
/// as written).
fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut rest = Vec::new();
    let mut head = absolute.as_path();
    loop {
        if let Ok(real) = head.canonicalize() {
            return rest.iter().rev().fold(real, |acc: PathBuf, part| acc.join(part));
        }
        match (head.parent(), head.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                head = parent;
            }
            _ => return absolute,
        }
    }
}

/// What a command may do with a file it is told to write (`--to`, `--out`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overwrite {
    /// Replace a file that is there only if qrelgen wrote it (`is_ours` says so).
    Ours,
    /// Replace whatever is there (`--force`): never a set's own files, though.
    Force,
}

/// Refuses an output path `path` (given as `flag`) that lies inside a set folder (but in the
/// folders meant for outputs: `allowed`, relative to the set), and one that would replace a file
/// `is_ours` does not recognise, unless `overwrite` is [`Overwrite::Force`].
///
/// # Errors
/// [`Error::OutputRefused`] saying why and what to do.
pub fn ensure_outside_set(
    path: &Path,
    flag: &str,
    allowed: &[&str],
    overwrite: Overwrite,
    is_ours: impl Fn(&Path) -> bool,
) -> Result<()> {
    let resolved = resolve(path);
    if let Some(set) = set_around(path) {
        let inside = resolved.strip_prefix(&set).unwrap_or(&resolved);
        let permitted = allowed.iter().any(|dir| inside.starts_with(dir) && inside != Path::new(dir));
        if !permitted {
            let places =
                allowed.iter().map(|dir| format!("{}/", set.join(dir).display())).collect::<Vec<_>>();
            let inside_too =
                if places.is_empty() { String::new() } else { format!(" or into {}", places.join(", ")) };
            return Err(Error::OutputRefused {
                path: path.to_owned(),
                message: format!(
                    "{flag} lies inside the test set in {}: a command never writes into a set's files from outside \
                     (only the set's own commands change it)",
                    set.display()
                ),
                hint: format!("write it outside the set folder{inside_too}"),
            });
        }
    }
    if overwrite == Overwrite::Ours && resolved.is_file() && !is_ours(&resolved) {
        return Err(Error::OutputRefused {
            path: path.to_owned(),
            message: format!("{flag} names a file that qrelgen did not write; it would be replaced"),
            hint: "choose another path, or pass --force to replace it".to_owned(),
        });
    }
    if resolved.is_dir() {
        return Err(Error::OutputRefused {
            path: path.to_owned(),
            message: format!("{flag} names a folder, not a file"),
            hint: "give the path of a file to write".to_owned(),
        });
    }
    Ok(())
}

/// A test hook, for the fault-injection tests: with `QRELGEN_TEST_PAUSE=<point>:<file>` in the
/// environment, a command that reaches `point` (`locked`: it holds the writer lock; `publish`:
/// its publish has moved its first file) makes `<file>.reached` and waits until `<file>` exists,
/// so a test can act (kill it, start another command) at a known point without timing anything.
/// Without the variable, nothing happens.
pub fn pause_point(point: &str) {
    let Ok(value) = std::env::var("QRELGEN_TEST_PAUSE") else { return };
    let Some((at, file)) = value.split_once(':') else { return };
    if at != point {
        return;
    }
    let file = PathBuf::from(file);
    let mut reached = file.clone().into_os_string();
    reached.push(".reached");
    let _ = fs_err::write(&reached, std::process::id().to_string());
    while !file.exists() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_in(dir: &Path) {
        fs_err::create_dir_all(dir).unwrap();
        fs_err::write(dir.join(layout::MANIFEST), r#"{"tool": "qrelgen 0.1.0", "format_version": 3}"#)
            .unwrap();
    }

    #[test]
    fn outputs_inside_a_set_are_refused_but_in_its_output_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let set = tmp.path().join("set");
        set_in(&set);
        let ours = |_: &Path| true;
        for inside in ["queries.jsonl", "review/decisions.jsonl", "qrels/new.tsv", "x/../qrels.trec", "runs"]
        {
            let err = ensure_outside_set(&set.join(inside), "--to", &[RUNS_DIR], Overwrite::Force, ours);
            let message = err.map_err(|e| e.to_string()).unwrap_err();
            assert!(message.contains("inside the test set"), "{inside}: {message}");
        }
        ensure_outside_set(&set.join("runs/bm25.run"), "--to", &[RUNS_DIR], Overwrite::Ours, ours).unwrap();
        ensure_outside_set(&tmp.path().join("bm25.run"), "--to", &[RUNS_DIR], Overwrite::Ours, ours).unwrap();
        #[cfg(unix)]
        {
            let link = tmp.path().join("link");
            std::os::unix::fs::symlink(&set, &link).unwrap();
            let err = ensure_outside_set(&link.join("queries.jsonl"), "--to", &[], Overwrite::Force, ours);
            assert!(err.is_err(), "a link into the set is the set");
        }
    }

    #[test]
    fn a_file_qrelgen_did_not_write_needs_force() {
        let tmp = tempfile::tempdir().unwrap();
        let notes = tmp.path().join("notes.txt");
        fs_err::write(&notes, "mine").unwrap();
        let theirs = |_: &Path| false;
        let err = ensure_outside_set(&notes, "--to", &[], Overwrite::Ours, theirs).unwrap_err().to_string();
        assert!(err.contains("did not write") && err.contains("--force"), "{err}");
        ensure_outside_set(&notes, "--to", &[], Overwrite::Force, theirs).unwrap();
        assert!(ensure_outside_set(tmp.path(), "--to", &[], Overwrite::Force, theirs).is_err(), "a folder");
    }
}
