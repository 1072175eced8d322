//! `manifest.json`: what was run, on what, with which result; enough to repeat the run.

use crate::config::BuildConfig;
use crate::filter::Checks;
use crate::generate::LlmSummary;
use crate::llm::NetworkStats;
use crate::record::{FailureKind, QueryType, Reason};
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
    pub run: Invocation,
}

/// The part of the manifest that differs between identical runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Invocation {
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

/// What happened to the queries of one type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TypeCounts {
    /// Quota from `--queries` and `--mix`.
    pub requested: usize,
    /// Requests planned, over all rounds.
    pub planned: usize,
    /// Queries the generator wrote.
    pub generated: usize,
    /// Generated as this type and kept (under this type or, relabelled, another).
    pub kept: usize,
    /// Generated as this type and flagged for review.
    pub flagged: usize,
    /// Generated as this type and left out.
    pub dropped: usize,
    /// Generated as this type, ended as another (a copying paraphrase, a reclassified
    /// no_answer query), whatever became of it.
    pub relabelled: usize,
    /// Places of this type's quota taken by queries of this type in the set.
    pub filled: usize,
    /// Queries of this type in the set beyond its quota (reclassified no_answer queries).
    pub beyond_quota: usize,
    /// Left out, by reason (written in the order of the reasons' labels).
    #[serde(serialize_with = "by_label")]
    pub dropped_by_reason: BTreeMap<Reason, usize>,
    /// Requests the generator could not serve, by kind of failure (the messages are in
    /// `rejects.jsonl`).
    pub generation_failures: BTreeMap<FailureKind, usize>,
}

impl TypeCounts {
    /// Queries of this type in the test set.
    #[must_use]
    pub fn in_set(&self) -> usize {
        self.filled + self.beyond_quota
    }

    /// The reasons queries of this type were left out for, with their counts, in the order of
    /// the reasons' labels (as reports list them).
    #[must_use]
    pub fn dropped_by_label(&self) -> Vec<(&'static str, usize)> {
        labelled(&self.dropped_by_reason)
    }
}

fn labelled(reasons: &BTreeMap<Reason, usize>) -> Vec<(&'static str, usize)> {
    let mut labelled: Vec<(&'static str, usize)> = reasons.iter().map(|(r, &n)| (r.label(), n)).collect();
    labelled.sort_unstable();
    labelled
}

fn by_label<S: serde::Serializer>(
    reasons: &BTreeMap<Reason, usize>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(labelled(reasons))
}

/// A type that ended below its quota.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shortfall {
    /// The type.
    #[serde(rename = "type")]
    pub query_type: QueryType,
    /// Its quota.
    pub wanted: usize,
    /// Queries of it in the set.
    pub got: usize,
    /// Why, in a few words.
    pub cause: String,
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} of {} wanted; {}", self.query_type, self.got, self.wanted, self.cause)
    }
}
