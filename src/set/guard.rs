//! Readers that never see a publish half done: a [`ReadGuard`] holds the publish lock shared
//! while a command reads a set, after rolling back a publish a killed command left half done.

use super::lock::{PublishLock, SetLock, Wait};
use crate::error::{Error, Result};
use std::path::Path;

/// The hint of a reader that found a publish cut short while a writer holds the set.
const READER_HINT: &str = "an earlier publish into the set was cut short and that command will put it back; run \
                           this command again when it has finished";

/// A reader's hold on a set: while it lives, no publish moves a file of the set, and none is
/// half done.
#[derive(Debug)]
pub struct ReadGuard {
    _publish: PublishLock,
}

impl ReadGuard {
    /// Waits for a publish under way in `dir` to finish, rolls back one a killed command left
    /// half done (under the writer lock, as `command`), and holds the set for reading, once its
    /// format is checked ([`super::check_format`]).
    ///
    /// # Errors
    /// [`Error::SetBusy`] when a publish was cut short and another command holds the writer lock
    /// (it puts the set back itself); [`Error::SetFormat`] for a set in another format; the
    /// errors of [`super::publish::recover`].
    pub fn open(dir: &Path, command: &str) -> Result<Self> {
        let guard = Self::open_any_format(dir, command)?;
        super::check_format(dir)?;
        Ok(guard)
    }

    /// As [`ReadGuard::open`], for any format (`validate` reports the format with the rest).
    ///
    /// # Errors
    /// As [`ReadGuard::open`], but for the format.
    pub fn open_any_format(dir: &Path, command: &str) -> Result<Self> {
        loop {
            let publish = PublishLock::shared(dir)?;
            if !super::publish::unfinished(dir) {
                return Ok(Self { _publish: publish });
            }
            drop(publish);
            let _writer = match SetLock::acquire(
                dir,
                &format!("{command} (putting back a publish cut short)"),
                Wait::No,
            ) {
                Err(Error::SetBusy { path, holder, .. }) => {
                    return Err(Error::SetBusy { path, holder, hint: READER_HINT });
                }
                other => other?,
            };
            super::publish::recover(dir)?;
        }
    }
}
