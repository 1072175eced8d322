//! The effective settings of a build, as the library sees them (the CLI maps flags onto this).
//! Recorded in full in the manifest, so a run can be repeated.

use crate::chunk::ChunkConfig;
use crate::filter::FilterConfig;
use crate::generate::TopicConfig;
use crate::generate::{LlmGeneration, Mix};
use crate::index::Segmenter;
use crate::judge::JudgeConfig;
use crate::llm::LlmConfig;
use crate::runs::PoolRunConfig;
use crate::sample::SampleConfig;
use crate::text::Language;
use serde::Serialize;
use std::path::PathBuf;

/// Which generator writes the queries.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GeneratorConfig {
    /// Simulated topical queries, no network.
    Offline,
    /// A chat model behind an OpenAI-compatible endpoint.
    Llm(Box<LlmSetup>),
}

/// Everything the LLM generator needs.
#[derive(Debug, Clone, Serialize)]
pub struct LlmSetup {
    /// The endpoint and how to call it.
    pub llm: LlmConfig,
    /// How to ask for queries.
    pub generation: LlmGeneration,
    /// Prompt folder; `None` = the bundled prompts.
    pub prompts: Option<PathBuf>,
    /// Reply cache; `None` = `llm-cache.sqlite` in the output folder.
    pub cache: Option<PathBuf>,
}

/// Everything a build needs besides the output folder.
#[derive(Debug, Clone, Serialize)]
pub struct BuildConfig {
    /// A folder of .txt/.md/.html files or a JSONL file.
    pub corpus: PathBuf,
    /// The JSONL lines are chunks already: use them as-is, keep their ids.
    pub prechunked: bool,
    /// How documents are split.
    pub chunking: ChunkConfig,
    /// How Chinese text is segmented for BM25.
    pub segmenter: Segmenter,
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
    /// Queries at least this similar (Jaccard of their shingles) to one in the set are dropped.
    pub dedup_threshold: f64,
    /// Chunks at least this similar (estimated Jaccard of their 3-word shingles) are copies of
    /// each other, relevant together.
    pub chunk_dup_threshold: f64,
    /// The LLM judge (used with the LLM generator).
    pub judge: JudgeConfig,
    /// The review queue.
    pub review: SampleConfig,
    /// The topics of offline queries (their co-relevant chunks).
    pub topics: TopicConfig,
    /// The user's retrievers' runs, pooled for judging (`--pool-run`).
    pub pool_runs: PoolRunConfig,
    /// Who writes the queries.
    pub generator: GeneratorConfig,
    /// The language of the queries; `None` = the corpus language.
    pub language: Option<Language>,
    /// Plan and estimate the calls, send none, write no test set.
    #[serde(skip)]
    pub dry_run: bool,
    /// Threads of every parallel stage (indexing, the round trip). Outputs do not depend on it,
    /// so the manifest leaves it out.
    #[serde(skip)]
    pub threads: usize,
}

/// The threads this machine can run at once (1 when it cannot tell): the default of `--threads`.
#[must_use]
pub fn all_cores() -> std::num::NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(std::num::NonZeroUsize::MIN)
}
