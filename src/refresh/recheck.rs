//! Refresh stage 2: every query of the current version against the new corpus, cheapest first.
//!
//! Each chunk a query points at is mapped ([`super::map`]):
//!
//! - unchanged: kept as it is (human labels included); the query's new BM25 pool is compared
//!   with the old corpus, and chunks that newly enter it are listed for review (`pool`);
//! - moved: relabelled to the new id (the text is the same);
//! - edited, split or merged: relabelled to the new chunk that holds the evidence quotes (and
//!   the answer); without one, or without quotes (the offline generator writes none), the
//!   source goes to the most alike new chunk, and the round trip and the judge decide (below);
//! - deleted: for a source, the chunk of the new corpus that holds the evidence (and the answer)
//!   becomes the candidate source (`retargeted`); without one, or without evidence quotes to
//!   search for, the query is retired.
//!
//! The round trip runs with the sources mapped; the evidence quotes were looked up here, so it
//! does not require them in the sources again ([`RoundTrip::recheck`]). A query with a source
//! moved to its most alike chunk is retired when the round trip drops it. With an LLM generator
//! the judge then grades each such source alone, in the refresh's one LLM session (its budget
//! and cache: a refresh run again asks nothing twice; a dry run counts the asks):
//!
//! - graded relevant (2 or more; 1 or more for a hop of a `multi_hop` query): `retargeted`, the
//!   row with the judge's grade;
//! - graded lower: retired, with the chunk and its grade in the reason;
//! - no grade (an unusable reply, a failed call): `retargeted`, the reason naming the failure
//!   (`judge_failed`).
//!
//! A `no_answer` query (one no label made answerable) has its sources mapped as any other, then
//! is re-verified on the new corpus: the round trip's rule (its absent term in the top hit) and,
//! with an LLM generator, the judge on every chunk of its new pool without a grade, asked as a
//! build asks ([`crate::judge::Asks`]; the grades of unchanged and moved chunks are carried). The
//! absent term found, a chunk graded 2 or more, or a grade missing makes it `may_be_answerable`
//! (flagged, first in the review queue; a refresh never reclassifies it); otherwise it is kept,
//! relabelled or retargeted as its sources say. Without an LLM the round trip alone decides.
//!
//! A query whose sources are unchanged but some derived rows (topic, duplicate, judge) moved or
//! went with their chunks keeps its line and is not queued (`remapped`). Other changed queries
//! are flagged; moved machine labels get provenance `refresh`. A human label is
//! carried when its chunk is unchanged, moved, or mapped with the evidence found; otherwise the
//! reason it no longer applies is recorded.

mod judge;

pub use judge::Questions;

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
    /// Chunks new to its pool, with the judge's grade (`--judge-pool`, or the re-verification
    /// of a `no_answer` query).
    pub pool_grades: Vec<PoolGrade>,
    /// What is left to the judge (with an LLM generator).
    to_judge: ToJudge,
    /// Its 1-based line number in the current `queries.jsonl`.
    at: usize,
}

/// A chunk new to a query's pool, as the judge graded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolGrade {
    /// The chunk.
    pub chunk: ChunkId,
    /// Its grade (0–3).
    pub grade: u8,
}

/// What the re-check of a query leaves to the judge.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ToJudge {
    Nothing,
    /// These new sources, the most alike chunks of changed ones that lack the evidence: each
    /// graded alone.
    Sources(Vec<ChunkId>),
    /// A `no_answer` query's new pool: its chunks without a grade.
    Pool,
}

/// Where a chunk a query points at went.
#[derive(Clone)]
enum Target {
    Same,
    /// A new chunk, and how it was chosen.
    To(ChunkId, Chosen),
    Gone(String),
}

/// How the new chunk of a changed one was chosen.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Chosen {
    /// Its text is the old one, or it holds the evidence: labels carry.
    Sure,
    /// It holds the evidence of a deleted source, found by a search of the new corpus.
    Searched,
    /// The most alike chunk, the evidence not in it (or no evidence to look for).
    Alike,
}

/// The re-check of queries against the new corpus.
pub struct Recheck<'a> {
    map: &'a ChunkMap,
    index: &'a ChunkIndex,
    filter: &'a RoundTrip<'a>,
    /// The old id of each moved chunk, by its new id (a grade of it still holds).
    moved_from: HashMap<&'a ChunkId, &'a ChunkId>,
}

impl<'a> Recheck<'a> {
    /// A re-check over the new corpus's `index` and round trip, with the chunk `map`.
    #[must_use]
    pub fn new(map: &'a ChunkMap, index: &'a ChunkIndex, filter: &'a RoundTrip<'a>) -> Self {
        let moved = map.old.iter().filter(|m| m.change == ChunkChange::Moved);
        let moved_from = moved.filter_map(|m| m.targets.first().map(|(new, _)| (new, &m.old))).collect();
        Self { map, index, filter, moved_from }
    }

    /// Re-checks the query of `line`, with its qrels `rows` and its build record (`judged`).
    ///
    /// # Errors
    /// [`Error::Index`] when a search fails; [`Error::Malformed`] for a query line that is not
    /// a JSON object.
    pub fn query(&self, line: &QueryLine, rows: Vec<Qrel>, judged: Option<&Checked>) -> Result<Rechecked> {
        let candidate = base_candidate(line, &rows, judged);
        let no_answer = line.query_type == QueryType::NoAnswer && !rows.iter().any(|r| r.grade >= 1);
        let unchanged = |id: &ChunkId| self.map.get(id).is_none_or(|m| m.change == ChunkChange::Unchanged);
        if !rows.iter().map(|r| &r.chunk_id).chain(&candidate.sources).all(unchanged) {
            return self.changed(line, rows, candidate, judged, no_answer);
        }
        let mut verdict = self.now(&candidate, &rows, judged)?;
        if no_answer {
            let checked = Rechecked::new(line, QueryChange::Kept, rows, Checked { candidate, verdict });
            return no_answer_kept(line, checked);
        }
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
            return Ok(Rechecked::new(line, QueryChange::Kept, rows, Checked { candidate, verdict }));
        }
        verdict.status = Status::Flagged;
        let mut checked = Rechecked::new(line, QueryChange::Pool, rows, Checked { candidate, verdict });
        checked.reason = format!("{} chunk(s) new to the corpus entered its pool, unjudged", new_pool.len());
        checked.new_pool = new_pool;
        Ok(checked)
    }

    /// The round trip's verdict on `candidate` in the new corpus, with the grades its pooled
    /// chunks already had (from the build record `old` or a judge row among `rows`; a moved
    /// chunk's under its old id).
    fn now(&self, candidate: &Candidate, rows: &[Qrel], old: Option<&Checked>) -> Result<Verdict> {
        let mut verdict = self.filter.recheck(candidate)?;
        let graded = |id: &ChunkId| {
            let row = rows.iter().find(|r| &r.chunk_id == id && r.provenance == Provenance::Judge);
            let pooled = || old?.verdict.pool.iter().find(|p| &p.chunk_id == id)?.grade;
            row.map(|r| r.grade).or_else(pooled)
        };
        for pooled in &mut verdict.pool {
            let moved_from = self.moved_from.get(&pooled.chunk_id).copied();
            pooled.grade = graded(&pooled.chunk_id).or_else(|| moved_from.and_then(graded));
        }
        Ok(verdict)
    }

    /// A query some of whose chunks changed (`no_answer`: one no label made answerable).
    fn changed(
        &self,
        line: &QueryLine,
        rows: Vec<Qrel>,
        mut candidate: Candidate,
        old: Option<&Checked>,
        no_answer: bool,
    ) -> Result<Rechecked> {
        let mut checked = Rechecked::retiring(line);
        let mut targets = self.source_targets(&candidate)?;
        // A no_answer query's source is the chunk it was modelled on, not an answer: when it is
        // deleted the query is re-checked against the new corpus like any other no_answer query.
        let sources = targets.len();
        if no_answer {
            targets.retain(|(_, t)| !matches!(t, Target::Gone(_)));
        }
        let modelled_on_gone = targets.len() < sources;
        self.move_rows(&mut checked, rows, &candidate, &targets)?;
        let gone = targets.iter().find_map(|(_, t)| if let Target::Gone(r) = t { Some(r) } else { None });
        if let Some(reason) = gone {
            retire(&mut checked, reason.clone());
            return Ok(checked);
        }
        dedup_rows(&mut checked.qrels);
        if targets.iter().all(|(_, t)| matches!(t, Target::Same))
            && checked.lost.is_empty()
            && !modelled_on_gone
        {
            checked.change = QueryChange::Remapped;
            "its sources are unchanged; derived labels moved or went with their chunks"
                .clone_into(&mut checked.reason);
            checked.line = Some(line.raw.clone());
            let verdict = self.now(&candidate, &checked.qrels, old)?;
            checked.judged = Some(Checked { candidate, verdict });
            return if no_answer { no_answer_kept(line, checked) } else { Ok(checked) };
        }
        let confirmed = targets.iter().all(|(_, t)| matches!(t, Target::Same | Target::To(_, Chosen::Sure)));
        let alike: Vec<ChunkId> = chosen(&targets, Chosen::Alike).cloned().collect();
        let sources = targets.iter().map(|(id, t)| if let Target::To(new, _) = t { new } else { id });
        let old_sources = std::mem::replace(&mut candidate.sources, sources.cloned().collect());
        candidate.topic = candidate.topic.take().map(|topic| self.remap(&topic));
        let mut verdict = self.now(&candidate, &checked.qrels, old)?;
        let (dropped, label) = (verdict.status == Status::Dropped, verdict.reason.label());
        if !no_answer && !confirmed && dropped {
            retire(&mut checked, format!("the round trip on the new corpus dropped it ({label})"));
            return Ok(checked);
        }
        (checked.change, checked.reason) = if no_answer && dropped {
            (QueryChange::MayBeAnswerable, format!("the new corpus may answer it ({label})"))
        } else if modelled_on_gone {
            let reason = "the chunk it was modelled on was deleted; the new corpus does not answer it";
            (QueryChange::Relabelled, format!("{reason} ({label})"))
        } else if confirmed {
            let reason = "its chunks moved or changed, and still hold its text or evidence";
            (QueryChange::Relabelled, reason.to_owned())
        } else {
            let searched: Vec<&str> = chosen(&targets, Chosen::Searched).map(ChunkId::as_str).collect();
            let why = if searched.is_empty() {
                "its chunks changed".to_owned()
            } else {
                format!("a deleted source's evidence was found in {}", searched.join(", "))
            };
            (QueryChange::Retargeted, format!("{why}; the round trip on the new corpus kept it ({label})"))
        };
        checked.to_judge = if no_answer && !dropped {
            ToJudge::Pool
        } else if !no_answer && !alike.is_empty() {
            ToJudge::Sources(alike)
        } else {
            ToJudge::Nothing
        };
        verdict.status = Status::Flagged;
        checked.line =
            Some(rewrite(line, Some((&candidate.sources, &verdict)), &old_sources, checked.change)?);
        checked.old_sources = old_sources;
        checked.judged = Some(Checked { candidate, verdict });
        Ok(checked)
    }

    /// Where each source of `candidate` went (a deleted one is searched for), in order.
    fn source_targets(&self, candidate: &Candidate) -> Result<Vec<(ChunkId, Target)>> {
        candidate.sources.iter().map(|s| Ok((s.clone(), self.target(s, candidate, true)?))).collect()
    }

    /// Moves `rows` to where their chunks went (a source's row to where the source went, as
    /// `targets` found it) into `checked`, recording the moves and the human labels lost.
    fn move_rows(
        &self,
        checked: &mut Rechecked,
        rows: Vec<Qrel>,
        candidate: &Candidate,
        targets: &[(ChunkId, Target)],
    ) -> Result<()> {
        for row in rows {
            let target = match targets.iter().find(|(id, _)| *id == row.chunk_id) {
                Some((_, target)) => target.clone(),
                None => self.target(&row.chunk_id, candidate, false)?,
            };
            match target {
                Target::Same => checked.qrels.push(row),
                Target::To(new, chosen) => {
                    let row = relabel(checked, row, new, chosen == Chosen::Sure);
                    checked.qrels.push(row);
                }
                Target::Gone(reason) => {
                    if row.provenance == Provenance::Human {
                        checked.lost.push(Lost { chunk: row.chunk_id.clone(), grade: row.grade, reason });
                    }
                }
            }
        }
        Ok(())
    }

    /// Where the old chunk `id` went, for `candidate` (a `source` is searched for when deleted).
    fn target(&self, id: &ChunkId, candidate: &Candidate, source: bool) -> Result<Target> {
        let Some(mapping) = self.map.get(id) else { return Ok(Target::Same) };
        Ok(match (mapping.change, mapping.targets.first().cloned()) {
            (ChunkChange::Unchanged, _) => Target::Same,
            (ChunkChange::Moved, Some((new, _))) => Target::To(new, Chosen::Sure),
            // Every word 3-gram the same (line ends, spacing or markup changed): the old text.
            (ChunkChange::Edited, Some((new, similarity))) if similarity >= 1.0 => {
                Target::To(new, Chosen::Sure)
            }
            (ChunkChange::Edited | ChunkChange::Split | ChunkChange::Merged, Some((best, _))) => {
                // The evidence decides: an LLM's answer is "taken from the passages", not quoted.
                let holding =
                    mapping.targets.iter().map(|(id, _)| id).find(|t| self.holds(t, candidate, false));
                match holding {
                    Some(new) if !candidate.evidence.is_empty() => Target::To(new.clone(), Chosen::Sure),
                    _ => Target::To(best, Chosen::Alike),
                }
            }
            _ if source && candidate.evidence.is_empty() => Target::Gone(format!(
                "its source {id} was deleted, and it has no evidence quotes to look for in the new corpus"
            )),
            _ if source => match self.search_evidence(candidate)? {
                Some(new) => Target::To(new, Chosen::Searched),
                None => Target::Gone(format!(
                    "its source {id} was deleted and no chunk of the new corpus holds its evidence"
                )),
            },
            _ => Target::Gone(format!("chunk {id} was deleted")),
        })
    }

    /// Whether the new chunk `id` holds every evidence quote of `candidate`, and, `with_answer`,
    /// its answer (when it has one).
    fn holds(&self, id: &ChunkId, candidate: &Candidate, with_answer: bool) -> bool {
        let Some(text) = self.index.position(id).and_then(|p| self.index.text(p).ok()) else {
            return false;
        };
        let text = Quotable::new(&text);
        let answer = candidate.answer.iter().filter(|a| with_answer && !a.trim().is_empty());
        candidate.evidence.iter().chain(answer).all(|quote| text.holds(quote))
    }

    /// The first chunk of a search with the evidence that holds it and the answer.
    fn search_evidence(&self, candidate: &Candidate) -> Result<Option<ChunkId>> {
        let hits = self.index.search(&candidate.evidence.join(" "), EVIDENCE_SEARCH_DEPTH)?;
        Ok(hits.iter().map(|h| self.index.chunk_id(h.chunk)).find(|id| self.holds(id, candidate, true)))
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

/// The new chunks of `targets` chosen as `how`.
fn chosen(targets: &[(ChunkId, Target)], how: Chosen) -> impl Iterator<Item = &ChunkId> {
    targets.iter().filter_map(move |(_, t)| match t {
        Target::To(id, chosen) if *chosen == how => Some(id),
        _ => None,
    })
}

/// Retires `checked` for `reason`: out of the set, its human labels recorded as lost.
fn retire(checked: &mut Rechecked, reason: String) {
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
    checked.line = None;
    checked.judged = None;
    checked.to_judge = ToJudge::Nothing;
}

/// A `no_answer` query whose sources kept their ids (`checked`, kept or remapped): one the round
/// trip dropped (its absent term found) may be answerable; the judge is asked about the others.
fn no_answer_kept(line: &QueryLine, mut checked: Rechecked) -> Result<Rechecked> {
    let Some(judged) = &mut checked.judged else { return Ok(checked) };
    if judged.verdict.status != Status::Dropped {
        checked.to_judge = ToJudge::Pool;
        return Ok(checked);
    }
    checked.reason = format!("the new corpus may answer it ({})", judged.verdict.reason.label());
    judged.verdict.status = Status::Flagged;
    checked.change = QueryChange::MayBeAnswerable;
    checked.line = Some(rewrite(line, None, &[], QueryChange::MayBeAnswerable)?);
    Ok(checked)
}

impl Rechecked {
    /// The query of `line` with `change`, its line as it is, its `rows` and the record `judged`.
    fn new(line: &QueryLine, change: QueryChange, rows: Vec<Qrel>, judged: Checked) -> Self {
        Self {
            change,
            line: Some(line.raw.clone()),
            qrels: rows,
            judged: Some(judged),
            ..Self::retiring(line)
        }
    }

    /// The query of `line`, without a line, rows or record yet (retired if none come).
    fn retiring(line: &QueryLine) -> Self {
        Self {
            id: line.id.clone(),
            change: QueryChange::Retired,
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
            to_judge: ToJudge::Nothing,
            at: line.line,
        }
    }
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
    let mut value = parse_line(&line.raw, line.line)?;
    let meta = metadata(&mut value, line.line)?;
    let mut refresh = serde_json::Map::new();
    if let Some((sources, verdict)) = now {
        let ids = |ids: &[ChunkId]| Value::from(ids.iter().map(ChunkId::as_str).collect::<Vec<_>>());
        meta.insert("sources".to_owned(), ids(sources));
        meta.insert("ranks".to_owned(), serde_json::to_value(&verdict.ranks).unwrap_or(Value::Null));
        refresh.insert("old_sources".to_owned(), ids(old_sources));
    }
    meta.insert("refresh".to_owned(), Value::Object(refresh));
    stamp(meta, change);
    Ok(value.to_string())
}

/// The query line `raw` (line `at` of `queries.jsonl`), flagged with the `change` the judge
/// made, what the refresh recorded in it before kept.
fn restamp(raw: &str, at: usize, change: QueryChange) -> Result<String> {
    let mut value = parse_line(raw, at)?;
    stamp(metadata(&mut value, at)?, change);
    Ok(value.to_string())
}

/// Marks the query's `meta`data flagged, with what the refresh did.
fn stamp(meta: &mut serde_json::Map<String, Value>, change: QueryChange) {
    meta.insert("status".to_owned(), Value::from(Status::Flagged.label()));
    let refresh = meta.entry("refresh").or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Some(refresh) = refresh.as_object_mut() {
        refresh.insert("change".to_owned(), Value::from(change.label()));
    }
}

/// An error for line `at` of `queries.jsonl`.
fn malformed(at: usize, message: String) -> Error {
    Error::Malformed { path: crate::output::layout::QUERIES.into(), line: at, message }
}

/// The query line `raw`, line `at` of `queries.jsonl`.
fn parse_line(raw: &str, at: usize) -> Result<Value> {
    serde_json::from_str(raw).map_err(|e| malformed(at, e.to_string()))
}

/// The metadata object of the query line `value` (line `at`).
fn metadata(value: &mut Value, at: usize) -> Result<&mut serde_json::Map<String, Value>> {
    value
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| malformed(at, "no metadata object".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::QueryChange;

    #[test]
    fn labels_are_serdes_names() {
        crate::testing::labels_are_serde_names(QueryChange::label);
    }
}
