//! Stage 7, output: writes the test set into the output folder, which is itself a BEIR dataset.
//!
//! Input: chunks (streamed), judged candidates, the review queue and the run's summary. Output:
//! files. A build writes them into `OUT/.staging/` and publishes them together at the end
//! ([`Staging`]), so a failed run leaves the previous test set whole, never half old, half new.
//! Invariants: every file is written to a temporary file in the same folder and renamed into
//! place, so a killed run never leaves a half-written file; outputs are byte-identical for the
//! same inputs (what differs between runs lives only in `manifest.json`'s `run`).

mod beir;
mod manifest;
mod measures;
pub(crate) mod report;

pub use beir::{
    POOL_TSV, PROVENANCE_HEADER, PROVENANCE_TSV, QRELS_TREC, QRELS_TSV, corpus_line, qrels, query_line,
    write_pool, write_qrels,
};
pub use manifest::{CorpusSummary, Manifest, RunInfo};
pub use measures::Measures;
pub use report::{Summary, TypeCounts, render_report};

use crate::error::{Error, Result};
use serde::Serialize;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file written to a temporary name in its folder and renamed into place on
/// [`AtomicFile::commit`]; dropped without a commit, it leaves no trace.
pub struct AtomicFile {
    path: PathBuf,
    writer: BufWriter<tempfile::NamedTempFile>,
}

impl AtomicFile {
    /// Starts writing `path`.
    ///
    /// # Errors
    /// [`Error::Output`] naming `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        fs_err::create_dir_all(dir).map_err(|e| output_error(path, e))?;
        let mut builder = tempfile::Builder::new();
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
        let temp = builder.tempfile_in(dir).map_err(|e| output_error(path, e))?;
        Ok(Self { path: path.to_owned(), writer: BufWriter::new(temp) })
    }

    /// Appends one JSON value and a newline.
    ///
    /// # Errors
    /// [`Error::Output`] naming the file.
    pub fn write_json_line<T: Serialize>(&mut self, value: &T) -> Result<()> {
        serde_json::to_writer(&mut self.writer, value)
            .map_err(std::io::Error::from)
            .and_then(|()| self.writer.write_all(b"\n"))
            .map_err(|e| output_error(&self.path, e))
    }

    /// Flushes, syncs and renames the file into place.
    ///
    /// # Errors
    /// [`Error::Output`] naming the file.
    pub fn commit(self) -> Result<()> {
        let path = self.path;
        let temp = self.writer.into_inner().map_err(|e| output_error(&path, e.into_error()))?;
        temp.as_file().sync_all().map_err(|e| output_error(&path, e))?;
        temp.persist(&path).map_err(|e| output_error(&path, e.error))?;
        Ok(())
    }
}

/// Where a build writes its files before publishing them together.
pub struct Staging {
    dir: PathBuf,
    out: PathBuf,
    published: bool,
}

/// The staging folder's name inside the output folder.
const STAGING: &str = ".staging";
/// Published last: its presence says the files beside it belong together.
const MANIFEST: &str = "manifest.json";

impl Staging {
    /// An empty staging folder in `out` (a leftover from a killed run is cleared).
    ///
    /// # Errors
    /// [`Error::Output`] if the folder cannot be made.
    pub fn create(out: &Path) -> Result<Self> {
        let dir = out.join(STAGING);
        if dir.exists() {
            fs_err::remove_dir_all(&dir).map_err(|e| output_error(&dir, e))?;
        }
        fs_err::create_dir_all(&dir).map_err(|e| output_error(&dir, e))?;
        Ok(Self { dir, out: out.to_owned(), published: false })
    }

    /// Where to write the output file `name` (e.g. `qrels/test.tsv`) for now.
    #[must_use]
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Moves every staged file into the output folder, `manifest.json` last.
    ///
    /// # Errors
    /// [`Error::Output`] naming the file that could not be moved.
    pub fn publish(self) -> Result<()> {
        self.publish_ordered(&[])
    }

    /// Moves every staged file into the output folder: the files under each of `first` (paths
    /// relative to the output folder, a file or a folder) in that order, then the rest by name,
    /// `manifest.json` last.
    ///
    /// # Errors
    /// [`Error::Output`] naming the file that could not be moved; files moved before it stay.
    pub fn publish_ordered(mut self, first: &[&str]) -> Result<()> {
        let mut files = self.staged();
        let rank = |relative: &Path| {
            if relative == Path::new(MANIFEST) {
                return first.len() + 1;
            }
            first.iter().position(|prefix| relative.starts_with(prefix)).unwrap_or(first.len())
        };
        files.sort_by_key(|relative| rank(relative));
        self.move_all(&files)?;
        self.published = true;
        fs_err::remove_dir_all(&self.dir).map_err(|e| output_error(&self.dir, e))
    }

    /// Moves the staged files under each of `prefixes` (in that order) into the output folder
    /// now, and syncs the folders they land in, so they are on disk before anything else moves.
    /// The rest stays staged.
    ///
    /// # Errors
    /// [`Error::Output`] naming the file that could not be moved.
    pub fn publish_part(&mut self, prefixes: &[&str]) -> Result<()> {
        let staged = self.staged();
        let files: Vec<PathBuf> = prefixes
            .iter()
            .flat_map(|prefix| staged.iter().filter(move |relative| relative.starts_with(prefix)))
            .cloned()
            .collect();
        self.move_all(&files)?;
        let mut folders: Vec<PathBuf> =
            files.iter().filter_map(|f| self.out.join(f).parent().map(Path::to_owned)).collect();
        folders.sort();
        folders.dedup();
        for folder in folders {
            sync_dir(&folder)?;
        }
        Ok(())
    }

    /// The staged files, relative to the staging folder, by name.
    fn staged(&self) -> Vec<PathBuf> {
        walkdir::WalkDir::new(&self.dir)
            .sort_by_file_name()
            .into_iter()
            .filter_map(std::result::Result::ok)
            .filter(|e| e.file_type().is_file())
            .filter_map(|e| e.path().strip_prefix(&self.dir).ok().map(Path::to_owned))
            .collect()
    }

    fn move_all(&self, files: &[PathBuf]) -> Result<()> {
        for relative in files {
            let target = self.out.join(relative);
            if let Some(parent) = target.parent() {
                fs_err::create_dir_all(parent).map_err(|e| output_error(parent, e))?;
            }
            fs_err::rename(self.dir.join(relative), &target).map_err(|e| output_error(&target, e))?;
        }
        Ok(())
    }
}

/// Syncs a folder, so the renames into it survive a crash (a no-op where folders cannot be opened).
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    fs_err::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| output_error(dir, e))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.published {
            // Best effort: a leftover is cleared by the next run anyway.
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn output_error(path: &Path, source: std::io::Error) -> Error {
    Error::Output { path: path.to_owned(), source }
}

/// Writes `path` atomically with `fill`.
///
/// # Errors
/// [`Error::Output`] naming `path`.
pub fn write_atomic(path: &Path, fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let mut atomic = AtomicFile::create(path)?;
    fill(&mut atomic.writer).map_err(|e| output_error(path, e))?;
    atomic.commit()
}

/// Writes one JSON value per line, atomically.
///
/// # Errors
/// [`Error::Output`] naming `path`.
pub fn write_jsonl<T: Serialize>(path: &Path, items: impl IntoIterator<Item = T>) -> Result<()> {
    let mut file = AtomicFile::create(path)?;
    for item in items {
        file.write_json_line(&item)?;
    }
    file.commit()
}

/// Writes pretty JSON, atomically.
///
/// # Errors
/// [`Error::Output`] naming `path`.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    write_atomic(path, |w| {
        serde_json::to_writer_pretty(&mut *w, value)?;
        w.write_all(b"\n")
    })
}

/// Writes text, atomically.
///
/// # Errors
/// [`Error::Output`] naming `path`.
pub fn write_text(path: &Path, text: &str) -> Result<()> {
    write_atomic(path, |w| w.write_all(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("sub/a.jsonl");
        write_jsonl(&path, [1, 2]).unwrap_or_else(|e| panic!("{e}"));
        write_jsonl(&path, ["x"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fs_err::read_to_string(&path).unwrap_or_default(), "\"x\"\n");
        let files = fs_err::read_dir(dir.path().join("sub")).map(Iterator::count).unwrap_or_default();
        assert_eq!(files, 1);
    }

    #[test]
    fn staging_publishes_all_files_or_none() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let out = dir.path();
        write_text(&out.join("queries.jsonl"), "old").unwrap_or_else(|e| panic!("{e}"));
        {
            let staging = Staging::create(out).unwrap_or_else(|e| panic!("{e}"));
            write_text(&staging.path("queries.jsonl"), "new").unwrap_or_else(|e| panic!("{e}"));
            // Dropped without publishing: a failed run.
        }
        assert_eq!(fs_err::read_to_string(out.join("queries.jsonl")).unwrap_or_default(), "old");
        assert!(!out.join(STAGING).exists());
        let staging = Staging::create(out).unwrap_or_else(|e| panic!("{e}"));
        write_text(&staging.path("queries.jsonl"), "new").unwrap_or_else(|e| panic!("{e}"));
        write_text(&staging.path("qrels/test.tsv"), "q\tc\t3\n").unwrap_or_else(|e| panic!("{e}"));
        staging.publish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fs_err::read_to_string(out.join("queries.jsonl")).unwrap_or_default(), "new");
        assert!(out.join("qrels/test.tsv").exists());
        assert!(!out.join(STAGING).exists());
    }

    #[test]
    fn failed_fill_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("a.txt");
        write_text(&path, "old").unwrap_or_else(|e| panic!("{e}"));
        let failed = write_atomic(&path, |_| Err(std::io::Error::other("boom")));
        assert!(failed.is_err_and(|e| e.to_string().contains("a.txt")));
        assert_eq!(fs_err::read_to_string(&path).unwrap_or_default(), "old");
    }
}
