//! `qrelgen refresh`: the next version of a set from a changed corpus. It keeps every label that
//! still holds and sends only what changed to the LLM and to reviewers.
//!
//! Stages: re-chunk the new corpus with the set's settings (the build's own stage) → map old
//! chunks to new ones ([`map`]) → re-check every query ([`recheck`]) → new queries for the new
//! chunks (the build's planner, generator and rounds, so the same controls) → review queue (what
//! changed, then the previous queue's items still in the set) → files, staged and published as version N + 1 (the current one kept under
//! `versions/vN/`), with `refresh/chunk_map.tsv`, `refresh/changelog.jsonl` and a section in the
//! report.

mod fresh;
pub mod map;
mod new_version;
pub mod recheck;
mod report;

use crate::build::DryRun;
use crate::build::ingest;
use crate::chunk::SavedChunking;
use crate::config::{BuildConfig, GeneratorConfig};
use crate::corpus;
use crate::error::{Error, Result};
use crate::filter::{Checks, RoundTrip};
use crate::id::QueryId;
use crate::index::{Analyzer, ChunkIndex, Earlier, OldChunk};
use crate::output::Invocation;
use crate::output::layout::{CANDIDATES, CORPUS, INDEX_DIR, MANIFEST, POOL_TSV, QUEUE, REPORT_HTML};
use crate::output::{self, Staging};
use crate::progress::Progress;
use crate::progress::Timings;
use crate::record::{Checked, Chunk, Qrel, QueryType, ReviewItem};
use crate::review::set::{ReviewSet, SetManifest, Version, read_all, read_manifest};
use crate::review::version::{self, MadeBy};
use crate::runs::PoolRuns;
use crate::topics::CorpusModel;
use fresh::{Fresh, Model, ready_ahead, timed};
use map::{ChunkChange, ChunkMap, Piece};
use new_version::NewVersion;
use recheck::{QueryChange, Recheck, Rechecked};
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
pub struct RefreshSummary {
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
    /// [`RefreshSummary::planned_calls`]) and answered from the cache.
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

/// `edited 3, deleted 1, added 2`: the chunk changes of `summary`.
#[must_use]
pub fn report_chunks(summary: &RefreshSummary) -> String {
    report::counts_line(&summary.chunks)
}

/// `kept 90, relabelled 3, …`: the query changes of `summary`.
#[must_use]
pub fn report_queries(summary: &RefreshSummary) -> String {
    report::counts_line(&summary.queries)
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
pub fn refresh(
    config: &BuildConfig,
    set: &Path,
    options: Options,
    progress: &Progress,
) -> Result<RefreshSummary> {
    let stage = progress.stage("read", 0);
    let (manifest, saved) = start(config, set, *progress)?;
    let scratch =
        tempfile::tempdir().map_err(|source| Error::Output { path: std::env::temp_dir(), source })?;
    // A dry run chunks and indexes in a scratch folder: nothing in the set is touched.
    let work = if options.dry_run { scratch.path() } else { set };
    if known_unchanged(config, &manifest, saved.as_ref(), work) {
        stage.finish(&format!("version {} of the set", manifest.version()));
        return Ok(nothing_changed(*progress));
    }
    // Made on the first write (`Staging::path`): an unchanged corpus stages nothing.
    let staging = Staging::create(work)?;
    let mut timings = Timings::default();
    timings.add("read", stage.finish(&format!("version {} of the set", manifest.version())));
    let (chunked, old) =
        chunk_and_read(config, set, work, &staging, &manifest, saved, *progress, &mut timings);
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
    let (ingest::IndexedCorpus { index, groups, corpus, unchanged, chunks, .. }, mapped) =
        chunked.index(config, work, &staging, earlier, *progress, &mut timings, map_beside)?;
    discard.later(old_corpus);
    let stage = progress.stage("map", old.len() as u64);
    let (new, map, took) = new_and_map(chunks, mapped, &old, &staging)?;
    let mut summary = RefreshSummary { chunks: map.counts(), ..RefreshSummary::default() };
    // The stage's time includes the mapping done beside the index stage.
    timings.add("map", stage.finish(&report::counts_line(&summary.chunks)) + took);
    summary.corpus_check = check.carrying_over(&summary.chunks).refuse_scant(config, options)?;
    let new_share = new_share(&new, &map);
    discard.later(new);
    if map.is_identity() {
        summary.nothing_changed = true;
        return Ok(summary);
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
    summary.llm_calls += fresh.judge(&mut checked, options.dry_run, &mut timings)?;
    summary.count_changes(&checked);
    let added: HashSet<usize> = map.fresh().into_iter().filter_map(|id| index.position(id)).collect();
    let in_set = checked.iter().filter(|c| c.line.is_some()).count();
    summary.new_wanted = options.new_queries.wanted(in_set, new_share);
    if options.dry_run {
        summary.estimate = fresh.estimate(&groups, &added, summary.new_wanted, &mut timings)?;
        summary.llm_calls += summary.estimate.map_or(0, |e| e.low.calls + e.low.judge_calls);
        return Ok(summary);
    }
    let rounds = fresh.generate(&groups, &added, summary.new_wanted, &checked, &mut timings)?;
    summary.count_llm(fresh.stages.as_ref().and_then(|s| s.generator.llm_report()));
    let version = manifest.version();
    let written = NewVersion {
        map: &map,
        checked: &checked,
        rounds: &rounds,
        index: &index,
        language,
        previous: &previous,
        version: version + 1,
    };
    written.count(&mut summary);
    let stage = progress.stage("write", 0);
    (summary.review_items, summary.queue_items) = written.stage(&staging, set, &candidates, &groups)?;
    drop(fresh);
    drop(old_chunks);
    discard.later((old, map, checked, rounds, current, candidates, previous));
    summary.version = Some(version + 1);
    report::stage(&staging, set, &summary, &config.corpus, &corpus)?;
    timings.add("write", stage.finish(&format!("version {}", version + 1)));
    publish(set, config, staging, manifest, &corpus, &summary, timings, *progress)?;
    Ok(summary)
}

/// The new corpus chunked (into `staging`, with the set's `saved` chunking) and, at the same
/// time, the set's version and chunks read (neither touches the other's files; the index folder
/// is updated only after both).
#[expect(clippy::too_many_arguments, reason = "the refresh's state at its start, each used once")]
fn chunk_and_read(
    config: &BuildConfig,
    set: &Path,
    work: &Path,
    staging: &Staging,
    manifest: &SetManifest,
    saved: Option<SavedChunking>,
    progress: Progress,
    timings: &mut Timings,
) -> (Result<ingest::ChunkedCorpus>, Result<SetState>) {
    let collect = old_chunks_hash(manifest).is_some();
    std::thread::scope(|scope| {
        let old = scope.spawn(|| SetState::read(config, set, manifest));
        let chunked = ingest::chunk(config, work, staging, saved, collect, progress, timings);
        (chunked, read_result(old.join(), set))
    })
}

/// What a refresh of a corpus that is the set's did: nothing.
fn nothing_changed(progress: Progress) -> RefreshSummary {
    progress.stage("map", 0).finish("the corpus is the set's");
    RefreshSummary { nothing_changed: true, ..RefreshSummary::default() }
}

/// Whether the corpus is known to be the set's before it is chunked: the set's settings, and
/// the documents of the chunking its index folder keeps ([`same_documents`]).
fn known_unchanged(
    config: &BuildConfig,
    manifest: &SetManifest,
    saved: Option<&SavedChunking>,
    work: &Path,
) -> bool {
    saved.is_some_and(|saved| {
        same_settings(config, manifest) && same_documents(&config.corpus, config.prechunked, saved, work)
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
    summary: &RefreshSummary,
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
    let run = Invocation { timings_ms: timings.into_millis(), llm_network: None };
    // Not in the manifest's timings: it is published with them.
    let stage = progress.stage("publish", 0);
    update_manifest(&mut manifest, config, corpus, summary, &run)?;
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
) -> Result<(SetManifest, Option<SavedChunking>)> {
    if output::recover(set)? {
        progress.warn(&format!(
            "a publish into {} was cut short; its previous files were put back",
            set.display()
        ));
    }
    let manifest = read_manifest(set)?;
    let saved = old_chunks_hash(&manifest).and_then(|fingerprint| {
        let stamp = crate::chunk::settings_stamp(config.chunking, config.prechunked);
        SavedChunking::load(&set.join(INDEX_DIR), &stamp, fingerprint)
    });
    Ok((manifest, saved))
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

/// Every query of `current`, in file order.
fn recheck_all(
    current: &Version,
    candidates: &[Checked],
    recheck: &Recheck<'_>,
    stage: &crate::progress::StageProgress,
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
/// documents of the `saved` chunking, in the same order, and no others: then it is the set's
/// corpus (the same documents give the same corpus hash), known without chunking it. The
/// documents are read and digested one at a time, and the read stops at the first that
/// differs, so a changed corpus costs the documents before its first change. A pre-chunked
/// corpus is not checked so (a unit's digest covers its text only).
fn same_documents(corpus: &Path, prechunked: bool, saved: &SavedChunking, work: &Path) -> bool {
    if prechunked {
        return false;
    }
    let (mut at, mut differs) = (0, false);
    let read = crate::corpus::read(corpus, false, Some(work), |item| {
        let same = match &item {
            crate::corpus::Item::Document(doc) => {
                saved.holds_at(at, doc.id.as_str(), &crate::chunk::document_digest(doc))
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
    read.is_ok() && !differs && at == saved.len()
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

impl RefreshSummary {
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

/// The manifest of the new version: the new corpus, the settings the refresh ran with, what it
/// did (the review log is added when the version is staged).
fn update_manifest(
    manifest: &mut SetManifest,
    config: &BuildConfig,
    corpus: &output::CorpusSummary,
    summary: &RefreshSummary,
    run: &Invocation,
) -> Result<()> {
    // Through the text, as a build writes it: `to_value` would widen an `f32` (0.3 becomes
    // 0.30000001192092896).
    let value = |text: std::result::Result<String, serde_json::Error>| {
        text.and_then(|text| serde_json::from_str(&text))
            .map_err(|e| Error::Output { path: MANIFEST.into(), source: e.into() })
    };
    manifest.rest.insert("corpus".to_owned(), value(serde_json::to_string(corpus))?);
    manifest.rest.insert("config".to_owned(), value(serde_json::to_string(config))?);
    manifest.rest.insert("refresh".to_owned(), value(serde_json::to_string(summary))?);
    manifest.rest.insert("run".to_owned(), value(serde_json::to_string(run))?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::{ChunkingWriter, document_digest};

    /// Keeps in `index` a chunking of the documents of `corpus` (no chunks: only their digests
    /// and order count here), for the chunk list "print".
    fn keep_chunking(corpus: &Path, index: &Path, stamp: &str) {
        let mut writer = ChunkingWriter::create(index, stamp).unwrap();
        let item = crate::chunk::SavedItem {
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
            let saved = SavedChunking::load(&index, stamp, "print").unwrap();
            same_documents(&corpus, false, &saved, &work)
        };
        assert!(same(), "the corpus the chunking was made of");
        let saved = SavedChunking::load(&index, stamp, "print").unwrap();
        assert!(!same_documents(&corpus, true, &saved, &work), "pre-chunked is not checked so");
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
