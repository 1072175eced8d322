//! Refresh stage 2: every query of the current version against the new corpus, cheapest first.
//!
//! - all its chunks unchanged: kept as it is (human labels included); its new BM25 pool is
//!   compared with the old corpus, and chunks that newly enter it are listed for review;
//! - a chunk moved: relabelled to the new id (the text is the same);
//! - a chunk edited, split or merged: relabelled to the new chunk that holds the evidence
//!   quotes; without such a chunk (or without quotes, as with the offline generator) to the most
//!   alike one, and the round trip on the new corpus decides;
//! - a source deleted: the chunk of the new corpus that holds the evidence (and the answer)
//!   becomes the candidate source, else the query is retired;
//! - a `no_answer` query is re-verified by the round trip (its absent term); one the new corpus
//!   may answer is flagged `may_be_answerable`.
//!
//! A query whose sources are unchanged but some derived rows (topic, duplicate, judge) moved or
//! went with their chunks keeps its line and is not queued (`remapped`). Other changed queries
//! are flagged; moved machine labels get provenance `refresh`. A human label is
//! carried when its chunk is unchanged, moved, or mapped with the evidence found; otherwise the
//! reason it no longer applies is recorded.

use super::map::{ChunkChange, ChunkMap};
use crate::error::{Error, Result};
use crate::filter::RoundTrip;
use crate::id::{ChunkId, QueryId};
use crate::index::ChunkIndex;
use crate::record::{Candidate, Checked, Provenance, Qrel, QueryType, Status, Verdict};
use crate::review::set::QueryLine;
use crate::text::Quotable;
use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// Hits searched for a deleted source's evidence.
const EVIDENCE_SEARCH_DEPTH: usize = 20;

pub use crate::record::QueryChange;

/// A qrels row moved to a new chunk id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moved {
    /// The old chunk id.
    pub old: ChunkId,
    /// The new one.
    pub new: ChunkId,
    /// The provenance it has now.
    pub provenance: &'static str,
}

/// A human label that no longer applies, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lost {
    /// The chunk it judged.
    pub chunk: ChunkId,
    /// The grade given.
    pub grade: u8,
    /// Why it was not carried.
    pub reason: String,
}

/// One query after the re-check.
#[derive(Debug, Clone)]
pub struct Rechecked {
    /// The query.
    pub id: QueryId,
    /// What happened.
    pub change: QueryChange,
    /// Its type.
    pub query_type: QueryType,
    /// Why (for changed and retired queries).
    pub reason: String,
    /// Its line in the new `queries.jsonl`; `None` when retired.
    pub line: Option<String>,
    /// Its qrels rows in the new version (grade 0 included).
    pub qrels: Vec<Qrel>,
    /// The query as the new corpus sees it (its pool, for `qrels/pool.tsv`; the review queue
    /// and `candidates.jsonl` for changed ones); `None` when retired.
    pub judged: Option<Checked>,
    /// Rows moved to new ids.
    pub moved: Vec<Moved>,
    /// The sources it had, when the refresh gave it new ones (`retargeted`, `relabelled`).
    pub old_sources: Vec<ChunkId>,
    /// Human labels not carried.
    pub lost: Vec<Lost>,
    /// Chunks new to the corpus that entered its pool, unjudged.
    pub new_pool: Vec<ChunkId>,
    /// Chunks new to the corpus that entered its pool, with the judge's grade.
    pub pool_grades: Vec<PoolGrade>,
}

/// A chunk new to a query's pool, as the judge graded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolGrade {
    /// The chunk.
    pub chunk: ChunkId,
    /// Its grade (0–3).
    pub grade: u8,
}

/// Where a chunk a query points at went.
#[derive(Clone)]
enum Target {
    Same,
    /// A new chunk; `true` when its text is the old one or holds the evidence.
    To(ChunkId, bool),
    Gone(String),
}

/// The re-check of queries against the new corpus.
pub struct Recheck<'a> {
    map: &'a ChunkMap,
    index: &'a ChunkIndex,
    filter: &'a RoundTrip<'a>,
}

impl<'a> Recheck<'a> {
    /// A re-check over the new corpus's `index` and round trip, with the chunk `map`.
    #[must_use]
    pub fn new(map: &'a ChunkMap, index: &'a ChunkIndex, filter: &'a RoundTrip<'a>) -> Self {
        Self { map, index, filter }
    }

    /// Re-checks the query of `line`, with its qrels `rows` and its build record (`judged`).
    ///
    /// # Errors
    /// [`Error::Index`] when a search fails; [`Error::Malformed`] for a query line that is not
    /// a JSON object.
    pub fn query(&self, line: &QueryLine, rows: Vec<Qrel>, judged: Option<&Checked>) -> Result<Rechecked> {
        let candidate = base_candidate(line, &rows, judged);
        let answerable = rows.iter().any(|r| r.grade >= 1);
        let kept = |change, judged| Rechecked {
            id: line.id.clone(),
            change,
            query_type: line.query_type,
            reason: String::new(),
            line: Some(line.raw.clone()),
            qrels: rows.clone(),
            judged,
            moved: Vec::new(),
            old_sources: Vec::new(),
            lost: Vec::new(),
            new_pool: Vec::new(),
            pool_grades: Vec::new(),
        };
        if line.query_type == QueryType::NoAnswer && !answerable {
            let mut verdict = self.now(&candidate, &rows, judged)?;
            if verdict.status != Status::Dropped {
                return Ok(kept(QueryChange::Kept, Some(Checked { candidate, verdict })));
            }
            let reason = format!("the new corpus may answer it ({})", verdict.reason.label());
            verdict.status = Status::Flagged;
            let mut checked = kept(QueryChange::MayBeAnswerable, Some(Checked { candidate, verdict }));
            checked.line = Some(rewrite(line, None, &[], QueryChange::MayBeAnswerable)?);
            checked.reason = reason;
            return Ok(checked);
        }
        let unchanged = |id: &ChunkId| self.map.get(id).is_none_or(|m| m.change == ChunkChange::Unchanged);
        if rows.iter().map(|r| &r.chunk_id).chain(&candidate.sources).all(unchanged) {
            let mut verdict = self.now(&candidate, &rows, judged)?;
            let mut judged_ids: HashSet<&ChunkId> = rows.iter().map(|r| &r.chunk_id).collect();
            // The new version of a chunk that was in the old pool has not newly entered it.
            let old_pool =
                judged.into_iter().flat_map(|j| &j.verdict.pool).filter_map(|p| self.map.get(&p.chunk_id));
            judged_ids.extend(old_pool.flat_map(|m| m.targets.iter().map(|(id, _)| id)));
            let new_pool: Vec<ChunkId> = verdict
                .pool
                .iter()
                .map(|p| &p.chunk_id)
                .filter(|id| self.map.get(id).is_none() && !judged_ids.contains(id))
                .cloned()
                .collect();
            if new_pool.is_empty() {
                return Ok(kept(QueryChange::Kept, Some(Checked { candidate, verdict })));
            }
            verdict.status = Status::Flagged;
            let mut checked = kept(QueryChange::Pool, Some(Checked { candidate, verdict }));
            checked.reason =
                format!("{} chunk(s) new to the corpus entered its pool, unjudged", new_pool.len());
            checked.new_pool = new_pool;
            return Ok(checked);
        }
        self.changed(line, rows, candidate, judged)
    }

    /// The round trip's verdict on `candidate` in the new corpus, with the grades its pooled
    /// chunks already had (from the build record `old` or a judge row among `rows`).
    fn now(&self, candidate: &Candidate, rows: &[Qrel], old: Option<&Checked>) -> Result<Verdict> {
        let mut verdict = self.filter.check(candidate)?;
        let graded = |id: &ChunkId| {
            let row = rows.iter().find(|r| &r.chunk_id == id && r.provenance == Provenance::Judge);
            let pooled = || old?.verdict.pool.iter().find(|p| &p.chunk_id == id)?.grade;
            row.map(|r| r.grade).or_else(pooled)
        };
        for pooled in &mut verdict.pool {
            pooled.grade = graded(&pooled.chunk_id);
        }
        Ok(verdict)
    }

    /// A query some of whose chunks changed.
    fn changed(
        &self,
        line: &QueryLine,
        rows: Vec<Qrel>,
        mut candidate: Candidate,
        old: Option<&Checked>,
    ) -> Result<Rechecked> {
        let mut checked = Rechecked {
            id: line.id.clone(),
            change: QueryChange::Relabelled,
            query_type: line.query_type,
            reason: String::new(),
            line: None,
            qrels: Vec::new(),
            judged: None,
            moved: Vec::new(),
            old_sources: Vec::new(),
            lost: Vec::new(),
            new_pool: Vec::new(),
            pool_grades: Vec::new(),
        };
        let mut confirmed = true;
        let mut sources_same = true;
        let mut retire: Option<String> = None;
        let mut sources = Vec::with_capacity(candidate.sources.len());
        // Where each source went, found once (a deleted one is searched for) and used again
        // for its rows.
        let mut source_targets: HashMap<&ChunkId, Target> = HashMap::new();
        for source in &candidate.sources {
            let target = self.target(source, &candidate, true)?;
            source_targets.insert(source, target.clone());
            match target {
                Target::Same => sources.push(source.clone()),
                Target::To(new, sure) => {
                    confirmed &= sure;
                    sources_same = false;
                    sources.push(new);
                }
                Target::Gone(reason) => retire = Some(reason),
            }
        }
        for row in rows {
            let target = match source_targets.get(&row.chunk_id) {
                Some(target) => target.clone(),
                None => self.target(&row.chunk_id, &candidate, false)?,
            };
            match target {
                Target::Same => checked.qrels.push(row),
                Target::To(new, sure) => {
                    let row = relabel(&mut checked, row, new, sure);
                    checked.qrels.push(row);
                }
                Target::Gone(reason) => {
                    if row.provenance == Provenance::Human {
                        checked.lost.push(Lost { chunk: row.chunk_id.clone(), grade: row.grade, reason });
                    }
                }
            }
        }
        if let Some(reason) = retire {
            return Ok(retired(checked, reason));
        }
        if sources_same && checked.lost.is_empty() {
            checked.change = QueryChange::Remapped;
            "its sources are unchanged; derived labels moved or went with their chunks"
                .clone_into(&mut checked.reason);
            checked.line = Some(line.raw.clone());
            dedup_rows(&mut checked.qrels);
            let verdict = self.now(&candidate, &checked.qrels, old)?;
            checked.judged = Some(Checked { candidate, verdict });
            return Ok(checked);
        }
        let old_sources = std::mem::replace(&mut candidate.sources, sources);
        candidate.topic = candidate.topic.take().map(|topic| self.remap(&topic));
        let mut verdict = self.now(&candidate, &checked.qrels, old)?;
        if !confirmed && verdict.status == Status::Dropped {
            let reason = format!("the round trip on the new corpus dropped it ({})", verdict.reason.label());
            return Ok(retired(checked, reason));
        }
        checked.change = if confirmed { QueryChange::Relabelled } else { QueryChange::Retargeted };
        checked.reason = if confirmed {
            "its chunks moved or changed, and still hold its text or evidence".to_owned()
        } else {
            format!(
                "its chunks changed; the round trip on the new corpus kept it ({})",
                verdict.reason.label()
            )
        };
        verdict.status = Status::Flagged;
        dedup_rows(&mut checked.qrels);
        checked.line =
            Some(rewrite(line, Some((&candidate.sources, &verdict)), &old_sources, checked.change)?);
        checked.old_sources = old_sources;
        checked.judged = Some(Checked { candidate, verdict });
        Ok(checked)
    }

    /// Where the old chunk `id` went, for `candidate` (a `source` is searched for when deleted).
    fn target(&self, id: &ChunkId, candidate: &Candidate, source: bool) -> Result<Target> {
        let Some(mapping) = self.map.get(id) else { return Ok(Target::Same) };
        let best = mapping.targets.first().map(|(id, _)| id.clone());
        Ok(match (mapping.change, best) {
            (ChunkChange::Unchanged, _) => Target::Same,
            (ChunkChange::Moved, Some(new)) => Target::To(new, true),
            (ChunkChange::Edited | ChunkChange::Split | ChunkChange::Merged, Some(best)) => {
                let holding = mapping.targets.iter().map(|(id, _)| id).find(|t| self.holds(t, candidate));
                match holding {
                    Some(new) if !candidate.evidence.is_empty() => Target::To(new.clone(), true),
                    _ => Target::To(best, false),
                }
            }
            _ if source => match self.search_evidence(candidate)? {
                Some(new) => Target::To(new, false),
                None => Target::Gone(format!(
                    "its source {id} was deleted and no chunk of the new corpus holds its evidence"
                )),
            },
            _ => Target::Gone(format!("chunk {id} was deleted")),
        })
    }

    /// Whether the new chunk `id` holds every evidence quote (and the answer) of `candidate`.
    fn holds(&self, id: &ChunkId, candidate: &Candidate) -> bool {
        let Some(text) = self.index.position(id).and_then(|p| self.index.text(p).ok()) else {
            return false;
        };
        let text = Quotable::new(&text);
        candidate.evidence.iter().chain(&candidate.answer).all(|quote| text.holds(quote))
    }

    /// The first chunk of a search with the evidence that holds it.
    fn search_evidence(&self, candidate: &Candidate) -> Result<Option<ChunkId>> {
        if candidate.evidence.is_empty() {
            return Ok(None);
        }
        let hits = self.index.search(&candidate.evidence.join(" "), EVIDENCE_SEARCH_DEPTH)?;
        Ok(hits.iter().map(|h| self.index.chunk_id(h.chunk)).find(|id| self.holds(id, candidate)))
    }

    /// Topic chunks in the new corpus: unchanged, or their most alike new chunk; deleted ones go.
    fn remap(&self, ids: &[ChunkId]) -> Vec<ChunkId> {
        let mut out: Vec<ChunkId> = Vec::new();
        for id in ids {
            let new = match self.map.get(id) {
                None => Some(id.clone()),
                Some(m) if m.change == ChunkChange::Unchanged => Some(id.clone()),
                Some(m) => m.targets.first().map(|(id, _)| id.clone()),
            };
            if let Some(new) = new.filter(|n| !out.contains(n)) {
                out.push(new);
            }
        }
        out
    }
}

/// The row moved to `new`: a human label stays human when `sure`, else it becomes a `refresh`
/// label and the reason is recorded.
fn relabel(checked: &mut Rechecked, row: Qrel, new: ChunkId, sure: bool) -> Qrel {
    let provenance = match row.provenance {
        Provenance::Human if sure => Provenance::Human,
        Provenance::Human => {
            checked.lost.push(Lost {
                chunk: row.chunk_id.clone(),
                grade: row.grade,
                reason: format!("chunk {} changed and its evidence was not found in {new}", row.chunk_id),
            });
            Provenance::Refresh
        }
        _ => Provenance::Refresh,
    };
    checked.moved.push(Moved { old: row.chunk_id, new: new.clone(), provenance: provenance.label() });
    Qrel { query_id: row.query_id, chunk_id: new, grade: row.grade, provenance }
}

fn retired(mut checked: Rechecked, reason: String) -> Rechecked {
    for row in checked.qrels.drain(..).filter(|r| r.provenance == Provenance::Human) {
        checked.lost.push(Lost {
            chunk: row.chunk_id,
            grade: row.grade,
            reason: format!("query retired: {reason}"),
        });
    }
    checked.change = QueryChange::Retired;
    checked.reason = reason;
    checked.moved.clear();
    checked
}

/// One row per chunk: rows that landed on the same chunk keep the human one, else the best grade.
fn dedup_rows(rows: &mut Vec<Qrel>) {
    let rank = |q: &Qrel| (q.provenance == Provenance::Human, q.grade);
    let mut out: Vec<Qrel> = Vec::with_capacity(rows.len());
    for row in rows.drain(..) {
        match out.iter_mut().find(|q| q.chunk_id == row.chunk_id) {
            Some(q) if rank(&row) > rank(q) => *q = row,
            Some(_) => {}
            None => out.push(row),
        }
    }
    *rows = out;
}

/// The query as built, with its text and type as the current version has them (a reviewer may
/// have edited or retyped it); a query the build record lacks is rebuilt from its source rows.
fn base_candidate(line: &QueryLine, rows: &[Qrel], judged: Option<&Checked>) -> Candidate {
    let mut candidate = judged.map_or_else(
        || Candidate {
            id: line.id.clone(),
            text: String::new(),
            query_type: line.query_type,
            sources: Vec::new(),
            absent_term: None,
            style: None,
            evidence: Vec::new(),
            answer: None,
            topic: None,
            generator: "unknown".to_owned(),
            round: 0,
        },
        |j| j.candidate.clone(),
    );
    candidate.text.clone_from(&line.text);
    candidate.query_type = line.query_type;
    if candidate.sources.is_empty() && line.query_type != QueryType::NoAnswer {
        let relevant = rows.iter().filter(|r| r.grade >= 1 && r.provenance != Provenance::Topic);
        candidate.sources = relevant.map(|r| r.chunk_id.clone()).collect();
    }
    candidate
}

/// The query line flagged, with what the refresh did (and the new sources and ranks).
fn rewrite(
    line: &QueryLine,
    now: Option<(&[ChunkId], &Verdict)>,
    old_sources: &[ChunkId],
    change: QueryChange,
) -> Result<String> {
    let malformed = |message: String| Error::Malformed {
        path: crate::output::layout::QUERIES.into(),
        line: line.line,
        message,
    };
    let mut value: Value = serde_json::from_str(&line.raw).map_err(|e| malformed(e.to_string()))?;
    let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Err(malformed("no metadata object".to_owned()));
    };
    meta.insert("status".to_owned(), Value::from(Status::Flagged.label()));
    let mut refresh = serde_json::Map::new();
    refresh.insert("change".to_owned(), Value::from(change.label()));
    if let Some((sources, verdict)) = now {
        let ids = |ids: &[ChunkId]| Value::from(ids.iter().map(ChunkId::as_str).collect::<Vec<_>>());
        meta.insert("sources".to_owned(), ids(sources));
        meta.insert("ranks".to_owned(), serde_json::to_value(&verdict.ranks).unwrap_or(Value::Null));
        refresh.insert("old_sources".to_owned(), ids(old_sources));
    }
    meta.insert("refresh".to_owned(), Value::Object(refresh));
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::QueryChange;

    #[test]
    fn labels_are_serdes_names() {
        crate::testing::labels_are_serde_names(QueryChange::label);
    }
}
