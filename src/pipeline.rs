//! The build, stage by stage: corpus → chunks → index → plan and generate → round trip →
//! review sample → files. Each stage lives in its own module; this one only wires them.

use crate::chunk::Chunker;
use crate::config::{BuildConfig, GeneratorConfig};
use crate::corpus::{self, Item, ReadReport, Skipped};
use crate::dedup::{ChunkGroups, Dedup};
use crate::error::{Error, Result};
use crate::filter::{Checks, RoundTrip};
use crate::generate::{
    Estimate, Generator, LlmGenerator, LlmReport, OfflineGenerator, Planner, Prompts, Quotas, Request, top_up,
};
use crate::id::{ChunkId, ContentHasher, QueryId};
use crate::index::{Analyzer, ChunkIndex, IndexError};
use crate::judge::{Asks, Judge, JudgeConfig, Phase};
use crate::llm::{Cache, Llm};
use crate::output::{self, CorpusSummary, Manifest, Occupant, RunInfo, Summary, TypeCounts, layout};
use crate::progress::Progress;
use crate::record::{
    Candidate, Chunk, ChunkMeta, Judged, PoolChunk, Pooled, QueryType, Reason, Reject, ReviewItem,
    ReviewSource, Status, Verdict,
};
use crate::runs::PoolRuns;
use crate::sample;
use crate::text::Language;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

pub use crate::output::report::Shortfall;

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
    let (index, groups, corpus, skipped) = chunk_and_index(config, out, &staging, *progress, &mut timings)?;
    let language = config.language.unwrap_or(corpus.language);

    let stage = progress.stage("connect", 0);
    let mut generator = make_generator(config, &index, out, language)?;
    timings.add("connect", stage.finish(&generator_line(generator.as_ref(), language)));
    let quotas = config.mix.quotas(config.queries);
    let group = generator.queries_per_call();
    let mut planner = Planner::new(&index, &groups, config.per_doc_cap, config.queries, group, config.seed);
    if config.dry_run {
        let dry_run = dry_run(config, generator.as_mut(), &mut planner, &quotas, language)?;
        return Ok(Outcome { dry_run: Some(dry_run), skipped, ..Outcome::default() });
    }
    let mut rounds = Rounds::new(&quotas, language, config.dedup_threshold, config.judge);
    // Without a judge, each hop of a multi_hop query must at least contribute a term.
    let checks = Checks { language: Some(language), hop_terms: generator.judge().is_none() };
    let runs = PoolRuns::read(&config.pool_runs, &index)?;
    let filter =
        RoundTrip::new(&index, &groups, config.filter, checks).with_runs(&runs).with_threads(config.threads);
    for round in 1..=config.max_rounds {
        let wanted = rounds.to_plan(round == config.max_rounds);
        if wanted.is_empty() {
            break;
        }
        let stage = progress.stage("plan", 0);
        let requests = planner.plan(&wanted, round, group)?;
        timings.add("plan", stage.finish(&format!("round {round}: {} requests", requests.len())));
        if requests.is_empty() {
            break;
        }
        rounds.run(round, generator.as_mut(), &filter, &index, &requests, *progress, &mut timings)?;
    }

    let mut manifest = Manifest::new(config, generator.name().to_owned());
    manifest.per_doc_cap = planner.cap();
    manifest.language = language;
    manifest.filter_checks = filter.checks();
    manifest.corpus = corpus;
    manifest.rounds = rounds.done;
    let shortfalls = rounds.shortfalls(&quotas);
    manifest.shortfalls.clone_from(&shortfalls);
    manifest.counts = rounds.counts.clone();
    let llm = generator.llm_report();
    manifest.llm = llm.as_ref().map(|r| r.summary.clone());
    let chunk_groups: Vec<Vec<ChunkId>> =
        groups.groups().iter().map(|g| g.iter().map(|&c| index.meta(c).id.clone()).collect()).collect();
    let made = Made { rounds: &rounds, skipped: &skipped, chunk_groups: &chunk_groups };
    let mut staging = staging;
    let review_items =
        stage_set(config, &staging, &index, &made, manifest, *progress, timings, llm.as_ref())?;
    let version = match occupant {
        Occupant::Reviewed => Some(crate::review::version::stage_rebuild(out, &mut staging)?),
        Occupant::Nothing | Occupant::Set | Occupant::Foreign { .. } => None,
    };
    staging.publish(&[])?;
    Ok(Outcome {
        shortfalls,
        in_set: rounds.judged.iter().filter(|j| j.in_set()).count(),
        counts: rounds.counts,
        skipped,
        review_items,
        dry_run: None,
        llm,
        version,
    })
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
}

/// Plans the rounds a run would go through, without sending anything: round 1 as planned, then
/// the top-ups that a yield of [`DRY_RUN_LOW_YIELD`] would call for (planned by the same rules
/// as a real run), and what each would cost.
fn dry_run(
    config: &BuildConfig,
    generator: &mut dyn Generator,
    planner: &mut Planner<'_>,
    quotas: &Quotas,
    language: Language,
) -> Result<DryRun> {
    let mut rounds = Rounds::new(quotas, language, config.dedup_threshold, config.judge);
    let group = generator.queries_per_call();
    let mut range =
        DryRun { low_yield_percent: (DRY_RUN_LOW_YIELD * 100.0).round() as u32, ..DryRun::default() };
    for round in 1..=config.max_rounds {
        let wanted = rounds.to_plan(round == config.max_rounds);
        let requests = if wanted.is_empty() { Vec::new() } else { planner.plan(&wanted, round, group)? };
        if requests.is_empty() {
            break;
        }
        let mut estimate = generator.estimate(&requests)?;
        if generator.judge().is_some() {
            estimate.judge_calls = judge_calls(&requests, config);
        }
        if round == 1 {
            (range.queries, range.low) = (requests.len(), estimate);
        }
        range.high.add(&estimate);
        range.rounds = round;
        rounds.assume_kept(&requests, DRY_RUN_LOW_YIELD);
    }
    Ok(range)
}

/// The judge calls `requests` may cost: a call per hop of a multi_hop query, per pooled chunk
/// of a no_answer one, and `--judge-pool` per answerable one.
fn judge_calls(requests: &[Request], config: &BuildConfig) -> u64 {
    let per_request = |r: &Request| match r.query_type {
        QueryType::NoAnswer => config.filter.pool_depth,
        QueryType::MultiHop => r.sources.len() + config.judge.pool,
        QueryType::Direct | QueryType::Paraphrase => config.judge.pool,
    };
    requests.iter().map(|r| per_request(r) as u64).sum()
}

/// Wall time per stage, summed over rounds.
#[derive(Default)]
struct Timings(BTreeMap<&'static str, u64>);

impl Timings {
    fn add(&mut self, stage: &'static str, elapsed: Duration) {
        *self.0.entry(stage).or_insert(0) += u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    }
}

/// Stages 1–3: reads and chunks the corpus into the staged `corpus.jsonl` (grouping
/// near-identical chunks on the way), then builds (or reuses) the index.
fn chunk_and_index(
    config: &BuildConfig,
    out: &Path,
    staging: &output::Staging,
    progress: Progress,
    timings: &mut Timings,
) -> Result<(ChunkIndex, ChunkGroups, CorpusSummary, Vec<Skipped>)> {
    // In bytes: a single large file shows its progress too.
    let size =
        fs_err::metadata(&config.corpus).ok().filter(std::fs::Metadata::is_file).map_or(0, |m| m.len());
    let stage = progress.stage_bytes("chunk", size);
    let corpus_file = staging.path(layout::CORPUS);
    let (chunks, groups, corpus, read) = read_and_chunk(config, out, &corpus_file, &stage)?;
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
    timings.add("chunk", stage.finish(&format!("{} documents → {} chunks", corpus.documents, chunks.len())));
    let stage = progress.stage("index", chunks.len() as u64);
    let analyzer = Analyzer::new(config.segmenter);
    let (index, provenance) = ChunkIndex::open_or_build(
        &out.join(layout::INDEX_DIR),
        chunks,
        &corpus.chunks_hash,
        analyzer,
        // One writer: `qrelgen run` writes BM25 scores, whose last bits depend on the segments.
        1,
        &stage,
        |add| reread_chunks(&corpus_file, add),
    )?;
    timings.add("index", stage.finish(&format!("{} chunks, index {provenance}", index.len())));
    Ok((index, groups, corpus, read.skipped))
}

/// What the stages made, for the files to show.
struct Made<'a> {
    rounds: &'a Rounds,
    skipped: &'a [Skipped],
    chunk_groups: &'a [Vec<ChunkId>],
}

/// Stages 6–7: samples the review queue and writes every file into the staging folder
/// (`manifest.json` last). Returns the size of the review queue.
#[expect(clippy::too_many_arguments, reason = "the last stage gathers what every stage made")]
fn stage_set(
    config: &BuildConfig,
    staging: &output::Staging,
    index: &ChunkIndex,
    made: &Made<'_>,
    mut manifest: Manifest<'_>,
    progress: Progress,
    mut timings: Timings,
    llm: Option<&LlmReport>,
) -> Result<usize> {
    let stage = progress.stage("sample", 0);
    let set: Vec<&Judged> = made.rounds.judged.iter().filter(|j| j.in_set()).collect();
    let queue = review_items(&sample::sample(&set, config.review, config.seed), index)?;
    timings.add("sample", stage.finish(&format!("{} queries to review", queue.len())));
    let stage = progress.stage("write", 0);
    write_files(staging, made, &set, &queue)?;
    let measures = output::Measures::compute(&set, index, config.filter.pool_depth)?;
    let summary = Summary {
        manifest: &manifest,
        judged: &made.rounds.judged,
        skipped: made.skipped,
        chunk_groups: made.chunk_groups,
        measures: &measures,
    };
    output::write_text(&staging.path(layout::REPORT_MD), &output::render_report(&summary))?;
    output::write_text(&staging.path(layout::REPORT_HTML), &output::render_report_html(&summary, index))?;
    timings.add("write", stage.finish(&format!("{} queries", set.len())));
    manifest.run = RunInfo { timings_ms: timings.0, llm_network: llm.map(|r| r.network) };
    output::write_json(&staging.path(layout::MANIFEST), &manifest)?;
    Ok(queue.len())
}

/// The generator the config asks for.
fn make_generator<'a>(
    config: &BuildConfig,
    index: &'a ChunkIndex,
    out: &Path,
    language: Language,
) -> Result<Box<dyn Generator + 'a>> {
    match &config.generator {
        GeneratorConfig::Offline => {
            Ok(Box::new(OfflineGenerator::new(index, config.seed, language, config.topics)?))
        }
        GeneratorConfig::Llm(setup) => {
            let prompts = Prompts::load(setup.prompts.as_deref(), language)?;
            let cache_path = setup.cache.clone().unwrap_or_else(|| out.join(layout::LLM_CACHE));
            let llm =
                Llm::new(setup.llm.clone(), Cache::open(&cache_path)?).map_err(|e| Error::Endpoint {
                    url: setup.llm.endpoint.base_url.clone(),
                    message: e.chain(),
                    hint: "check --base-url (e.g. http://127.0.0.1:8080/v1)",
                })?;
            let generator = LlmGenerator::new(
                index,
                llm,
                prompts,
                setup.generation.clone(),
                config.seed,
                !config.dry_run,
            )?;
            Ok(Box::new(generator))
        }
    }
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
/// `corpus.jsonl`; only their metadata stays in memory.
fn read_and_chunk(
    config: &BuildConfig,
    out: &Path,
    corpus_file: &Path,
    stage: &crate::progress::Stage,
) -> Result<(Vec<ChunkMeta>, ChunkGroups, CorpusSummary, ReadReport)> {
    let chunker = Chunker::new(config.chunking)?;
    let mut groups = ChunkGroups::new(config.chunk_dup_threshold);
    let mut file = output::AtomicFile::create(corpus_file)?;
    let mut metas = Vec::new();
    let mut corpus_hash = ContentHasher::default();
    let mut chunks_hash = ContentHasher::default();
    let mut languages = Languages::default();
    let mut keep = |chunk: &Chunk| -> Result<()> {
        chunks_hash.update(&[chunk.id.as_str(), &chunk.title, &chunk.text]);
        file.write_json_line(&output::corpus_line(chunk))?;
        groups.add(&chunk.text);
        metas.push(chunk.meta());
        Ok(())
    };
    let report = corpus::read(&config.corpus, config.prechunked, Some(out), |item| {
        match item {
            Item::Document(doc) => {
                corpus_hash.update(&[doc.id.as_str(), &doc.title, &doc.text]);
                languages.add(&doc.text);
                chunker
                    .chunk_reporting(&doc, &mut |bytes| stage.inc(bytes as u64))
                    .iter()
                    .try_for_each(&mut keep)?;
            }
            Item::Chunk(chunk) => {
                corpus_hash.update(&[chunk.id.as_str(), &chunk.title, &chunk.text]);
                languages.add(&chunk.text);
                keep(&chunk)?;
                stage.inc(chunk.text.len() as u64);
            }
        }
        Ok(())
    })?;
    file.commit()?;
    groups.seal();
    let summary = CorpusSummary {
        documents: report.documents,
        skipped: report.skipped.len(),
        ignored: report.ignored,
        hash: corpus_hash.finish(),
        chunks: metas.len(),
        chunks_hash: chunks_hash.finish(),
        language: languages.corpus(),
        languages: languages.documents,
        duplicate_groups: groups.groups().len(),
        chunks_in_groups: groups.groups().iter().map(Vec::len).sum(),
    };
    Ok((metas, groups, summary, report))
}

/// Languages of the documents read, detected one by one.
#[derive(Default)]
struct Languages {
    documents: BTreeMap<Language, usize>,
    characters: BTreeMap<Language, usize>,
}

impl Languages {
    fn add(&mut self, text: &str) {
        let language = Language::detect(text);
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

/// Streams the chunks back from the `corpus.jsonl` this run wrote (to build the index).
fn reread_chunks(corpus_file: &Path, add: &mut dyn FnMut(Chunk) -> Result<(), IndexError>) -> Result<()> {
    let skipped = corpus::read_prechunked(corpus_file, |chunk| Ok(add(chunk)?))?;
    match skipped.first() {
        None => Ok(()),
        Some(line) => Err(Error::Output {
            path: corpus_file.to_owned(),
            source: std::io::Error::other(format!("cannot read back what was written: {line}")),
        }),
    }
}

/// The state carried across generation rounds.
struct Rounds {
    language: Language,
    dedup: Dedup,
    judge: JudgeConfig,
    judged: Vec<Judged>,
    rejects: Vec<Reject>,
    counts: BTreeMap<QueryType, TypeCounts>,
    seen: HashSet<QueryId>,
    done: u32,
}

impl Rounds {
    fn new(quotas: &Quotas, language: Language, dedup_threshold: f64, judge: JudgeConfig) -> Self {
        let counts = quotas
            .iter()
            .map(|(&t, &requested)| (t, TypeCounts { requested, ..TypeCounts::default() }))
            .collect();
        Self {
            language,
            dedup: Dedup::new(dedup_threshold),
            judge,
            judged: Vec::new(),
            rejects: Vec::new(),
            counts,
            seen: HashSet::new(),
            done: 0,
        }
    }

    /// Counts `requests` as planned, and `share` of each type's planned queries so far as in
    /// the set (for a dry run).
    fn assume_kept(&mut self, requests: &[Request], share: f64) {
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
    /// so top-ups converge in a round or two, and the `last` round adds a margin so that it
    /// fills ([`top_up`]).
    fn to_plan(&self, last: bool) -> Quotas {
        self.counts
            .iter()
            .filter(|(_, c)| Self::deficit(c) > 0)
            .map(|(&t, c)| {
                let keep_rate = if c.planned == 0 { 1.0 } else { c.filled as f64 / c.planned as f64 };
                (t, top_up(Self::deficit(c), keep_rate, last))
            })
            .collect()
    }

    fn generate(
        &mut self,
        generator: &mut dyn Generator,
        index: &ChunkIndex,
        requests: &[Request],
        stage: &crate::progress::Stage,
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
                sources: request.sources.iter().map(|&c| index.meta(c).id.clone()).collect(),
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
                let sources: Vec<ChunkId> =
                    request.sources.iter().map(|&c| index.meta(c).id.clone()).collect();
                Candidate {
                    id: QueryId::derive(request.query_type.label(), &sources, &draft.text),
                    text: draft.text,
                    query_type: request.query_type,
                    sources,
                    absent_term: draft.absent_term,
                    style: draft.style,
                    evidence: draft.evidence,
                    answer: draft.answer,
                    topic: draft.topic.map(|t| t.into_iter().map(|c| index.meta(c).id.clone()).collect()),
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
        stage: &crate::progress::Stage,
    ) -> Result<Vec<Judged>> {
        let fresh: Vec<bool> = candidates.iter().map(|c| self.seen.insert(c.id.clone())).collect();
        let searched: Vec<&Candidate> =
            candidates.iter().zip(&fresh).filter(|(_, f)| **f).map(|(c, _)| c).collect();
        let mut verdicts = filter.judge_all(&searched, stage)?.into_iter();
        stage.inc((candidates.len() - searched.len()) as u64);
        Ok(candidates
            .into_iter()
            .zip(fresh)
            .map(|(candidate, fresh)| {
                // A repeat of an earlier candidate is dropped unsearched.
                let verdict = if fresh { verdicts.next() } else { None };
                Judged { candidate, verdict: verdict.unwrap_or_else(|| Verdict::dropped(Reason::Duplicate)) }
            })
            .collect())
    }

    /// Lets the judge grade what it must in `phase`, and applies its grades; questions left
    /// without a grade go to `rejects.jsonl` with the reason.
    fn run_judge(
        &mut self,
        judge: &mut dyn Judge,
        index: &ChunkIndex,
        items: &mut [Judged],
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
                sources: vec![index.meta(ask.chunk).id.clone()],
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
    fn admit(&mut self, items: &mut [Judged]) {
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
    fn record(&mut self, items: Vec<Judged>) {
        for item in items {
            let counts = self.count(item.candidate.query_type);
            counts.relabelled += usize::from(item.verdict.relabelled.is_some());
            match item.verdict.status {
                Status::Kept => counts.kept += 1,
                Status::Flagged => counts.flagged += 1,
                Status::Dropped => {
                    counts.dropped += 1;
                    *counts.dropped_by_reason.entry(item.verdict.reason.label().to_owned()).or_default() += 1;
                }
            }
            self.judged.push(item);
        }
    }

    /// One round: generate the planned requests, filter, let the judge decide, admit, then let
    /// the judge grade the pools of the queries admitted.
    #[expect(clippy::too_many_arguments, reason = "a round touches every stage between plan and set")]
    fn run(
        &mut self,
        round: u32,
        generator: &mut dyn Generator,
        filter: &RoundTrip<'_>,
        index: &ChunkIndex,
        requests: &[Request],
        progress: Progress,
        timings: &mut Timings,
    ) -> Result<()> {
        let stage = progress.stage("generate", requests.len() as u64);
        let candidates = self.generate(generator, index, requests, &stage)?;
        timings.add("generate", stage.finish(&format!("round {round}: {} queries", candidates.len())));
        let stage = progress.stage("filter", candidates.len() as u64);
        let mut items = self.round_trip(filter, candidates, &stage)?;
        let passed = items.iter().filter(|j| j.in_set()).count();
        timings.add("filter", stage.finish(&format!("round {round}: {passed} passed the round trip")));
        if let Some(judge) = generator.judge() {
            timings.add("judge", self.run_judge(judge, index, &mut items, Phase::Decide, progress)?);
        }
        self.admit(&mut items);
        if let Some(judge) = generator.judge().filter(|_| self.judge.pool > 0) {
            timings.add("judge", self.run_judge(judge, index, &mut items, Phase::Pool, progress)?);
        }
        self.record(items);
        self.done = round;
        Ok(())
    }

    fn count(&mut self, t: QueryType) -> &mut TypeCounts {
        self.counts.entry(t).or_default()
    }

    fn shortfalls(&self, quotas: &Quotas) -> Vec<Shortfall> {
        quotas
            .iter()
            .filter_map(|(&t, &wanted)| {
                let got = self.counts.get(&t).map_or(0, |c| c.filled);
                let counts = self.counts.get(&t).cloned().unwrap_or_default();
                (got < wanted).then(|| Shortfall {
                    query_type: t,
                    wanted,
                    got,
                    cause: shortfall_cause(&counts),
                })
            })
            .collect()
    }
}

/// Why a type fell short, in a few words pointing at the fix.
fn shortfall_cause(counts: &TypeCounts) -> String {
    let failed: usize = counts.generation_failures.values().sum();
    if counts.planned == 0 {
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

fn review_items(queue: &[&Judged], index: &ChunkIndex) -> Result<Vec<ReviewItem>> {
    queue
        .iter()
        .map(|j| {
            let sources = j
                .answering_chunks()
                .iter()
                .filter_map(|id| index.position(id).map(|p| (id, p)))
                .map(|(id, p)| {
                    let stored = index.stored(p)?;
                    Ok(ReviewSource { chunk_id: id.clone(), title: stored.title, text: stored.text })
                })
                .collect::<Result<_>>()?;
            Ok(ReviewItem {
                query_id: j.candidate.id.clone(),
                text: j.candidate.text.clone(),
                query_type: j.query_type(),
                status: j.verdict.status,
                reason: j.verdict.reason,
                ranks: j.verdict.ranks.clone(),
                absent_term: j.candidate.absent_term.clone(),
                evidence: j.candidate.evidence.clone(),
                sources,
                pool: pool_chunks(&j.verdict.pool, index)?,
                decision: None,
            })
        })
        .collect()
}

fn pool_chunks(pool: &[Pooled], index: &ChunkIndex) -> Result<Vec<PoolChunk>> {
    pool.iter()
        .filter_map(|p| index.position(&p.chunk_id).map(|at| (p, at)))
        .map(|(p, at)| {
            let stored = index.stored(at)?;
            Ok(PoolChunk { pooled: p.clone(), title: stored.title, text: stored.text })
        })
        .collect()
}

fn write_files(out: &output::Staging, made: &Made<'_>, set: &[&Judged], queue: &[ReviewItem]) -> Result<()> {
    let rounds = made.rounds;
    output::write_jsonl(
        &out.path(layout::QUERIES),
        set.iter().map(|j| output::query_line(j, rounds.language)),
    )?;
    output::write_qrels(|name| out.path(name), &output::qrels(set.iter().copied()))?;
    output::write_atomic(&out.path(layout::NO_ANSWER), |w| {
        let no_answer = set.iter().filter(|j| j.query_type() == QueryType::NoAnswer);
        no_answer.map(|j| &j.candidate.id).try_for_each(|id| writeln!(w, "{id}"))
    })?;
    output::write_jsonl(&out.path(layout::CHUNK_GROUPS), made.chunk_groups)?;
    output::write_jsonl(&out.path(layout::CANDIDATES), &rounds.judged)?;
    output::write_jsonl(&out.path(layout::REJECTS), &rounds.rejects)?;
    if set.iter().any(|j| j.verdict.pool.iter().any(|p| !p.pooled_by.is_empty())) {
        output::write_pool(&out.path(layout::POOL_TSV), set)?;
    }
    output::write_jsonl(&out.path(layout::QUEUE), queue)
}
