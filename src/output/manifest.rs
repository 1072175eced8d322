//! `manifest.json`: what was run, on what, with which result; enough to repeat the run.

use crate::config::BuildConfig;
use crate::filter::Checks;
use crate::generate::LlmSummary;
use crate::llm::NetworkStats;
use crate::record::QueryType;
use crate::rounds::{Shortfall, TypeCounts};
use crate::text::Language;
use serde::Serialize;
use std::collections::BTreeMap;

/// The corpus as the run saw it.
#[derive(Debug, Clone, Serialize)]
pub struct CorpusSummary {
    /// Documents (or pre-chunked lines) read.
    pub documents: usize,
    /// Files or lines skipped with a warning.
    pub skipped: usize,
    /// Files ignored for their extension.
    pub ignored: usize,
    /// Hash of every document's id, title and text, in order.
    pub hash: String,
    /// Chunks made.
    pub chunks: usize,
    /// Hash of every chunk's id and text, in order (the index is rebuilt when it changes).
    pub chunks_hash: String,
    /// The language of most of the text.
    pub language: Language,
    /// Documents per detected language.
    pub languages: BTreeMap<Language, usize>,
    /// Groups of near-identical chunks (`chunk_groups.jsonl`).
    pub duplicate_groups: usize,
    /// Chunks in those groups.
    pub chunks_in_groups: usize,
}

/// The contents of `manifest.json`.
#[derive(Debug, Serialize)]
pub struct Manifest<'a> {
    /// Version of the output formats.
    pub format_version: u32,
    /// `qrelgen <version>`.
    pub tool: String,
    /// The seed (also in `config`, repeated for the eye).
    pub seed: u64,
    /// The generator that wrote the queries.
    pub generator: String,
    /// Effective settings.
    pub config: &'a BuildConfig,
    /// Effective per-document cap.
    pub per_doc_cap: usize,
    /// What the filter checked besides its settings (derived from the corpus and the generator).
    pub filter_checks: Checks,
    /// The corpus.
    pub corpus: CorpusSummary,
    /// Generation rounds run.
    pub rounds: u32,
    /// Per-type counts.
    pub counts: BTreeMap<QueryType, TypeCounts>,
    /// Types that ended below their quota.
    pub shortfalls: Vec<Shortfall>,
    /// The language the queries are written in.
    pub language: Language,
    /// The LLM generator's endpoint, response format and token use (cached replies included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmSummary>,
    /// What this particular run did: the only part that differs between identical runs.
    pub run: RunInfo,
}

/// The part of the manifest that differs between identical runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunInfo {
    /// Wall time per stage in milliseconds.
    pub timings_ms: BTreeMap<&'static str, u64>,
    /// Requests, cache hits, retries and 429s of this run's LLM calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm_network: Option<NetworkStats>,
}

/// `qrelgen <version>`, the manifest's `tool`.
#[must_use]
pub fn tool() -> String {
    format!("qrelgen {}", env!("CARGO_PKG_VERSION"))
}
