//! Stage 5c, admission: the rounds of a build. Each round generates the planned requests, runs
//! the round trip and the judge, and admits the survivors into the set by quota (queries of
//! their generated type first, near-duplicates dropped, reclassified no_answer queries kept
//! beyond the quotas); later rounds top up the types still short.
//!
//! Input: [`Request`]s per round. Output: every candidate with its verdict ([`Checked`]), the
//! rejects, and per-type [`TypeCounts`] and [`Shortfall`]s. Invariants: a query id is judged once
//! (a repeat is dropped unsearched); a type's `filled` never exceeds its quota; every candidate
//! is counted under the type it was generated as.

use super::stages::RoundStages;
use crate::dedup::Dedup;
use crate::error::Result;
use crate::filter::RoundTrip;
use crate::generate::{Generator, Margin, Quotas, Request, stalled, top_up};
use crate::id::{ChunkId, QueryId};
use crate::index::ChunkIndex;
use crate::judge::{Asks, Judge, JudgeConfig, Phase};
use crate::output::{Shortfall, TypeCounts};
use crate::progress::{Progress, StageProgress, Timings};
use crate::record::{Candidate, Checked, QueryType, Reason, Reject, Status, Verdict};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// The state carried across generation rounds.
pub(crate) struct Rounds {
    pub(crate) dedup: Dedup,
    judge: JudgeConfig,
    /// Every candidate so far, with its verdict.
    pub(crate) judged: Vec<Checked>,
    /// Requests that yielded no usable query, grades the judge could not give.
    pub(crate) rejects: Vec<Reject>,
    /// Per-type counts.
    pub(crate) counts: BTreeMap<QueryType, TypeCounts>,
    pub(crate) seen: HashSet<QueryId>,
    /// Rounds run.
    pub(crate) done: u32,
    /// Types whose top-ups stopped, and the round that stalled each.
    stalls: BTreeMap<QueryType, Stall>,
}

/// A top-up round that added far fewer queries of a type than planned ([`stalled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stall {
    round: u32,
    planned: usize,
    added: usize,
}

/// A type's requests planned and places filled so far: what a round's yield is measured from.
pub(crate) type Tally = BTreeMap<QueryType, (usize, usize)>;

impl Rounds {
    pub(crate) fn new(quotas: &Quotas, dedup_threshold: f64, judge: JudgeConfig) -> Self {
        let counts = quotas
            .iter()
            .map(|(&t, &requested)| (t, TypeCounts { requested, ..TypeCounts::default() }))
            .collect();
        Self {
            dedup: Dedup::new(dedup_threshold),
            judge,
            judged: Vec::new(),
            rejects: Vec::new(),
            counts,
            seen: HashSet::new(),
            done: 0,
            stalls: BTreeMap::new(),
        }
    }

    /// Counts `requests` as planned, and `share` of each type's planned queries so far as in
    /// the set (for a dry run).
    pub(crate) fn assume_kept(&mut self, requests: &[Request], share: f64) {
        for r in requests {
            self.count(r.query_type).planned += 1;
        }
        for counts in self.counts.values_mut() {
            counts.filled = ((counts.planned as f64 * share).floor() as usize).min(counts.requested);
        }
    }

    /// Queries still missing per type.
    fn deficit(counts: &TypeCounts) -> usize {
        counts.requested.saturating_sub(counts.filled)
    }

    /// Requests to plan per type: the first round asks for the quota; later rounds ask for the
    /// deficit divided by the share of that type's planned requests that joined the set so far,
    /// so top-ups converge in a round or two, and the last round adds a [`Margin::Safe`] so that
    /// it fills ([`top_up`]).
    pub(crate) fn to_plan(&self, margin: Margin) -> Quotas {
        self.counts
            .iter()
            .filter(|(t, c)| Self::deficit(c) > 0 && !self.stalls.contains_key(t))
            .map(|(&t, c)| (t, top_up(Self::deficit(c), keep_rate(c.planned, c.filled), margin)))
            .collect()
    }

    /// Each type's planned requests and filled places, before a round.
    pub(crate) fn tally(&self) -> Tally {
        self.counts.iter().map(|(&t, c)| (t, (c.planned, c.filled))).collect()
    }

    /// Stops planning the types a top-up `round` stalled: the round's yield, measured against
    /// `before`, far below the keep rate it was planned with ([`stalled`]).
    pub(crate) fn find_stalls(&mut self, round: u32, before: &Tally) {
        for (&t, c) in &self.counts {
            let Some(&(planned, filled)) = before.get(&t) else { continue };
            let (now_planned, added) = (c.planned - planned, c.filled - filled);
            let topped_up = planned > 0 && now_planned > 0;
            if topped_up && Self::deficit(c) > 0 && stalled(now_planned, added, keep_rate(planned, filled)) {
                self.stalls.insert(t, Stall { round, planned: now_planned, added });
            }
        }
    }

    fn generate(
        &mut self,
        generator: &mut dyn Generator,
        index: &ChunkIndex,
        requests: &[Request],
        stage: &StageProgress,
    ) -> Result<Vec<Candidate>> {
        for r in requests {
            self.count(r.query_type).planned += 1;
        }
        let generated = generator.generate(requests, stage)?;
        for failure in generated.failures {
            let request = &requests[failure.request];
            *self.count(request.query_type).generation_failures.entry(failure.kind).or_default() += 1;
            self.rejects.push(Reject {
                query_type: request.query_type,
                sources: request.sources.iter().map(|&c| index.chunk_id(c)).collect(),
                round: request.round,
                kind: failure.kind,
                reason: failure.reason,
                reply: failure.reply,
            });
        }
        let candidates: Vec<Candidate> = generated
            .drafts
            .into_iter()
            .map(|draft| {
                let request = &requests[draft.request];
                let sources: Vec<ChunkId> = request.sources.iter().map(|&c| index.chunk_id(c)).collect();
                Candidate {
                    id: QueryId::derive(request.query_type.label(), &sources, &draft.text),
                    text: draft.text,
                    query_type: request.query_type,
                    sources,
                    absent_term: draft.absent_term,
                    style: draft.style,
                    evidence: draft.evidence,
                    answer: draft.answer,
                    topic: draft.topic.map(|t| t.into_iter().map(|c| index.chunk_id(c)).collect()),
                    generator: generator.name().to_owned(),
                    round: request.round,
                }
            })
            .collect();
        for c in &candidates {
            self.count(c.query_type).generated += 1;
        }
        Ok(candidates)
    }

    /// The round trip and the lexical controls, for every candidate (a repeat of an earlier
    /// one is dropped unsearched).
    fn round_trip(
        &mut self,
        filter: &RoundTrip<'_>,
        candidates: Vec<Candidate>,
        stage: &StageProgress,
    ) -> Result<Vec<Checked>> {
        let fresh: Vec<bool> = candidates.iter().map(|c| self.seen.insert(c.id.clone())).collect();
        let searched: Vec<&Candidate> =
            candidates.iter().zip(&fresh).filter(|(_, f)| **f).map(|(c, _)| c).collect();
        let mut verdicts = filter.check_all(&searched, stage)?.into_iter();
        stage.inc((candidates.len() - searched.len()) as u64);
        Ok(candidates
            .into_iter()
            .zip(fresh)
            .map(|(candidate, fresh)| {
                // A repeat of an earlier candidate is dropped unsearched.
                let verdict = if fresh { verdicts.next() } else { None };
                Checked { candidate, verdict: verdict.unwrap_or_else(|| Verdict::dropped(Reason::Duplicate)) }
            })
            .collect())
    }

    /// Lets the judge grade what it must in `phase`, and applies its grades; questions left
    /// without a grade go to `rejects.jsonl` with the reason.
    fn run_judge(
        &mut self,
        judge: &mut dyn Judge,
        index: &ChunkIndex,
        items: &mut [Checked],
        phase: Phase,
        progress: Progress,
    ) -> Result<Duration> {
        let asks = Asks::plan(items, index, self.judge, phase);
        let asked = asks.asks().len();
        let stage = progress.stage("judge", asked as u64);
        let grades = if asked == 0 { Vec::new() } else { judge.grade(asks.asks(), &stage)? };
        let usable = grades.iter().flatten().count();
        for (at, ask, ungraded) in asks.ungraded(&grades) {
            let candidate = &items[at].candidate;
            self.rejects.push(Reject {
                query_type: candidate.query_type,
                sources: vec![index.chunk_id(ask.chunk)],
                round: candidate.round,
                kind: ungraded.kind,
                reason: format!(
                    "the judge gave no grade for {} against this chunk: {}",
                    candidate.id, ungraded.reason
                ),
                reply: ungraded.reply.clone(),
            });
        }
        asks.apply(items, &grades, self.judge, phase);
        Ok(stage.finish(&format!("{usable} of {asked} grades")))
    }

    /// Admits the round's survivors into the set while their type has room and no query in the
    /// set is too alike: queries of their generated type first, then relabelled ones, so a copy
    /// never takes the place of an original. A reclassified no_answer query (`--reclassify`)
    /// is kept beyond the quotas.
    fn admit(&mut self, items: &mut [Checked]) {
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by_key(|&i| items[i].verdict.relabelled.is_some());
        for i in order {
            let item = &mut items[i];
            if !item.in_set() {
                continue;
            }
            let reclassified = item.verdict.reason == Reason::Reclassified;
            if !reclassified && Self::deficit(self.count(item.query_type())) == 0 {
                item.verdict.mark(Status::Dropped, Reason::OverQuota);
            } else if let Some(survivor) = self.dedup.check_and_keep(&item.candidate.id, &item.candidate.text)
            {
                item.verdict.mark(Status::Dropped, Reason::NearDuplicate);
                item.verdict.duplicate_of = Some(survivor);
            } else if reclassified {
                self.count(item.query_type()).beyond_quota += 1;
            } else {
                self.count(item.query_type()).filled += 1;
            }
        }
    }

    /// Counts the round's candidates under the type they were generated as, and keeps them.
    fn record(&mut self, items: Vec<Checked>) {
        for item in items {
            let counts = self.count(item.candidate.query_type);
            counts.relabelled += usize::from(item.verdict.relabelled.is_some());
            match item.verdict.status {
                Status::Kept => counts.kept += 1,
                Status::Flagged => counts.flagged += 1,
                Status::Dropped => {
                    counts.dropped += 1;
                    *counts.dropped_by_reason.entry(item.verdict.reason).or_default() += 1;
                }
            }
            self.judged.push(item);
        }
    }

    /// One round: generate the planned requests, filter, let the judge decide, admit, then let
    /// the judge grade the pools of the queries admitted.
    #[expect(clippy::too_many_arguments, reason = "a round touches every stage between plan and set")]
    pub(crate) fn run(
        &mut self,
        round: u32,
        stages: &mut RoundStages<'_>,
        filter: &RoundTrip<'_>,
        index: &ChunkIndex,
        requests: &[Request],
        progress: Progress,
        timings: &mut Timings,
    ) -> Result<()> {
        let stage = progress.stage("generate", requests.len() as u64);
        let candidates = self.generate(stages.generator.as_mut(), index, requests, &stage)?;
        timings.add("generate", stage.finish(&format!("round {round}: {} queries", candidates.len())));
        let stage = progress.stage("filter", candidates.len() as u64);
        let mut items = self.round_trip(filter, candidates, &stage)?;
        let passed = items.iter().filter(|j| j.in_set()).count();
        timings.add("filter", stage.finish(&format!("round {round}: {passed} passed the round trip")));
        if let Some(judge) = stages.judge.as_mut() {
            timings.add("judge", self.run_judge(judge, index, &mut items, Phase::Decide, progress)?);
        }
        self.admit(&mut items);
        if let Some(judge) = stages.judge.as_mut().filter(|_| self.judge.pool > 0) {
            timings.add("judge", self.run_judge(judge, index, &mut items, Phase::Pool, progress)?);
        }
        self.record(items);
        self.done = round;
        Ok(())
    }

    fn count(&mut self, t: QueryType) -> &mut TypeCounts {
        self.counts.entry(t).or_default()
    }

    pub(crate) fn shortfalls(&self, quotas: &Quotas) -> Vec<Shortfall> {
        quotas
            .iter()
            .filter_map(|(&t, &wanted)| {
                let got = self.counts.get(&t).map_or(0, |c| c.filled);
                let counts = self.counts.get(&t).cloned().unwrap_or_default();
                (got < wanted).then(|| Shortfall {
                    query_type: t,
                    wanted,
                    got,
                    cause: shortfall_cause(&counts, self.stalls.get(&t)),
                })
            })
            .collect()
    }
}

/// The share of planned requests that joined the set (1 before any were planned).
fn keep_rate(planned: usize, filled: usize) -> f64 {
    if planned == 0 { 1.0 } else { filled as f64 / planned as f64 }
}

/// Why a type fell short, in a few words pointing at the fix.
fn shortfall_cause(counts: &TypeCounts, stall: Option<&Stall>) -> String {
    let failed: usize = counts.generation_failures.values().sum();
    if let Some(s) = stall {
        format!(
            "top-ups stopped after round {}: it added {} of {} requests planned, far below the rate so far (the corpus may hold no more such queries; see report.md and rejects.jsonl)",
            s.round, s.added, s.planned
        )
    } else if counts.planned == 0 {
        "nothing could be planned: no chunk with 5+ distinct query words left under --per-doc-cap".to_owned()
    } else if counts.planned < counts.requested && counts.dropped == 0 && failed == 0 {
        format!("only {} could be planned: chunks or --per-doc-cap ran out", counts.planned)
    } else {
        let relabelled = match counts.relabelled {
            0 => String::new(),
            n => format!(", {n} relabelled as another type"),
        };
        format!(
            "{} dropped by the controls{relabelled}, {failed} not generated (see report.md and rejects.jsonl)",
            counts.dropped
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::OnAnswered;

    fn kept(text: &str) -> Checked {
        let mut verdict = Verdict::dropped(Reason::SourceInTopN);
        verdict.mark(Status::Kept, Reason::SourceInTopN);
        Checked { candidate: Candidate::sample(QueryType::Direct, text, &["d:1"]), verdict }
    }

    fn rounds(direct: usize) -> Rounds {
        let quotas: Quotas = [(QueryType::Direct, direct)].into_iter().collect();
        Rounds::new(&quotas, 0.9, JudgeConfig { pool: 0, on_answered: OnAnswered::Drop, gate: None })
    }

    #[test]
    fn a_top_up_round_far_below_its_planned_yield_stops_the_type() {
        let mut rounds = rounds(100);
        let direct = |r: &mut Rounds| r.count(QueryType::Direct).clone();
        rounds.count(QueryType::Direct).planned = 100;
        rounds.count(QueryType::Direct).filled = 50;
        let before = rounds.tally();
        rounds.find_stalls(1, &Tally::new());
        assert!(rounds.stalls.is_empty(), "round 1 has no planned yield to fall below");
        // Round 2 plans 100 at the keep rate 0.5 and gets 45: within chance.
        rounds.count(QueryType::Direct).planned += 100;
        rounds.count(QueryType::Direct).filled += 45;
        rounds.find_stalls(2, &before);
        assert_eq!(rounds.to_plan(Margin::Expected).get(&QueryType::Direct), Some(&11), "5 / 0.475");
        // Round 3 plans 20 and gets 1: stalled.
        let before = rounds.tally();
        rounds.count(QueryType::Direct).planned += 20;
        rounds.count(QueryType::Direct).filled += 1;
        rounds.find_stalls(3, &before);
        assert!(rounds.to_plan(Margin::Safe).is_empty());
        let cause = &rounds.shortfalls(&[(QueryType::Direct, 100)].into_iter().collect())[0].cause;
        assert!(cause.starts_with("top-ups stopped after round 3: it added 1 of 20 requests"), "{cause}");
        assert_eq!(direct(&mut rounds).filled, 96);
    }

    #[test]
    fn drop_reasons_are_counted_by_reason_and_written_in_label_order() {
        let mut counts = TypeCounts::default();
        // Declared over_quota before near_duplicate; written the other way round, as before.
        counts.dropped_by_reason.insert(Reason::OverQuota, 2);
        counts.dropped_by_reason.insert(Reason::NearDuplicate, 1);
        assert_eq!(counts.dropped_by_label(), [("near_duplicate", 1), ("over_quota", 2)]);
        let json = serde_json::to_value(&counts).unwrap();
        assert_eq!(json["dropped_by_reason"].to_string(), r#"{"near_duplicate":1,"over_quota":2}"#);
    }

    #[test]
    fn admission_stops_at_the_quota_and_drops_near_duplicates() {
        let mut rounds = rounds(2);
        let mut items = vec![
            kept("how do harbor cranes lift containers"),
            kept("how do harbor cranes lift containers"),
            kept("when does the ferry to the north pier leave"),
            kept("what powers the lighthouse lamp at night"),
        ];
        rounds.admit(&mut items);
        let reasons: Vec<Reason> = items.iter().map(|j| j.verdict.reason).collect();
        assert_eq!(
            reasons,
            [Reason::SourceInTopN, Reason::NearDuplicate, Reason::SourceInTopN, Reason::OverQuota]
        );
        assert_eq!(rounds.counts[&QueryType::Direct].filled, 2);
        rounds.record(items);
        let counts = &rounds.counts[&QueryType::Direct];
        assert_eq!((counts.kept, counts.dropped), (2, 2));
        assert_eq!(counts.dropped_by_reason.values().sum::<usize>(), 2);
        assert!(rounds.to_plan(Margin::Expected).is_empty(), "the quota is filled");
    }

    #[test]
    fn a_top_up_asks_for_the_deficit_over_the_yield() {
        let mut rounds = rounds(10);
        assert_eq!(rounds.to_plan(Margin::Expected)[&QueryType::Direct], 10, "round 1 plans the quota");
        let counts = rounds.count(QueryType::Direct);
        (counts.planned, counts.filled) = (10, 5);
        // 5 missing at a yield of 1/2: 10 requests.
        assert_eq!(rounds.to_plan(Margin::Expected)[&QueryType::Direct], 10);
        rounds.count(QueryType::Direct).filled = 1;
        // 9 missing at a yield of 1/10: capped at 4 per missing query.
        assert_eq!(rounds.to_plan(Margin::Expected)[&QueryType::Direct], 36);
        let short = rounds.shortfalls(&[(QueryType::Direct, 10)].into_iter().collect());
        assert_eq!((short[0].wanted, short[0].got), (10, 1));
    }
}
