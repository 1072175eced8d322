//! The effective settings of a build, as the library sees them (the CLI maps flags onto this).
//! Recorded in full in the manifest, so a run can be repeated.

use crate::chunk::ChunkConfig;
use crate::filter::FilterConfig;
use crate::generate::Mix;
use crate::sample::SampleConfig;
use serde::Serialize;
use std::path::PathBuf;

/// Everything a build needs besides the output folder.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BuildConfig {
    /// A folder of .txt/.md/.html files or a JSONL file.
    pub corpus: PathBuf,
    /// The JSONL lines are chunks already: use them as-is, keep their ids.
    pub prechunked: bool,
    /// How documents are split.
    pub chunking: ChunkConfig,
    /// Queries wanted in the test set.
    pub queries: usize,
    /// Share of each query type.
    pub mix: Mix,
    /// Most queries per document; `None` = automatic (twice a fair share, at least 2).
    pub per_doc_cap: Option<usize>,
    /// Seed of every random draw.
    pub seed: u64,
    /// Generation rounds at most: later rounds top up types that fell short.
    pub max_rounds: u32,
    /// The round trip.
    pub filter: FilterConfig,
    /// The review queue.
    pub review: SampleConfig,
}
