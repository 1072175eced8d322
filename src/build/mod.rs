//! The build, stage by stage: corpus → chunks → index (`ingest`, `chunking`, `corpus_file`) →
//! plan and generate (`stages`) → round trip and admission (`rounds`, over [`crate::filter`]) →
//! review sample ([`crate::sample`]) → files ([`crate::output`]). This module is the driver: it
//! checks the output folder, runs the stages in order and publishes the staged set; the stages
//! live in their own modules (`dry_run` prices a run without sending anything).

mod chunking;
mod corpus_file;
pub(crate) mod dry_run;
pub(crate) mod ingest;
pub(crate) mod rounds;
pub(crate) mod stages;

use crate::BuildConfig;
use crate::corpus::Skipped;
use crate::error::{Error, Result};
use crate::filter::{Checks, RoundTrip};
use crate::generate::{LlmReport, Margin, Planner};
use crate::output::{self, Invocation, Manifest, Occupant, SetFiles, Shortfall, TypeCounts, layout};
use crate::progress::{Progress, Timings};
use crate::record::{Checked, FORMAT_VERSION, QueryType};
use crate::runs::PoolRuns;
use crate::sample;
use crate::text::Language;
use dry_run::{check_batch_budget, dry_run, submits_batches};
use ingest::{IndexedCorpus, chunk_and_index};
use rounds::Rounds;
use stages::{generator_line, make_stages};
use std::collections::BTreeMap;
use std::path::Path;

pub use dry_run::DryRun;

/// What a build produced, for the command line to report and turn into an exit code.
#[derive(Debug, Clone, Default)]
pub struct BuildSummary {
    /// Per-type counts.
    pub counts: BTreeMap<QueryType, TypeCounts>,
    /// Types below their quota.
    pub shortfalls: Vec<Shortfall>,
    /// Inputs skipped while reading the corpus.
    pub skipped: Vec<Skipped>,
    /// Queries in the test set.
    pub in_set: usize,
    /// Queries in the review queue.
    pub review_items: usize,
    /// With `--dry-run`: what the run would cost.
    pub dry_run: Option<DryRun>,
    /// The LLM generator's usage, when it was used.
    pub llm: Option<LlmReport>,
    /// With `--force` into a reviewed set: the version of the set the build became.
    pub version: Option<u32>,
}

/// What a build does when `--out` holds a set under review or files qrelgen did not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfOccupied {
    /// Refuse, naming what is there and the ways out; nothing is written.
    Refuse,
    /// Build anyway: a reviewed set's current version is kept under `versions/` and the build
    /// becomes its next version; files qrelgen does not write are left as they are.
    Force,
}

/// Publishes a build's staged files into `out`: a reviewed set's current version is kept under
/// `versions/` first, and the new version's number returned.
fn publish(out: &Path, staging: output::Staging, occupant: &Occupant) -> Result<Option<u32>> {
    match occupant {
        Occupant::Reviewed => {
            use crate::review::version::{MadeBy, publish_rebuild, stage_previous};
            let previous = stage_previous(out, &staging, &[])?;
            Ok(Some(publish_rebuild(out, staging, &previous, MadeBy::Build)?))
        }
        Occupant::Nothing | Occupant::Set | Occupant::Foreign { .. } => {
            staging.publish(&[])?;
            Ok(None)
        }
    }
}

/// Runs the whole build and writes its files into `out`.
///
/// # Errors
/// Fatal problems only: an output folder that holds a set under review or files qrelgen did not
/// write (unless [`IfOccupied::Force`]), unreadable or empty corpus, bad settings, index or write
/// failures, an unusable endpoint, a spent budget.
pub fn build(
    config: &BuildConfig,
    out: &Path,
    if_occupied: IfOccupied,
    progress: &Progress,
) -> Result<BuildSummary> {
    let occupant = check_out(out, &config.corpus, if_occupied, *progress)?;
    fs_err::create_dir_all(out).map_err(|source| Error::Output { path: out.to_owned(), source })?;
    let mut timings = Timings::default();
    let staging = output::Staging::create(out)?;
    let IndexedCorpus { index, groups, corpus, skipped, .. } =
        chunk_and_index(config, out, &staging, *progress, &mut timings)?;
    let language = config.language.unwrap_or(corpus.language);

    let stage = progress.stage("connect", 0);
    let mut stages = make_stages(config, &index, out, language, *progress, None)?;
    timings.add("connect", stage.finish(&generator_line(stages.generator.as_ref(), language)));
    release_dictionary(language);
    let quotas = config.mix.quotas(config.queries);
    let per_call = stages.generator.queries_per_call();
    let mut planner =
        Planner::new(&index, &groups, config.per_doc_cap, config.queries, per_call, config.seed);
    if config.dry_run {
        let dry_run = dry_run(config, &stages, &mut planner, &quotas)?;
        return Ok(BuildSummary { dry_run: Some(dry_run), skipped, ..BuildSummary::default() });
    }
    if submits_batches(config) {
        let mut fresh =
            Planner::new(&index, &groups, config.per_doc_cap, config.queries, per_call, config.seed);
        check_batch_budget(config, &dry_run(config, &stages, &mut fresh, &quotas)?)?;
    }
    let mut rounds = Rounds::new(&quotas, config.dedup_threshold, config.judge);
    // Without a judge, each hop of a multi_hop query must at least contribute a term.
    let checks = Checks { language: Some(language), hop_terms: stages.judge.is_none() };
    let runs = PoolRuns::read(&config.pool_runs, &index)?;
    let filter =
        RoundTrip::new(&index, &groups, config.filter, checks).with_runs(&runs).with_threads(config.threads);
    for round in 1..=config.max_rounds {
        let wanted = rounds.to_plan(Margin::of_round(round, config.max_rounds));
        if wanted.is_empty() {
            break;
        }
        let stage = progress.stage("plan", 0);
        let requests = planner.plan(&wanted, round, per_call)?;
        timings.add("plan", stage.finish(&format!("round {round}: {} requests", requests.len())));
        if requests.is_empty() {
            break;
        }
        let before = rounds.tally();
        rounds.run(round, &mut stages, &filter, &index, &requests, *progress, &mut timings)?;
        rounds.find_stalls(round, &before);
    }

    let shortfalls = rounds.shortfalls(&quotas);
    let llm = stages.generator.llm_report();
    let mut manifest = Manifest {
        format_version: FORMAT_VERSION,
        tool: output::tool(),
        seed: config.seed,
        generator: stages.generator.name().to_owned(),
        config,
        per_doc_cap: planner.cap(),
        filter_checks: filter.checks(),
        corpus,
        rounds: rounds.done,
        counts: rounds.counts.clone(),
        shortfalls: shortfalls.clone(),
        language,
        llm: llm.as_ref().map(|r| r.summary.clone()),
        // Filled in last, once the write stage's time is known.
        run: Invocation::default(),
    };

    let stage = progress.stage("sample", 0);
    let set: Vec<&Checked> = rounds.judged.iter().filter(|j| j.in_set()).collect();
    let queue = sample::review_items(&sample::sample(&set, config.review, config.seed), &index)?;
    timings.add("sample", stage.finish(&format!("{} queries to review", queue.len())));

    let stage = progress.stage("write", 0);
    let files = SetFiles {
        language,
        judged: &rounds.judged,
        rejects: &rounds.rejects,
        set: &set,
        queue: &queue,
        chunk_groups: groups.groups(),
        skipped: &skipped,
    };
    output::write_set(&staging, &files, &manifest, &index)?;
    staging.sync()?;
    timings.add("write", stage.finish(&format!("{} queries", set.len())));
    manifest.run =
        Invocation { timings_ms: timings.into_millis(), llm_network: llm.as_ref().map(|r| r.network) };
    output::write_json(&staging.path(layout::MANIFEST), &manifest)?;

    let version = publish(out, staging, &occupant)?;
    Ok(BuildSummary {
        shortfalls,
        in_set: set.len(),
        review_items: queue.len(),
        counts: rounds.counts,
        skipped,
        dry_run: None,
        llm,
        version,
    })
}

/// Once every chunk has been analysed (index, connect), the few Chinese names of an English run
/// need not keep jieba's dictionary (about 32 MiB) through the rounds; a text that needs it
/// later loads it again.
fn release_dictionary(language: Language) {
    if language == Language::En {
        crate::index::release_dictionary();
    }
}

/// Looks at what `out` holds (after rolling back a publish a killed run left half done) and
/// refuses, unless forced, a set under review or a folder that is not a qrelgen set.
fn check_out(out: &Path, corpus: &Path, if_occupied: IfOccupied, progress: Progress) -> Result<Occupant> {
    if out.canonicalize().is_ok_and(|out| corpus.canonicalize().is_ok_and(|corpus| corpus == out)) {
        return Err(Error::OutIsCorpus(out.to_owned()));
    }
    if output::recover(out)? {
        progress.warn(&format!(
            "publishing into {} was cut short by an earlier run; its previous files were put back",
            out.display()
        ));
    }
    let occupant = output::inspect(out)?;
    if let Some(refusal) = occupant.refusal(out) {
        if if_occupied == IfOccupied::Refuse {
            return Err(refusal);
        }
        if !occupant.left().is_empty() {
            progress.warn(&format!(
                "{} holds files the build does not write; they are left as they are: {}",
                out.display(),
                output::list(occupant.left())
            ));
        }
    }
    Ok(occupant)
}
