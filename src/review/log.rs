//! The review log's records: the `review` section of `manifest.json` (versions and how each
//! was made) and the ledger's entries (`review/decisions.jsonl`). Read by the set
//! ([`super::set`]), written by [`super::version`].

use super::agreement::Policy;
use super::{Decision, Format, Judgment, Location};
use crate::output::layout::VERSIONS_DIR;
use crate::set::ledger::Seal;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The folder that keeps version `n` once a later one exists.
#[must_use]
pub fn version_dir(set: &Path, n: u32) -> PathBuf {
    set.join(VERSIONS_DIR).join(format!("v{n}"))
}

/// The `review` section of `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewLog {
    /// The version in the folder.
    pub version: u32,
    /// The version it was made from.
    pub parent: u32,
    /// The version the last build wrote (1, or the one a `build --force` made): later versions
    /// are derived from it and the judgments applied since.
    #[serde(default = "first_version", skip_serializing_if = "is_first_version")]
    pub base: u32,
    /// Every version made by applying decisions or by a forced rebuild, oldest first.
    pub history: Vec<VersionRecord>,
    /// The seal of the ledger this version made (judgments and digest); absent in sets made
    /// before ledgers were sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<Seal>,
}

impl ReviewLog {
    /// The version the last build wrote: 1, or the one the last `build --force` made.
    #[must_use]
    pub fn built(&self) -> u32 {
        self.history.iter().rev().find(|r| r.made_by == MadeBy::Build).map_or(1, |r| r.version)
    }

    /// Whether the base version was made by a refresh.
    #[must_use]
    pub fn refreshed(&self) -> bool {
        self.history.iter().any(|r| r.version == self.base && r.made_by == MadeBy::Refresh)
    }
}

fn first_version() -> u32 {
    1
}

#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
fn is_first_version(version: &u32) -> bool {
    *version == 1
}

/// What made a version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum MadeBy {
    /// Decisions applied (`review apply`, `review agree --resolve`).
    #[default]
    Review,
    /// A build into the reviewed set with `--force`.
    Build,
    /// `qrelgen refresh` from a changed corpus.
    Refresh,
    /// `qrelgen pool`: runs pooled and the new pairs graded.
    Pool,
}

impl MadeBy {
    /// Its label in the manifest: serde's name.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }

    #[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
    fn is_review(&self) -> bool {
        *self == Self::Review
    }
}

/// How one version was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// Its number.
    pub version: u32,
    /// The version it was made from.
    pub parent: u32,
    /// What made it (a review unless said).
    #[serde(default, skip_serializing_if = "MadeBy::is_review")]
    pub made_by: MadeBy,
    /// blake3 of the decisions files (and the policy, when two reviewers were resolved): the key
    /// that makes a second apply of the same input a no-op.
    pub key: String,
    /// The decisions files applied.
    pub inputs: Vec<InputFile>,
    /// Who judged.
    pub reviewers: Vec<String>,
    /// How two reviewers' judgments were merged, if they were.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resolve: Option<Policy>,
    /// What the decisions did, and the size of the set they left.
    pub counts: Counts,
}

/// A decisions file as applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// Its file name when it was applied.
    pub name: String,
    /// Its copy in the set folder.
    pub stored: String,
    /// blake3 of its bytes.
    pub blake3: String,
    /// Its format.
    pub format: Format,
}

/// What a version's decisions did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Judgments read (rows with a decision or a grade).
    pub judgments: usize,
    /// Queries accepted.
    pub accepted: usize,
    /// Queries edited.
    pub edited: usize,
    /// `no_answer` queries found answerable.
    pub answerable: usize,
    /// Queries rejected.
    pub rejected: usize,
    /// Chunk grades given.
    pub grades: usize,
    /// Queries in the set after the decisions.
    pub queries: usize,
    /// qrels rows (grade 1 or more) after the decisions.
    pub qrels: usize,
}

impl Counts {
    /// Counts the decisions and grades of `judgments`.
    #[must_use]
    pub fn of(judgments: &[Judgment]) -> Self {
        let decided = |d| judgments.iter().filter(|j| j.decision == Some(d)).count();
        Self {
            judgments: judgments.len(),
            accepted: decided(Decision::Accept),
            edited: decided(Decision::Edit),
            answerable: decided(Decision::Answerable),
            rejected: decided(Decision::Reject),
            grades: judgments.iter().map(|j| j.grades.len()).sum(),
            queries: 0,
            qrels: 0,
        }
    }
}

/// One line of the ledger: a judgment and the version that applied it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The version it made.
    pub version: u32,
    /// Where it was read (line, row, task, or resolved).
    pub at: Location,
    /// The judgment.
    #[serde(flatten)]
    pub judgment: Judgment,
}
