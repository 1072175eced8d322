//! A dry run: the rounds a build would go through and what each would cost, planned without
//! sending anything; and, before a batch run submits anything, the check of its whole cost
//! against the budget.

use super::rounds::Rounds;
use super::stages::RoundStages;
use crate::config::{BuildConfig, GeneratorConfig};
use crate::error::{Error, Result};
use crate::generate::{Estimate, Margin, Planner, Quotas, Request};
use crate::llm::BatchMode;

/// Share of the planned queries assumed kept at the high end of a dry run's range.
const DRY_RUN_LOW_YIELD: f64 = 0.5;

/// What a whole run would cost, as a range: from every query kept (round 1 only) to half of the
/// queries dropped in every round (the rounds that planning then needs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DryRun {
    /// Queries planned in round 1.
    pub queries: usize,
    /// Round 1, if every query is kept.
    pub low: Estimate,
    /// Every round, if half the queries are dropped.
    pub high: Estimate,
    /// Rounds at the high end.
    pub rounds: u32,
    /// The share of queries kept at the high end, in percent.
    pub low_yield_percent: u32,
    /// With `--batch`: batches of round 1, and of every round at the high end (one per
    /// generation round and judge phase, more where a stage's calls exceed the requests per
    /// batch; repairs of unusable replies add small ones).
    pub batches: (u64, u64),
}

/// Plans the rounds a run would go through, without sending anything: round 1 as planned, then
/// the top-ups that a yield of [`DRY_RUN_LOW_YIELD`] would call for (planned by the same rules
/// as a real run), and what each would cost.
pub(crate) fn dry_run(
    config: &BuildConfig,
    stages: &RoundStages<'_>,
    planner: &mut Planner<'_>,
    quotas: &Quotas,
) -> Result<DryRun> {
    let mut rounds = Rounds::new(quotas, config.dedup_threshold, config.judge);
    let per_call = stages.generator.queries_per_call();
    let mut range =
        DryRun { low_yield_percent: (DRY_RUN_LOW_YIELD * 100.0).round() as u32, ..DryRun::default() };
    for round in 1..=config.max_rounds {
        let wanted = rounds.to_plan(Margin::of_round(round, config.max_rounds));
        let requests = if wanted.is_empty() { Vec::new() } else { planner.plan(&wanted, round, per_call)? };
        if requests.is_empty() {
            break;
        }
        let estimate = estimate(config, stages, &requests)?;
        let batches = batches_of(config, &estimate);
        if round == 1 {
            (range.queries, range.low, range.batches.0) = (requests.len(), estimate, batches);
        }
        range.batches.1 += batches;
        range.high.add(&estimate);
        range.rounds = round;
        rounds.assume_kept(&requests, DRY_RUN_LOW_YIELD);
    }
    Ok(range)
}

/// What `requests` would cost: the generator's calls, and the judge's on the queries they give.
pub(crate) fn estimate(
    config: &BuildConfig,
    stages: &RoundStages<'_>,
    requests: &[Request],
) -> Result<Estimate> {
    let mut estimate = stages.generator.estimate(requests)?;
    if let Some(judge) = &stages.judge {
        (estimate.judge_calls, estimate.judge_prompt_tokens) =
            judge.estimate(requests, config.judge, config.filter.pool_depth)?;
    }
    Ok(estimate)
}

/// The batches a round of `estimate` makes with `--batch`: its generation calls split by the
/// requests per batch, and one per judge phase that has calls (0 without `--batch`).
fn batches_of(config: &BuildConfig, estimate: &Estimate) -> u64 {
    let GeneratorConfig::Llm(setup) = &config.generator else { return 0 };
    let Some(batch) = &setup.llm.batch else { return 0 };
    let per = batch.max_requests.max(1) as u64;
    let judge_phases = if estimate.judge_calls == 0 { 0 } else { 1 + u64::from(config.judge.pool > 0) };
    estimate.calls.div_ceil(per) + judge_phases * estimate.judge_calls.div_ceil(per).max(1)
}

/// Before a batch run submits anything, refuses it when the whole run at the high end of its
/// dry-run range could take the spend over `--max-tokens-total` or `--max-cost` (at the batch
/// price): a submitted batch cannot be stopped half way. Judge calls are counted at the judge's
/// own prompts.
pub(super) fn check_batch_budget(config: &BuildConfig, range: &DryRun) -> Result<()> {
    let GeneratorConfig::Llm(setup) = &config.generator else { return Ok(()) };
    let (llm, high) = (&setup.llm, &range.high);
    let prompt = high.prompt_tokens + high.judge_prompt_tokens;
    let completion = high.max_completion_tokens + high.judge_calls * u64::from(llm.max_tokens);
    if let Some(limit) = llm.budget.max_tokens_total.filter(|&limit| prompt + completion > limit) {
        return Err(Error::Budget(format!(
            "the whole batch run could take up to {} tokens ({} calls and {} judge calls in {} round(s)), over \
             --max-tokens-total {limit}; nothing was submitted",
            prompt + completion,
            high.calls,
            high.judge_calls,
            range.rounds
        )));
    }
    if let (Some(limit), Some(price)) = (llm.budget.max_cost, llm.budget.price) {
        let cost = price.discounted(llm.batch_discount).of(prompt, completion);
        if cost > limit {
            return Err(Error::Budget(format!(
                "the whole batch run could cost up to {cost:.4} at the batch price ({} × the given prices), over \
                 --max-cost {limit}; nothing was submitted",
                llm.batch_discount
            )));
        }
    }
    Ok(())
}

/// Whether the run submits its calls as batches.
pub(super) fn submits_batches(config: &BuildConfig) -> bool {
    matches!(&config.generator, GeneratorConfig::Llm(setup)
        if setup.llm.batch.as_ref().is_some_and(|b| b.mode == BatchMode::Submit))
}
