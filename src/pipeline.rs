//! The build, stage by stage: corpus → chunks → index → plan and generate → round trip →
//! review sample → files. Each stage lives in its own module; this one only wires them.

use crate::chunk::{self, Chunker, KeptChunking, KeptItem, KeptWriter, Lines};
use crate::config::{BuildConfig, GeneratorConfig};
use crate::corpus::{self, Item, ReadReport, Skipped};
use crate::dedup::{ChunkGroups, Signature};
use crate::error::{Error, Result};
use crate::filter::{Checks, RoundTrip};
use crate::generate::{
    Estimate, Generator, LlmGenerator, LlmReport, Margin, OfflineGenerator, Planner, Preflight, Prompts,
    Quotas, Request,
};
use crate::id::StreamHasher;
use crate::index::{Analyzer, ChunkIndex, ChunkList, Earlier, IndexError, Unchanged};
use crate::judge::LlmJudge;
use crate::llm::{BatchMode, Cache, Llm, Session};
use crate::output::{self, CorpusSummary, Manifest, Occupant, RunInfo, SetFiles, layout};
use crate::progress::{Progress, Timings};
use crate::record::{Checked, Chunk, Document, FORMAT_VERSION, QueryType};
use crate::rounds::{Rounds, Stages};
use crate::runs::PoolRuns;
use crate::sample;
use crate::text::Language;
use crate::topics::CorpusModel;
use std::collections::BTreeMap;
use std::path::Path;

pub use crate::rounds::{Shortfall, TypeCounts};

/// What a build produced, for the command line to report and turn into an exit code.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
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
) -> Result<Outcome> {
    let occupant = check_out(out, &config.corpus, if_occupied, *progress)?;
    fs_err::create_dir_all(out).map_err(|source| Error::Output { path: out.to_owned(), source })?;
    let mut timings = Timings::default();
    let staging = output::Staging::create(out)?;
    let Chunked { index, groups, corpus, skipped, .. } =
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
        return Ok(Outcome { dry_run: Some(dry_run), skipped, ..Outcome::default() });
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
        run: RunInfo::default(),
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
        RunInfo { timings_ms: timings.into_millis(), llm_network: llm.as_ref().map(|r| r.network) };
    output::write_json(&staging.path(layout::MANIFEST), &manifest)?;

    let version = publish(out, staging, &occupant)?;
    Ok(Outcome {
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
    stages: &Stages<'_>,
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
pub(crate) fn estimate(config: &BuildConfig, stages: &Stages<'_>, requests: &[Request]) -> Result<Estimate> {
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
fn check_batch_budget(config: &BuildConfig, range: &DryRun) -> Result<()> {
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

/// Stages 1–3 of a build: reads and chunks the corpus into the staged `corpus.jsonl` (grouping
/// near-identical chunks on the way), then builds (or reuses) the index. The chunking is kept
/// in the index folder for the next refresh (which calls [`chunk`] and
/// [`ChunkedCorpus::index`] itself, with the earlier run's chunking and chunks).
pub(crate) fn chunk_and_index(
    config: &BuildConfig,
    out: &Path,
    staging: &output::Staging,
    progress: Progress,
    timings: &mut Timings,
) -> Result<Chunked> {
    let chunked = chunk(config, out, staging, None, false, progress, timings)?;
    chunked.index(config, out, staging, None, progress, timings, |_| ()).map(|(chunked, _)| chunked)
}

/// Stages 1–2 of [`chunk_and_index`]: the corpus read and chunked, the index not yet touched.
/// With `collect` (a refresh, which maps the chunks against the old ones), every chunk is kept
/// in memory, and the index is fed from there rather than from `corpus.jsonl`; then nothing is
/// written (`staging` stays unmade) until [`ChunkedCorpus::index`], so a refresh that finds the
/// corpus unchanged writes nothing.
pub(crate) fn chunk(
    config: &BuildConfig,
    out: &Path,
    staging: &output::Staging,
    kept: Option<KeptChunking>,
    collect: bool,
    progress: Progress,
    timings: &mut Timings,
) -> Result<ChunkedCorpus> {
    // In bytes: a single large file shows its progress too.
    let size =
        fs_err::metadata(&config.corpus).ok().filter(std::fs::Metadata::is_file).map_or(0, |m| m.len());
    let stage = progress.stage_bytes("chunk", size);
    let corpus_file = (!collect).then(|| staging.path(layout::CORPUS));
    let chunking = Chunking::new(config, out, staging, kept.unwrap_or_default(), collect)?;
    let (chunks, groups, corpus, read, (chunking, reused, collected)) =
        read_and_chunk(config, out, corpus_file.as_deref(), chunking, &stage)?;
    // No corpus file exactly when the chunks are collected.
    let texts = match corpus_file {
        Some(file) => ChunkTexts::Staged(file),
        None => ChunkTexts::Memory(collected.unwrap_or_default()),
    };
    for s in &read.skipped {
        progress.warn(&format!("skipped {s}"));
    }
    for renamed in &read.renamed {
        progress.warn(&renamed.to_string());
    }
    if read.ignored > 0 {
        progress.warn(&format!(
            "{} file(s) with extensions qrelgen does not read were ignored: {}",
            read.ignored,
            corpus::extensions(&read.ignored_by_extension)
        ));
    }
    let reused = match reused {
        0 => String::new(),
        n => format!(" ({n} unchanged, their chunks kept)"),
    };
    timings.add(
        "chunk",
        stage.finish(&format!("{} documents → {} chunks{reused}", corpus.documents, chunks.len())),
    );
    Ok(ChunkedCorpus { chunks, groups, corpus, skipped: read.skipped, chunking, texts })
}

/// Where the chunks of a [`ChunkedCorpus`] are.
enum ChunkTexts {
    /// In memory, as chunked (a refresh's): `corpus.jsonl` is staged from them (and the set's
    /// own, for the items chunked as before) once the run goes on to index them.
    Memory(Collected),
    /// Only in the staged `corpus.jsonl`, at this path.
    Staged(std::path::PathBuf),
}

/// What [`chunk`] made: the chunks, not yet indexed.
pub(crate) struct ChunkedCorpus {
    chunks: ChunkList,
    groups: ChunkGroups,
    corpus: CorpusSummary,
    skipped: Vec<Skipped>,
    chunking: chunk::Written,
    texts: ChunkTexts,
}

impl ChunkedCorpus {
    /// What was read of the corpus (its hash among it).
    pub(crate) fn corpus(&self) -> &CorpusSummary {
        &self.corpus
    }

    /// Stage 3 of [`chunk_and_index`]: builds (or reuses, or with `earlier` updates) the index
    /// and keeps the chunking beside it. With the chunks in memory (a refresh's), meanwhile
    /// `corpus.jsonl` is staged, the lines of the items chunked as before copied from
    /// `earlier`'s (the set's `corpus.jsonl`, whose bytes come with it), and `beside` runs with
    /// the chunks, each on a thread of its own; what `beside` returns comes back with the index
    /// (`None` when the chunks are not in memory).
    #[expect(clippy::too_many_arguments, reason = "the stage's inputs, and the work beside it")]
    pub(crate) fn index<T: Send>(
        self,
        config: &BuildConfig,
        out: &Path,
        staging: &output::Staging,
        earlier: Option<(Earlier<'_>, &[u8])>,
        progress: Progress,
        timings: &mut Timings,
        beside: impl FnOnce(&[Chunk]) -> T + Send,
    ) -> Result<(Chunked, Option<T>)> {
        let Self { chunks, groups, corpus, skipped, chunking, texts } = self;
        let stage = progress.stage("index", chunks.len() as u64);
        let dir = out.join(layout::INDEX_DIR);
        let (earlier, earlier_corpus) = earlier.unzip();
        let index =
            |feed: Feed<'_>| index_chunks(&dir, chunks, &corpus.chunks_hash, earlier, config, &stage, feed);
        let ((index, provenance, unchanged), texts, beside) = match texts {
            ChunkTexts::Memory(Collected { chunks: mut texts, lines }) => {
                let corpus_lines = CorpusLines { chunks: &texts, lines: &lines, earlier: earlier_corpus };
                let (indexed, beside) = stage_corpus_while(staging, corpus_lines, beside, |texts| {
                    index(&|add| {
                        texts.iter().try_for_each(|chunk| match title_for_index(chunk) {
                            Some(title) => Ok(add(&Chunk { title, ..chunk.clone() })?),
                            None => Ok(add(chunk)?),
                        })
                    })
                })?;
                for chunk in &mut texts {
                    if let Some(title) = title_for_index(chunk) {
                        chunk.title = title;
                    }
                }
                (indexed, Some(texts), Some(beside))
            }
            ChunkTexts::Staged(file) => (index(&|add| reread_chunks(&file, add))?, None, None),
        };
        chunking.place(&dir).map_err(|source| Error::Output { path: dir.join(chunk::KEPT_FILE), source })?;
        timings.add("index", stage.finish(&format!("{} chunks, index {provenance}", index.len())));
        Ok((Chunked { index, groups, corpus, skipped, unchanged, chunks: texts }, beside))
    }
}

/// What [`chunk_and_index`] made.
pub(crate) struct Chunked {
    pub(crate) index: ChunkIndex,
    pub(crate) groups: ChunkGroups,
    pub(crate) corpus: CorpusSummary,
    pub(crate) skipped: Vec<Skipped>,
    /// With an index updated in place: the chunks it kept as they were.
    pub(crate) unchanged: Option<Unchanged>,
    /// For a refresh, every chunk, as `corpus.jsonl` reads back.
    pub(crate) chunks: Option<Vec<Chunk>>,
}

/// The generator the config asks for, and with an LLM generator the LLM judge, both holding one
/// LLM session. The offline generator uses `model` (the corpus model of `index`'s chunks, kept
/// beside the index) or builds it and keeps it there, for a later refresh to fold changes into.
pub(crate) fn make_stages<'a>(
    config: &BuildConfig,
    index: &'a ChunkIndex,
    out: &Path,
    language: Language,
    progress: Progress,
    model: Option<CorpusModel>,
) -> Result<Stages<'a>> {
    let setup = match &config.generator {
        GeneratorConfig::Offline => {
            let model = match model {
                Some(kept) => kept,
                None => CorpusModel::build(index)?.keep_beside(index)?,
            };
            let generator = OfflineGenerator::new(index, config.seed, language, config.topics, model)?;
            return Ok(Stages { generator: Box::new(generator), judge: None });
        }
        GeneratorConfig::Llm(setup) => setup,
    };
    let prompts = Prompts::load(setup.prompts.as_deref(), language)?;
    let cache_path = setup.cache.clone().unwrap_or_else(|| out.join(layout::LLM_CACHE));
    let llm = Llm::new(setup.llm.clone(), Cache::open(&cache_path)?).map_err(|e| Error::Endpoint {
        url: crate::llm::redact_url(&setup.llm.endpoint.base_url),
        message: e.chain(),
        hint: "check --base-url (e.g. http://127.0.0.1:8080/v1)",
    })?;
    if let Some(BatchMode::Import { from, .. }) = setup.llm.batch.as_ref().map(|b| &b.mode) {
        let imported = llm.import(from)?;
        progress.stage("batch", 0).finish(&format!(
            "imported {} replies from {} ({} failed, {} not run, {} unreadable lines, {} unknown custom_id(s) \
             rejected, {} duplicate(s) of a call already answered dropped: the first reply stands)",
            imported.replies,
            from.display(),
            imported.failed,
            imported.not_run,
            imported.unreadable,
            imported.unknown,
            imported.duplicates
        ));
    }
    // A batch runner of the user's own may have no online endpoint to probe.
    let offline_batch = setup.llm.batch.as_ref().is_some_and(|b| !matches!(b.mode, BatchMode::Submit));
    let preflight = if config.dry_run || offline_batch { Preflight::Skip } else { Preflight::Run };
    let session = std::sync::Arc::new(Session::new(llm, setup.generation.stall_after)?);
    let generation = setup.generation.clone();
    let repairs = generation.repairs;
    let generator = LlmGenerator::new(
        index,
        std::sync::Arc::clone(&session),
        prompts.clone(),
        generation,
        config.seed,
        preflight,
    )?;
    let judge = LlmJudge::new(index, session, prompts, generator.response_mode(), repairs);
    Ok(Stages { generator: Box::new(generator), judge: Some(judge) })
}

/// Whether the run submits its calls as batches.
fn submits_batches(config: &BuildConfig) -> bool {
    matches!(&config.generator, GeneratorConfig::Llm(setup)
        if setup.llm.batch.as_ref().is_some_and(|b| b.mode == BatchMode::Submit))
}

fn generator_line(generator: &dyn Generator, language: Language) -> String {
    match generator.llm_report() {
        Some(report) => format!(
            "{} at {}, {} output ({}), queries in {}",
            report.summary.model,
            report.summary.base_url,
            report.summary.json_mode.label(),
            report.mode_reason,
            language.name()
        ),
        None => format!("offline generator, queries in {}", language.name()),
    }
}

/// Reads the corpus, chunks each document as it arrives and streams the chunks to
/// `corpus_file` (`corpus.jsonl`; none when [`Chunking`] keeps them); only their metadata stays
/// in memory.
fn read_and_chunk(
    config: &BuildConfig,
    out: &Path,
    corpus_file: Option<&Path>,
    mut chunking: Chunking,
    stage: &crate::progress::Stage,
) -> Result<(ChunkList, ChunkGroups, CorpusSummary, ReadReport, KeptRun)> {
    let mut sink = ChunkSink::create(corpus_file, config.chunk_dup_threshold)?;
    let mut tally = CorpusTally::default();
    let mut keep = |mut batch: Vec<Item>, chunking: &mut Chunking| -> Result<()> {
        for (item, made) in chunking.make(&mut batch, config.threads, stage)? {
            sink.write(&made.lines)?;
            let language = match &item {
                Item::Document(doc) => {
                    let (chunks, signatures, language) = chunking.document(doc, made)?;
                    for (chunk, signature) in chunks.into_iter().zip(&signatures) {
                        sink.keep(&chunk, signature.as_ref());
                        chunking.collect(chunk);
                    }
                    language
                }
                Item::Chunk(chunk) => {
                    let (signature, language) = chunking.unit(chunk, made)?;
                    sink.keep(chunk, signature.as_ref());
                    stage.inc(chunk.text.len() as u64);
                    language
                }
            };
            tally.add(&item, language);
            if let Item::Chunk(chunk) = item {
                chunking.collect(chunk);
            }
        }
        Ok(())
    };
    // The corpus is read a batch ahead of the chunking, on a thread of its own.
    let read = |hand: &mut dyn FnMut(Vec<Item>) -> Result<()>| {
        let mut batch = ChunkBatch::default();
        let report = corpus::read(&config.corpus, config.prechunked, Some(out), |item| {
            if batch.push(item) {
                hand(batch.take())?;
            }
            Ok(())
        })?;
        hand(batch.take())?;
        Ok(report)
    };
    let report = crate::threads::ahead(read, |batch| keep(batch, &mut chunking))?;
    let ChunkSink { file, mut groups, metas, hash } = sink;
    file.map(output::AtomicFile::commit).transpose()?;
    groups.seal();
    let summary = tally.summary(&report, &metas, &groups, &hash);
    let written = chunking.finish(&summary.chunks_hash)?;
    Ok((metas, groups, summary, report, written))
}

/// The chunker, with the items an earlier run chunked (taken from there when unchanged) and
/// the record of this run's chunking for the next one.
struct Chunking {
    chunker: Chunker,
    kept: KeptChunking,
    writer: KeptWriter,
    path: std::path::PathBuf,
    /// Items whose chunks were kept.
    reused: usize,
    /// Every chunk and item's lines, when asked for.
    collected: Option<Collected>,
}

/// The chunks of a corpus in memory, and each item's `corpus.jsonl` lines.
#[derive(Default)]
struct Collected {
    chunks: Vec<Chunk>,
    lines: Vec<ItemLines>,
}

/// An item's `corpus.jsonl` lines in a [`Collected`]: the lines of its `chunks` (that many of
/// [`Collected::chunks`], after the earlier items').
struct ItemLines {
    chunks: usize,
    lines: LinesAt,
}

/// Where the lines of an item are.
enum LinesAt {
    /// Made now.
    Made(Vec<u8>),
    /// In the earlier run's `corpus.jsonl`, at this byte range, with this digest (as the item
    /// was chunked as before; made again if the file no longer has them there).
    Earlier(std::ops::Range<usize>, chunk::Digest),
}

/// `f` of each of `items`, in order, on up to `threads` threads. Each thread takes the next
/// item not yet taken, so an item that takes long (a large document) holds up one thread
/// while the others go on with the rest, where runs of as many items each would leave the
/// items behind it in its run waiting, and the other threads idle.
fn map_in_order<T: Send, U: Send>(items: Vec<T>, threads: usize, f: impl Fn(T) -> U + Sync) -> Vec<U> {
    let len = items.len();
    if threads <= 1 || len < 2 {
        return items.into_iter().map(f).collect();
    }
    let mut items = items.into_iter().enumerate();
    // Each thread's first item is its own, so every thread started maps one at least.
    let firsts: Vec<(usize, T)> = items.by_ref().take(threads.min(len)).collect();
    let queue = std::sync::Mutex::new(items);
    let next = || queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next();
    let (f, next) = (&f, &next);
    let mut done: Vec<(usize, U)> = std::thread::scope(|scope| {
        let running: Vec<_> = firsts
            .into_iter()
            .map(|first| {
                let taken = std::iter::once(first).chain(std::iter::from_fn(next));
                scope.spawn(move || taken.map(|(i, item)| (i, f(item))).collect::<Vec<_>>())
            })
            .collect();
        running.into_iter().flat_map(crate::threads::join).collect()
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, made)| made).collect()
}

/// The items [`read_and_chunk`] chunks at once (over the threads): up to [`CHUNK_BATCH_BYTES`]
/// of their ids, titles and text, and no more than [`CHUNK_BATCH_ITEMS`] of them (so many tiny
/// items do not make a batch without bound).
#[derive(Default)]
struct ChunkBatch {
    items: Vec<Item>,
    bytes: usize,
}

impl ChunkBatch {
    /// Adds `item`; whether the batch is now full.
    fn push(&mut self, item: Item) -> bool {
        let (ids, source_id, title, text) = match &item {
            Item::Document(doc) => (doc.id.as_str().len(), &doc.source_id, &doc.title, &doc.text),
            Item::Chunk(unit) => (
                unit.id.as_str().len() + unit.doc_id.as_str().len(),
                &unit.source_id,
                &unit.title,
                &unit.text,
            ),
        };
        self.bytes += ids + source_id.as_ref().map_or(0, String::len) + title.len() + text.len();
        self.items.push(item);
        self.bytes >= CHUNK_BATCH_BYTES || self.items.len() >= CHUNK_BATCH_ITEMS
    }

    /// The items, leaving the batch empty.
    fn take(&mut self) -> Vec<Item> {
        self.bytes = 0;
        std::mem::take(&mut self.items)
    }
}

/// Bytes of ids, titles and text in a chunk batch.
const CHUNK_BATCH_BYTES: usize = 1 << 20;

/// Items in a chunk batch.
const CHUNK_BATCH_ITEMS: usize = 4096;

/// What [`Chunking::make`] made of an item: its digest and chunking, where its lines lay in
/// the earlier run's `corpus.jsonl` when that chunking is the earlier run's, a document's
/// chunks, and the item's `corpus.jsonl` lines (none when they are the earlier run's and the
/// chunks are collected).
struct Made {
    digest: chunk::Digest,
    item: KeptItem,
    earlier: Option<std::ops::Range<usize>>,
    chunks: Vec<Chunk>,
    lines: Vec<u8>,
}

/// What [`Chunking`] leaves: the record for the next run, the items whose chunks were kept,
/// and the chunks and lines, when asked for.
type KeptRun = (chunk::Written, usize, Option<Collected>);

impl Chunking {
    /// With `collect`, the chunks and the record are kept in memory (nothing staged yet), else
    /// the record is written into `staging` as the items are chunked.
    fn new(
        config: &BuildConfig,
        out: &Path,
        staging: &output::Staging,
        kept: KeptChunking,
        collect: bool,
    ) -> Result<Self> {
        let stamp = chunk::settings_stamp(config.chunking, config.prechunked);
        let (writer, path) = if collect {
            (KeptWriter::in_memory(&stamp), out.join(layout::INDEX_DIR).join(chunk::KEPT_FILE))
        } else {
            let path = staging.path(chunk::KEPT_FILE);
            let writer = KeptWriter::create(&staging.path(""), &stamp)
                .map_err(|source| Error::Output { path: path.clone(), source })?;
            (writer, path)
        };
        let collected = collect.then(Collected::default);
        Ok(Self { chunker: Chunker::new(config.chunking)?, kept, writer, path, reused: 0, collected })
    }

    /// Takes the items of `batch` (leaving it empty), each with what its chunking is: the
    /// earlier run's when it is unchanged, else made now, and its chunks and `corpus.jsonl`
    /// lines (none for an unchanged item when the chunks are collected: its lines are copied
    /// from the earlier run's file later); the items of the batch on up to `threads` threads at
    /// once (each item's digest, chunking, chunks and lines are its own; the items stay in
    /// order).
    fn make(
        &self,
        batch: &mut Vec<Item>,
        threads: usize,
        stage: &crate::progress::Stage,
    ) -> Result<Vec<(Item, Made)>> {
        let (chunker, earlier) = (&self.chunker, &self.kept);
        // Collected chunks of an unchanged item get the earlier run's lines at the index stage
        // ([`stage_corpus_while`]), so none are made here for them.
        let collecting = self.collected.is_some();
        let make = |item: Item| -> Result<(Item, Made)> {
            let (id, digest, text) = match &item {
                Item::Document(doc) => (doc.id.as_str(), chunk::document_digest(doc), &doc.text),
                Item::Chunk(unit) => (unit.id.as_str(), chunk::text_digest(&unit.text), &unit.text),
            };
            let kept = earlier.get(id, &digest, text).filter(|(k, _)| match &item {
                Item::Chunk(_) => k.signatures.len() == 1,
                Item::Document(_) => true,
            });
            if let (Some(_), Item::Document(doc)) = (&kept, &item) {
                stage.inc(doc.text.len() as u64);
            }
            let (mut made, earlier) = match kept {
                Some((kept, lines)) => (kept.clone(), Some(lines)),
                None => (chunker.item(&item, &mut |bytes| stage.inc(bytes as u64)), None),
            };
            let chunks = match &item {
                Item::Document(doc) => chunk::chunks_at(doc, &made.spans),
                Item::Chunk(_) => Vec::new(),
            };
            let lines = if collecting && earlier.is_some() {
                Vec::new()
            } else {
                let units = match &item {
                    Item::Document(_) => chunks.as_slice(),
                    Item::Chunk(unit) => std::slice::from_ref(unit),
                };
                let lines = corpus_lines(units)?;
                made.lines = Lines::of(&lines);
                lines
            };
            Ok((item, Made { digest, item: made, earlier, chunks, lines }))
        };
        map_in_order(std::mem::take(batch), threads, make).into_iter().collect()
    }

    /// The chunks of `doc` and their signatures, from what [`Chunking::make`] made of it.
    fn document(
        &mut self,
        doc: &Document,
        made: Made,
    ) -> Result<(Vec<Chunk>, Vec<Option<Signature>>, Language)> {
        let Made { digest, item, earlier, chunks, lines } = made;
        self.record(doc.id.as_str(), &digest, &item, earlier, lines, chunks.len())?;
        Ok((chunks, item.signatures, item.language))
    }

    /// The signature and language of a pre-chunked unit, from what [`Chunking::make`] made of
    /// it.
    fn unit(&mut self, unit: &Chunk, made: Made) -> Result<(Option<Signature>, Language)> {
        let Made { digest, item, earlier, lines, .. } = made;
        self.record(unit.id.as_str(), &digest, &item, earlier, lines, 1)?;
        Ok((item.signatures[0], item.language))
    }

    /// Records an item's chunking for the next run and, when the chunks are collected, where
    /// the lines of its `chunks` chunks are.
    fn record(
        &mut self,
        id: &str,
        digest: &chunk::Digest,
        item: &KeptItem,
        earlier: Option<std::ops::Range<usize>>,
        lines: Vec<u8>,
        chunks: usize,
    ) -> Result<()> {
        if earlier.is_some() {
            self.reused += 1;
        }
        if let Some(collected) = &mut self.collected {
            let lines = match earlier {
                Some(range) if lines.is_empty() => LinesAt::Earlier(range, item.lines.digest),
                _ => LinesAt::Made(lines),
            };
            collected.lines.push(ItemLines { chunks, lines });
        }
        self.writer.item(id, digest, item).map_err(|source| Error::Output { path: self.path.clone(), source })
    }

    /// Keeps `chunk` when the chunks are asked for, as chunked.
    fn collect(&mut self, chunk: Chunk) {
        if let Some(collected) = &mut self.collected {
            collected.chunks.push(chunk);
        }
    }

    /// The finished record, the items whose chunks were kept, and the chunks and lines if asked
    /// for.
    fn finish(self, fingerprint: &str) -> Result<KeptRun> {
        let written =
            self.writer.finish(fingerprint).map_err(|source| Error::Output { path: self.path, source })?;
        Ok((written, self.reused, self.collected))
    }
}

/// Adds a document (or pre-chunked unit) to the corpus hash.
fn hash_item(hasher: &mut StreamHasher, item: &Item) {
    match item {
        Item::Document(doc) => hasher.update(&[doc.id.as_str(), &doc.title, &doc.text]),
        Item::Chunk(chunk) => hasher.update(&[chunk.id.as_str(), &chunk.title, &chunk.text]),
    }
}

/// Where the chunks go as they are made: `corpus.jsonl`, the duplicate groups, and the metadata
/// that stays in memory; their hash is taken on the way.
struct ChunkSink {
    /// `corpus.jsonl` (none when the chunks are kept in memory: written from there later).
    file: Option<output::AtomicFile>,
    groups: ChunkGroups,
    metas: ChunkList,
    hash: StreamHasher,
}

impl ChunkSink {
    fn create(corpus_file: Option<&Path>, dup_threshold: f64) -> Result<Self> {
        Ok(Self {
            file: corpus_file.map(output::AtomicFile::create).transpose()?,
            groups: ChunkGroups::new(dup_threshold),
            metas: ChunkList::default(),
            hash: StreamHasher::default(),
        })
    }

    /// Writes `lines` (an item's, made by [`Chunking::make`]) to `corpus.jsonl`.
    fn write(&mut self, lines: &[u8]) -> Result<()> {
        match &mut self.file {
            Some(file) => file.write_bytes(lines),
            None => Ok(()),
        }
    }

    /// Keeps `chunk` (its line written), whose near-duplicate signature is `signature`.
    fn keep(&mut self, chunk: &Chunk, signature: Option<&Signature>) {
        self.hash.update(&[chunk.id.as_str(), &chunk.title, &chunk.text]);
        self.groups.add_signature(signature);
        self.metas.push(chunk);
    }
}

/// What is tallied of the corpus as it is read, before chunking: its hash and its languages.
#[derive(Default)]
struct CorpusTally {
    hash: StreamHasher,
    languages: Languages,
}

impl CorpusTally {
    /// Adds a document (or, prechunked, a chunk) to the corpus hash (the manifest's
    /// `corpus.hash`), and its text in `language` (its text's [`Language::detect`]).
    fn add(&mut self, item: &Item, language: Language) {
        hash_item(&mut self.hash, item);
        let text = match item {
            Item::Document(doc) => &doc.text,
            Item::Chunk(chunk) => &chunk.text,
        };
        self.languages.add(text, language);
    }

    fn summary(
        self,
        report: &ReadReport,
        metas: &ChunkList,
        groups: &ChunkGroups,
        chunks_hash: &StreamHasher,
    ) -> CorpusSummary {
        CorpusSummary {
            documents: report.documents,
            skipped: report.skipped.len(),
            ignored: report.ignored,
            hash: self.hash.finish(),
            chunks: metas.len(),
            chunks_hash: chunks_hash.finish(),
            language: self.languages.corpus(),
            languages: self.languages.documents,
            duplicate_groups: groups.groups().len(),
            chunks_in_groups: groups.groups().iter().map(Vec::len).sum(),
        }
    }
}

/// Languages of the documents read, detected one by one.
#[derive(Default)]
struct Languages {
    documents: BTreeMap<Language, usize>,
    characters: BTreeMap<Language, usize>,
}

impl Languages {
    fn add(&mut self, text: &str, language: Language) {
        *self.documents.entry(language).or_default() += 1;
        *self.characters.entry(language).or_default() += text.chars().count();
    }

    /// The language of most of the text (English on a tie).
    fn corpus(&self) -> Language {
        let zh = self.characters.get(&Language::Zh).copied().unwrap_or(0);
        let en = self.characters.get(&Language::En).copied().unwrap_or(0);
        if zh > en { Language::Zh } else { Language::En }
    }
}

/// Hands every chunk, in order, to the index's callback.
type Feed<'a> = &'a dyn Fn(&mut dyn FnMut(&Chunk) -> Result<(), IndexError>) -> Result<()>;

/// Indexes the chunks `feed` hands over: updates the index in `dir` in place when it holds
/// the `earlier` list's, else opens or builds it.
fn index_chunks(
    dir: &Path,
    chunks: ChunkList,
    fingerprint: &str,
    earlier: Option<Earlier<'_>>,
    config: &BuildConfig,
    stage: &crate::progress::Stage,
    feed: Feed<'_>,
) -> Result<(ChunkIndex, crate::index::IndexOrigin, Option<Unchanged>)> {
    let (analyzer, threads) = (Analyzer::new(config.segmenter), config.threads);
    let feed = |add: &mut dyn FnMut(&Chunk) -> Result<(), IndexError>| feed(add);
    match earlier {
        Some(earlier) => {
            ChunkIndex::update_or_build(dir, chunks, fingerprint, earlier, analyzer, threads, stage, feed)
        }
        None => ChunkIndex::open_or_build(dir, chunks, fingerprint, analyzer, threads, stage, feed)
            .map(|(index, origin)| (index, origin, None)),
    }
}

/// The `corpus.jsonl` lines of `chunks`.
fn corpus_lines(chunks: &[Chunk]) -> Result<Vec<u8>> {
    let mut lines = Vec::new();
    for chunk in chunks {
        serde_json::to_writer(&mut lines, &output::corpus_line(chunk))
            .map_err(|e| Error::Output { path: layout::CORPUS.into(), source: e.into() })?;
        lines.push(b'\n');
    }
    Ok(lines)
}

/// What a refresh's `corpus.jsonl` is staged from: the chunks in memory, each item's lines, and
/// the earlier run's `corpus.jsonl`, which holds the lines of the items chunked as before.
#[derive(Clone, Copy)]
struct CorpusLines<'a> {
    chunks: &'a [Chunk],
    lines: &'a [ItemLines],
    earlier: Option<&'a [u8]>,
}

impl CorpusLines<'_> {
    /// Writes `corpus.jsonl` to `path`: each item's lines made now, or copied from the earlier
    /// run's file where they still have their digest there (else made again from its chunks).
    fn write(self, path: &Path) -> Result<()> {
        let mut file = output::AtomicFile::create(path)?;
        let mut chunks = self.chunks;
        for item in self.lines {
            let (mine, rest) = chunks.split_at_checked(item.chunks).unwrap_or((chunks, &[]));
            chunks = rest;
            let earlier = match &item.lines {
                LinesAt::Made(lines) => Some(lines.as_slice()),
                LinesAt::Earlier(range, digest) => self
                    .earlier
                    .and_then(|bytes| bytes.get(range.clone()))
                    .filter(|lines| blake3::hash(lines).as_bytes() == digest),
            };
            match earlier {
                Some(lines) => file.write_bytes(lines)?,
                None => file.write_bytes(&corpus_lines(mine)?)?,
            }
        }
        file.commit()
    }
}

/// Stages `corpus.jsonl` from `lines` and runs `beside` with their chunks, each on a thread of
/// its own, while `index` indexes the chunks on this one; the first error of the write and the
/// index (the write's first), else what the index and `beside` returned.
fn stage_corpus_while<T, B: Send>(
    staging: &output::Staging,
    lines: CorpusLines<'_>,
    beside: impl FnOnce(&[Chunk]) -> B + Send,
    index: impl FnOnce(&[Chunk]) -> Result<T>,
) -> Result<(T, B)> {
    let path = staging.path(layout::CORPUS);
    std::thread::scope(|scope| {
        let written = scope.spawn(|| lines.write(&path));
        let beside = scope.spawn(|| beside(lines.chunks));
        let indexed = index(lines.chunks);
        let written = crate::threads::join(written);
        let beside = crate::threads::join(beside);
        written.and(indexed).map(|indexed| (indexed, beside))
    })
}

/// The title the index (and the rest of the run) gives `chunk` when its own is blank: its
/// document's id.
fn title_for_index(chunk: &Chunk) -> Option<String> {
    chunk.title.trim().is_empty().then(|| chunk.doc_id.to_string())
}

/// Streams the chunks back from the `corpus.jsonl` this run wrote (to build the index).
fn reread_chunks(corpus_file: &Path, add: &mut dyn FnMut(&Chunk) -> Result<(), IndexError>) -> Result<()> {
    let skipped = corpus::read_prechunked(corpus_file, |chunk| Ok(add(&chunk)?))?;
    match skipped.first() {
        None => Ok(()),
        Some(line) => Err(Error::Output {
            path: corpus_file.to_owned(),
            source: std::io::Error::other(format!("cannot read back what was written: {line}")),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_unit(i: usize, title: &str) -> Item {
        Item::Chunk(Chunk {
            id: crate::id::ChunkId::parse(&format!("d{i}:0")).unwrap(),
            doc_id: crate::id::DocId::sanitized(&format!("d{i}")),
            source_id: None,
            ordinal: 0,
            title: title.to_owned(),
            text: "x".to_owned(),
            section: None,
        })
    }

    #[test]
    fn a_blank_title_is_indexed_as_the_document_id() {
        let Item::Chunk(mut chunk) = tiny_unit(3, " \t") else { unreachable!() };
        assert_eq!(title_for_index(&chunk).as_deref(), Some("d3"));
        chunk.title = "Kept".to_owned();
        assert_eq!(title_for_index(&chunk), None);
    }

    /// Items a fresh batch takes before it is full.
    fn fill(mut item: impl FnMut(usize) -> Item) -> usize {
        let mut batch = ChunkBatch::default();
        (1..=10 * CHUNK_BATCH_ITEMS).find(|&i| batch.push(item(i))).unwrap_or(usize::MAX)
    }

    #[test]
    fn a_chunk_batch_is_bounded_by_count_and_by_ids_titles_and_text() {
        assert_eq!(fill(|i| tiny_unit(i, "")), CHUNK_BATCH_ITEMS);
        let title = "t".repeat(CHUNK_BATCH_BYTES / 4);
        assert!(fill(|i| tiny_unit(i, &title)) <= 4, "long titles count");
        let mut batch = ChunkBatch::default();
        batch.push(tiny_unit(0, ""));
        assert_eq!((batch.take().len(), batch.items.len(), batch.bytes), (1, 0, 0));
    }

    #[test]
    fn a_long_item_holds_up_one_thread_while_the_others_map_the_rest() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // The first item waits for all the others: with runs of as many items each, those in
        // its own run never start.
        let small = 9;
        let finished = AtomicUsize::new(0);
        let start = std::time::Instant::now();
        let mapped = map_in_order((0..=small).collect(), 2, |i: usize| {
            if i == 0 {
                while finished.load(Ordering::SeqCst) < small {
                    if start.elapsed() > std::time::Duration::from_secs(10) {
                        return None;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            } else {
                finished.fetch_add(1, Ordering::SeqCst);
            }
            Some(i * 3)
        });
        assert_eq!(mapped, (0..=small).map(|i| Some(i * 3)).collect::<Vec<_>>());
    }

    #[test]
    fn map_in_order_keeps_the_order_and_runs_on_the_threads() {
        for threads in [1, 2, 3, 8] {
            for len in [0, 1, 2, 5, 100] {
                let items: Vec<usize> = (0..len).collect();
                let mapped =
                    map_in_order(items, threads, |i| (i * 3, format!("{:?}", std::thread::current().id())));
                assert_eq!(
                    mapped.iter().map(|m| m.0).collect::<Vec<_>>(),
                    (0..len).map(|i| i * 3).collect::<Vec<_>>()
                );
                let used: std::collections::BTreeSet<&String> = mapped.iter().map(|m| &m.1).collect();
                assert_eq!(
                    used.len(),
                    threads.min(len).max(usize::from(len > 0)),
                    "{threads} threads, {len} items"
                );
            }
        }
    }
}
