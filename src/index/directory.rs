//! The index folder as qrelgen reads and writes it: tantivy's memory-mapped directory, except
//! for the document stores, which are read with positioned reads, and for the syncs of the
//! files it writes, which wait for [`Directory::sync_directory`] and are then made all at once.
//!
//! Searching touches a small part of the postings again and again, which a memory map serves
//! best. The document store is different: building the topic space reads every chunk's text
//! once, and mapped, every page read would stay in the process's resident memory (`RssFile`) for
//! the rest of the run, as large as the compressed texts. Read through the file, the pages stay
//! in the kernel's page cache only, and tantivy's store reader still keeps its cache of recent
//! blocks.
//!
//! tantivy syncs each file of a new segment as it is finished, one after the other, and then the
//! folder, before it writes `meta.json` (a file is durable only once both are done). Here a
//! finished file is only flushed and noted; `sync_directory` syncs the noted files together
//! (a file system commits syncs that wait together in one go), then the folder: the same
//! guarantee before `meta.json`, at the cost of about one sync instead of one per file.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use tantivy::HasLen;
use tantivy::directory::error::{DeleteError, LockError, OpenDirectoryError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    AntiCallToken, Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, OwnedBytes, TerminatingWrite,
    WatchCallback, WatchHandle, WritePtr,
};

/// A memory-mapped index folder whose document stores are read, not mapped, and whose written
/// files are synced together.
#[derive(Debug, Clone)]
pub(super) struct IndexDirectory {
    root: PathBuf,
    mapped: MmapDirectory,
    /// Files written and finished since the last `sync_directory`, not yet synced.
    unsynced: Arc<Mutex<Vec<File>>>,
}

impl IndexDirectory {
    /// Opens the index folder `root`.
    pub(super) fn open(root: &Path) -> Result<Self, OpenDirectoryError> {
        Ok(Self { root: root.to_owned(), mapped: MmapDirectory::open(root)?, unsynced: Arc::default() })
    }
}

/// Finished files kept open for the next `sync_directory`, at most: past this many (a large
/// build's many segments between two commits), they are synced at once, so a build never holds
/// more open files than this.
const UNSYNCED_MAX: usize = 64;

/// Syncs a folder, so the renames into it survive a crash (a no-op where folders cannot be
/// opened as files).
///
/// # Errors
/// When the folder cannot be opened or synced.
pub(crate) fn sync_folder(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    fs_err::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Syncs the data of `files`, many at once.
fn sync_files(files: &[File]) -> io::Result<()> {
    crate::threads::sync_together(files, File::sync_data, |panic| {
        io::Error::other(format!("a sync thread panicked: {panic}"))
    })
}

/// A file being written: flushed when finished, and noted for the next `sync_directory`.
struct Unsynced {
    file: Option<File>,
    unsynced: Arc<Mutex<Vec<File>>>,
}

impl io::Write for Unsynced {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(file) => file.write(buf),
            None => Err(io::Error::other("write after the file was finished")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TerminatingWrite for Unsynced {
    fn terminate_ref(&mut self, _: AntiCallToken) -> io::Result<()> {
        if let Some(mut file) = self.file.take() {
            io::Write::flush(&mut file)?;
            let full = {
                let mut unsynced = self.unsynced.lock().unwrap_or_else(PoisonError::into_inner);
                unsynced.push(file);
                (unsynced.len() >= UNSYNCED_MAX).then(|| std::mem::take(&mut *unsynced))
            };
            // Synced outside the lock, so other writer threads finishing a file do not wait.
            if let Some(files) = full {
                sync_files(&files)?;
            }
        }
        Ok(())
    }
}

/// Whether tantivy's file `path` is a segment's document store.
fn is_store(path: &Path) -> bool {
    path.extension().is_some_and(|extension| extension == "store")
}

impl Directory for IndexDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        if !is_store(path) {
            return self.mapped.get_file_handle(path);
        }
        let opened = File::open(self.root.join(path)).and_then(|file| {
            let len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
            Ok(ReadFile { file, len })
        });
        match opened {
            Ok(file) => Ok(Arc::new(file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(OpenReadError::FileDoesNotExist(path.to_owned()))
            }
            Err(e) => Err(OpenReadError::wrap_io_error(e, path.to_owned())),
        }
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.mapped.delete(path)
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.mapped.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        // As tantivy's memory-mapped directory opens it; durable after `sync_directory`.
        let file = File::options().write(true).create_new(true).open(self.root.join(path)).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                OpenWriteError::FileAlreadyExists(path.to_owned())
            } else {
                OpenWriteError::wrap_io_error(e, path.to_owned())
            }
        })?;
        let unsynced = Unsynced { file: Some(file), unsynced: Arc::clone(&self.unsynced) };
        Ok(io::BufWriter::new(Box::new(unsynced)))
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.mapped.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.mapped.atomic_write(path, data)
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.mapped.acquire_lock(lock)
    }

    fn sync_directory(&self) -> io::Result<()> {
        let files = std::mem::take(&mut *self.unsynced.lock().unwrap_or_else(PoisonError::into_inner));
        sync_files(&files)?;
        self.mapped.sync_directory()
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.mapped.watch(watch_callback)
    }
}

/// A file read by positioned reads (several threads at once, no shared cursor).
#[derive(Debug)]
struct ReadFile {
    file: File,
    len: usize,
}

impl HasLen for ReadFile {
    fn len(&self) -> usize {
        self.len
    }
}

impl FileHandle for ReadFile {
    fn read_bytes(&self, range: Range<usize>) -> io::Result<OwnedBytes> {
        if range.end > self.len || range.start > range.end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bytes {range:?} of a file of {} bytes", self.len),
            ));
        }
        let mut buffer = vec![0; range.len()];
        read_at(&self.file, &mut buffer, range.start as u64)?;
        Ok(OwnedBytes::new(buffer))
    }
}

/// Fills `buffer` from `file` at `offset`, leaving the file's cursor alone on Unix.
#[cfg(unix)]
pub(crate) fn read_at(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buffer, offset)
}

/// Writes all of `bytes` into `file` at `offset`.
#[cfg(unix)]
pub(crate) fn write_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

/// Fills `buffer` from `file` at `offset`.
#[cfg(windows)]
pub(crate) fn read_at(file: &File, mut buffer: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buffer.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buffer, offset)? {
            0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            read => {
                buffer = &mut buffer[read..];
                offset += read as u64;
            }
        }
    }
    Ok(())
}

/// Writes all of `bytes` into `file` at `offset`.
#[cfg(windows)]
pub(crate) fn write_at(file: &File, mut bytes: &[u8], mut offset: u64) -> io::Result<()> {
    while !bytes.is_empty() {
        match std::os::windows::fs::FileExt::seek_write(file, bytes, offset)? {
            0 => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            written => {
                bytes = &bytes[written..];
                offset += written as u64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_file_serves_ranges_and_refuses_ranges_past_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.store");
        std::fs::write(&path, b"0123456789").unwrap();
        let directory = IndexDirectory::open(dir.path()).unwrap();
        let handle = directory.get_file_handle(Path::new("0.store")).unwrap();
        assert_eq!(handle.len(), 10);
        assert_eq!(handle.read_bytes(2..5).unwrap().as_slice(), b"234");
        assert!(handle.read_bytes(4..4).unwrap().as_slice().is_empty());
        assert!(handle.read_bytes(8..11).is_err());
        assert!(matches!(
            directory.get_file_handle(Path::new("1.store")),
            Err(OpenReadError::FileDoesNotExist(_))
        ));
    }

    #[test]
    fn written_files_wait_for_sync_directory_and_are_synced_there() {
        let dir = tempfile::tempdir().unwrap();
        let directory = IndexDirectory::open(dir.path()).unwrap();
        for name in ["a.idx", "b.term"] {
            let mut writer = directory.open_write(Path::new(name)).unwrap();
            io::Write::write_all(&mut writer, name.as_bytes()).unwrap();
            writer.terminate().unwrap();
        }
        assert!(matches!(
            directory.open_write(Path::new("a.idx")),
            Err(OpenWriteError::FileAlreadyExists(_))
        ));
        assert_eq!(directory.unsynced.lock().unwrap().len(), 2, "finished, not synced yet");
        directory.sync_directory().unwrap();
        assert!(directory.unsynced.lock().unwrap().is_empty());
        assert_eq!(std::fs::read(dir.path().join("b.term")).unwrap(), b"b.term");
        // Never more than `UNSYNCED_MAX` open at once.
        for n in 0..UNSYNCED_MAX + 6 {
            let writer = directory.open_write(Path::new(&format!("{n}.pos"))).unwrap();
            writer.terminate().unwrap();
        }
        assert_eq!(directory.unsynced.lock().unwrap().len(), 6);
    }
}
