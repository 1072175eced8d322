//! The typed records that stages hand to each other and that output files hold.
//!
//! Changing a serialized record is a file-format change: bump [`FORMAT_VERSION`].

use crate::id::{ChunkId, DocId, QueryId};
use serde::{Deserialize, Serialize};
use std::fmt;
use strum::{EnumString, IntoStaticStr, VariantArray};

/// Version of the output file formats, recorded in the manifest.
pub const FORMAT_VERSION: u32 = 3;

/// A source document, as read from the corpus. Lives only until it is chunked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Stable id (relative path or JSONL id).
    pub id: DocId,
    /// The JSONL id as the corpus wrote it, when it had whitespace or `#` and was renamed.
    pub source_id: Option<String>,
    /// Title: the first heading, the `<title>`, the JSONL `title`, or the file name.
    pub title: String,
    /// Plain text (HTML already reduced to text).
    pub text: String,
    /// Whether `text` is Markdown, so the chunker can split on its structure.
    pub markdown: bool,
}

/// A retrieval unit: the "documents" of the output BEIR dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Stable id, derived from the document id and the chunk text.
    pub id: ChunkId,
    /// The document the chunk comes from.
    pub doc_id: DocId,
    /// The document's id as the corpus wrote it, when it was renamed (see [`Document::source_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_id: Option<String>,
    /// Position of the chunk within its document (0-based).
    pub ordinal: u32,
    /// The document title.
    pub title: String,
    /// The chunk text.
    pub text: String,
    /// Where in its document it starts: the heading of its section in a Markdown document
    /// (a PDF's `Page N`, a Word heading), when that is not the title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
}

/// The kinds of query a generator writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, EnumString, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum QueryType {
    /// Asks for what one chunk says, in its words.
    Direct,
    /// Asks for what one chunk says, avoiding its rarest words.
    Paraphrase,
    /// Needs two chunks; all of them are relevant.
    MultiHop,
    /// Plausible in the domain, answered by no chunk.
    NoAnswer,
}

impl QueryType {
    /// All types, in report order (the declaration order, strum's `VARIANTS`).
    pub const ALL: &'static [Self] = <Self as VariantArray>::VARIANTS;

    /// The label used in flags, ids and files: serde's name.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// Parses a label as written by [`QueryType::label`].
    #[must_use]
    pub fn from_label(label: &str) -> Option<Self> {
        label.parse().ok()
    }
}

impl fmt::Display for QueryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A query written by a generator, before the round-trip filter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Stable id derived from type, sources and text.
    pub id: QueryId,
    /// The query text.
    pub text: String,
    /// The type the generator was asked for.
    #[serde(rename = "type")]
    pub query_type: QueryType,
    /// The chunks the query was written from (empty sources are never relevant for `no_answer`).
    pub sources: Vec<ChunkId>,
    /// For `no_answer`: the term that makes the query unanswerable (absent from the corpus).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub absent_term: Option<String>,
    /// The style it was written in (LLM generator: `question`, `keyword`, …).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub style: Option<String>,
    /// Verbatim quotes from the sources that support it (LLM generator).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub evidence: Vec<String>,
    /// A short answer (LLM generator).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub answer: Option<String>,
    /// For a topical query (offline generator): the chunks on its topic, co-relevant with its
    /// sources; its sources and these are all graded [`grade::TOPIC`].
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub topic: Option<Vec<ChunkId>>,
    /// Which generator wrote it, e.g. `offline`.
    pub generator: String,
    /// Generation round (1 = first; later rounds top up types that fell short).
    pub round: u32,
}

/// Where a review judgment comes from in its decisions file, for messages (ordered as in the
/// file); recorded with each judgment in the review ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Location {
    /// A JSONL line (1-based).
    Line(usize),
    /// A CSV row, counted as a spreadsheet does (the header is row 1).
    Row(usize),
    /// A Label Studio task (1-based position in the export) and its annotation (1-based).
    Task {
        /// Position of the task in the export.
        task: usize,
        /// The task's Label Studio id, if the export has one.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        id: Option<u64>,
        /// Position of the annotation in the task.
        annotation: usize,
    },
    /// A judgment made by resolving two reviewers' judgments.
    Resolved,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Line(n) => write!(f, "line {n}"),
            Self::Row(n) => write!(f, "row {n}"),
            Self::Task { task, id: Some(id), annotation } => {
                write!(f, "task {task} (id {id}), annotation {annotation}")
            }
            Self::Task { task, id: None, annotation } => write!(f, "task {task}, annotation {annotation}"),
            Self::Resolved => f.write_str("resolved"),
        }
    }
}

#[cfg(test)]
impl Candidate {
    /// A candidate for tests: `text`, of `query_type`, written from the chunks `sources`.
    pub(crate) fn sample(query_type: QueryType, text: &str, sources: &[&str]) -> Self {
        let sources: Vec<ChunkId> = sources.iter().map(|s| ChunkId::parse(s).unwrap()).collect();
        Self {
            id: QueryId::derive(query_type.label(), &sources, text),
            text: text.to_owned(),
            query_type,
            sources,
            absent_term: None,
            style: None,
            evidence: Vec::new(),
            answer: None,
            topic: None,
            generator: "test".into(),
            round: 1,
        }
    }
}

/// Where a candidate ends up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Status {
    /// In the test set.
    Kept,
    /// In the test set, marked for review first.
    Flagged,
    /// Not in the test set.
    Dropped,
}

impl Status {
    /// The label used in files and reports: serde's name.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// Why a candidate got its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Reason {
    /// Every source (or, with `--multi-hop-rule any`, one) ranks within the top N.
    SourceInTopN,
    /// A single source chunk is not within the top N.
    SourceNotInTopN,
    /// A topical query (offline) whose source misses the top N, but a chunk on its topic is
    /// within it: the query finds an answer.
    TopicInTopN,
    /// A `multi_hop` query misses the hop rule.
    HopNotInTopN,
    /// A `no_answer` query whose top hit contains no absent term.
    NoAnswerConfirmed,
    /// A `no_answer` query whose top hit contains its absent term: the corpus may answer it.
    AbsentTermFound,
    /// A `no_answer` query without an absent term to check: kept for a reviewer to confirm.
    NoAnswerUnchecked,
    /// The same type, sources and text as an earlier candidate.
    Duplicate,
    /// Its type had already reached its quota when it was judged (a top-up round over-planned).
    OverQuota,
    /// An evidence quote does not occur in the source chunks.
    EvidenceNotInSource,
    /// The query is not in the language asked for.
    WrongLanguage,
    /// Too close to a query already in the set (`--dedup-threshold`).
    NearDuplicate,
    /// A `paraphrase` query that copies its source's wording (`--max-paraphrase-overlap`,
    /// `--on-copy drop`).
    CopiesSource,
    /// A `multi_hop` query that one of its chunks answers alone (judge), or that lacks terms
    /// of one hop (offline).
    OneChunkAnswers,
    /// A `no_answer` query that a retrieved chunk answers (judge).
    AnsweredInCorpus,
    /// A `no_answer` query that a retrieved chunk answers, kept as answerable (`--reclassify`).
    Reclassified,
    /// The judge gave no usable grade: kept for a reviewer to decide.
    JudgeFailed,
    /// The sources miss the top N, but the judge grades them as answering the query
    /// (`--gate judge`): kept.
    JudgeAnswers,
    /// The judge grades the source of a `direct` or `paraphrase` query below 2: it does not
    /// answer the query (`--gate judge`).
    SourceNotAnswering,
    /// The judge grades a hop of a `multi_hop` query 0: not relevant (`--gate judge`).
    HopNotRelevant,
}

impl Reason {
    /// The label used in reports: serde's name.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// How hard a query is for BM25, measured (see [`Difficulty::measure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Difficulty {
    /// The source ranks first and the query mostly uses its words.
    Easy,
    /// In between.
    Medium,
    /// A source ranks below 3 (or misses the top N), or the query shares under half its terms
    /// with the sources.
    Hard,
}

impl Difficulty {
    /// All levels, in report order (the declaration order, strum's `VARIANTS`).
    pub const ALL: &'static [Self] = <Self as VariantArray>::VARIANTS;

    /// Easy: every source ranks 1st and overlap ≥ 0.8. Hard: a source ranks below 3rd or not at
    /// all, or overlap < 0.5. Medium: the rest. (For `multi_hop`, "ranks 1st" means its hops
    /// take the top places.)
    #[must_use]
    pub fn measure(ranks: &[Option<u32>], overlap: f64) -> Self {
        let hops = u32::try_from(ranks.len()).unwrap_or(u32::MAX);
        let worst = ranks.iter().try_fold(0, |worst, r| r.map(|r| worst.max(r)));
        match worst {
            Some(worst) if worst > 0 && worst <= hops && overlap >= 0.8 => Self::Easy,
            Some(worst) if worst > 0 && worst <= hops + 2 && overlap >= 0.5 => Self::Medium,
            _ => Self::Hard,
        }
    }

    /// The label used in files and reports: serde's name.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// The round-trip filter's finding on one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Final status.
    pub status: Status,
    /// Why.
    pub reason: Reason,
    /// 1-based BM25 rank of each source, in `sources` order; `None` = not in the top N.
    pub ranks: Vec<Option<u32>>,
    /// The top-ranked chunk, if any chunk matched.
    pub top_hit: Option<ChunkId>,
    /// Share of the query's content terms that occur in its source chunks (for `no_answer`: in
    /// the chunk it was modelled on, which is not relevant).
    pub overlap: f64,
    /// Length, in terms, of the longest run of query terms that occurs in a source as written.
    pub longest_shared: u32,
    /// The type the query ended up as, when the controls changed it (a copying paraphrase is
    /// `direct`; a reclassified no_answer is `direct`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub relabelled: Option<QueryType>,
    /// Near-identical copies of the sources (co-relevant, with the sources' grade).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub copies: Vec<ChunkId>,
    /// Measured difficulty, from the sources' BM25 ranks and the overlap (not for `no_answer`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub difficulty: Option<Difficulty>,
    /// For a near-duplicate: the query in the set that it repeats.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub duplicate_of: Option<QueryId>,
    /// The top-k chunks the query retrieves besides its sources (`--pool-depth`).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub pool: Vec<Pooled>,
}

impl Verdict {
    /// Sets the status and the reason for it.
    pub fn mark(&mut self, status: Status, reason: Reason) {
        (self.status, self.reason) = (status, reason);
    }

    /// The verdict on a candidate dropped before (or instead of) its round trip.
    #[must_use]
    pub fn dropped(reason: Reason) -> Self {
        Self {
            status: Status::Dropped,
            reason,
            ranks: Vec::new(),
            top_hit: None,
            overlap: 0.0,
            longest_shared: 0,
            relabelled: None,
            copies: Vec::new(),
            difficulty: None,
            duplicate_of: None,
            pool: Vec::new(),
        }
    }
}

/// A candidate together with its verdict: one line of `candidates.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checked {
    /// The query.
    #[serde(flatten)]
    pub candidate: Candidate,
    /// What the filter made of it.
    #[serde(flatten)]
    pub verdict: Verdict,
}

impl Checked {
    /// Whether the query is part of the test set (kept or flagged).
    #[must_use]
    pub fn in_set(&self) -> bool {
        self.verdict.status != Status::Dropped
    }

    /// Whether a no_answer query was kept as answerable (`--reclassify`).
    #[must_use]
    pub fn is_reclassified(&self) -> bool {
        self.candidate.query_type == QueryType::NoAnswer && self.verdict.relabelled.is_some()
    }

    /// The chunks that answer the query: its sources, but for a reclassified no_answer query
    /// the pooled chunks the judge graded 2 or more (its own chunk was only a model).
    #[must_use]
    pub fn answering_chunks(&self) -> Vec<ChunkId> {
        if !self.is_reclassified() {
            return self.candidate.sources.clone();
        }
        let answering = self.verdict.pool.iter().filter(|p| p.grade.is_some_and(|g| g >= 2));
        answering.map(|p| p.chunk_id.clone()).collect()
    }

    /// The query's type in the set: the generator's, unless a control relabelled it.
    #[must_use]
    pub fn query_type(&self) -> QueryType {
        self.verdict.relabelled.unwrap_or(self.candidate.query_type)
    }
}

/// What kind of failure left a request without a query (or a question without a grade): what
/// the report counts. The message that goes with it (a server's words, a parse error) is kept in
/// `rejects.jsonl`, never used as a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum FailureKind {
    /// The offline generator found too few usable terms in the chunk.
    TooFewTerms,
    /// No usable reply after the repair re-asks (invalid JSON, missing fields, wrong language).
    UnusableReply,
    /// The reply was cut off by `max_tokens`.
    Truncated,
    /// The reply held no query of the type asked for.
    MissingQuery,
    /// No reply within `--timeout`, on every attempt.
    Timeout,
    /// The server answered with an error status.
    HttpError,
    /// The connection failed.
    Connection,
    /// A success answer that is not a chat completion.
    BadResponse,
}

impl FailureKind {
    /// The label used in files and reports (`unusable_reply`, `timeout`, …).
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// A request a generator could not serve: one line of `rejects.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reject {
    /// The type asked for.
    #[serde(rename = "type")]
    pub query_type: QueryType,
    /// The chunks it was to be written from.
    pub sources: Vec<ChunkId>,
    /// Generation round.
    pub round: u32,
    /// What kind of failure.
    pub kind: FailureKind,
    /// Why it failed, in words (a server's message, a parse error).
    pub reason: String,
    /// The unusable reply, if there was one (truncated).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reply: Option<String>,
}

/// Relevance grades written to the qrels (the scale is documented in docs/formats.md).
pub mod grade {
    /// The chunk a direct or paraphrase query was written from: it fully answers the query.
    pub const SOURCE: u8 = 3;
    /// One hop of a `multi_hop` query: needed, but answers only part of the query.
    pub const HOP: u8 = 2;
    /// A chunk on the topic of a topical query (offline generator), its sources included: a
    /// bag of topical words has no single answer, every chunk on the topic is related to it.
    pub const TOPIC: u8 = 1;
}

/// Where a relevance judgment comes from (recorded in `qrels/provenance.tsv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, EnumString, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Provenance {
    /// A chunk the query was written from (a source or a hop).
    Source,
    /// A near-identical copy of a source chunk (co-relevant).
    Duplicate,
    /// On the topic of a topical query (offline generator): close to its sources in the
    /// corpus's latent topic space.
    Topic,
    /// Graded by the LLM judge (pooling, or a reclassified `no_answer` query).
    Judge,
    /// Graded by the one-shot labeller (`qrelgen pool --judge one-shot`): close enough, in the
    /// corpus's topic space, to a chunk known to be relevant.
    OneShot,
    /// Set by a human reviewer; overrides every other provenance.
    Human,
    /// Moved to a new chunk id by `refresh` (the old id is in `refresh/changelog.jsonl`).
    Refresh,
}

impl Provenance {
    /// The label used in `qrels/provenance.tsv`: serde's name.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// Parses a label as written by [`Provenance::label`].
    #[must_use]
    pub fn from_label(label: &str) -> Option<Self> {
        label.parse().ok()
    }
}

/// One relevance judgment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Qrel {
    /// The query.
    pub query_id: QueryId,
    /// The relevant chunk.
    pub chunk_id: ChunkId,
    /// Graded relevance, see [`grade`].
    pub grade: u8,
    /// Who said so.
    pub provenance: Provenance,
}

/// A chunk as shown to a reviewer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewSource {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// Its document title.
    pub title: String,
    /// Its text.
    pub text: String,
    /// Its section heading ([`Chunk::section`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
}

/// A chunk in a query's pool: retrieved in the top k, but not one of its sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pooled {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// Its BM25 rank for the query (1-based).
    pub rank: u32,
    /// The judge's grade (0–3), if the pool was judged (`--judge-pool`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub grade: Option<u8>,
    /// With `--pool-run`: every source that pooled the chunk, with its rank there
    /// (`round_trip:2` for the round trip's BM25 hits, `dense:1` for a run named `dense`);
    /// `rank` is then the first source's rank.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub pooled_by: Vec<String>,
}

/// A pooled chunk as shown to a reviewer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolChunk {
    /// The chunk, its rank and grade.
    #[serde(flatten)]
    pub pooled: Pooled,
    /// Its document title.
    pub title: String,
    /// Its text.
    pub text: String,
    /// Its section heading ([`Chunk::section`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
}

/// One line of `review_queue.jsonl`: everything an annotator needs, plus an empty decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewItem {
    /// The query.
    pub query_id: QueryId,
    /// Its text.
    pub text: String,
    /// Its type.
    #[serde(rename = "type")]
    pub query_type: QueryType,
    /// Kept or flagged.
    pub status: Status,
    /// The filter's reason.
    pub reason: Reason,
    /// Source ranks, as in the verdict.
    pub ranks: Vec<Option<u32>>,
    /// For `no_answer`: the absent term.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub absent_term: Option<String>,
    /// Verbatim quotes from the sources that support the query (LLM generator).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub evidence: Vec<String>,
    /// The source chunks, in full.
    pub sources: Vec<ReviewSource>,
    /// Other chunks the query retrieves (its pool), with the judge's grade when one was asked.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub pool: Vec<PoolChunk>,
    /// What a refresh changed, for a query a refresh queued (a build's items have none).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub refresh: Option<RefreshNote>,
    /// Always empty here; `qrelgen review export` gives annotators the decision fields to fill
    /// (`accept`, `edit`, `answerable`, `reject`; see `review::Decision`).
    pub decision: Option<String>,
}

/// What the refresh did to a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum QueryChange {
    /// A `no_answer` query the new corpus may answer (flagged, first in the review queue).
    MayBeAnswerable,
    /// Moved to a new chunk the round trip chose, or a candidate source found for a deleted one
    /// (flagged).
    Retargeted,
    /// Moved to new chunk ids with the evidence found (flagged).
    Relabelled,
    /// Labels kept; chunks new to the corpus entered its pool (listed for review).
    Pool,
    /// Labels kept; the judge graded the chunks new to the corpus that entered its pool
    /// (`--judge-pool`). Not flagged, not queued.
    PoolJudged,
    /// Its sources unchanged; only derived rows (topic, duplicate, judge) moved to new ids or
    /// went with their deleted chunks. Not flagged, not queued.
    Remapped,
    /// Written for a new document.
    New,
    /// Kept as it was.
    Kept,
    /// No longer holds: left out of the set, kept in the changelog with the reason.
    Retired,
}

impl QueryChange {
    /// The label in the changelog, the manifest and the report.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// Whether it goes to the review queue.
    #[must_use]
    pub fn queued(self) -> bool {
        !matches!(self, Self::Kept | Self::Remapped | Self::PoolJudged | Self::Retired)
    }
}

/// Why a refresh queued a query for review: what it changed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshNote {
    /// The version the refresh made.
    pub version: u32,
    /// What it did to the query.
    pub change: QueryChange,
    /// Why, as the changelog says.
    pub reason: String,
    /// The sources the query had before (`retargeted` and `relabelled` queries).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub old_sources: Vec<ChunkId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::labels_are_serde_names;

    #[test]
    fn labels_are_the_names_serde_writes() {
        labels_are_serde_names(QueryType::label);
        labels_are_serde_names(Status::label);
        labels_are_serde_names(Reason::label);
        labels_are_serde_names(Difficulty::label);
        labels_are_serde_names(FailureKind::label);
        labels_are_serde_names(Provenance::label);
        assert_eq!(Reason::SourceInTopN.label(), "source_in_top_n");
        assert_eq!(QueryType::MultiHop.to_string(), "multi_hop");
        for &t in QueryType::VARIANTS {
            assert_eq!(QueryType::from_label(t.label()), Some(t));
        }
        for &p in Provenance::VARIANTS {
            assert_eq!(Provenance::from_label(p.label()), Some(p));
        }
        assert_eq!(QueryType::from_label("Direct"), None, "labels are exact");
        assert_eq!(
            QueryType::ALL,
            [QueryType::Direct, QueryType::Paraphrase, QueryType::MultiHop, QueryType::NoAnswer]
        );
        assert_eq!(Difficulty::ALL, [Difficulty::Easy, Difficulty::Medium, Difficulty::Hard], "report order");
        assert_eq!(Provenance::from_label("bm25"), None);
    }
}
