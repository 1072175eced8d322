//! The set's files: everything a build writes into the staging folder but `manifest.json`,
//! which the build writes last once its timings are known.

use super::layout::{
    CANDIDATES, CHUNK_GROUPS, NO_ANSWER, POOL_TSV, QUERIES, QUEUE, REJECTS, REPORT_HTML, REPORT_MD,
};
use super::{Manifest, Measures, Staging, Summary};
use crate::corpus::Skipped;
use crate::error::Result;
use crate::index::ChunkIndex;
use crate::record::{Checked, QueryType, Reject, ReviewItem};
use crate::text::Language;

/// What the stages made, for the files to show.
pub struct SetFiles<'a> {
    /// The language the queries are written in.
    pub language: Language,
    /// Every candidate with its verdict.
    pub judged: &'a [Checked],
    /// Requests that yielded no usable query, grades the judge could not give.
    pub rejects: &'a [Reject],
    /// The queries in the test set.
    pub set: &'a [&'a Checked],
    /// The review queue.
    pub queue: &'a [ReviewItem],
    /// Groups of near-identical chunks, by position (named by the index as they are written).
    pub chunk_groups: &'a [Vec<usize>],
    /// Inputs skipped while reading the corpus.
    pub skipped: &'a [Skipped],
}

/// Writes the set's files (queries, qrels, no_answer ids, chunk groups, candidates, rejects, the
/// pools when runs were pooled, the review queue and both reports) into `out`.
///
/// # Errors
/// [`crate::Error::Output`] naming the file; [`crate::Error::Index`] when a pooled chunk's text
/// cannot be read.
pub fn write_set(
    out: &Staging,
    files: &SetFiles<'_>,
    manifest: &Manifest<'_>,
    index: &ChunkIndex,
) -> Result<()> {
    let set = files.set;
    super::write_jsonl(&out.path(QUERIES), set.iter().map(|j| super::query_line(j, files.language)))?;
    super::write_qrels(|name| out.path(name), &super::qrels(set.iter().copied()))?;
    super::write_atomic(&out.path(NO_ANSWER), |w| {
        let no_answer = set.iter().filter(|j| j.query_type() == QueryType::NoAnswer);
        no_answer.map(|j| &j.candidate.id).try_for_each(|id| writeln!(w, "{id}"))
    })?;
    let named = files.chunk_groups.iter().map(|g| g.iter().map(|&c| index.chunk_id(c)).collect::<Vec<_>>());
    super::write_jsonl(&out.path(CHUNK_GROUPS), named)?;
    super::write_jsonl(&out.path(CANDIDATES), files.judged)?;
    super::write_jsonl(&out.path(REJECTS), files.rejects)?;
    if set.iter().any(|j| j.verdict.pool.iter().any(|p| !p.pooled_by.is_empty())) {
        super::write_pool(&out.path(POOL_TSV), set)?;
    }
    super::write_jsonl(&out.path(QUEUE), files.queue)?;
    let measures = Measures::compute(set, index, manifest.config.filter.pool_depth)?;
    let summary = Summary {
        manifest,
        judged: files.judged,
        skipped: files.skipped,
        chunk_groups: files.chunk_groups,
        index,
        measures: &measures,
    };
    super::write_text(&out.path(REPORT_MD), &super::render_report(&summary))?;
    super::write_text(&out.path(REPORT_HTML), &super::render_report_html(&summary, index))
}
