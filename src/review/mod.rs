//! The human review loop: the review queue goes out to annotators ([`export`]), their decisions
//! come back ([`decisions`], [`label_studio`]) and become the next version of the set
//! ([`apply`], [`version`]); two reviewers' judgments are compared and resolved ([`agreement`]);
//! and the reviewed sample estimates the share of good queries in the whole set ([`estimate`],
//! [`status`]).
//!
//! Input: a set folder written by `qrelgen build` and decision files. Output: new versions of
//! `queries.jsonl` and the qrels, the previous ones kept under `versions/`. Invariants: every
//! version is derived from the base (what the machine made: version 1, or the version a
//! `build --force` made) and the ledger of every decision applied since, so applying in any order of files gives what the last decisions say; a file
//! with one bad row applies nothing; the same file applied twice changes nothing.

pub mod agreement;
pub mod apply;
pub mod decisions;
pub mod estimate;
pub mod export;
pub mod judge_agreement;
pub mod label_studio;
mod log;
mod raw;
mod rules;
pub mod set;
pub mod status;
pub mod version;

pub use crate::error::Problem;
use crate::id::{ChunkId, QueryId};
pub use crate::record::Location;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// The highest relevance grade a reviewer can give.
pub const GRADE_MAX: u8 = 3;

/// What a reviewer decided about a query, in order of severity (the `strict` policy lets the
/// most severe win).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::VariantArray)]
#[strum(serialize_all = "snake_case", ascii_case_insensitive)]
pub enum Decision {
    /// The query and its qrels are right as they are (grades may still be corrected).
    Accept,
    /// The query is kept with a corrected text (`edited_text`).
    Edit,
    /// A `no_answer` query that the corpus does answer: the chunks graded 1 or more answer it.
    Answerable,
    /// The query leaves the set (`reject_reason` says why).
    Reject,
}

impl Decision {
    /// The label written in decision files: serde's name.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// Parses a label as written by [`Decision::label`] (any case).
    #[must_use]
    pub fn from_label(label: &str) -> Option<Self> {
        label.parse().ok()
    }

    /// Whether the query, as the machine made it, was good: an accept counts, even with corrected
    /// chunk grades (an edit, a rejection or an answerable `no_answer` query each mean the machine
    /// erred). An accepted query always keeps a relevant chunk: apply refuses one that would not.
    #[must_use]
    pub fn is_good(self) -> bool {
        self == Self::Accept
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A reviewer's grade for one chunk.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChunkGrade {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// 0–3, on the scale of the qrels.
    pub grade: u8,
}

/// One reviewer's judgment of one query, as read from a decisions file and checked for form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgment {
    /// The query judged.
    pub query_id: QueryId,
    /// Who judged it.
    pub reviewer: String,
    /// The decision; `None` when the reviewer only graded chunks.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub decision: Option<Decision>,
    /// Why it was rejected.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reject_reason: Option<String>,
    /// The corrected query text.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub edited_text: Option<String>,
    /// Grades given to chunks, shown ones and added ones, in chunk order.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub grades: Vec<ChunkGrade>,
}

/// A judgment with the place it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Where it was read.
    pub at: Location,
    /// What it says.
    pub judgment: Judgment,
    /// The query text as the row shows it, when the format carries one (JSONL `text`, CSV
    /// `query`): a text changed without the decision `edit` is refused.
    pub shown_text: Option<String>,
}

impl Located {
    /// A judgment read at `at`, without a shown text.
    #[must_use]
    pub fn new(at: Location, judgment: Judgment) -> Self {
        Self { at, judgment, shown_text: None }
    }
}

/// The formats decisions go out and come back in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// One JSON object per item.
    Jsonl,
    /// One row per item, chunks in numbered columns.
    Csv,
    /// Label Studio tasks and labeling config; its JSON export comes back.
    LabelStudio,
}

impl Format {
    /// The format a file's extension implies: `.jsonl`, `.csv`, or `.json` (a Label Studio export).
    #[must_use]
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "jsonl" | "ndjson" => Some(Self::Jsonl),
            "csv" => Some(Self::Csv),
            "json" => Some(Self::LabelStudio),
            _ => None,
        }
    }

    /// The extension files of this format get.
    #[must_use]
    pub fn extension(self) -> &'static str {
        match self {
            Self::Jsonl => "jsonl",
            Self::Csv => "csv",
            Self::LabelStudio => "json",
        }
    }
}

/// Names of the decision fields, shared by every format (JSONL keys, CSV columns, Label Studio
/// controls), so what export writes is what the readers look for.
pub mod field {
    /// The query id.
    pub const QUERY_ID: &str = "query_id";
    /// accept, edit, answerable or reject.
    pub const DECISION: &str = "decision";
    /// Why a query is rejected.
    pub const REJECT_REASON: &str = "reject_reason";
    /// The corrected query text.
    pub const EDITED_TEXT: &str = "edited_text";
    /// Chunks to grade by id: `CHUNK_ID=GRADE` (or `CHUNK_ID` for grade 3), separated by spaces.
    pub const ADD: &str = "add";
    /// Who decided.
    pub const REVIEWER: &str = "reviewer";
}

/// Whether a shown chunk is one of the query's sources or one of its pooled chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A chunk the query was written from.
    Source,
    /// A chunk the query retrieves besides its sources.
    Pool,
}

/// A numbered place for a shown chunk: `source_1`, `pool_3`. CSV columns and Label Studio
/// fields are named after slots (`source_1_id`, `source_1_grade`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Source or pool.
    pub role: Role,
    /// 1-based position.
    pub index: usize,
}

impl Slot {
    /// `source_N` or `pool_N`.
    #[must_use]
    pub fn name(self) -> String {
        let role = match self.role {
            Role::Source => "source",
            Role::Pool => "pool",
        };
        format!("{role}_{}", self.index)
    }

    /// The field `<slot>_<suffix>`, e.g. `source_1_grade`.
    #[must_use]
    pub fn field(self, suffix: &str) -> String {
        format!("{}_{suffix}", self.name())
    }

    /// The slot and suffix of a field named by [`Slot::field`].
    #[must_use]
    pub fn parse_field(name: &str) -> Option<(Self, &str)> {
        let (role, rest) = if let Some(rest) = name.strip_prefix("source_") {
            (Role::Source, rest)
        } else {
            (Role::Pool, name.strip_prefix("pool_")?)
        };
        let (index, suffix) = rest.split_once('_')?;
        let index = index.parse().ok().filter(|&i| i >= 1)?;
        Some((Self { role, index }, suffix))
    }

    /// The slots for `sources` source chunks and `pool` pooled chunks, in display order.
    pub fn all(sources: usize, pool: usize) -> impl Iterator<Item = Self> {
        let sources = (1..=sources).map(|index| Self { role: Role::Source, index });
        sources.chain((1..=pool).map(|index| Self { role: Role::Pool, index }))
    }
}

/// Suffixes of slot fields.
pub mod slot_field {
    /// The chunk id.
    pub const ID: &str = "id";
    /// The reviewer's grade (empty: keep the machine's).
    pub const GRADE: &str = "grade";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_fields_round_trip() {
        let slot = Slot { role: Role::Pool, index: 12 };
        assert_eq!(slot.field(slot_field::GRADE), "pool_12_grade");
        assert_eq!(Slot::parse_field("pool_12_grade"), Some((slot, "grade")));
        assert_eq!(
            Slot::parse_field("source_1_machine_grade").map(|(s, f)| (s.name(), f)),
            Some(("source_1".into(), "machine_grade"))
        );
        assert_eq!(Slot::parse_field("source_0_grade"), None);
        assert_eq!(Slot::parse_field("decision"), None);
        assert_eq!(Slot::all(2, 1).map(Slot::name).collect::<Vec<_>>(), ["source_1", "source_2", "pool_1"]);
    }

    #[test]
    fn decisions_parse_in_any_case_and_order_by_severity() {
        assert_eq!(Decision::from_label("Reject"), Some(Decision::Reject));
        assert_eq!(Decision::from_label("maybe"), None);
        assert!(Decision::Reject > Decision::Answerable && Decision::Edit > Decision::Accept);
        assert!(Decision::Accept.is_good() && !Decision::Edit.is_good());
    }

    #[test]
    fn labels_are_the_names_serde_writes() {
        use strum::VariantArray as _;
        crate::testing::labels_are_serde_names(Decision::label);
        for &d in Decision::VARIANTS {
            assert_eq!(Decision::from_label(&d.label().to_uppercase()), Some(d));
        }
        crate::testing::labels_are_serde_names(agreement::Policy::label);
        crate::testing::labels_are_serde_names(version::MadeBy::label);
        assert_eq!(
            Decision::VARIANTS,
            [Decision::Accept, Decision::Edit, Decision::Answerable, Decision::Reject],
            "VARIANTS is in declaration (severity) order"
        );
    }
}
