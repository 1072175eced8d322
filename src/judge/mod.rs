//! Stage 5b, judge: an LLM grades (query, chunk) pairs on the qrels scale — 3 fully answers,
//! 2 mostly, 1 related, 0 not relevant (`prompts/<lang>/judge.md`) — and the grades decide three
//! controls the round trip cannot:
//!
//! - a `multi_hop` query that one of its hops answers alone (grade 3) is rejected;
//! - a `no_answer` query that one of its top-k chunks answers (grade 2 or 3) is dropped, or with
//!   `--reclassify` kept as an answerable (`direct`) query with the graded chunks as relevant;
//! - with `--judge-pool K`, the first K chunks of each answerable query's pool are graded, and
//!   grades of 1 or more become extra qrels rows (provenance `judge`).
//!
//! Input: the round's [`Checked`] candidates. Output: the same, with pool grades set and status,
//! reason or type changed where the judge says so. Invariants: a dropped candidate is never
//! graded; the same (query, chunk) pair is asked once per round (and, through the LLM cache,
//! once ever); a missing grade never drops a query: it flags it for review (`judge_failed`).
//! What is asked of each candidate is decided in one place, `asked`, which both plans the
//! asks and estimates their cost.

mod llm;

pub use llm::LlmJudge;

use crate::error::Result;
use crate::filter::OnMiss;
use crate::index::ChunkIndex;
use crate::llm::Unusable;
use crate::progress::StageProgress;
use crate::record::{Checked, Difficulty, Pooled, QueryType, Reason, Status, Verdict};
use serde::Serialize;
use std::collections::BTreeMap;

/// A grade at least this high means the chunk answers the query.
pub(crate) const ANSWERS: u8 = 2;
/// The grade of a chunk that answers the query on its own.
const FULLY: u8 = 3;

/// The qrels relevance of a judge's grade: the grade itself when it says the chunk answers the
/// query (2 or 3), else 0, "judged not relevant". A grade of 1 ("related") is not counted as
/// relevant: most pooled chunks are not relevant, so a judge's errors are mostly false
/// "relevant" labels, and the stricter grade bounds them.
#[must_use]
pub fn relevance(grade: u8) -> u8 {
    if grade >= ANSWERS { grade } else { 0 }
}

/// One question to the judge: how well does the chunk answer the query?
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ask {
    /// The query text.
    pub query: String,
    /// Position of the chunk in the index.
    pub chunk: usize,
}

/// The judge's answer to one ask: a grade 0–3, or why there is none (an unusable reply after
/// the repairs, a failed call).
pub type Grade = std::result::Result<u8, Unusable>;

/// Grades asks. Implemented by [`LlmJudge`], which shares the run's LLM session (endpoint,
/// limits, cache and budget) with the generator.
pub trait Judge {
    /// One grade (0–3) per ask, in order, or why none came back.
    ///
    /// # Errors
    /// Fatal problems only: an unusable endpoint, a spent budget.
    fn grade(&mut self, asks: &[Ask], progress: &StageProgress) -> Result<Vec<Grade>>;
}

/// Settings of the judge stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct JudgeConfig {
    /// With `--gate judge`, what becomes of an answerable query whose source the judge says
    /// does not answer it (`--on-miss`); `None` when the round trip is the gate. Recorded in
    /// the manifest with the filter's settings.
    #[serde(skip)]
    pub gate: Option<OnMiss>,
    /// Pooled chunks graded per answerable query (`--judge-pool`); 0 = none.
    pub pool: usize,
    /// What becomes of a `no_answer` query that the corpus answers (recorded as
    /// `reclassify: true|false`).
    #[serde(rename = "reclassify")]
    pub on_answered: OnAnswered,
}

/// What becomes of a `no_answer` query that a chunk answers (`--reclassify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnAnswered {
    /// Dropped (`answered_in_corpus`).
    #[default]
    Drop,
    /// Kept as an answerable `direct` query, the chunks that answer it relevant.
    Reclassify,
}

impl Serialize for OnAnswered {
    /// As the manifest has always recorded it: `reclassify: true` or `false`.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_bool(*self == Self::Reclassify)
    }
}

/// The two passes of the judge in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before admission: the questions that decide whether a candidate stays (multi_hop hops,
    /// no_answer pools).
    Decide,
    /// After admission, for the queries in the set only: pool grades (`--judge-pool`).
    Pool,
}

/// What the judge asks about a candidate in a phase: the one policy behind both the asks of a
/// round ([`Asks::plan`]) and what a planned query may cost ([`calls_at_most`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// Nothing.
    Nothing,
    /// Each source of the query (each hop of a `multi_hop` query), alone.
    Sources,
    /// The first this many chunks of its pool (and, when pools are graded at all, every chunk a
    /// `--pool-run` run added: the point of pooling a run is that its finds get graded).
    Pool(usize),
}

/// What the judge asks about a candidate of `query_type` in `phase`.
fn asked(phase: Phase, query_type: QueryType, config: JudgeConfig) -> Asked {
    match (phase, query_type) {
        (Phase::Decide, QueryType::NoAnswer) => Asked::Pool(usize::MAX),
        (Phase::Decide, QueryType::MultiHop) => Asked::Sources,
        (Phase::Decide, QueryType::Direct | QueryType::Paraphrase) if config.gate.is_some() => Asked::Sources,
        (Phase::Decide, QueryType::Direct | QueryType::Paraphrase) => Asked::Nothing,
        (Phase::Pool, _) => Asked::Pool(config.pool),
    }
}

/// The asks a planned query of `query_type` may cost over both phases, at most: whether its
/// sources are asked, and how many of the `pool_depth` chunks of its pool (a chunk graded in the
/// first phase is not asked again in the second).
#[must_use]
pub fn calls_at_most(query_type: QueryType, config: JudgeConfig, pool_depth: usize) -> CallsAtMost {
    let phases = [Phase::Decide, Phase::Pool].map(|phase| asked(phase, query_type, config));
    let pool = phases.iter().filter_map(|a| if let Asked::Pool(take) = a { Some(*take) } else { None }).max();
    CallsAtMost { sources: phases.contains(&Asked::Sources), pool: pool.unwrap_or(0).min(pool_depth) }
}

/// The asks a planned query may cost, at most (see [`calls_at_most`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallsAtMost {
    /// One ask per source (per hop of a `multi_hop` query).
    pub sources: bool,
    /// Asks about chunks of its pool.
    pub pool: usize,
}

/// What one ask is for.
#[derive(Debug, Clone, Copy)]
enum Purpose {
    /// A source of the query (a hop of a `multi_hop` query), judged alone.
    Source,
    /// The pool entry at this index.
    Pool(usize),
}

/// The asks of one candidate: what each is for and which ask answers it.
type Plan = Vec<(Purpose, usize)>;

/// A round's questions to the judge, each asked once, and which candidate needs which answer.
#[derive(Debug, Default)]
pub struct Asks {
    asks: Vec<Ask>,
    plans: Vec<Plan>,
}

impl Asks {
    /// Plans the asks of `phase` for the round's candidates that are still in the running.
    #[must_use]
    pub fn plan(items: &[Checked], index: &ChunkIndex, config: JudgeConfig, phase: Phase) -> Self {
        let mut numbered: BTreeMap<Ask, usize> = BTreeMap::new();
        let plans = items
            .iter()
            .map(|item| {
                purposes(item, index, config, phase)
                    .into_iter()
                    .map(|(purpose, chunk)| {
                        let next = numbered.len();
                        let ask = Ask { query: item.candidate.text.clone(), chunk };
                        (purpose, *numbered.entry(ask).or_insert(next))
                    })
                    .collect()
            })
            .collect();
        let mut asks: Vec<(Ask, usize)> = numbered.into_iter().collect();
        asks.sort_by_key(|(_, at)| *at);
        Self { asks: asks.into_iter().map(|(ask, _)| ask).collect(), plans }
    }

    /// The distinct questions, in the candidates' order.
    #[must_use]
    pub fn asks(&self) -> &[Ask] {
        &self.asks
    }

    /// The candidate each ungraded ask was first planned for, with the ask and why: for
    /// `rejects.jsonl`.
    #[must_use]
    pub fn ungraded<'g>(&self, grades: &'g [Grade]) -> Vec<(usize, &Ask, &'g Unusable)> {
        let mut first_asker = vec![None; self.asks.len()];
        for (item, plan) in self.plans.iter().enumerate() {
            for &(_, at) in plan {
                if let Some(asker @ None) = first_asker.get_mut(at) {
                    *asker = Some(item);
                }
            }
        }
        let failed = grades.iter().enumerate().filter_map(|(at, g)| g.as_ref().err().map(|u| (at, u)));
        failed
            .filter_map(|(at, u)| Some((first_asker.get(at).copied().flatten()?, self.asks.get(at)?, u)))
            .collect()
    }

    /// Applies the judge's grades (one per ask) to the candidates they were planned for.
    pub fn apply(self, items: &mut [Checked], grades: &[Grade], config: JudgeConfig, phase: Phase) {
        for (item, plan) in items.iter_mut().zip(self.plans) {
            let answers: Vec<(Purpose, Option<u8>)> = plan
                .into_iter()
                .map(|(purpose, at)| (purpose, grades.get(at).and_then(|g| g.as_ref().ok()).copied()))
                .collect();
            record_pool_grades(item, &answers);
            if phase == Phase::Decide && item.in_set() {
                decide(item, &answers, config);
            }
        }
    }
}

/// The chunks to ask about for one candidate in `phase`, and why.
fn purposes(item: &Checked, index: &ChunkIndex, config: JudgeConfig, phase: Phase) -> Vec<(Purpose, usize)> {
    if !item.in_set() {
        return Vec::new();
    }
    let from_run = |p: &Pooled| p.pooled_by.iter().any(|s| crate::runs::is_run_source(s));
    match asked(phase, item.candidate.query_type, config) {
        Asked::Nothing => Vec::new(),
        Asked::Sources => item
            .candidate
            .sources
            .iter()
            .filter_map(|id| index.position(id))
            .map(|c| (Purpose::Source, c))
            .collect(),
        Asked::Pool(take) => {
            let entries = item.verdict.pool.iter().enumerate();
            let wanted = entries.filter(|(i, p)| *i < take || (take > 0 && from_run(p)));
            let ungraded = wanted.filter(|(_, p)| p.grade.is_none());
            ungraded.filter_map(|(i, p)| index.position(&p.chunk_id).map(|c| (Purpose::Pool(i), c))).collect()
        }
    }
}

/// Records the grades of pooled chunks.
fn record_pool_grades(item: &mut Checked, graded: &[(Purpose, Option<u8>)]) {
    for &(purpose, grade) in graded {
        if let Purpose::Pool(i) = purpose
            && let Some(pooled) = item.verdict.pool.get_mut(i)
        {
            pooled.grade = grade;
        }
    }
}

/// The type's rule, from the deciding grades: a hop that answers alone rejects a multi_hop
/// query; a chunk that answers a no_answer query drops it (or reclassifies it), and a
/// no_answer query no chunk answers is confirmed. A missing grade flags the query. With the
/// judge as the gate, a source that does not answer its query (a hop that is not relevant)
/// fails it as `--on-miss` says, and a query BM25 missed passes on the judge's word.
fn decide(item: &mut Checked, graded: &[(Purpose, Option<u8>)], config: JudgeConfig) {
    let failed = graded.iter().any(|&(_, g)| g.is_none());
    let answered = graded.iter().any(|&(_, g)| g.is_some_and(|g| g >= ANSWERS));
    let sources = || graded.iter().filter(|(p, _)| matches!(p, Purpose::Source)).map(|&(_, g)| g);
    let one_hop_answers = sources().any(|g| g == Some(FULLY));
    let verdict = &mut item.verdict;
    match item.candidate.query_type {
        QueryType::MultiHop if one_hop_answers => verdict.mark(Status::Dropped, Reason::OneChunkAnswers),
        QueryType::NoAnswer if answered && config.on_answered == OnAnswered::Reclassify => {
            reclassify(verdict);
        }
        QueryType::NoAnswer if answered => verdict.mark(Status::Dropped, Reason::AnsweredInCorpus),
        _ if failed => verdict.mark(Status::Flagged, Reason::JudgeFailed),
        QueryType::NoAnswer => verdict.mark(Status::Kept, Reason::NoAnswerConfirmed),
        _ => {
            if let Some(on_miss) = config.gate {
                gate(verdict, item.candidate.query_type, sources(), on_miss);
            }
        }
    }
}

/// The judge as the gate of an answerable query: a source graded below 2 (a hop graded 0)
/// fails it as `--on-miss` says; one BM25 missed but the judge passes is kept.
fn gate(
    verdict: &mut Verdict,
    query_type: QueryType,
    mut sources: impl Iterator<Item = Option<u8>>,
    on_miss: OnMiss,
) {
    let (fails, failure) = match query_type {
        QueryType::MultiHop => (sources.any(|g| g == Some(0)), Reason::HopNotRelevant),
        _ => (sources.any(|g| g.is_some_and(|g| g < ANSWERS)), Reason::SourceNotAnswering),
    };
    if fails {
        let status = match on_miss {
            OnMiss::Drop => Status::Dropped,
            OnMiss::Flag => Status::Flagged,
        };
        verdict.mark(status, failure);
    } else if matches!(verdict.reason, Reason::SourceNotInTopN | Reason::HopNotInTopN) {
        verdict.mark(Status::Kept, Reason::JudgeAnswers);
    }
}

/// Keeps an answered no_answer query as a `direct` one: the chunks that answer it (grade ≥ 2)
/// rank where its sources would, and its difficulty follows from them.
fn reclassify(verdict: &mut Verdict) {
    verdict.mark(Status::Kept, Reason::Reclassified);
    verdict.relabelled = Some(QueryType::Direct);
    let best = verdict.pool.iter().filter(|p| p.grade.is_some_and(|g| g >= ANSWERS)).map(|p| p.rank).min();
    verdict.ranks = vec![best];
    verdict.difficulty = Some(Difficulty::measure(&verdict.ranks, verdict.overlap));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ChunkId;
    use crate::record::{Candidate, FailureKind, Pooled, Verdict};

    fn id(s: &str) -> ChunkId {
        ChunkId::parse(s).unwrap()
    }

    fn item(query_type: QueryType, pool: &[&str]) -> Checked {
        let pool = (1..)
            .zip(pool)
            .map(|(rank, c)| Pooled { chunk_id: id(c), rank, grade: None, pooled_by: Vec::new() })
            .collect();
        Checked {
            candidate: Candidate::sample(query_type, "q", &["a", "b"]),
            verdict: Verdict { pool, ..Verdict::dropped(Reason::SourceInTopN) },
        }
        .kept()
    }

    impl Checked {
        fn kept(mut self) -> Self {
            self.verdict.mark(Status::Kept, Reason::SourceInTopN);
            self
        }
    }

    const NO_POOL: JudgeConfig = JudgeConfig { pool: 0, on_answered: OnAnswered::Drop, gate: None };

    fn outcome(item: &Checked) -> (Status, Reason, Option<QueryType>) {
        (item.verdict.status, item.verdict.reason, item.verdict.relabelled)
    }

    #[test]
    fn a_planned_query_may_cost_its_hops_and_the_deepest_pool_either_phase_grades() {
        let pooled = JudgeConfig { pool: 3, on_answered: OnAnswered::Drop, gate: None };
        let at_most = |t, config| calls_at_most(t, config, 5);
        assert_eq!(at_most(QueryType::NoAnswer, NO_POOL), CallsAtMost { sources: false, pool: 5 });
        assert_eq!(
            at_most(QueryType::NoAnswer, pooled),
            CallsAtMost { sources: false, pool: 5 },
            "graded once"
        );
        assert_eq!(at_most(QueryType::MultiHop, NO_POOL), CallsAtMost { sources: true, pool: 0 });
        assert_eq!(at_most(QueryType::MultiHop, pooled), CallsAtMost { sources: true, pool: 3 });
        assert_eq!(at_most(QueryType::Direct, NO_POOL), CallsAtMost { sources: false, pool: 0 });
        assert_eq!(at_most(QueryType::Paraphrase, pooled), CallsAtMost { sources: false, pool: 3 });
        assert_eq!(calls_at_most(QueryType::Direct, pooled, 2).pool, 2, "never deeper than the pool");
        let gated = JudgeConfig { gate: Some(OnMiss::Drop), ..NO_POOL };
        assert_eq!(
            at_most(QueryType::Direct, gated),
            CallsAtMost { sources: true, pool: 0 },
            "the gate asks"
        );
    }

    #[test]
    fn only_a_grade_that_answers_the_query_is_relevant() {
        assert_eq!([0, 1, 2, 3].map(relevance), [0, 0, 2, 3]);
    }

    #[test]
    fn on_answered_is_recorded_as_reclassify_true_or_false() {
        let json = |on_answered| {
            serde_json::to_string(&JudgeConfig { pool: 1, on_answered, gate: Some(OnMiss::Drop) }).unwrap()
        };
        assert_eq!(json(OnAnswered::Drop), r#"{"pool":1,"reclassify":false}"#);
        assert_eq!(json(OnAnswered::Reclassify), r#"{"pool":1,"reclassify":true}"#);
    }

    #[test]
    fn a_hop_that_answers_alone_rejects_a_multi_hop_query() {
        let mut one = item(QueryType::MultiHop, &[]);
        decide(&mut one, &[(Purpose::Source, Some(3)), (Purpose::Source, Some(1))], NO_POOL);
        assert_eq!(outcome(&one), (Status::Dropped, Reason::OneChunkAnswers, None));
        let mut both = item(QueryType::MultiHop, &[]);
        decide(&mut both, &[(Purpose::Source, Some(2)), (Purpose::Source, Some(2))], NO_POOL);
        assert_eq!(outcome(&both), (Status::Kept, Reason::SourceInTopN, None));
        let mut unsure = item(QueryType::MultiHop, &[]);
        decide(&mut unsure, &[(Purpose::Source, None), (Purpose::Source, Some(2))], NO_POOL);
        assert_eq!(outcome(&unsure), (Status::Flagged, Reason::JudgeFailed, None));
    }

    #[test]
    fn the_judge_as_gate_keeps_what_its_source_answers_whatever_bm25_found() {
        let gated = |on_miss| JudgeConfig { gate: Some(on_miss), ..NO_POOL };
        let missed = |query_type| {
            let mut item = item(query_type, &[]);
            item.verdict.mark(Status::Kept, Reason::SourceNotInTopN);
            item
        };
        let mut answers = missed(QueryType::Paraphrase);
        decide(&mut answers, &[(Purpose::Source, Some(2))], gated(OnMiss::Drop));
        assert_eq!(outcome(&answers), (Status::Kept, Reason::JudgeAnswers, None));
        let mut related = item(QueryType::Direct, &[]);
        decide(&mut related, &[(Purpose::Source, Some(1))], gated(OnMiss::Drop));
        assert_eq!(outcome(&related), (Status::Dropped, Reason::SourceNotAnswering, None), "found by BM25");
        let mut flagged = missed(QueryType::Direct);
        decide(&mut flagged, &[(Purpose::Source, Some(0))], gated(OnMiss::Flag));
        assert_eq!(outcome(&flagged), (Status::Flagged, Reason::SourceNotAnswering, None));
        let mut hops = missed(QueryType::MultiHop);
        decide(&mut hops, &[(Purpose::Source, Some(1)), (Purpose::Source, Some(2))], gated(OnMiss::Drop));
        assert_eq!(outcome(&hops), (Status::Kept, Reason::JudgeAnswers, None), "a hop may be related only");
        let mut stray = item(QueryType::MultiHop, &[]);
        decide(&mut stray, &[(Purpose::Source, Some(0)), (Purpose::Source, Some(2))], gated(OnMiss::Drop));
        assert_eq!(outcome(&stray), (Status::Dropped, Reason::HopNotRelevant, None));
        let mut ungated = missed(QueryType::Direct);
        decide(&mut ungated, &[], NO_POOL);
        assert_eq!(outcome(&ungated), (Status::Kept, Reason::SourceNotInTopN, None), "no gate, no change");
    }

    #[test]
    fn an_answered_no_answer_query_is_dropped_or_reclassified() {
        let graded = [(Purpose::Pool(0), Some(1)), (Purpose::Pool(1), Some(2))];
        let mut dropped = item(QueryType::NoAnswer, &["x", "y"]);
        decide(&mut dropped, &graded, NO_POOL);
        assert_eq!(outcome(&dropped), (Status::Dropped, Reason::AnsweredInCorpus, None));
        let mut kept = item(QueryType::NoAnswer, &["x", "y"]);
        record_pool_grades(&mut kept, &graded);
        decide(&mut kept, &graded, JudgeConfig { pool: 0, on_answered: OnAnswered::Reclassify, gate: None });
        assert_eq!(outcome(&kept), (Status::Kept, Reason::Reclassified, Some(QueryType::Direct)));
        let pool: Vec<Option<u8>> = kept.verdict.pool.iter().map(|p| p.grade).collect();
        assert_eq!(pool, [Some(1), Some(2)]);
        assert_eq!(kept.verdict.ranks, [Some(2)], "the answering chunk's rank");
        let mut unanswered = item(QueryType::NoAnswer, &["x"]);
        decide(&mut unanswered, &[(Purpose::Pool(0), Some(1))], NO_POOL);
        assert_eq!(outcome(&unanswered), (Status::Kept, Reason::NoAnswerConfirmed, None));
    }

    #[test]
    fn an_ungraded_ask_is_reported_for_the_first_candidate_that_planned_it() {
        let ask = |chunk| Ask { query: "q".into(), chunk };
        let asks = Asks {
            asks: vec![ask(0), ask(1), ask(2)],
            plans: vec![
                vec![],
                vec![(Purpose::Source, 1), (Purpose::Source, 0)],
                vec![(Purpose::Pool(0), 1), (Purpose::Pool(1), 2)],
            ],
        };
        let failed =
            |reason: &str| Unusable { kind: FailureKind::Timeout, reason: reason.into(), reply: None };
        let grades = [Err(failed("a")), Err(failed("b")), Ok(1)];
        let reported: Vec<(usize, usize, &str)> = asks
            .ungraded(&grades)
            .into_iter()
            .map(|(at, ask, u)| (at, ask.chunk, u.reason.as_str()))
            .collect();
        assert_eq!(reported, [(1, 0, "a"), (1, 1, "b")]);
    }

    #[test]
    fn a_missing_pool_grade_of_an_answerable_query_only_leaves_the_chunk_ungraded() {
        let mut direct = item(QueryType::Direct, &["x", "y"]);
        let asks = Asks { asks: Vec::new(), plans: vec![vec![(Purpose::Pool(0), 0), (Purpose::Pool(1), 1)]] };
        let failed = Unusable { kind: FailureKind::UnusableReply, reason: "no JSON".into(), reply: None };
        asks.apply(std::slice::from_mut(&mut direct), &[Err(failed), Ok(2)], NO_POOL, Phase::Pool);
        assert_eq!(outcome(&direct), (Status::Kept, Reason::SourceInTopN, None));
        assert_eq!(direct.verdict.pool[1].grade, Some(2));
    }
}
