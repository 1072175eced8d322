//! BEIR and TREC lines: `corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv` and `qrels.trec`.

use super::layout::{PROVENANCE_HEADER, PROVENANCE_TSV, QRELS_HEADER, QRELS_TREC, QRELS_TSV};
use crate::error::Result;
use crate::id::{ChunkId, DocId, QueryId};
use crate::record::{Checked, Chunk, Difficulty, Provenance, Qrel, QueryType, Reason, Status, grade};
use crate::text::Language;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// A line of `corpus.jsonl`.
#[derive(Debug, Serialize)]
pub struct CorpusLine<'a> {
    #[serde(rename = "_id")]
    id: &'a ChunkId,
    title: &'a str,
    text: &'a str,
    metadata: CorpusMeta<'a>,
}

#[derive(Debug, Serialize)]
struct CorpusMeta<'a> {
    doc_id: &'a DocId,
    ordinal: u32,
    /// The document id as the corpus wrote it, when it was renamed.
    #[serde(skip_serializing_if = "Option::is_none")]
    source_id: Option<&'a str>,
    /// The heading of its section, when the document has one besides its title.
    #[serde(skip_serializing_if = "Option::is_none")]
    section: Option<&'a str>,
}

/// The `corpus.jsonl` line of a chunk.
#[must_use]
pub fn corpus_line(chunk: &Chunk) -> CorpusLine<'_> {
    CorpusLine {
        id: &chunk.id,
        title: &chunk.title,
        text: &chunk.text,
        metadata: CorpusMeta {
            doc_id: &chunk.doc_id,
            ordinal: chunk.ordinal,
            source_id: chunk.source_id.as_deref(),
            section: chunk.section.as_deref(),
        },
    }
}

/// A line of `queries.jsonl`.
#[derive(Debug, Serialize)]
pub struct QueryLine<'a> {
    #[serde(rename = "_id")]
    id: &'a QueryId,
    text: &'a str,
    metadata: QueryMeta<'a>,
}

#[derive(Debug, Serialize)]
struct QueryMeta<'a> {
    #[serde(rename = "type")]
    query_type: QueryType,
    #[serde(skip_serializing_if = "Option::is_none")]
    generated_as: Option<QueryType>,
    status: Status,
    reason: Reason,
    sources: Vec<ChunkId>,
    /// For a reclassified no_answer query: the chunk it was written from (not relevant).
    #[serde(skip_serializing_if = "Option::is_none")]
    modelled_on: Option<&'a [ChunkId]>,
    #[serde(skip_serializing_if = "<[ChunkId]>::is_empty")]
    copies: &'a [ChunkId],
    ranks: &'a [Option<u32>],
    overlap: f64,
    longest_shared: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    difficulty: Option<Difficulty>,
    generator: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    absent_term: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    style: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    evidence: &'a [String],
    language: Language,
}

/// The `queries.jsonl` line of a query in the set, written in `language`.
#[must_use]
pub fn query_line(judged: &Checked, language: Language) -> QueryLine<'_> {
    let (c, v) = (&judged.candidate, &judged.verdict);
    QueryLine {
        id: &c.id,
        text: &c.text,
        metadata: QueryMeta {
            query_type: judged.query_type(),
            generated_as: v.relabelled.map(|_| c.query_type),
            status: v.status,
            reason: v.reason,
            sources: judged.answering_chunks(),
            modelled_on: judged.is_reclassified().then_some(c.sources.as_slice()),
            copies: &v.copies,
            ranks: &v.ranks,
            overlap: round4(v.overlap),
            longest_shared: v.longest_shared,
            difficulty: v.difficulty,
            generator: &c.generator,
            absent_term: c.absent_term.as_deref(),
            style: c.style.as_deref(),
            answer: c.answer.as_deref(),
            evidence: &c.evidence,
            language,
        },
    }
}

/// Rounds to 4 decimals, so files don't carry float noise.
pub(crate) fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// The judgments of the queries in the set, in query order, without repeated pairs: the
/// sources and their copies first, then every pooled chunk the judge graded (0 included).
/// `no_answer` queries have none.
#[must_use]
pub fn qrels<'a>(set: impl IntoIterator<Item = &'a Checked>) -> Vec<Qrel> {
    let mut seen = BTreeSet::new();
    let mut qrels = Vec::new();
    for judged in set {
        let (c, v) = (&judged.candidate, &judged.verdict);
        // A reclassified no_answer query's own chunk was only a model: the judge found its
        // relevant chunks.
        let grade = match (c.query_type, judged.query_type()) {
            (_, QueryType::NoAnswer) => continue,
            (QueryType::NoAnswer, _) => None,
            _ if c.topic.is_some() => Some(grade::TOPIC),
            (QueryType::MultiHop, _) => Some(grade::HOP),
            (QueryType::Direct | QueryType::Paraphrase, _) => Some(grade::SOURCE),
        };
        let topic = c.topic.iter().flatten().map(|chunk| (chunk, grade::TOPIC, Provenance::Topic));
        let sources = grade.into_iter().flat_map(|g| {
            let sources = c.sources.iter().map(move |chunk| (chunk, g, Provenance::Source));
            sources.chain(v.copies.iter().map(move |chunk| (chunk, g, Provenance::Duplicate)))
        });
        let sources = sources.chain(topic);
        // Grade 0 too: "judged not relevant" is not "never judged" ([`write_qrels`] keeps it in
        // the provenance file only).
        let judged = v.pool.iter().filter_map(|p| p.grade.map(|g| (&p.chunk_id, g, Provenance::Judge)));
        for (chunk, grade, provenance) in sources.chain(judged) {
            if seen.insert((&c.id, chunk)) {
                qrels.push(Qrel { query_id: c.id.clone(), chunk_id: chunk.clone(), grade, provenance });
            }
        }
    }
    qrels
}

/// The relevance a judgment has in `qrels.trec` and `qrels/test.tsv`: its grade, but a judge's
/// grade through [`crate::judge::relevance`] (a grade of 1 is "judged not relevant").
#[must_use]
pub fn relevance(qrel: &Qrel) -> u8 {
    match qrel.provenance {
        Provenance::Judge => crate::judge::relevance(qrel.grade),
        _ => qrel.grade,
    }
}

/// The rows of `qrels.trec` and `qrels/test.tsv`, with their relevance: every judgment of each
/// query that has a relevant chunk, the judged non-relevant ones as relevance 0 (so that
/// condensed-list measures, nDCG′ and bpref, know them), in the order of `qrels`. A query
/// with no relevant chunk has no rows (a `no_answer` query, or one the judge found nothing
/// for).
#[must_use]
pub fn trec_rows(qrels: &[Qrel]) -> Vec<(&Qrel, u8)> {
    let answered: BTreeSet<&QueryId> =
        qrels.iter().filter(|q| relevance(q) >= 1).map(|q| &q.query_id).collect();
    qrels.iter().filter(|q| answered.contains(&q.query_id)).map(|q| (q, relevance(q))).collect()
}

/// Writes `qrels/test.tsv` and `qrels.trec` (see [`trec_rows`]) and `qrels/provenance.tsv`
/// (every judgment with its own grade, and where it comes from) at the paths `path` gives for
/// those names.
///
/// # Errors
/// [`Error::Output`](crate::error::Error::Output) naming the file.
pub fn write_qrels(path: impl Fn(&str) -> PathBuf, qrels: &[Qrel]) -> Result<()> {
    let rows = trec_rows(qrels);
    super::write_atomic(&path(QRELS_TSV), |w| {
        writeln!(w, "{QRELS_HEADER}")?;
        rows.iter().try_for_each(|(q, rel)| writeln!(w, "{}\t{}\t{rel}", q.query_id, q.chunk_id))
    })?;
    super::write_atomic(&path(PROVENANCE_TSV), |w| {
        writeln!(w, "{PROVENANCE_HEADER}")?;
        qrels.iter().try_for_each(|q| {
            writeln!(w, "{}\t{}\t{}\t{}", q.query_id, q.chunk_id, q.grade, q.provenance.label())
        })
    })?;
    super::write_atomic(&path(QRELS_TREC), |w| {
        rows.iter().try_for_each(|(q, rel)| writeln!(w, "{} 0 {} {rel}", q.query_id, q.chunk_id))
    })
}

/// Writes `qrels/pool.tsv`: one row per pooled chunk of each query in the set and per source
/// that pooled it (`round_trip` for the round trip's own top hits, else the run's name), with the
/// chunk's rank there, and its grade once judged (empty until then).
///
/// # Errors
/// [`Error::Output`](crate::error::Error::Output) naming the file.
pub fn write_pool(path: &std::path::Path, set: &[&Checked]) -> Result<()> {
    super::write_atomic(path, |w| {
        writeln!(w, "query-id\tcorpus-id\tpooled-by\trank\tgrade")?;
        for judged in set {
            for pooled in &judged.verdict.pool {
                for source in &pooled.pooled_by {
                    let (by, rank) = source.rsplit_once(':').unwrap_or((source, ""));
                    let grade = pooled.grade.map(|g| g.to_string()).unwrap_or_default();
                    writeln!(w, "{}\t{}\t{by}\t{rank}\t{grade}", judged.candidate.id, pooled.chunk_id)?;
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Candidate, Verdict};

    fn judged(query_type: QueryType, sources: &[&str]) -> Checked {
        Checked {
            candidate: Candidate::sample(query_type, "q", sources),
            verdict: Verdict {
                status: Status::Kept,
                reason: Reason::SourceInTopN,
                ranks: vec![Some(1)],
                top_hit: None,
                overlap: 1.0,
                longest_shared: 1,
                relabelled: None,
                copies: Vec::new(),
                difficulty: None,
                duplicate_of: None,
                pool: Vec::new(),
            },
        }
    }

    #[test]
    fn trec_rows_keep_judged_non_relevant_pairs_of_answered_queries_as_zero() {
        let row = |q: &str, c: &str, grade, provenance| Qrel {
            query_id: QueryId::parse(q).unwrap(),
            chunk_id: ChunkId::parse(c).unwrap(),
            grade,
            provenance,
        };
        let qrels = [
            row("a", "d:1", 3, Provenance::Source),
            row("a", "d:2", 1, Provenance::Judge),
            row("a", "d:3", 2, Provenance::Judge),
            row("a", "d:4", 0, Provenance::Human),
            row("a", "d:5", 1, Provenance::OneShot),
            // Only "related" by the judge: no relevant chunk, no rows.
            row("b", "d:1", 1, Provenance::Judge),
            row("b", "d:2", 0, Provenance::OneShot),
        ];
        let rows: Vec<(&str, &str, u8)> = trec_rows(&qrels)
            .into_iter()
            .map(|(q, rel)| (q.query_id.as_str(), q.chunk_id.as_str(), rel))
            .collect();
        assert_eq!(
            rows,
            [("a", "d:1", 3), ("a", "d:2", 0), ("a", "d:3", 2), ("a", "d:4", 0), ("a", "d:5", 1)]
        );
    }

    #[test]
    fn qrels_grade_by_type_and_skip_no_answer_and_repeats() {
        let set = [
            judged(QueryType::Direct, &["a"]),
            judged(QueryType::MultiHop, &["b", "c", "b"]),
            judged(QueryType::NoAnswer, &["d"]),
        ];
        let rows: Vec<_> = qrels(&set).into_iter().map(|q| (q.chunk_id.to_string(), q.grade)).collect();
        assert_eq!(rows, [("a".into(), 3), ("b".into(), 2), ("c".into(), 2)]);
    }
}
