//! `qrelgen refresh`: the next version of a set from a changed corpus. It keeps every label that
//! still holds and sends only what changed to the LLM and to reviewers.
//!
//! Stages: re-chunk the new corpus with the set's settings (the build's own stage) → map old
//! chunks to new ones ([`map`]) → re-check every query ([`recheck`]) → new queries for the new
//! chunks (the build's planner, generator and rounds, so the same controls) → review queue (what
//! changed, then the previous queue's items still in the set) → files, staged and published as version N + 1 (the current one kept under
//! `versions/vN/`), with `refresh/chunk_map.tsv`, `refresh/changelog.jsonl` and a section in the
//! report.

pub mod map;
pub mod recheck;
mod report;

use crate::build::DryRun;
use crate::build::rounds::Rounds;
use crate::build::stages::Stages;
use crate::build::{dry_run, ingest, stages};
use crate::chunk::KeptChunking;
use crate::config::{BuildConfig, GeneratorConfig};
use crate::corpus;
use crate::error::{Error, Result};
use crate::filter::{Checks, RoundTrip};
use crate::generate::Planner;
use crate::id::{ChunkId, QueryId};
use crate::index::{Analyzer, ChunkIndex, Earlier, IndexError, OldChunk, Unchanged};
use crate::judge::{Ask, Judge};
use crate::output::RunInfo;
use crate::output::layout::{
    CANDIDATES, CHUNK_GROUPS, CORPUS, INDEX_DIR, MANIFEST, NO_ANSWER, POOL_TSV, POOLED_TSV, QUERIES, QUEUE,
    REJECTS, REPORT_HTML,
};
use crate::output::{self, Staging};
use crate::progress::Progress;
use crate::progress::Timings;
use crate::record::{Checked, Chunk, Provenance, Qrel, QueryType, RefreshNote, ReviewItem};
use crate::review::set::{ReviewSet, SetManifest, Version, read_all, read_manifest};
use crate::review::version::{self, MadeBy};
use crate::runs::PoolRuns;
use crate::set::pooled::{pooled_text, read_pooled};
use crate::topics::CorpusModel;
use map::{ChunkChange, ChunkMap, Piece};
use recheck::{PoolGrade, QueryChange, Questions, Recheck, Rechecked};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

/// The map of old chunks to new ones.
pub const CHUNK_MAP: &str = "refresh/chunk_map.tsv";
/// One line per chunk change and per query.
pub const CHANGELOG: &str = "refresh/changelog.jsonl";

/// How many new queries to write for the new material ([`ChunkMap::fresh`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewQueries {
    /// The set's size times the share of the new corpus's text that is new material, rounded up
    /// (so a new document gets a query).
    Auto,
    /// This many.
    Count(usize),
}

/// What a refresh is asked to do beyond the set's own settings.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// New queries for new chunks.
    pub new_queries: NewQueries,
    /// Report what would change and the LLM calls it would make; write nothing.
    pub dry_run: bool,
    /// Refresh from a corpus even when under half of the set's chunks carry over into it.
    pub accept_new_corpus: bool,
}

/// What a refresh did (or, with `--dry-run`, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    /// The new corpus has the old chunks and no others: nothing was written.
    pub nothing_changed: bool,
    /// Old chunks per change, and the added ones.
    pub chunks: BTreeMap<ChunkChange, usize>,
    /// How much of the set's corpus carries over into the new one, and how much was unreadable.
    pub corpus_check: CorpusCheck,
    /// Queries per change (new ones included).
    pub queries: BTreeMap<QueryChange, usize>,
    /// New queries asked for.
    pub new_wanted: usize,
    /// LLM calls sent (with `--dry-run`: planned, the new queries' round 1 only; see
    /// [`Outcome::planned_calls`]) and answered from the cache.
    pub llm_calls: u64,
    /// LLM calls answered from the cache.
    pub llm_cache_hits: u64,
    /// With `--dry-run`: what the new queries would cost, from round 1 with every query kept to
    /// every round with half of them dropped.
    #[serde(skip)]
    pub estimate: Option<DryRun>,
    /// Queries in the new version.
    pub in_set: usize,
    /// Queries in the new version, by type.
    pub by_type: BTreeMap<QueryType, usize>,
    /// Share of the new version's queries with a human label.
    pub human_share: f64,
    /// Queries the refresh queued for review: the changed part of the queue, first in it
    /// (`review export --only changed`).
    pub review_items: usize,
    /// Items in the review queue: the changed ones, then the previous queue's items still in
    /// the set.
    pub queue_items: usize,
    /// The version written (`None` for a dry run or nothing changed).
    pub version: Option<u32>,
}

/// What a refresh checks of the new corpus before it trusts it: how much of the set's corpus
/// carries over (the old chunks something in the new corpus resembles: unchanged, moved,
/// edited, split or merged; not deleted), and how many inputs could not be read.
///
/// The rules: at least half of the old chunks carry over, and no more files or lines are
/// skipped than when the set's corpus was read. A corpus changes by editions, so most of it
/// stays; under half means another corpus or the wrong path, and newly unreadable files mean
/// a damaged copy. Either way a refresh would retire the queries and the human judgments on
/// what is missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CorpusCheck {
    /// The set's chunks.
    pub old_chunks: usize,
    /// Those that carry over.
    pub carried: usize,
    /// Files or lines of the new corpus skipped as unreadable.
    pub skipped: usize,
    /// Files or lines skipped when the set's corpus was read.
    pub skipped_before: usize,
}

impl CorpusCheck {
    /// The inputs skipped as unreadable in the new `corpus` and in the set's (its `manifest`).
    fn readable(manifest: &SetManifest, corpus: &output::CorpusSummary) -> Self {
        let before =
            manifest.rest.get("corpus").and_then(|c| c.get("skipped")).and_then(serde_json::Value::as_u64);
        Self {
            skipped: corpus.skipped,
            skipped_before: before.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX)),
            ..Self::default()
        }
    }

    /// With the carry-over the chunk changes `counts` show.
    #[must_use]
    pub fn carrying_over(mut self, counts: &BTreeMap<ChunkChange, usize>) -> Self {
        let count = |change| counts.get(&change).copied().unwrap_or(0);
        self.old_chunks = counts.values().sum::<usize>() - count(ChunkChange::Added);
        self.carried = self.old_chunks - count(ChunkChange::Deleted);
        self
    }

    /// The share of the old chunks that carry over (1 for a set without chunks).
    #[must_use]
    pub fn share(self) -> f64 {
        if self.old_chunks == 0 { 1.0 } else { self.carried as f64 / self.old_chunks as f64 }
    }

    /// Refuses `config`'s corpus when more of it is unreadable than of the set's, unless
    /// `options` accept a new corpus.
    ///
    /// # Errors
    /// [`Error::CorpusRefused`] with the figures.
    pub fn refuse_unreadable(self, config: &BuildConfig, options: Options) -> Result<Self> {
        if options.accept_new_corpus || self.skipped <= self.skipped_before {
            return Ok(self);
        }
        let reason = format!(
            "{} file(s) or line(s) of it could not be read and were skipped (see the warnings above), \
             {} when the set's corpus was read",
            self.skipped, self.skipped_before
        );
        Err(Error::CorpusRefused { path: config.corpus.clone(), reason })
    }

    /// Refuses `config`'s corpus when under half of the old chunks carry over, unless
    /// `options` accept a new corpus.
    ///
    /// # Errors
    /// [`Error::CorpusRefused`] with the figures.
    pub fn refuse_scant(self, config: &BuildConfig, options: Options) -> Result<Self> {
        if options.accept_new_corpus || self.carried * 2 >= self.old_chunks {
            return Ok(self);
        }
        let reason = format!(
            "{} of the set's {} chunks ({:.0} %) carry over into it, under half",
            self.carried,
            self.old_chunks,
            self.share() * 100.0
        );
        Err(Error::CorpusRefused { path: config.corpus.clone(), reason })
    }
}

/// `edited 3, deleted 1, added 2`: the chunk changes of `outcome`.
#[must_use]
pub fn report_chunks(outcome: &Outcome) -> String {
    report::counts_line(&outcome.chunks)
}

/// `kept 90, relabelled 3, …`: the query changes of `outcome`.
#[must_use]
pub fn report_queries(outcome: &Outcome) -> String {
    report::counts_line(&outcome.queries)
}

/// The ids of the queries the last refresh of `set` changed and queued for review.
///
/// # Errors
/// [`Error::NotRefreshed`] when no refresh made the set's base version (it was never
/// refreshed, or built again since); [`Error::Input`] when its `refresh/changelog.jsonl`
/// cannot be read; [`Error::Malformed`] for a bad line.
pub fn changed_queries(set: &ReviewSet) -> Result<HashSet<String>> {
    #[derive(serde::Deserialize)]
    struct Entry {
        query_id: Option<String>,
        change: String,
    }
    if !set.log().is_some_and(crate::review::version::ReviewLog::refreshed) {
        return Err(Error::NotRefreshed { path: set.dir.clone() });
    }
    let entries: Vec<Entry> = read_all(&set.dir.join(CHANGELOG))?;
    let queued = |label: &str| {
        <QueryChange as strum::VariantArray>::VARIANTS.iter().any(|c| c.label() == label && c.queued())
    };
    Ok(entries.into_iter().filter(|e| queued(&e.change)).filter_map(|e| e.query_id).collect())
}

/// Refreshes the set in `set` from `config.corpus` (`config` is the set's recorded settings, with
/// any overrides).
///
/// # Errors
/// An unreadable set (manifest, queries, qrels, corpus) or corpus, index or write failures, an
/// unusable endpoint.
pub fn refresh(config: &BuildConfig, set: &Path, options: Options, progress: &Progress) -> Result<Outcome> {
    let stage = progress.stage("read", 0);
    let (manifest, kept) = start(config, set, *progress)?;
    let scratch =
        tempfile::tempdir().map_err(|source| Error::Output { path: std::env::temp_dir(), source })?;
    // A dry run chunks and indexes in a scratch folder: nothing in the set is touched.
    let work = if options.dry_run { scratch.path() } else { set };
    if known_unchanged(config, &manifest, kept.as_ref(), work) {
        stage.finish(&format!("version {} of the set", manifest.version()));
        return Ok(nothing_changed(*progress));
    }
    // Made on the first write (`Staging::path`): an unchanged corpus stages nothing.
    let staging = Staging::create(work)?;
    let mut timings = Timings::default();
    timings.add("read", stage.finish(&format!("version {} of the set", manifest.version())));
    let (chunked, old) =
        chunk_and_read(config, set, work, &staging, &manifest, kept, *progress, &mut timings);
    let chunked = chunked?;
    if same_corpus(config, &manifest, &chunked.corpus().hash) {
        return Ok(nothing_changed(*progress));
    }
    let check = CorpusCheck::readable(&manifest, chunked.corpus()).refuse_unreadable(config, options)?;
    // The run's large records are freed on a thread of their own once they are done with.
    let discard = crate::threads::Discard::new();
    let stage = progress.stage("read", 0);
    let SetState { current, corpus: old_corpus, pieces: old, mut model, queue: previous } = old?;
    timings.add("read", stage.finish(&format!("{} queries, {} chunks", current.queries.len(), old.len())));
    let old_chunks: Vec<OldChunk<'_>> =
        old.iter().map(|p| OldChunk { id: &p.id, title: &p.title, text: &p.text }).collect();
    let earlier = old_chunks_hash(&manifest)
        .map(|fingerprint| (Earlier { fingerprint, chunks: &old_chunks }, old_corpus.as_slice()));
    // The chunks in memory are mapped beside the index stage.
    let map_beside = |new: &[Chunk]| timed(|| ChunkMap::build(&old, new));
    let (ingest::Chunked { index, groups, corpus, unchanged, chunks, .. }, mapped) =
        chunked.index(config, work, &staging, earlier, *progress, &mut timings, map_beside)?;
    discard.later(old_corpus);
    let stage = progress.stage("map", old.len() as u64);
    let (new, map, took) = new_and_map(chunks, mapped, &old, &staging)?;
    let mut outcome = Outcome { chunks: map.counts(), ..Outcome::default() };
    // The stage's time includes the mapping done beside the index stage.
    timings.add("map", stage.finish(&report::counts_line(&outcome.chunks)) + took);
    outcome.corpus_check = check.carrying_over(&outcome.chunks).refuse_scant(config, options)?;
    let new_share = new_share(&new, &map);
    discard.later(new);
    if map.is_identity() {
        outcome.nothing_changed = true;
        return Ok(outcome);
    }
    let language = config.language.unwrap_or(corpus.language);
    let checks =
        Checks { language: Some(language), hop_terms: matches!(config.generator, GeneratorConfig::Offline) };
    let runs = PoolRuns::read(&config.pool_runs, &index)?;
    let filter = RoundTrip::new(&index, &groups, config.filter, checks).with_runs(&runs);
    let candidates = read_candidates(set)?;
    // While the queries are re-checked, a second thread readies what comes next: the offline
    // generator's model folded in when new queries will be written (both only read the index),
    // the LLM's token counter loaded (its first request would wait for it).
    let to_fold = model.take_if(|_| options.writes_new(&map));
    let ahead = ready_ahead(to_fold, &config.generator, &old_chunks, &index, unchanged.as_ref());
    let stage = progress.stage("recheck", current.queries.len() as u64);
    let recheck = || recheck_all(&current, &candidates, &Recheck::new(&map, &index, &filter), &stage);
    let (checked, folded) = crate::threads::beside(recheck, ahead);
    let folded = folded.flatten();
    let mut checked = checked?;
    timings.add("recheck", stage.finish(&format!("{} queries re-checked", checked.len())));
    let mut fresh = Fresh {
        config,
        index: &index,
        filter: &filter,
        work,
        language,
        progress: *progress,
        stages: None,
        model: folded.or_else(|| model.map(|model| Model::Old(model, old_chunks.as_slice()))),
        unchanged: unchanged.as_ref(),
    };
    outcome.llm_calls += fresh.judge(&mut checked, options.dry_run, &mut timings)?;
    outcome.count_changes(&checked);
    let added: HashSet<usize> = map.fresh().into_iter().filter_map(|id| index.position(id)).collect();
    let in_set = checked.iter().filter(|c| c.line.is_some()).count();
    outcome.new_wanted = options.new_queries.wanted(in_set, new_share);
    if options.dry_run {
        outcome.estimate = fresh.estimate(&groups, &added, outcome.new_wanted, &mut timings)?;
        outcome.llm_calls += outcome.estimate.map_or(0, |e| e.low.calls + e.low.judge_calls);
        return Ok(outcome);
    }
    let rounds = fresh.generate(&groups, &added, outcome.new_wanted, &checked, &mut timings)?;
    outcome.count_llm(fresh.stages.as_ref().and_then(|s| s.generator.llm_report()));
    let version = manifest.version();
    let written = Written {
        map: &map,
        checked: &checked,
        rounds: &rounds,
        index: &index,
        language,
        previous: &previous,
        version: version + 1,
    };
    written.count(&mut outcome);
    let stage = progress.stage("write", 0);
    (outcome.review_items, outcome.queue_items) = written.stage(&staging, set, &candidates, &groups)?;
    drop(fresh);
    drop(old_chunks);
    discard.later((old, map, checked, rounds, current, candidates, previous));
    outcome.version = Some(version + 1);
    report::stage(&staging, set, &outcome, &config.corpus, &corpus)?;
    timings.add("write", stage.finish(&format!("version {}", version + 1)));
    publish(set, config, staging, manifest, &corpus, &outcome, timings, *progress)?;
    Ok(outcome)
}

/// The new corpus chunked (into `staging`, with the set's `kept` chunking) and, at the same
/// time, the set's version and chunks read (neither touches the other's files; the index folder
/// is updated only after both).
#[expect(clippy::too_many_arguments, reason = "the refresh's state at its start, each used once")]
fn chunk_and_read(
    config: &BuildConfig,
    set: &Path,
    work: &Path,
    staging: &Staging,
    manifest: &SetManifest,
    kept: Option<KeptChunking>,
    progress: Progress,
    timings: &mut Timings,
) -> (Result<ingest::ChunkedCorpus>, Result<SetState>) {
    let collect = old_chunks_hash(manifest).is_some();
    std::thread::scope(|scope| {
        let old = scope.spawn(|| SetState::read(config, set, manifest));
        let chunked = ingest::chunk(config, work, staging, kept, collect, progress, timings);
        (chunked, read_result(old.join(), set))
    })
}

/// What a refresh of a corpus that is the set's did: nothing.
fn nothing_changed(progress: Progress) -> Outcome {
    progress.stage("map", 0).finish("the corpus is the set's");
    Outcome { nothing_changed: true, ..Outcome::default() }
}

/// Whether the corpus is known to be the set's before it is chunked: the set's settings, and
/// the documents of the chunking its index folder keeps ([`same_documents`]).
fn known_unchanged(
    config: &BuildConfig,
    manifest: &SetManifest,
    kept: Option<&KeptChunking>,
    work: &Path,
) -> bool {
    kept.is_some_and(|kept| {
        same_settings(config, manifest) && same_documents(&config.corpus, config.prechunked, kept, work)
    })
}

/// The `keep` and `publish` stages: the current version kept under `versions/vN/`, the files
/// synced, the manifest written (the run's timings up to here in it), all published.
#[expect(clippy::too_many_arguments, reason = "the refresh's state at its end, each used once")]
fn publish(
    set: &Path,
    config: &BuildConfig,
    staging: Staging,
    mut manifest: SetManifest,
    corpus: &output::CorpusSummary,
    outcome: &Outcome,
    mut timings: Timings,
    progress: Progress,
) -> Result<()> {
    let version = manifest.version();
    // The current version's files kept (most are moved there when the new version replaces
    // them), and every file synced, inside the timed stages: the publish then has only the
    // manifest and the ledger left to sync.
    let stage = progress.stage("keep", 0);
    let previous = version::stage_previous(set, &staging, &KEPT_BY_REFRESH)?;
    staging.sync()?;
    timings.add("keep", stage.finish(&format!("version {version} under versions/v{version}/")));
    let run = RunInfo { timings_ms: timings.into_millis(), llm_network: None };
    // Not in the manifest's timings: it is published with them.
    let stage = progress.stage("publish", 0);
    update_manifest(&mut manifest, config, corpus, outcome, &run)?;
    output::write_json(&staging.path(MANIFEST), &manifest)?;
    version::publish_rebuild(set, staging, &previous, MadeBy::Refresh)?;
    stage.finish(&format!("version {}", version + 1));
    Ok(())
}

/// Reads the manifest of the set in `set` (after rolling back a publish cut short) and the
/// chunking its index folder keeps.
fn start(
    config: &BuildConfig,
    set: &Path,
    progress: Progress,
) -> Result<(SetManifest, Option<KeptChunking>)> {
    if output::recover(set)? {
        progress.warn(&format!(
            "a publish into {} was cut short; its previous files were put back",
            set.display()
        ));
    }
    let manifest = read_manifest(set)?;
    let kept = old_chunks_hash(&manifest).and_then(|fingerprint| {
        let stamp = crate::chunk::settings_stamp(config.chunking, config.prechunked);
        KeptChunking::load(&set.join(INDEX_DIR), &stamp, fingerprint)
    });
    Ok((manifest, kept))
}

/// What the thread reading the set in `set` ([`SetState::read`]) returned, its panic an error
/// with the panic's message.
fn read_result<T>(joined: std::thread::Result<Result<T>>, set: &Path) -> Result<T> {
    joined.unwrap_or_else(|panic| {
        let message = crate::threads::panic_message(panic.as_ref());
        let panicked = std::io::Error::other(format!("the thread reading the set panicked: {message}"));
        Err(Error::Input { path: set.to_owned(), source: panicked })
    })
}

/// What a refresh starts from besides the manifest: the set's current version, its
/// `corpus.jsonl` and chunks, the offline generator's corpus model of them that its index
/// folder keeps, and its review queue.
struct SetState {
    current: Version,
    corpus: Vec<u8>,
    pieces: Vec<Piece>,
    model: Option<CorpusModel>,
    queue: Vec<ReviewItem>,
}

impl SetState {
    /// Reads them from the set in `set`, before its index folder is updated (the model of the
    /// old chunks is kept in it).
    fn read(config: &BuildConfig, set: &Path, manifest: &SetManifest) -> Result<Self> {
        let current = Version::read(set)?;
        let (corpus, pieces) = read_pieces(&set.join(CORPUS))?;
        let model = saved_model(config, set, manifest);
        let queue = if set.join(QUEUE).is_file() { read_all(&set.join(QUEUE))? } else { Vec::new() };
        Ok(Self { current, corpus, pieces, model, queue })
    }
}

/// The files of the current version that a build does not keep under `versions/vN/` when it
/// replaces it (a refresh writes new ones): staged there beside them.
const KEPT_BY_REFRESH: [&str; 4] = [CHUNK_MAP, CHANGELOG, REPORT_HTML, POOL_TSV];

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

/// Every query of `current`, in file order.
fn recheck_all(
    current: &Version,
    candidates: &[Checked],
    recheck: &Recheck<'_>,
    stage: &crate::progress::Stage,
) -> Result<Vec<Rechecked>> {
    let by_id: HashMap<&QueryId, &Checked> = candidates.iter().map(|j| (&j.candidate.id, j)).collect();
    let mut rows: HashMap<&QueryId, Vec<Qrel>> = HashMap::new();
    for q in &current.qrels {
        rows.entry(&q.query_id).or_default().push(q.clone());
    }
    current
        .queries
        .iter()
        .map(|line| {
            stage.inc(1);
            recheck.query(line, rows.remove(&line.id).unwrap_or_default(), by_id.get(&line.id).copied())
        })
        .collect()
}

/// Whether the corpus read, whose hash is `hash`, holds the very documents the set was built
/// from (the manifest's corpus hash), chunked with the same settings: then every chunk is
/// unchanged, and the refresh needs no index to know it.
fn same_corpus(config: &BuildConfig, manifest: &SetManifest, hash: &str) -> bool {
    let recorded_hash =
        manifest.rest.get("corpus").and_then(|c| c.get("hash")).and_then(serde_json::Value::as_str);
    recorded_hash == Some(hash) && same_settings(config, manifest)
}

/// Whether `config` chunks and analyses as the set's manifest records.
fn same_settings(config: &BuildConfig, manifest: &SetManifest) -> bool {
    let recorded = |pointer: &str| manifest.rest.get("config").and_then(|c| c.pointer(pointer));
    let same = |pointer: &str, now: std::result::Result<serde_json::Value, serde_json::Error>| {
        now.ok().as_ref() == recorded(pointer)
    };
    same("/chunking", serde_json::to_value(config.chunking))
        && same("/segmenter", serde_json::to_value(config.segmenter))
        && same("/prechunked", serde_json::to_value(config.prechunked))
}

/// Whether the corpus `corpus` (read with `work` left out, as the chunk stage reads it) holds the very
/// documents of the `kept` chunking, in the same order, and no others: then it is the set's
/// corpus (the same documents give the same corpus hash), known without chunking it. The
/// documents are read and digested one at a time, and the read stops at the first that
/// differs, so a changed corpus costs the documents before its first change. A pre-chunked
/// corpus is not checked so (a unit's digest covers its text only).
fn same_documents(corpus: &Path, prechunked: bool, kept: &KeptChunking, work: &Path) -> bool {
    if prechunked {
        return false;
    }
    let (mut at, mut differs) = (0, false);
    let read = crate::corpus::read(corpus, false, Some(work), |item| {
        let same = match &item {
            crate::corpus::Item::Document(doc) => {
                kept.holds_at(at, doc.id.as_str(), &crate::chunk::document_digest(doc))
            }
            crate::corpus::Item::Chunk(_) => false,
        };
        at += 1;
        if same {
            return Ok(());
        }
        differs = true;
        // Stops the read; the error itself is not used.
        Err(Error::Input { path: corpus.to_owned(), source: std::io::Error::other("a document differs") })
    });
    read.is_ok() && !differs && at == kept.len()
}

/// The share of the new corpus's text that is new material ([`ChunkMap::fresh`]: added or rewritten chunks).
fn new_share(new: &[Piece], map: &ChunkMap) -> f64 {
    let fresh = map.fresh();
    let total: usize = new.iter().map(|p| p.text.len()).sum();
    let fresh: usize = new.iter().filter(|p| fresh.contains(&p.id)).map(|p| p.text.len()).sum();
    if total == 0 { 0.0 } else { fresh as f64 / total as f64 }
}

/// The bytes of a `corpus.jsonl`, and its chunk ids, titles and texts.
fn read_pieces(path: &Path) -> Result<(Vec<u8>, Vec<Piece>)> {
    let bytes =
        fs_err::read(path).map_err(|source| Error::CorpusUnreadable { path: path.to_owned(), source })?;
    let mut pieces = Vec::new();
    corpus::read_prechunked_from(path, bytes.as_slice(), |chunk| {
        pieces.push(Piece::from(chunk));
        Ok(())
    })?;
    Ok((bytes, pieces))
}

/// The fingerprint of the set's chunks (the manifest's `corpus.chunks_hash`).
fn old_chunks_hash(manifest: &SetManifest) -> Option<&str> {
    manifest.rest.get("corpus")?.get("chunks_hash")?.as_str()
}

/// With the offline generator: the corpus model the set's index keeps of the set's chunks, if
/// it is there and made with the analyzer the refresh indexes with (new queries fold the
/// corpus's changes into it instead of building it again).
fn saved_model(config: &BuildConfig, set: &Path, manifest: &SetManifest) -> Option<CorpusModel> {
    if !matches!(config.generator, GeneratorConfig::Offline) {
        return None;
    }
    let chunks_hash = old_chunks_hash(manifest)?;
    let stamp = ChunkIndex::stamp(&Analyzer::new(config.segmenter), chunks_hash);
    CorpusModel::load(&set.join(INDEX_DIR), &stamp, config.threads)
}

/// The offline generator's corpus model on its way from the old corpus to the new one.
enum Model<'a> {
    /// The old corpus's, with the old chunks: folded in when the generator is made.
    Old(CorpusModel, &'a [OldChunk<'a>]),
    /// Folded in and kept beside the index ahead of time (beside the recheck), which took `took`.
    Folded { model: std::result::Result<CorpusModel, IndexError>, took: Duration },
}

/// What `work` returns, and the time it took.
fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let started = std::time::Instant::now();
    let done = work();
    (done, started.elapsed())
}

/// The new chunks and their map from the `old` ones: `mapped` beside the index stage (which took
/// the time given) when the chunks were in memory, else read back from the staged
/// `corpus.jsonl` and mapped now.
fn new_and_map(
    chunks: Option<Vec<Chunk>>,
    mapped: Option<(ChunkMap, Duration)>,
    old: &[Piece],
    staging: &Staging,
) -> Result<(Vec<Piece>, ChunkMap, Duration)> {
    if let (Some(chunks), Some((map, took))) = (chunks, mapped) {
        return Ok((chunks.into_iter().map(Piece::from).collect(), map, took));
    }
    let new = read_pieces(&staging.staged_path(CORPUS))?.1;
    let map = ChunkMap::build(old, &new);
    Ok((new, map, Duration::ZERO))
}

/// The candidates the set keeps (`candidates.jsonl`; none when it has no such file).
fn read_candidates(set: &Path) -> Result<Vec<Checked>> {
    let path = set.join(CANDIDATES);
    if path.is_file() { read_all(&path) } else { Ok(Vec::new()) }
}

impl Outcome {
    /// With `--dry-run`: the LLM calls the refresh would make, from every new query kept in round
    /// 1 to half of them dropped in every round (the asks about kept queries' pools included).
    #[must_use]
    pub fn planned_calls(&self) -> (u64, u64) {
        let more = self.estimate.map_or(0, |e| {
            (e.high.calls + e.high.judge_calls).saturating_sub(e.low.calls + e.low.judge_calls)
        });
        (self.llm_calls, self.llm_calls + more)
    }

    /// Counts the queries of `checked` by their change.
    fn count_changes(&mut self, checked: &[Rechecked]) {
        for c in checked {
            *self.queries.entry(c.change).or_default() += 1;
        }
    }

    /// Counts the LLM calls of a generator's `report`.
    fn count_llm(&mut self, report: Option<crate::generate::LlmReport>) {
        if let Some(report) = report {
            self.llm_calls += report.network.requests;
            self.llm_cache_hits += report.network.cache_hits;
        }
    }
}

impl NewQueries {
    /// How many new queries to write for a set of `in_set` queries whose corpus has `new_share`
    /// of its text new.
    fn wanted(self, in_set: usize, new_share: f64) -> usize {
        match self {
            Self::Count(n) => n,
            Self::Auto => (in_set as f64 * new_share).ceil() as usize,
        }
    }
}

impl Options {
    /// Whether a refresh with these options and chunk changes `map` writes new queries (the
    /// set's size may still ask for none).
    fn writes_new(&self, map: &ChunkMap) -> bool {
        !self.dry_run && !map.fresh().is_empty() && self.new_queries != NewQueries::Count(0)
    }
}

/// The work that readies the new queries' `generator`, to run on another thread: the [`fold`]
/// of `model`, timed, or, for an LLM generator, the loading of the token counter; `None` when
/// there is neither.
fn ready_ahead<'a>(
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
    model.fold_in(old, index, unchanged)?.keep_beside(index)
}

/// The new queries: the build's planner (over the new material only: added and rewritten
/// chunks), generator and rounds.
struct Fresh<'a> {
    config: &'a BuildConfig,
    index: &'a ChunkIndex,
    filter: &'a RoundTrip<'a>,
    work: &'a Path,
    language: crate::text::Language,
    progress: Progress,
    /// The generator and judge, made on first use and then shared: one LLM session (one
    /// budget, limiter and cache) for the whole refresh.
    stages: Option<Stages<'a>>,
    /// The offline generator's corpus model.
    model: Option<Model<'a>>,
    /// With the index updated in place: the chunks it kept as they were.
    unchanged: Option<&'a Unchanged>,
}

impl<'a> Fresh<'a> {
    /// The generator and judge stages, made (and timed as `connect`) on first use.
    fn stages(&mut self, timings: &mut Timings) -> Result<&mut Stages<'a>> {
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
    fn judge(&mut self, checked: &mut [Rechecked], dry_run: bool, timings: &mut Timings) -> Result<u64> {
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
    fn estimate(
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

    fn generate(
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

/// What the refresh writes, from what it found.
struct Written<'a> {
    map: &'a ChunkMap,
    checked: &'a [Rechecked],
    rounds: &'a Rounds,
    index: &'a ChunkIndex,
    language: crate::text::Language,
    /// The review queue of the version refreshed.
    previous: &'a [ReviewItem],
    /// The version the refresh makes.
    version: u32,
}

impl Written<'_> {
    fn new_set(&self) -> impl Iterator<Item = &Checked> {
        self.rounds.judged.iter().filter(|j| j.in_set())
    }

    /// Every query of the new version as the new corpus sees it, in file order.
    fn in_set(&self) -> impl Iterator<Item = &Checked> {
        let old = self.checked.iter().filter(|c| c.line.is_some()).filter_map(|c| c.judged.as_ref());
        old.chain(self.new_set())
    }

    fn qrels(&self) -> Vec<Qrel> {
        let mut qrels: Vec<Qrel> = self.checked.iter().flat_map(|c| c.qrels.iter().cloned()).collect();
        qrels.extend(output::qrels(self.new_set()));
        qrels
    }

    /// Counts the new version's queries into `outcome`: the new ones, the queries in the set (by
    /// type), and the share with a human label.
    fn count(&self, outcome: &mut Outcome) {
        let new = self.new_set().count();
        if new > 0 {
            outcome.queries.insert(QueryChange::New, new);
        }
        let kept = self.checked.iter().filter(|c| c.line.is_some());
        let types = kept.map(|c| c.query_type).chain(self.new_set().map(Checked::query_type));
        outcome.by_type = types.fold(BTreeMap::new(), |mut by_type, t| {
            *by_type.entry(t).or_default() += 1;
            by_type
        });
        outcome.in_set = outcome.by_type.values().sum();
        outcome.human_share = self.human_share();
    }

    fn human_share(&self) -> f64 {
        let human: HashSet<&QueryId> = self
            .checked
            .iter()
            .flat_map(|c| &c.qrels)
            .filter(|q| q.provenance == Provenance::Human)
            .map(|q| &q.query_id)
            .collect();
        let total = self.checked.iter().filter(|c| c.line.is_some()).count() + self.new_set().count();
        if total == 0 { 0.0 } else { human.len() as f64 / total as f64 }
    }

    /// The review queue: what changed first (`may_be_answerable`, then retargeted, relabelled,
    /// pool and new queries, by type within each), each with its [`RefreshNote`]; then the
    /// previous queue's items still in the set ([`Written::carried`]). Returns it and the size of
    /// its changed part.
    fn queue(&self) -> Result<(Vec<ReviewItem>, usize)> {
        let note = |change, reason: &str, old_sources: &[ChunkId]| RefreshNote {
            version: self.version,
            change,
            reason: reason.to_owned(),
            old_sources: old_sources.to_vec(),
        };
        let mut changed: Vec<(QueryChange, QueryType, &Checked, RefreshNote)> = self
            .checked
            .iter()
            .filter(|c| c.change.queued())
            .filter_map(|c| {
                let j = c.judged.as_ref()?;
                Some((c.change, c.query_type, j, note(c.change, &c.reason, &c.old_sources)))
            })
            .collect();
        let new = QueryChange::New;
        changed.extend(self.new_set().map(|j| (new, j.query_type(), j, note(new, report::NEW_REASON, &[]))));
        changed.sort_by_key(|(change, t, _, _)| (*change, *t));
        let (records, notes): (Vec<&Checked>, Vec<RefreshNote>) =
            changed.into_iter().map(|(_, _, j, note)| (j, note)).unzip();
        let mut queue = crate::sample::review_items(&records, self.index)?;
        for (item, note) in queue.iter_mut().zip(notes) {
            item.refresh = Some(note);
        }
        let queued: HashSet<QueryId> = queue.iter().map(|i| i.query_id.clone()).collect();
        queue.extend(self.carried(&queued)?);
        Ok((queue, queued.len()))
    }

    /// The previous queue's items whose queries are still in the set and not `queued` again, in
    /// their order (a retired or rejected query's item goes): an item stays as it was when the
    /// query was kept and every chunk it shows is unchanged; otherwise it is made again from
    /// the query as the new corpus sees it (its rows and pool moved), keeping the machine status,
    /// reason and refresh note it was queued with.
    fn carried(&self, queued: &HashSet<QueryId>) -> Result<Vec<ReviewItem>> {
        let in_set: HashMap<&QueryId, &Rechecked> =
            self.checked.iter().filter(|c| c.line.is_some()).map(|c| (&c.id, c)).collect();
        let unchanged = |id: &ChunkId| self.map.get(id).is_none_or(|m| m.change == ChunkChange::Unchanged);
        let mut carried = Vec::new();
        for item in self.previous.iter().filter(|i| !queued.contains(&i.query_id)) {
            let Some(c) = in_set.get(&item.query_id) else { continue };
            let mut shown =
                item.sources.iter().map(|s| &s.chunk_id).chain(item.pool.iter().map(|p| &p.pooled.chunk_id));
            if c.change == QueryChange::Kept && shown.all(unchanged) {
                carried.push(item.clone());
                continue;
            }
            let Some(judged) = &c.judged else { continue };
            if let Some(mut made) = crate::sample::review_items(&[judged], self.index)?.pop() {
                (made.status, made.reason) = (item.status, item.reason);
                made.refresh.clone_from(&item.refresh);
                carried.push(made);
            }
        }
        Ok(carried)
    }

    /// Stages every file of the new version but the manifest; returns the size of the queue's
    /// changed part and of the whole queue.
    fn stage(
        &self,
        staging: &Staging,
        set: &Path,
        candidates: &[Checked],
        groups: &crate::dedup::ChunkGroups,
    ) -> Result<(usize, usize)> {
        let new_lines: Vec<String> = self
            .new_set()
            .map(|j| serde_json::to_string(&output::query_line(j, self.language)))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::Output { path: staging.path(QUERIES), source: e.into() })?;
        let lines =
            self.checked.iter().filter_map(|c| c.line.as_deref()).chain(new_lines.iter().map(String::as_str));
        output::write_text(&staging.path(QUERIES), &lines.flat_map(|l| [l, "\n"]).collect::<String>())?;
        let qrels = self.qrels();
        output::write_qrels(|name| staging.path(name), &qrels)?;
        output::write_text(&staging.path(NO_ANSWER), &self.no_answer(&qrels))?;
        let (queue, changed) = self.queue()?;
        output::write_jsonl(&staging.path(QUEUE), &queue)?;
        let pools: Vec<&Checked> = self.in_set().collect();
        let pooled_by_runs = pools.iter().any(|j| j.verdict.pool.iter().any(|p| !p.pooled_by.is_empty()));
        // Rewritten whenever the set has one, so that it never lists the old corpus's pools.
        if pooled_by_runs || set.join(POOL_TSV).is_file() {
            output::write_pool(&staging.path(POOL_TSV), &pools)?;
        }
        let pooled = read_pooled(&set.join(POOLED_TSV))?;
        if !pooled.is_empty() {
            let ids: HashSet<&QueryId> = pools.iter().map(|j| &j.candidate.id).collect();
            output::write_text(
                &staging.path(POOLED_TSV),
                &pooled_text(&self.map.pooled(pooled, |q| ids.contains(q))),
            )?;
        }
        output::write_jsonl(&staging.path(CANDIDATES), self.candidates(candidates))?;
        let mut rejects: Vec<serde_json::Value> =
            if set.join(REJECTS).is_file() { read_all(&set.join(REJECTS))? } else { Vec::new() };
        rejects.extend(self.rounds.rejects.iter().filter_map(|r| serde_json::to_value(r).ok()));
        output::write_jsonl(&staging.path(REJECTS), &rejects)?;
        let chunk_groups =
            groups.groups().iter().map(|g| g.iter().map(|&c| self.index.chunk_id(c)).collect::<Vec<_>>());
        output::write_jsonl(&staging.path(CHUNK_GROUPS), chunk_groups)?;
        output::write_text(&staging.path(CHUNK_MAP), &self.map.tsv())?;
        output::write_jsonl(
            &staging.path(CHANGELOG),
            report::changelog(self.map, self.checked, self.new_set()),
        )?;
        Ok((changed, queue.len()))
    }

    fn no_answer(&self, qrels: &[Qrel]) -> String {
        let answered: HashSet<&QueryId> =
            qrels.iter().filter(|q| q.grade >= 1).map(|q| &q.query_id).collect();
        let ids = self
            .checked
            .iter()
            .filter(|c| c.line.is_some() && c.query_type == QueryType::NoAnswer)
            .map(|c| &c.id)
            .chain(self.new_set().filter(|j| j.query_type() == QueryType::NoAnswer).map(|j| &j.candidate.id));
        ids.filter(|id| !answered.contains(id)).flat_map(|id| [id.as_str(), "\n"]).collect()
    }

    /// The build's records with the changed queries' new ones, then the new candidates.
    fn candidates<'c>(&'c self, old: &'c [Checked]) -> impl Iterator<Item = &'c Checked> {
        let changed: HashMap<&QueryId, &Checked> = self
            .checked
            .iter()
            .filter(|c| {
                matches!(
                    c.change,
                    QueryChange::Relabelled | QueryChange::Retargeted | QueryChange::MayBeAnswerable
                )
            })
            .filter_map(|c| c.judged.as_ref().map(|j| (&j.candidate.id, j)))
            .collect();
        old.iter()
            .map(move |j| changed.get(&j.candidate.id).copied().unwrap_or(j))
            .chain(self.rounds.judged.iter())
    }
}

/// The manifest of the new version: the new corpus, the settings the refresh ran with, what it
/// did (the review log is added when the version is staged).
fn update_manifest(
    manifest: &mut SetManifest,
    config: &BuildConfig,
    corpus: &output::CorpusSummary,
    outcome: &Outcome,
    run: &RunInfo,
) -> Result<()> {
    // Through the text, as a build writes it: `to_value` would widen an `f32` (0.3 becomes
    // 0.30000001192092896).
    let value = |text: std::result::Result<String, serde_json::Error>| {
        text.and_then(|text| serde_json::from_str(&text))
            .map_err(|e| Error::Output { path: MANIFEST.into(), source: e.into() })
    };
    manifest.rest.insert("corpus".to_owned(), value(serde_json::to_string(corpus))?);
    manifest.rest.insert("config".to_owned(), value(serde_json::to_string(config))?);
    manifest.rest.insert("refresh".to_owned(), value(serde_json::to_string(outcome))?);
    manifest.rest.insert("run".to_owned(), value(serde_json::to_string(run))?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::{KeptWriter, document_digest};

    /// Keeps in `index` a chunking of the documents of `corpus` (no chunks: only their digests
    /// and order count here), for the chunk list "print".
    fn keep_chunking(corpus: &Path, index: &Path, stamp: &str) {
        let mut writer = KeptWriter::create(index, stamp).unwrap();
        let item = crate::chunk::KeptItem {
            language: crate::text::Language::En,
            spans: Vec::new(),
            signatures: Vec::new(),
            lines: crate::chunk::Lines::default(),
        };
        corpus::read(corpus, false, None, |read| {
            let corpus::Item::Document(doc) = read else { panic!("a document") };
            writer.item(doc.id.as_str(), &document_digest(&doc), &item).unwrap();
            Ok(())
        })
        .unwrap();
        writer.finish("print").unwrap().place(index).unwrap();
    }

    #[test]
    fn the_same_documents_in_the_same_order_and_no_others_are_the_sets_corpus() {
        let dir = tempfile::tempdir().unwrap();
        let (corpus, index, work) =
            (dir.path().join("corpus"), dir.path().join("index"), dir.path().join("set"));
        for folder in [&corpus, &index, &work] {
            fs_err::create_dir_all(folder).unwrap();
        }
        let write = |name: &str, text: &str| fs_err::write(corpus.join(name), text).unwrap();
        write("a.md", "# A\n\nAlpha beta gamma.");
        write("b.md", "# B\n\nDelta epsilon zeta.");
        let stamp = "stamp";
        keep_chunking(&corpus, &index, stamp);
        let same = || {
            let kept = KeptChunking::load(&index, stamp, "print").unwrap();
            same_documents(&corpus, false, &kept, &work)
        };
        assert!(same(), "the corpus the chunking was made of");
        let kept = KeptChunking::load(&index, stamp, "print").unwrap();
        assert!(!same_documents(&corpus, true, &kept, &work), "pre-chunked is not checked so");
        write("b.md", "# B\n\nDelta epsilon eta.");
        assert!(!same(), "the last document edited");
        write("b.md", "# B\n\nDelta epsilon zeta.");
        write("c.md", "# C\n\nTheta iota.");
        assert!(!same(), "a document added at the end");
        fs_err::remove_file(corpus.join("c.md")).unwrap();
        fs_err::remove_file(corpus.join("b.md")).unwrap();
        assert!(!same(), "the last document deleted");
        fs_err::rename(corpus.join("a.md"), corpus.join("b.md")).unwrap();
        write("a.md", "# B\n\nDelta epsilon zeta.");
        assert!(!same(), "the same texts under each other's names");
        fs_err::remove_dir_all(&corpus).unwrap();
        assert!(!same(), "no corpus");
    }

    #[test]
    fn a_panic_of_the_thread_reading_the_set_is_an_error_with_its_message() {
        let joined = std::thread::scope(|scope| {
            scope.spawn(|| -> Result<()> { panic!("queries.jsonl line 3 is bad") }).join()
        });
        let failed = read_result(joined, Path::new("set")).map_err(|e| {
            let cause = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default();
            format!("{e}: {cause}")
        });
        assert_eq!(
            failed,
            Err("cannot read set: the thread reading the set panicked: queries.jsonl line 3 is bad"
                .to_owned())
        );
        assert_eq!(read_result(Ok(Ok(7)), Path::new("set")).ok(), Some(7));
    }
}
