//! The re-check's questions to the LLM judge, and what its grades decide (the rules are in the
//! parent module's docs): each new source chosen without its evidence, graded alone; and the
//! chunks of a `no_answer` query's new pool without a grade, asked and decided as a build asks
//! and decides them ([`Asks`], [`Phase::Decide`]).

use super::{PoolGrade, QueryChange, Rechecked, ToJudge, restamp, retire};
use crate::error::Result;
use crate::id::ChunkId;
use crate::index::ChunkIndex;
use crate::judge::{ANSWERS, Ask, Asks, Grade, JudgeConfig, OnAnswered, Phase};
use crate::record::{Checked, Provenance, QueryType, Reason, Status};
use std::collections::{BTreeMap, HashMap};

/// How the judge decides a `no_answer` query in a refresh: a chunk that answers it drops it,
/// which the refresh turns into `may_be_answerable` (it never reclassifies a query).
const NO_ANSWER: JudgeConfig = JudgeConfig { pool: 0, on_answered: OnAnswered::Drop, gate: None };

/// The lowest grade that keeps a new source of a query of `query_type`: one that answers it;
/// for a hop of a `multi_hop` query, which answers only part of it, one that is related (1).
fn lowest_kept(query_type: QueryType) -> u8 {
    if query_type == QueryType::MultiHop { 1 } else { ANSWERS }
}

/// The judge's questions about the re-checked queries, and which query each is for.
pub struct Questions {
    /// The places of the `no_answer` queries asked about among the re-checked queries.
    places: Vec<usize>,
    /// Their records, which their asks are planned over and decide.
    records: Vec<Checked>,
    /// The asks about their pools.
    pools: Asks,
    /// Each source asked about: the place of its query, the chunk, the ask.
    sources: Vec<(usize, ChunkId, Ask)>,
}

impl Questions {
    /// The questions the re-check of `checked` left, about chunks of `index`.
    #[must_use]
    pub fn plan(checked: &[Rechecked], index: &ChunkIndex) -> Self {
        let (mut places, mut records, mut sources) = (Vec::new(), Vec::new(), Vec::new());
        for (at, c) in checked.iter().enumerate() {
            let Some(judged) = &c.judged else { continue };
            match &c.to_judge {
                ToJudge::Nothing => {}
                ToJudge::Pool => {
                    places.push(at);
                    records.push(judged.clone());
                }
                ToJudge::Sources(ids) => {
                    for id in ids {
                        if let Some(chunk) = index.position(id) {
                            let ask = Ask { query: judged.candidate.text.clone(), chunk };
                            sources.push((at, id.clone(), ask));
                        }
                    }
                }
            }
        }
        let pools = Asks::plan(&records, index, NO_ANSWER, Phase::Decide);
        Self { places, records, pools, sources }
    }

    /// How many asks there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.pools.asks().len() + self.sources.len()
    }

    /// Whether there is no ask.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every ask: the pools' first, then the sources'.
    #[must_use]
    pub fn asks(&self) -> Vec<Ask> {
        let sources = self.sources.iter().map(|(_, _, ask)| ask.clone());
        self.pools.asks().iter().cloned().chain(sources).collect()
    }

    /// Applies the judge's `grades` (one per ask, in the order of [`Questions::asks`]) to the
    /// queries of `checked` they were planned for (over the chunks of `index`).
    ///
    /// # Errors
    /// [`crate::Error::Malformed`] for a query line that is not a JSON object.
    pub fn apply(self, checked: &mut [Rechecked], grades: &[Grade], index: &ChunkIndex) -> Result<()> {
        let (pools, sources) = grades.split_at(self.pools.asks().len().min(grades.len()));
        let mut by_query: BTreeMap<usize, Vec<(&ChunkId, Option<&Grade>)>> = BTreeMap::new();
        for (at, (place, id, _)) in self.sources.iter().enumerate() {
            by_query.entry(*place).or_default().push((id, sources.get(at)));
        }
        for (place, answers) in by_query {
            settle_sources(&mut checked[place], &answers);
        }
        self.apply_pools(checked, pools, index)
    }

    /// Applies the judge's grades of the `no_answer` queries' pools (`pools`, one per ask).
    fn apply_pools(self, checked: &mut [Rechecked], pools: &[Grade], index: &ChunkIndex) -> Result<()> {
        let Self { places, mut records, pools: asks, .. } = self;
        let ungraded: Vec<Vec<usize>> = records.iter().map(ungraded_entries).collect();
        let mut failures: HashMap<usize, String> = HashMap::new();
        for (item, ask, unusable) in asks.ungraded(pools) {
            let failure = || format!("{}: {}", index.chunk_id(ask.chunk), unusable.reason);
            failures.entry(item).or_insert_with(failure);
        }
        asks.apply(&mut records, pools, NO_ANSWER, Phase::Decide);
        for (item, (place, record)) in places.into_iter().zip(records).enumerate() {
            let c = &mut checked[place];
            let entries = ungraded[item].iter().filter_map(|&p| record.verdict.pool.get(p));
            let new = entries.filter_map(|p| Some(PoolGrade { chunk: p.chunk_id.clone(), grade: p.grade? }));
            c.pool_grades.extend(new);
            settle_no_answer(c, record, failures.get(&item).map(String::as_str))?;
        }
        Ok(())
    }
}

/// The positions of the entries of `record`'s pool without a grade.
fn ungraded_entries(record: &Checked) -> Vec<usize> {
    let pool = record.verdict.pool.iter().enumerate();
    pool.filter(|(_, p)| p.grade.is_none()).map(|(at, _)| at).collect()
}

/// A query retargeted to the most alike chunks of its changed sources, with the judge's grade
/// of each (`None` when none came back): retired when one is graded too low, else each row on
/// them takes the judge's grade, and a missing grade is named in the reason (`judge_failed`).
fn settle_sources(c: &mut Rechecked, graded: &[(&ChunkId, Option<&Grade>)]) {
    let lowest = lowest_kept(c.query_type);
    let too_low = graded.iter().find_map(|&(id, g)| match g {
        Some(Ok(g)) if *g < lowest => Some((id, *g)),
        _ => None,
    });
    if let Some((id, grade)) = too_low {
        let reason = format!(
            "its chunks changed and its evidence is not in {id}, where its source went; the judge graded \
             {id} {grade} (below {lowest}): it no longer answers it"
        );
        retire(c, reason);
        return;
    }
    let (mut said, mut failed) = (Vec::new(), Vec::new());
    for &(id, grade) in graded {
        match grade {
            Some(Ok(grade)) => {
                let machine =
                    c.qrels.iter_mut().filter(|r| r.chunk_id == *id && r.provenance != Provenance::Human);
                machine.for_each(|r| r.grade = *grade);
                said.push(format!("{id} {grade}"));
            }
            Some(Err(unusable)) => failed.push(format!("{id} ({})", unusable.reason)),
            None => failed.push(format!("{id} (no grade came back)")),
        }
    }
    if !said.is_empty() {
        c.reason = format!("{}; the judge graded {}", c.reason, said.join(", "));
    }
    if !failed.is_empty() {
        c.reason = format!("{}; the judge could not grade {}", c.reason, failed.join(", "));
        if let Some(judged) = &mut c.judged {
            judged.verdict.mark(Status::Flagged, Reason::JudgeFailed);
        }
    }
}

/// A `no_answer` query with its `record` as the judge decided it (`failure`: why a grade is
/// missing): one a chunk answers, or with a grade missing, may be answerable; another keeps its
/// change (flagged when it is queued).
fn settle_no_answer(c: &mut Rechecked, mut record: Checked, failure: Option<&str>) -> Result<()> {
    let reason = match record.verdict.reason {
        Reason::AnsweredInCorpus => {
            let answering = c.pool_grades.iter().filter(|g| g.grade >= ANSWERS);
            let answering: Vec<String> = answering.map(|g| format!("{} {}", g.chunk, g.grade)).collect();
            Some(format!(
                "the judge graded a chunk of its new pool as answering it ({}): the new corpus may answer it",
                answering.join(", ")
            ))
        }
        Reason::JudgeFailed => Some(format!(
            "the judge could not grade a chunk of its new pool ({}): the new corpus may answer it",
            failure.unwrap_or("no grade came back")
        )),
        _ => None,
    };
    if let Some(reason) = reason {
        c.change = QueryChange::MayBeAnswerable;
        c.reason = reason;
        if let Some(line) = &c.line {
            c.line = Some(restamp(line, c.at, QueryChange::MayBeAnswerable)?);
        }
    }
    if c.change.queued() {
        record.verdict.status = Status::Flagged;
    }
    c.judged = Some(record);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Unusable;
    use crate::record::{Candidate, FailureKind, Qrel, Verdict};
    use crate::review::set::QueryLine;

    fn id(s: &str) -> ChunkId {
        ChunkId::parse(s).unwrap()
    }

    /// A query of `query_type` retargeted to `a:2` and `b:2`, with a machine row on each and a
    /// human one on `b:2`.
    fn retargeted(query_type: QueryType) -> Rechecked {
        let candidate = Candidate::sample(query_type, "how are keys rotated", &["a:2", "b:2"]);
        let raw = format!(r#"{{"_id":"{}","text":"how are keys rotated","metadata":{{}}}}"#, candidate.id);
        let line = QueryLine {
            id: candidate.id.clone(),
            text: candidate.text.clone(),
            query_type,
            status: Status::Kept,
            raw,
            line: 1,
        };
        let row = |chunk: &str, provenance| Qrel {
            query_id: candidate.id.clone(),
            chunk_id: id(chunk),
            grade: 3,
            provenance,
        };
        let rows = vec![row("a:2", Provenance::Refresh), row("b:2", Provenance::Human)];
        let mut verdict = Verdict::dropped(Reason::SourceInTopN);
        verdict.mark(Status::Flagged, Reason::SourceInTopN);
        let mut c = Rechecked::new(&line, QueryChange::Retargeted, rows, Checked { candidate, verdict });
        "kept".clone_into(&mut c.reason);
        c
    }

    fn grades(c: &Rechecked) -> Vec<(&str, u8)> {
        c.qrels.iter().map(|r| (r.chunk_id.as_str(), r.grade)).collect()
    }

    #[test]
    fn new_sources_graded_relevant_keep_the_query_with_the_judges_grades() {
        let (a, b) = (id("a:2"), id("b:2"));
        let mut c = retargeted(QueryType::Direct);
        settle_sources(&mut c, &[(&a, Some(&Ok(2))), (&b, Some(&Ok(3)))]);
        assert_eq!(c.change, QueryChange::Retargeted);
        assert_eq!(c.reason, "kept; the judge graded a:2 2, b:2 3");
        assert_eq!(grades(&c), [("a:2", 2), ("b:2", 3)], "a human grade stays");
        let mut hop = retargeted(QueryType::MultiHop);
        settle_sources(&mut hop, &[(&a, Some(&Ok(1)))]);
        assert_eq!((hop.change, grades(&hop)), (QueryChange::Retargeted, vec![("a:2", 1), ("b:2", 3)]));
    }

    #[test]
    fn a_new_source_graded_too_low_retires_the_query() {
        let (a, b) = (id("a:2"), id("b:2"));
        let mut c = retargeted(QueryType::Paraphrase);
        settle_sources(&mut c, &[(&a, Some(&Ok(3))), (&b, Some(&Ok(1)))]);
        assert_eq!(c.change, QueryChange::Retired);
        assert_eq!(
            c.reason,
            "its chunks changed and its evidence is not in b:2, where its source went; the judge graded b:2 1 \
             (below 2): it no longer answers it"
        );
        assert!(c.line.is_none() && c.judged.is_none() && c.qrels.is_empty());
        assert_eq!(c.lost.iter().map(|l| l.chunk.as_str()).collect::<Vec<_>>(), ["b:2"], "the human label");
    }

    #[test]
    fn a_missing_grade_flags_the_query_with_the_failure() {
        let (a, b) = (id("a:2"), id("b:2"));
        let mut c = retargeted(QueryType::Direct);
        let failed = Unusable { kind: FailureKind::Timeout, reason: "timed out".into(), reply: None };
        settle_sources(&mut c, &[(&a, Some(&Ok(2))), (&b, Some(&Err(failed)))]);
        assert_eq!(c.change, QueryChange::Retargeted);
        assert_eq!(c.reason, "kept; the judge graded a:2 2; the judge could not grade b:2 (timed out)");
        let verdict = &c.judged.as_ref().unwrap().verdict;
        assert_eq!((verdict.status, verdict.reason), (Status::Flagged, Reason::JudgeFailed));
        assert_eq!(grades(&c), [("a:2", 2), ("b:2", 3)]);
        let mut none = retargeted(QueryType::Direct);
        settle_sources(&mut none, &[(&a, None)]);
        assert_eq!(none.reason, "kept; the judge could not grade a:2 (no grade came back)");
    }

    #[test]
    fn a_query_line_is_restamped_with_the_judges_change_and_keeps_what_the_refresh_wrote() {
        let line = r#"{"_id":"q","metadata":{"refresh":{"change":"relabelled","old_sources":["a:1"]},"status":"flagged"}}"#;
        let now = restamp(line, 3, QueryChange::MayBeAnswerable).unwrap();
        assert_eq!(
            now,
            r#"{"_id":"q","metadata":{"refresh":{"change":"may_be_answerable","old_sources":["a:1"]},"status":"flagged"}}"#
        );
        let kept = restamp(r#"{"_id":"q","metadata":{"status":"kept"}}"#, 3, QueryChange::MayBeAnswerable);
        assert_eq!(
            kept.unwrap(),
            r#"{"_id":"q","metadata":{"refresh":{"change":"may_be_answerable"},"status":"flagged"}}"#
        );
        let bad = restamp(r#"{"_id":"q"}"#, 3, QueryChange::MayBeAnswerable).map_err(|e| e.to_string());
        assert!(bad.is_err_and(|e| e.contains('3')), "names the line");
    }
}
