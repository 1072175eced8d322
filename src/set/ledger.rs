//! The review ledger's seal: the manifest records how many judgments the ledger
//! (`review/decisions.jsonl`) held when its version was made, and the BLAKE3 digest of those
//! lines; every version also keeps a copy of the ledger it made (`versions/ledger-v<N>.jsonl`).
//! An emptied, truncated or edited ledger no longer matches its seal, and every command that
//! reads judgments from it refuses (or, `validate`, reports) it, saying how to put it back.
//!
//! Lines after the sealed ones are allowed only when they belong to a later version than the
//! set's (what a failed apply leaves; the set ignores them).

use super::layout::{LEDGER, VERSIONS_DIR};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The longest ledger line read, in bytes (a judgment is well under 64 KiB).
const MAX_LINE: usize = 1 << 20;

/// What the manifest records of the ledger of its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    /// The number of judgments (non-blank lines).
    pub decisions: usize,
    /// BLAKE3 of those lines, each followed by a line break.
    pub blake3: String,
}

impl Seal {
    /// The seal of the ledger lines `lines` (blank ones skipped).
    #[must_use]
    pub fn of<'a>(lines: impl IntoIterator<Item = &'a str>) -> Self {
        let mut hasher = blake3::Hasher::new();
        let mut decisions = 0;
        for line in lines.into_iter().filter(|line| !line.trim().is_empty()) {
            hasher.update(line.as_bytes());
            hasher.update(b"\n");
            decisions += 1;
        }
        Self { decisions, blake3: hasher.finalize().to_hex().to_string() }
    }

    /// The seal of the ledger bytes `bytes` (a JSONL file).
    #[must_use]
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self::of(String::from_utf8_lossy(bytes).lines())
    }
}

/// Where version `version`'s copy of its ledger is kept, relative to the set folder.
#[must_use]
pub fn archived_copy(version: u32) -> PathBuf {
    Path::new(VERSIONS_DIR).join(format!("ledger-v{version}.jsonl"))
}

/// Checks the ledger of the set in `dir` against `seal`, recorded by version `version`.
///
/// # Errors
/// [`Error::LedgerDamaged`] saying what differs (missing, fewer or other judgments, judgments
/// added) and how to restore the ledger; [`Error::Input`] when it cannot be read.
pub fn check(dir: &Path, seal: &Seal, version: u32) -> Result<()> {
    let path = dir.join(LEDGER);
    let text = match fs_err::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => return Err(Error::Input { path, source }),
    };
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).collect();
    if let Some(long) = lines.iter().position(|line| line.len() > MAX_LINE) {
        return Err(damaged(dir, version, &format!("line {} is over {MAX_LINE} bytes long", long + 1)));
    }
    let held = lines.len();
    if held < seal.decisions {
        let what = if held == 0 { "is empty or missing".to_owned() } else { "was truncated".to_owned() };
        return Err(damaged(
            dir,
            version,
            &format!(
                "{what}: it holds {held} judgment(s), but version {version} recorded {}",
                seal.decisions
            ),
        ));
    }
    let sealed = Seal::of(lines[..seal.decisions].iter().copied());
    if sealed.blake3 != seal.blake3 {
        return Err(damaged(
            dir,
            version,
            &format!(
                "was edited: its first {} judgment(s) are not those version {version} recorded (digest {} instead of {})",
                seal.decisions, sealed.blake3, seal.blake3
            ),
        ));
    }
    let added = lines[seal.decisions..]
        .iter()
        .filter(|line| entry_version(line).is_none_or(|v| v <= version))
        .count();
    if added > 0 {
        return Err(damaged(
            dir,
            version,
            &format!(
                "was edited: {added} judgment(s) after the {} recorded were added by hand",
                seal.decisions
            ),
        ));
    }
    Ok(())
}

/// The version a ledger line belongs to (`None` if it does not say).
fn entry_version(line: &str) -> Option<u32> {
    #[derive(Deserialize)]
    struct Versioned {
        version: u32,
    }
    serde_json::from_str::<Versioned>(line).ok().map(|v| v.version)
}

/// The error for a ledger of version `version` that does not match its seal.
fn damaged(dir: &Path, version: u32, message: &str) -> Error {
    let copy = archived_copy(version);
    let hint = if dir.join(&copy).is_file() {
        format!(
            "nothing was changed; restore the ledger from the copy version {version} kept: cp {} {}",
            dir.join(&copy).display(),
            dir.join(LEDGER).display()
        )
    } else {
        format!(
            "nothing was changed; this set keeps no copy of version {version}'s ledger: restore {} from a backup \
             (earlier versions' copies are versions/ledger-v<N>.jsonl, their sets versions/v<N>/)",
            dir.join(LEDGER).display()
        )
    };
    Error::LedgerDamaged { path: dir.join(LEDGER), message: format!("the review ledger {message}"), hint }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(dir: &Path, text: &str) {
        fs_err::create_dir_all(dir.join("review")).unwrap();
        fs_err::write(dir.join(LEDGER), text).unwrap();
    }

    #[test]
    fn an_emptied_truncated_edited_or_added_to_ledger_is_found() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let lines = "{\"version\":2,\"q\":\"a\"}\n{\"version\":2,\"q\":\"b\"}\n";
        let seal = Seal::of_bytes(lines.as_bytes());
        assert_eq!(seal.decisions, 2);
        ledger(dir, lines);
        check(dir, &seal, 2).unwrap();
        ledger(dir, &format!("{lines}{{\"version\":3,\"q\":\"c\"}}\n"));
        check(dir, &seal, 2).unwrap();
        let cases = [
            ("", "is empty or missing: it holds 0 judgment(s), but version 2 recorded 2"),
            ("{\"version\":2,\"q\":\"a\"}\n", "was truncated: it holds 1"),
            ("{\"version\":2,\"q\":\"a\"}\n{\"version\":2,\"q\":\"B\"}\n", "was edited: its first 2"),
            (
                "{\"version\":2,\"q\":\"a\"}\n{\"version\":2,\"q\":\"b\"}\n{\"version\":1}\n",
                "1 judgment(s) after",
            ),
        ];
        for (text, expected) in cases {
            ledger(dir, text);
            let message = check(dir, &seal, 2).unwrap_err().to_string();
            assert!(message.contains(expected), "{text:?}: {message}");
            assert!(message.contains("keeps no copy"), "{message}");
        }
        fs_err::create_dir_all(dir.join(VERSIONS_DIR)).unwrap();
        fs_err::write(dir.join(archived_copy(2)), lines).unwrap();
        fs_err::remove_file(dir.join(LEDGER)).unwrap();
        let message = check(dir, &seal, 2).unwrap_err().to_string();
        assert!(message.contains("cp ") && message.contains("ledger-v2.jsonl"), "{message}");
    }
}
