//! One writer at a time, and readers that never see a publish half done.
//!
//! Two OS advisory locks (`flock`, through fs4), each on a file of its own in the set folder, so
//! the OS releases them when their holder ends, however it ends (kill -9 included: no stale
//! locks):
//! - [`WRITER`]: held exclusively, for its whole run, by every command that changes the set
//!   ([`SetLock`]); the holder writes who it is into the file (command, pid, start time), which a
//!   second writer names when it fails at once, or waits for with `--wait`.
//! - [`PUBLISH`]: held exclusively by a publish or a recovery ([`PublishLock::exclusive`]), and
//!   shared by a reader for as long as it reads ([`super::ReadGuard`]), so a reader sees the files of
//!   one version, never half of two; a publish killed half way (its journal still in
//!   `.rollback/`) is rolled back by the reader first, under the writer lock, or, when a writer
//!   holds it, the reader refuses naming that writer.

use super::layout::{PUBLISH, WRITER};
use crate::error::{Error, Result};
use fs4::fs_std::FileExt as _;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Whether a writer that finds the set locked waits for it or fails at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Fail at once, naming the holder.
    No,
    /// Wait until the holder is done (a note on stderr says for whom).
    Yes,
}

impl Wait {
    /// `Yes` when `wait` (a `--wait` flag).
    #[must_use]
    pub fn from_flag(wait: bool) -> Self {
        if wait { Self::Yes } else { Self::No }
    }
}

/// Who holds a set's writer lock, as its lock file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The command, e.g. `refresh`.
    pub command: String,
    /// Its process id.
    pub pid: u32,
    /// When it took the lock (an HTTP date, UTC).
    pub started: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`qrelgen {}` (pid {}, since {})", self.command, self.pid, self.started)
    }
}

/// The hint of a writer that found the set locked.
const WRITER_HINT: &str = "wait for it to finish and run the command again, or pass --wait to wait for it";

/// The writer lock of a set folder, held until dropped (or the process ends).
#[derive(Debug)]
pub struct SetLock {
    file: File,
    dir: PathBuf,
}

impl SetLock {
    /// Takes the writer lock of the set in `dir` (made if missing) for `command`: at once, or,
    /// with [`Wait::Yes`], once its holder is done.
    ///
    /// # Errors
    /// [`Error::SetBusy`] naming the holder when another command holds it and `wait` is
    /// [`Wait::No`]; [`Error::Output`] when the folder or the lock file cannot be made.
    pub fn acquire(dir: &Path, command: &str, wait: Wait) -> Result<Self> {
        fs_err::create_dir_all(dir).map_err(|source| Error::Output { path: dir.to_owned(), source })?;
        let path = dir.join(WRITER);
        let file = open(&path)?;
        let locked =
            file.try_lock_exclusive().map_err(|source| Error::Output { path: path.clone(), source })?;
        if !locked {
            let holder = holder_text(&path);
            if wait == Wait::No {
                return Err(Error::SetBusy { path: dir.to_owned(), holder, hint: WRITER_HINT });
            }
            eprintln!("note: {} is being changed by {holder}; waiting for it to finish", dir.display());
            file.lock_exclusive().map_err(|source| Error::Output { path: path.clone(), source })?;
        }
        let holder = Holder { command: command.to_owned(), pid: std::process::id(), started: now() };
        write_holder(&file, &holder).map_err(|source| Error::Output { path, source })?;
        let lock = Self { file, dir: dir.to_owned() };
        super::check_format(dir)?;
        Ok(lock)
    }

    /// The set folder.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SetLock {
    fn drop(&mut self) {
        // The holder's record goes first, so that nobody names a command that is done; the OS
        // releases the lock with the file anyway.
        let _ = self.file.set_len(0);
        let _ = fs4::fs_std::FileExt::unlock(&self.file);
    }
}

/// The publish lock of a set folder, held until dropped.
#[derive(Debug)]
pub struct PublishLock {
    _file: Option<File>,
}

impl PublishLock {
    /// Takes the publish lock of `dir` exclusively, waiting for readers to finish (a publish or a
    /// recovery: they are short).
    ///
    /// # Errors
    /// [`Error::Output`] when the lock file cannot be made or locked.
    pub fn exclusive(dir: &Path) -> Result<Self> {
        let path = dir.join(PUBLISH);
        let file = open(&path)?;
        file.lock_exclusive().map_err(|source| Error::Output { path, source })?;
        Ok(Self { _file: Some(file) })
    }

    /// Takes the publish lock of `dir` shared, waiting for a publish under way to finish. In a
    /// folder where the lock file cannot be made (a read-only set, which nobody can publish
    /// into), or that does not exist, nothing is locked.
    ///
    /// # Errors
    /// [`Error::Input`] when the lock file exists but cannot be locked.
    pub fn shared(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Ok(Self { _file: None });
        }
        let path = dir.join(PUBLISH);
        let Ok(file) = open(&path) else { return Ok(Self { _file: None }) };
        fs4::fs_std::FileExt::lock_shared(&file).map_err(|source| Error::Input { path, source })?;
        Ok(Self { _file: Some(file) })
    }
}

/// Opens (or makes) a lock file for reading and writing, keeping what it holds.
fn open(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| Error::Output { path: path.to_owned(), source })
}

/// Replaces what the lock file says with `holder`.
fn write_holder(mut file: &File, holder: &Holder) -> std::io::Result<()> {
    use std::io::{Seek as _, Write as _};
    file.set_len(0)?;
    file.seek(std::io::SeekFrom::Start(0))?;
    let json = serde_json::to_string(holder).map_err(std::io::Error::other)?;
    file.write_all(json.as_bytes())?;
    file.write_all(b"\n")
}

/// Who holds the lock at `path`, as a phrase for a message.
fn holder_text(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    serde_json::from_str::<Holder>(text.trim())
        .map_or_else(|_| "another qrelgen command (it has not said which yet)".to_owned(), |h| h.to_string())
}

/// Now, as an HTTP date (UTC).
fn now() -> String {
    httpdate::fmt_http_date(std::time::SystemTime::now())
}

/// The holder recorded in the writer lock file of `dir`, if any (whether or not it still holds
/// the lock).
#[must_use]
pub fn recorded_holder(dir: &Path) -> Option<Holder> {
    let text = std::fs::read_to_string(dir.join(WRITER)).ok()?;
    serde_json::from_str(text.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_fails_at_once_naming_the_first_and_gets_the_lock_once_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let set = dir.path().join("set");
        let first = SetLock::acquire(&set, "refresh", Wait::No).unwrap();
        let holder = recorded_holder(&set).unwrap();
        assert_eq!((holder.command.as_str(), holder.pid), ("refresh", std::process::id()));
        let err = SetLock::acquire(&set, "review apply", Wait::No).unwrap_err().to_string();
        assert!(err.contains("`qrelgen refresh` (pid ") && err.contains("--wait"), "{err}");
        drop(first);
        assert_eq!(recorded_holder(&set), None, "a released lock names nobody");
        let second = SetLock::acquire(&set, "review apply", Wait::No).unwrap();
        assert_eq!(recorded_holder(&set).map(|h| h.command), Some("review apply".to_owned()));
        assert_eq!(second.dir(), set);
    }

    #[test]
    fn a_waiting_writer_gets_the_lock_when_the_holder_releases_it() {
        let dir = tempfile::tempdir().unwrap();
        let set = dir.path().to_owned();
        let first = SetLock::acquire(&set, "refresh", Wait::No).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn({
            let set = set.clone();
            move || {
                let lock = SetLock::acquire(&set, "build", Wait::Yes);
                tx.send(lock.is_ok()).unwrap();
                lock
            }
        });
        // Still waiting: the holder has not let go (no answer can have come).
        assert!(rx.try_recv().is_err());
        drop(first);
        assert!(rx.recv().unwrap(), "the waiter got the lock");
        drop(waiter.join().unwrap());
    }

    #[test]
    fn a_reader_waits_for_no_one_when_no_publish_is_under_way_and_shares_with_readers() {
        let dir = tempfile::tempdir().unwrap();
        let _writer = SetLock::acquire(dir.path(), "refresh", Wait::No).unwrap();
        let one = crate::set::ReadGuard::open(dir.path(), "eval").unwrap();
        let two = crate::set::ReadGuard::open(dir.path(), "validate").unwrap();
        drop((one, two));
        let _publish = PublishLock::exclusive(dir.path()).unwrap();
    }
}
