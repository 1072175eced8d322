//! Staged writes, publish and recovery of a set folder: every file is written to a temporary
//! file in its folder and renamed into place ([`AtomicFile`]), and a command's outputs are staged
//! in `OUT/.staging/` and published together ([`Staging::publish`]), so a failed run leaves the
//! previous set whole, never half old, half new: the files a publish replaces are kept in
//! `OUT/.rollback/` with a journal until the last one is in place and the folders are synced; a
//! failed move puts them back at once, a killed publish is rolled back by the next command that
//! opens the folder ([`recover`]). A publish and a recovery hold the set's publish lock
//! ([`super::lock::PublishLock`]) exclusively, so a reader holding it shared never sees one half
//! done.

use super::layout::{JOURNAL, KEPT, MANIFEST, REPLACED, ROLLBACK, STAGING};
use super::lock::PublishLock;
use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::BTreeSet;
use std::io::{BufWriter, Write};
use std::path::{Component, Path, PathBuf};

/// A file written to a temporary name in its folder and renamed into place on
/// [`AtomicFile::commit`]; dropped without a commit, it leaves no trace. It is synced to disk
/// before the rename, unless it lies in a staging folder: [`Staging::publish`] syncs every
/// staged file at once before it moves any.
pub struct AtomicFile {
    path: PathBuf,
    writer: BufWriter<tempfile::NamedTempFile>,
    sync: bool,
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
        let staged = path.components().any(|c| c.as_os_str() == STAGING);
        Ok(Self { path: path.to_owned(), writer: BufWriter::new(temp), sync: !staged })
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

    /// Appends `bytes` (lines made elsewhere, each ending with a newline).
    ///
    /// # Errors
    /// [`Error::Output`] naming the file.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer.write_all(bytes).map_err(|e| output_error(&self.path, e))
    }

    /// Flushes, syncs (outside a staging folder) and renames the file into place.
    ///
    /// # Errors
    /// [`Error::Output`] naming the file.
    pub fn commit(self) -> Result<()> {
        let path = self.path;
        let temp = self.writer.into_inner().map_err(|e| output_error(&path, e.into_error()))?;
        if self.sync {
            temp.as_file().sync_all().map_err(|e| output_error(&path, e))?;
        }
        temp.persist(&path).map_err(|e| output_error(&path, e.error))?;
        Ok(())
    }
}

/// Where a build (or a review version, or a refresh) writes its files before publishing them
/// together: `OUT/.staging/`, made on the first [`Staging::path`] (a leftover of a killed run
/// cleared then), so a run that stages nothing (a refresh that finds nothing changed) creates,
/// clears and writes nothing in `OUT`.
pub struct Staging {
    dir: PathBuf,
    out: PathBuf,
    published: bool,
    /// Whether the folder was made (a leftover cleared first), and the error if that failed:
    /// set by the first [`Staging::path`].
    made: std::sync::OnceLock<std::result::Result<(), (std::io::ErrorKind, String)>>,
    /// The files [`Staging::sync`] synced, by path, each with what identifies it as it was
    /// then ([`FileKey`]); [`Staging::path`] forgets a file's entry, so that the file a writer
    /// writes there since is synced again.
    synced: std::sync::Mutex<std::collections::HashMap<PathBuf, FileKey>>,
}

impl Staging {
    /// The staging folder of `out`, not yet made (see [`Staging::path`]); a publish into `out`
    /// that a killed run left half done is rolled back first.
    ///
    /// # Errors
    /// The errors of [`recover`].
    pub fn create(out: &Path) -> Result<Self> {
        recover(out)?;
        Ok(Self {
            dir: out.join(STAGING),
            out: out.to_owned(),
            published: false,
            made: std::sync::OnceLock::new(),
            synced: std::sync::Mutex::default(),
        })
    }

    /// Makes the folder, once: a leftover from a killed run is cleared first (an error is kept
    /// for [`Staging::ready`]).
    fn make(&self) {
        let kept = |result: std::io::Result<()>| result.map_err(|e| (e.kind(), e.to_string()));
        self.made.get_or_init(|| {
            if fs_err::symlink_metadata(&self.dir).is_ok() {
                kept(fs_err::remove_dir_all(&self.dir))?;
            }
            kept(fs_err::create_dir_all(&self.dir))
        });
    }

    /// Whether the folder was made, or the error of making it (staged files are not published
    /// from a folder whose leftover could not be cleared).
    fn ready(&self) -> Result<bool> {
        match self.made.get() {
            None => Ok(false),
            Some(Ok(())) => Ok(true),
            Some(Err((kind, message))) => {
                Err(output_error(&self.dir, std::io::Error::new(*kind, message.clone())))
            }
        }
    }

    /// Syncs every file staged so far to disk, many at once (see [`AtomicFile`]): a run calls
    /// it as its write stage ends, so that its publish has little left to sync (a publish syncs
    /// only the files not synced here, and those written again since).
    ///
    /// # Errors
    /// [`Error::Output`] naming the file that could not be synced.
    pub fn sync(&self) -> Result<()> {
        if !self.ready()? {
            return Ok(());
        }
        let synced = sync_files(&self.dir, &self.unsynced(&self.staged()))?;
        self.synced.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(synced);
        Ok(())
    }

    /// Those of `files` (relative to the staging folder) that [`Staging::sync`] has not synced
    /// as they are now.
    fn unsynced(&self, files: &[PathBuf]) -> Vec<PathBuf> {
        let synced = self.synced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let unsynced = |relative: &&PathBuf| {
            synced.get(*relative).is_none_or(|key| FileKey::of(&self.dir.join(relative)) != Some(*key))
        };
        files.iter().filter(unsynced).cloned().collect()
    }

    /// Where to write the output file `name` (e.g. `qrels/test.tsv`) for now.
    ///
    /// The first call makes the staging folder (clearing a leftover of a killed run); if that
    /// fails, the writes fail or the publish (or sync) does. The file at `name` counts as not synced
    /// from now on (it is written anew).
    #[must_use]
    pub fn path(&self, name: &str) -> PathBuf {
        self.make();
        self.synced.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(Path::new(name));
        self.dir.join(name)
    }

    /// Where the staged file `name` is, to read or probe it: unlike [`Staging::path`], this
    /// neither makes the folder nor counts the file as not synced (nothing is written there).
    #[must_use]
    pub fn staged_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Moves every staged file into the output folder, all or none: the files under each of
    /// `first` (paths relative to the output folder, a file or a folder) in that order, then the
    /// rest by name, `manifest.json` last. Each file it replaces is kept until the last one is
    /// in place and the folders are synced; if a move fails, the replaced files are put back and
    /// the files it created removed.
    ///
    /// # Errors
    /// [`Error::Publish`] when a move failed and the folder was put back as it was;
    /// [`Error::PublishRestore`] when putting it back failed too (the next [`recover`] retries).
    pub fn publish(self, first: &[&str]) -> Result<()> {
        self.publish_keeping(first, None)
    }

    /// [`Staging::publish`], keeping the files it replaces that `keep` names: each is moved into
    /// `keep`'s folder instead of being deleted (no copy), as part of the publish (rolled back
    /// with it: put back in place).
    ///
    /// # Errors
    /// As [`Staging::publish`].
    pub fn publish_keeping(mut self, first: &[&str], keep: Option<&Keep>) -> Result<()> {
        let made = self.ready()?;
        let mut files = self.staged();
        let rank = |relative: &Path| {
            if relative == Path::new(MANIFEST) {
                return first.len() + 1;
            }
            first.iter().position(|prefix| relative.starts_with(prefix)).unwrap_or(first.len())
        };
        files.sort_by_key(|relative| rank(relative));
        sync_files(&self.dir, &self.unsynced(&files))?;
        let _publish = PublishLock::exclusive(&self.out)?;
        let mut rollback = Rollback::begin(&self.out, &files, keep)?;
        let moved = files.iter().enumerate().try_for_each(|(i, relative)| {
            rollback.replace(&self.dir.join(relative), relative)?;
            if i == 0 {
                super::pause_point("publish");
            }
            Ok(())
        });
        if let Err(failed) = moved.and_then(|()| rollback.sync()) {
            return Err(rollback.undo(failed));
        }
        rollback.finish()?;
        self.published = true;
        if made {
            fs_err::remove_dir_all(&self.dir).map_err(|e| output_error(&self.dir, e))?;
        }
        Ok(())
    }

    /// Moves the staged files under each of `prefixes` (in that order) into the output folder
    /// now, and syncs the folders they land in, so they are on disk before anything else moves.
    /// These moves stand even if the [`Staging::publish`] of the rest fails: use it for files
    /// that only add (a kept version), never for files a reader takes as the current state.
    ///
    /// # Errors
    /// [`Error::Output`] naming the file that could not be moved.
    pub fn publish_part(&mut self, prefixes: &[&str]) -> Result<()> {
        self.ready()?;
        let staged = self.staged();
        let files: Vec<PathBuf> = prefixes
            .iter()
            .flat_map(|prefix| staged.iter().filter(move |relative| relative.starts_with(prefix)))
            .cloned()
            .collect();
        sync_files(&self.dir, &self.unsynced(&files))?;
        let _publish = PublishLock::exclusive(&self.out)?;
        let mut folders = BTreeSet::new();
        for relative in &files {
            let target = self.out.join(relative);
            folders.extend(make_parent(&target)?);
            fs_err::rename(self.dir.join(relative), &target).map_err(|e| output_error(&target, e))?;
        }
        sync_dirs(&folders)
    }

    /// The staged files, relative to the staging folder, by name: none unless this run made the
    /// folder (what a killed run left there is not this run's to publish).
    fn staged(&self) -> Vec<PathBuf> {
        if !matches!(self.made.get(), Some(Ok(()))) {
            return Vec::new();
        }
        walkdir::WalkDir::new(&self.dir)
            .sort_by_file_name()
            .into_iter()
            .filter_map(std::result::Result::ok)
            .filter(|e| e.file_type().is_file())
            .filter_map(|e| e.path().strip_prefix(&self.dir).ok().map(Path::to_owned))
            .collect()
    }
}

/// Files of the output folder that a publish keeps when it replaces them: moved into `dir`
/// (relative to the output folder).
pub struct Keep<'a> {
    /// Where they go, e.g. `versions/v3`.
    pub dir: &'a Path,
    /// Their paths, relative to the output folder.
    pub names: &'a [&'a str],
}

/// A publish under way: the files it replaced, kept in `OUT/.rollback/` (or in the folder a
/// [`Keep`] names), and a journal of the files it created, so that a failure now, or a crash
/// found by the next [`recover`], puts the folder back as it was.
struct Rollback {
    out: PathBuf,
    dir: PathBuf,
    /// The folders files were moved into, to sync.
    folders: BTreeSet<PathBuf>,
    /// The files replaced that go into `.0` (relative to `out`), not into the rollback folder.
    keep: Option<(PathBuf, BTreeSet<PathBuf>)>,
}

/// In [`super::layout::KEPT`], after a file's name: a copy was already where the file is kept.
const COPY_MARK: &str = "\tcopy";

impl Rollback {
    /// Writes the list of files kept by moving them (each marked `copy` when a file is already
    /// where it goes), and the journal (both synced) before anything moves.
    fn begin(out: &Path, files: &[PathBuf], keep: Option<&Keep>) -> Result<Self> {
        for relative in files.iter().map(PathBuf::as_path).chain(keep.map(|keep| keep.dir)) {
            listable(out, relative)?;
        }
        let dir = out.join(ROLLBACK);
        let made = !dir.exists();
        let exists = |relative: &&PathBuf| fs_err::symlink_metadata(out.join(relative)).is_ok();
        let keep = keep.map(|keep| {
            let names: BTreeSet<PathBuf> = keep.names.iter().map(PathBuf::from).collect();
            let moved: BTreeSet<PathBuf> =
                files.iter().filter(exists).filter(|f| names.contains(*f)).cloned().collect();
            (keep.dir.to_owned(), moved)
        });
        if let Some((archive_dir, moved)) = &keep {
            let mut lines = format!("{}\n", archive_dir.to_string_lossy());
            for relative in moved {
                lines.push_str(&relative.to_string_lossy());
                if fs_err::symlink_metadata(out.join(archive_dir).join(relative)).is_ok() {
                    lines.push_str(COPY_MARK);
                }
                lines.push('\n');
            }
            write_text(&dir.join(KEPT), &lines)?;
        }
        let created: String = files
            .iter()
            .filter(|relative| !exists(relative))
            .flat_map(|relative| [relative.to_string_lossy(), "\n".into()])
            .collect();
        write_text(&dir.join(JOURNAL), &created)?;
        sync_dir(&dir)?;
        if made {
            // The rollback folder itself must be on disk for the next open to find it.
            sync_dir(out)?;
        }
        Ok(Self { out: out.to_owned(), dir, folders: BTreeSet::from([out.to_owned()]), keep })
    }

    /// Moves `staged` to `OUT/relative`, keeping the file it replaces.
    fn replace(&mut self, staged: &Path, relative: &Path) -> Result<()> {
        let target = self.out.join(relative);
        self.folders.extend(make_parent(&target)?);
        if let Ok(meta) = fs_err::symlink_metadata(&target) {
            if meta.is_dir() {
                let in_the_way = std::io::Error::new(
                    std::io::ErrorKind::IsADirectory,
                    "a folder is where this file goes; move it away",
                );
                return Err(output_error(&target, in_the_way));
            }
            let kept = match &self.keep {
                Some((archive_dir, moved)) if moved.contains(relative) => {
                    let kept = self.out.join(archive_dir).join(relative);
                    if fs_err::symlink_metadata(&kept).is_ok() {
                        // A file already there (a copy an earlier publish left) is replaced
                        // too: kept with the others, put back by a rollback.
                        let aside = self.dir.join(REPLACED).join(archive_dir).join(relative);
                        self.folders.extend(make_parent(&aside)?);
                        fs_err::rename(&kept, &aside).map_err(|e| output_error(&kept, e))?;
                    }
                    kept
                }
                _ => self.dir.join(REPLACED).join(relative),
            };
            self.folders.extend(make_parent(&kept)?);
            fs_err::rename(&target, &kept).map_err(|e| output_error(&target, e))?;
        }
        fs_err::rename(staged, &target).map_err(|e| output_error(&target, e))
    }

    /// Syncs every folder a file was moved into.
    fn sync(&self) -> Result<()> {
        sync_dirs(&self.folders)
    }

    /// Puts the folder back after `failed`, and says what happened.
    fn undo(self, failed: Error) -> Error {
        match roll_back(&self.out) {
            Ok(()) => Error::Publish { out: self.out, source: Box::new(failed) },
            Err(restoring) => Error::PublishRestore {
                restoring: chain(&restoring),
                kept: self.dir.join(REPLACED),
                out: self.out,
                source: Box::new(failed),
            },
        }
    }

    /// Ends the publish: the journal goes, then the replaced files.
    fn finish(self) -> Result<()> {
        let journal = self.dir.join(JOURNAL);
        fs_err::remove_file(&journal).map_err(|e| output_error(&journal, e))?;
        fs_err::remove_dir_all(&self.dir).map_err(|e| output_error(&self.dir, e))
    }
}

/// Refuses a name the rollback's lists (one name a line, a tab before a mark) cannot hold: one
/// with a tab or a line break, or not UTF-8, would be read back as another name.
fn listable(out: &Path, relative: &Path) -> Result<()> {
    let listed = relative.to_str().is_some_and(|name| !name.contains(['\t', '\n', '\r']));
    if listed {
        return Ok(());
    }
    let unlistable = std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "a file name with a tab, a line break or bytes that are not UTF-8 cannot be published (rename the file)",
    );
    Err(output_error(&out.join(relative), unlistable))
}

/// Whether a publish into `out` is under way or was cut short (its rollback folder is there).
#[must_use]
pub fn unfinished(out: &Path) -> bool {
    fs_err::symlink_metadata(out.join(ROLLBACK)).is_ok()
}

/// Rolls back a publish into `out` that a killed process left half done (its journal is still
/// there), and clears what a complete one left. Returns whether there was one to roll back.
///
/// # Errors
/// [`Error::Input`]/[`Error::Output`] naming the file that could not be read or moved back.
pub fn recover(out: &Path) -> Result<bool> {
    let dir = out.join(ROLLBACK);
    if !dir.exists() {
        return Ok(false);
    }
    // A publish under way holds the lock: wait for it, then look again.
    let _publish = PublishLock::exclusive(out)?;
    if !dir.exists() {
        return Ok(false);
    }
    let interrupted = dir.join(JOURNAL).exists();
    if interrupted {
        roll_back(out)?;
    } else {
        fs_err::remove_dir_all(&dir).map_err(|e| output_error(&dir, e))?;
    }
    Ok(interrupted)
}

/// Moves every replaced file back into place and removes every file the publish created.
fn roll_back(out: &Path) -> Result<()> {
    let dir = out.join(ROLLBACK);
    let journal = dir.join(JOURNAL);
    let created =
        fs_err::read_to_string(&journal).map_err(|source| Error::Input { path: journal.clone(), source })?;
    let replaced = dir.join(REPLACED);
    let mut folders = BTreeSet::from([out.to_owned()]);
    // Only plain relative paths: the lists name files inside the folder, nothing else.
    let inside =
        |relative: &&str| Path::new(relative).components().all(|c| matches!(c, Component::Normal(_)));
    let kept_list = dir.join(KEPT);
    if kept_list.is_file() {
        let text = fs_err::read_to_string(&kept_list)
            .map_err(|source| Error::Input { path: kept_list.clone(), source })?;
        let mut lines = text.lines().filter(|line| !line.is_empty());
        if let Some(archive_dir) = lines.next().filter(inside) {
            // Those moved already (before the kill) go back; the others never left. Where a
            // copy was in the kept folder before (marked), the publish moved it aside first:
            // while it is not aside, the file in the kept folder is that copy, which stays (and
            // goes back there from the replaced files once it was moved aside). Names only, so
            // a remount that renumbers devices or inodes changes nothing.
            for line in lines {
                let (relative, copy) = line.strip_suffix(COPY_MARK).map_or((line, false), |r| (r, true));
                if !inside(&relative) {
                    continue;
                }
                let (kept, target) = (out.join(archive_dir).join(relative), out.join(relative));
                let aside = replaced.join(archive_dir).join(relative);
                let moved = kept.is_file() && (!copy || aside.is_file());
                if moved {
                    folders.extend(make_parent(&target)?);
                    fs_err::rename(&kept, &target).map_err(|e| output_error(&target, e))?;
                }
            }
        }
    }
    let kept = walkdir::WalkDir::new(&replaced).into_iter().filter_map(std::result::Result::ok);
    for entry in kept.filter(|e| e.file_type().is_file()) {
        let Ok(relative) = entry.path().strip_prefix(&replaced) else { continue };
        let target = out.join(relative);
        folders.extend(make_parent(&target)?);
        fs_err::rename(entry.path(), &target).map_err(|e| output_error(&target, e))?;
    }
    for relative in created.lines().filter(|line| !line.is_empty()).filter(inside) {
        let target = out.join(relative);
        if target.is_file() {
            fs_err::remove_file(&target).map_err(|e| output_error(&target, e))?;
        }
    }
    sync_dirs(&folders)?;
    fs_err::remove_file(&journal).map_err(|e| output_error(&journal, e))?;
    fs_err::remove_dir_all(&dir).map_err(|e| output_error(&dir, e))
}

/// Makes the folder `path` goes in, and returns the folders to sync for a file moved there to
/// be found after a crash: that folder, each folder made for it, and the one above the highest
/// of those (which holds its name).
fn make_parent(path: &Path) -> Result<Vec<PathBuf>> {
    let folder_of = |path: &Path| match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let parent = folder_of(path);
    let mut folders = vec![parent.clone()];
    let mut folder = parent.clone();
    while fs_err::symlink_metadata(&folder).is_err() && folder != Path::new(".") {
        folder = folder_of(&folder);
        folders.push(folder.clone());
    }
    fs_err::create_dir_all(&parent).map_err(|e| output_error(&parent, e))?;
    Ok(folders)
}

/// An error and its causes, on one line.
fn chain(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Syncs the files `files` (relative to `dir`) to disk, many at once (see
/// [`crate::threads::sync_together`]); returns them with their keys after the sync (none for a
/// file whose key cannot be told).
fn sync_files(dir: &Path, files: &[PathBuf]) -> Result<Vec<(PathBuf, FileKey)>> {
    let sync = |relative: &PathBuf| {
        let path = dir.join(relative);
        let file = std::fs::OpenOptions::new().write(true).open(&path).map_err(|e| output_error(&path, e))?;
        file.sync_all().map_err(|e| output_error(&path, e))
    };
    crate::threads::sync_together(files, sync, |panic| sync_lost(dir, panic))?;
    let keyed = |relative: &PathBuf| Some((relative.clone(), FileKey::of(&dir.join(relative))?));
    Ok(files.iter().filter_map(keyed).collect())
}

/// What tells a synced staged file from the file written at its path since: its device and
/// inode, size, and modification and change times (nanoseconds). An inode number alone is not
/// enough: a file system reuses the number of a deleted file (ext4 does at once), and every
/// write of a staged file replaces it ([`AtomicFile`]). The sizes and times tell most rewrites
/// apart; what they may not (a rewrite of the same size within one tick of the file system's
/// clock, onto a reused inode) does not happen to a file written through [`Staging::path`],
/// which forgets the file's entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FileKey {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
    changed: (i64, i64),
}

impl FileKey {
    /// The key of the file at `path` (`None` where there is none, or it cannot be told: the
    /// file is synced again).
    fn of(path: &Path) -> Option<Self> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            Some(Self {
                dev: meta.dev(),
                ino: meta.ino(),
                len: meta.len(),
                modified: meta.modified().ok(),
                changed: (meta.ctime(), meta.ctime_nsec()),
            })
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            None
        }
    }
}

/// Syncs a folder, so the renames into it survive a crash (a no-op where folders cannot be opened).
fn sync_dir(dir: &Path) -> Result<()> {
    crate::index::sync_folder(dir).map_err(|e| output_error(dir, e))
}

/// Syncs the folders `folders`, many at once.
fn sync_dirs(folders: &BTreeSet<PathBuf>) -> Result<()> {
    let folders: Vec<&PathBuf> = folders.iter().collect();
    crate::threads::sync_together(
        &folders,
        |folder| sync_dir(folder),
        |panic| sync_lost(Path::new("."), panic),
    )
}

/// The error of a thread syncing in `dir` that panicked with `panic`.
fn sync_lost(dir: &Path, panic: &str) -> Error {
    output_error(dir, std::io::Error::other(format!("a sync thread panicked: {panic}")))
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.published && self.made.get().is_some() {
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

/// Copies the file `from` to `to` atomically (in the kernel where it can: no pass through this
/// process, and on a file system with copy-on-write, its blocks shared until either changes).
///
/// # Errors
/// [`Error::Output`] naming `to` (or `from`, if it cannot be read).
pub fn copy_atomic(from: &Path, to: &Path) -> Result<()> {
    let mut source = std::fs::File::open(from).map_err(|e| output_error(from, e))?;
    let mut atomic = AtomicFile::create(to)?;
    std::io::copy(&mut source, atomic.writer.get_mut().as_file_mut()).map_err(|e| output_error(to, e))?;
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
mod tests;
