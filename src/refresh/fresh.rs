//! The refresh's new queries: the offline generator's corpus model on its way to the new corpus
//! ([`Model`], readied ahead on another thread), and [`Fresh`], which runs the build's planner,
//! generator, judge and rounds over the new material only.

use super::recheck::{PoolGrade, QueryChange, Questions, Rechecked};
use crate::build::DryRun;
use crate::build::rounds::Rounds;
use crate::build::stages::RoundStages;
use crate::build::{dry_run, stages};
use crate::config::{BuildConfig, GeneratorConfig};
use crate::error::Result;
use crate::filter::RoundTrip;
use crate::generate::Planner;
use crate::id::ChunkId;
use crate::index::{ChunkIndex, IndexError, OldChunk, Unchanged};
use crate::judge::{Ask, Judge};
use crate::progress::Progress;
use crate::progress::Timings;
use crate::record::{Provenance, Qrel};
use crate::topics::CorpusModel;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

/// The offline generator's corpus model on its way from the old corpus to the new one.
pub(super) enum Model<'a> {
    /// The old corpus's, with the old chunks: folded in when the generator is made.
    Old(CorpusModel, &'a [OldChunk<'a>]),
    /// Folded in and kept beside the index ahead of time (beside the recheck), which took `took`.
    Folded { model: std::result::Result<CorpusModel, IndexError>, took: Duration },
}

/// What `work` returns, and the time it took.
pub(super) fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let started = std::time::Instant::now();
    let done = work();
    (done, started.elapsed())
}

/// The work that readies the new queries' `generator`, to run on another thread: the [`fold`]
/// of `model`, timed, or, for an LLM generator, the loading of the token counter; `None` when
/// there is neither.
pub(super) fn ready_ahead<'a>(
    model: Option<CorpusModel>,
    generator: &GeneratorConfig,
    old: &'a [OldChunk<'a>],
    index: &'a ChunkIndex,
    unchanged: Option<&'a Unchanged>,
) -> Option<impl FnOnce() -> Option<Model<'a>> + Send + 'a> {
    let needed = model.is_some() || matches!(generator, GeneratorConfig::Llm(_));
    let ready = move || {
        if let Some(model) = model {
            let (model, took) = timed(|| fold(model, old, index, unchanged));
            return Some(Model::Folded { model, took });
        }
        crate::llm::load_token_counter();
        None
    };
    needed.then_some(ready)
}

/// `model` of the `old` chunks with the corpus's changes folded in (see
/// [`CorpusModel::fold_in`]), kept beside `index` for the next refresh.
fn fold(
    model: CorpusModel,
    old: &[OldChunk<'_>],
    index: &ChunkIndex,
    unchanged: Option<&Unchanged>,
) -> std::result::Result<CorpusModel, IndexError> {
    model.fold_in(old, index, unchanged)?.save_beside(index)
}

/// The new queries: the build's planner (over the new material only: added and rewritten
/// chunks), generator and rounds.
pub(super) struct Fresh<'a> {
    pub(super) config: &'a BuildConfig,
    pub(super) index: &'a ChunkIndex,
    pub(super) filter: &'a RoundTrip<'a>,
    pub(super) work: &'a Path,
    pub(super) language: crate::text::Language,
    pub(super) progress: Progress,
    /// The generator and judge, made on first use and then shared: one LLM session (one
    /// budget, limiter and cache) for the whole refresh.
    pub(super) stages: Option<RoundStages<'a>>,
    /// The offline generator's corpus model.
    pub(super) model: Option<Model<'a>>,
    /// With the index updated in place: the chunks it kept as they were.
    pub(super) unchanged: Option<&'a Unchanged>,
}

impl<'a> Fresh<'a> {
    /// The generator and judge stages, made (and timed as `connect`) on first use.
    fn stages(&mut self, timings: &mut Timings) -> Result<&mut RoundStages<'a>> {
        let made = if let Some(made) = self.stages.take() {
            made
        } else {
            let stage = self.progress.stage("connect", 0);
            let (model, ahead) = match self.model.take() {
                Some(Model::Old(model, old)) => {
                    (Some(fold(model, old, self.index, self.unchanged)?), Duration::ZERO)
                }
                Some(Model::Folded { model, took }) => (Some(model?), took),
                None => (None, Duration::ZERO),
            };
            let made =
                stages::make_stages(self.config, self.index, self.work, self.language, self.progress, model)?;
            // The stage's time includes the folding done ahead on the other thread.
            timings.add("connect", stage.finish(made.generator.name()) + ahead);
            made
        };
        Ok(self.stages.insert(made))
    }

    /// With an LLM: the judge's questions the re-check left, then (with `--judge-pool`) the
    /// chunks new to kept queries' pools; with `dry_run`, only counted. Returns the asks counted.
    pub(super) fn judge(
        &mut self,
        checked: &mut [Rechecked],
        dry_run: bool,
        timings: &mut Timings,
    ) -> Result<u64> {
        let rechecked = self.judge_rechecked(checked, dry_run, timings)?;
        Ok(rechecked + self.judge_new_pools(checked, dry_run, timings)?)
    }

    /// With an LLM: the judge's questions the re-check left ([`Questions`]) asked, and their
    /// outcomes applied; with `dry_run`, only counted. Returns the asks counted.
    fn judge_rechecked(
        &mut self,
        checked: &mut [Rechecked],
        dry_run: bool,
        timings: &mut Timings,
    ) -> Result<u64> {
        if !matches!(self.config.generator, GeneratorConfig::Llm(_)) {
            return Ok(0);
        }
        let questions = Questions::plan(checked, self.index);
        if dry_run {
            return Ok(questions.len() as u64);
        }
        // Without asks the grades carried decide (no LLM session is made for none).
        let grades = if questions.is_empty() { Vec::new() } else { self.grade(&questions.asks(), timings)? };
        questions.apply(checked, &grades, self.index)?;
        Ok(0)
    }

    /// The judge's grades of `asks` (none without a judge), timed as `judge`.
    fn grade(&mut self, asks: &[Ask], timings: &mut Timings) -> Result<Vec<crate::judge::Grade>> {
        let progress = self.progress;
        let Some(judge) = self.stages(timings)?.judge.as_mut() else { return Ok(Vec::new()) };
        let stage = progress.stage("judge", asks.len() as u64);
        let grades = judge.grade(asks, &stage)?;
        let usable = grades.iter().flatten().count();
        timings.add("judge", stage.finish(&format!("re-check: {usable} of {} grades", asks.len())));
        Ok(grades)
    }

    /// With `--judge-pool` and an LLM: the chunks new to kept queries' pools graded (see
    /// [`judge_pools`]); with `dry_run`, only counted. Returns the asks counted.
    fn judge_new_pools(
        &mut self,
        checked: &mut [Rechecked],
        dry_run: bool,
        timings: &mut Timings,
    ) -> Result<u64> {
        if self.config.judge.pool == 0 || !matches!(self.config.generator, GeneratorConfig::Llm(_)) {
            return Ok(0);
        }
        let asks = pool_asks(checked, self.index);
        if dry_run {
            return Ok(asks.len() as u64);
        }
        let progress = self.progress;
        if !asks.is_empty()
            && let Some(judge) = self.stages(timings)?.judge.as_mut()
        {
            judge_pools(judge, asks, checked, progress, timings)?;
        }
        Ok(0)
    }

    fn planner<'g>(
        &self,
        groups: &'g crate::dedup::ChunkGroups,
        added: &HashSet<usize>,
        n: usize,
        group: usize,
    ) -> Planner<'g>
    where
        Self: 'g,
    {
        let docs: HashSet<_> = added.iter().map(|&p| self.index.doc_id(p)).collect();
        let cap = self.config.per_doc_cap.unwrap_or_else(|| crate::generate::auto_cap(n, docs.len()));
        Planner::new(self.index, groups, Some(cap.max(group)), n, group, self.config.seed).only(added)
    }

    /// What the new queries would cost, as a build's dry run counts it: the generator's calls
    /// and the judge's, from round 1 with every query kept to every round with half dropped.
    pub(super) fn estimate(
        &mut self,
        groups: &crate::dedup::ChunkGroups,
        added: &HashSet<usize>,
        n: usize,
        timings: &mut Timings,
    ) -> Result<Option<DryRun>> {
        // The offline generator makes no calls: its estimate would only cost its topic space.
        if n == 0 || added.is_empty() || matches!(self.config.generator, GeneratorConfig::Offline) {
            return Ok(None);
        }
        let group = self.stages(timings)?.generator.queries_per_call();
        let mut planner = self.planner(groups, added, n, group);
        let Some(stages) = &self.stages else { return Ok(None) };
        dry_run::dry_run(self.config, stages, &mut planner, &self.config.mix.quotas(n)).map(Some)
    }

    pub(super) fn generate(
        &mut self,
        groups: &crate::dedup::ChunkGroups,
        added: &HashSet<usize>,
        n: usize,
        checked: &[Rechecked],
        timings: &mut Timings,
    ) -> Result<Rounds> {
        let quotas = self.config.mix.quotas(n);
        let mut rounds = Rounds::new(&quotas, self.config.dedup_threshold, self.config.judge);
        if n == 0 || added.is_empty() {
            return Ok(rounds);
        }
        // The queries kept are in the set already: a new one must not repeat them.
        for c in checked.iter().filter(|c| c.line.is_some()) {
            if let Some(j) = &c.judged {
                rounds.seen.insert(j.candidate.id.clone());
                rounds.dedup.check_and_keep(&j.candidate.id, &j.candidate.text);
            }
        }
        let group = self.stages(timings)?.generator.queries_per_call();
        let mut planner = self.planner(groups, added, n, group);
        for round in 1..=self.config.max_rounds {
            let wanted = rounds.to_plan(crate::generate::Margin::of_round(round, self.config.max_rounds));
            let requests =
                if wanted.is_empty() { Vec::new() } else { planner.plan(&wanted, round, group)? };
            if requests.is_empty() {
                break;
            }
            let (filter, index, progress) = (self.filter, self.index, self.progress);
            rounds.run(round, self.stages(timings)?, filter, index, &requests, progress, timings)?;
        }
        Ok(rounds)
    }
}

/// The questions for the judge: every chunk new to the corpus that entered the pool of a query
/// whose labels were kept, with the query it is for (its place in `checked`).
fn pool_asks(checked: &[Rechecked], index: &ChunkIndex) -> Vec<(usize, ChunkId, Ask)> {
    let mut asks = Vec::new();
    for (at, c) in checked.iter().enumerate().filter(|(_, c)| c.change == QueryChange::Pool) {
        let Some(judged) = &c.judged else { continue };
        for id in &c.new_pool {
            if let Some(chunk) = index.position(id) {
                asks.push((at, id.clone(), Ask { query: judged.candidate.text.clone(), chunk }));
            }
        }
    }
    asks
}

/// With `--judge-pool` and an LLM: the judge grades the chunks new to the corpus that entered
/// kept queries' pools. A grade becomes a qrels row (provenance `judge`; a 0 stays in
/// `qrels/provenance.tsv` only, as in a build); a query whose new chunks all got one is not
/// queued (`pool_judged`); one the judge could not grade stays listed for review.
fn judge_pools(
    judge: &mut dyn Judge,
    asks: Vec<(usize, ChunkId, Ask)>,
    checked: &mut [Rechecked],
    progress: Progress,
    timings: &mut Timings,
) -> Result<()> {
    let stage = progress.stage("judge", asks.len() as u64);
    let questions: Vec<Ask> = asks.iter().map(|(_, _, ask)| ask.clone()).collect();
    let grades = judge.grade(&questions, &stage)?;
    let mut answered = 0;
    for ((at, id, _), grade) in asks.into_iter().zip(grades) {
        let Ok(grade) = grade else { continue };
        answered += 1;
        let c = &mut checked[at];
        c.new_pool.retain(|p| *p != id);
        if let Some(judged) = &mut c.judged {
            judged.verdict.pool.iter_mut().filter(|p| p.chunk_id == id).for_each(|p| p.grade = Some(grade));
        }
        let row = Qrel { query_id: c.id.clone(), chunk_id: id.clone(), grade, provenance: Provenance::Judge };
        c.qrels.push(row);
        c.pool_grades.push(PoolGrade { chunk: id, grade });
    }
    for c in checked.iter_mut().filter(|c| c.change == QueryChange::Pool) {
        let judged = c.pool_grades.len();
        c.reason = if c.new_pool.is_empty() {
            c.change = QueryChange::PoolJudged;
            format!("{judged} chunk(s) new to the corpus entered its pool; the judge graded them")
        } else {
            format!(
                "{} chunk(s) new to the corpus entered its pool, unjudged ({judged} graded by the judge)",
                c.new_pool.len()
            )
        };
    }
    timings.add("judge", stage.finish(&format!("{answered} grades")));
    Ok(())
}
