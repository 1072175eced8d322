//! `qrelgen refresh`: the next version of a set from a changed corpus. It keeps every label that
//! still holds and sends only what changed to the LLM and to reviewers.
//!
//! Stages: re-chunk the new corpus with the set's settings (the build's own stage) → map old
//! chunks to new ones ([`map`]) → re-check every query ([`recheck`]) → new queries for the new
//! chunks (the build's planner, generator and rounds, so the same controls) → review queue of what
//! changed → files, staged and published as version N + 1 (the current one kept under
//! `versions/vN/`), with `refresh/chunk_map.tsv`, `refresh/changelog.jsonl` and a section in the
//! report.

pub mod map;
pub mod recheck;
mod report;

use crate::config::{BuildConfig, GeneratorConfig};
use crate::corpus;
use crate::error::{Error, Result};
use crate::filter::{Checks, RoundTrip};
use crate::generate::{Estimate, Planner};
use crate::id::{ChunkId, QueryId};
use crate::index::ChunkIndex;
use crate::output::layout::{CANDIDATES, CHUNK_GROUPS, CORPUS, MANIFEST, NO_ANSWER, QUERIES, QUEUE, REJECTS};
use crate::output::{self, Staging};
use crate::pipeline;
use crate::progress::Progress;
use crate::progress::Timings;
use crate::record::{Judged, Provenance, Qrel, QueryType};
use crate::review::set::{SetManifest, Version, read_all, read_manifest};
use crate::review::version::{self, MadeBy};
use crate::rounds::Rounds;
use crate::runs::PoolRuns;
use map::{ChunkChange, ChunkMap, Piece};
use recheck::{Checked, QueryChange, Recheck};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// The map of old chunks to new ones.
pub const CHUNK_MAP: &str = "refresh/chunk_map.tsv";
/// One line per chunk change and per query.
pub const CHANGELOG: &str = "refresh/changelog.jsonl";

/// How many new queries to write for the new chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewQueries {
    /// The set's size times the share of the new corpus's text that is new, rounded up (so a new
    /// document gets a query).
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
}

/// What a refresh did (or, with `--dry-run`, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    /// The new corpus has the old chunks and no others: nothing was written.
    pub nothing_changed: bool,
    /// Old chunks per change, and the added ones.
    pub chunks: BTreeMap<ChunkChange, usize>,
    /// Queries per change (new ones included).
    pub queries: BTreeMap<QueryChange, usize>,
    /// New queries asked for.
    pub new_wanted: usize,
    /// LLM calls sent (with `--dry-run`: planned) and answered from the cache.
    pub llm_calls: u64,
    /// LLM calls answered from the cache.
    pub llm_cache_hits: u64,
    /// With `--dry-run`: what the new queries would cost.
    #[serde(skip)]
    pub estimate: Option<Estimate>,
    /// Queries in the new version.
    pub in_set: usize,
    /// Share of the new version's queries with a human label.
    pub human_share: f64,
    /// Queries in the review queue.
    pub review_items: usize,
    /// The version written (`None` for a dry run or nothing changed).
    pub version: Option<u32>,
}

/// `edited 3, deleted 1, added 2`: the chunk changes of `outcome`.
#[must_use]
pub fn report_chunks(outcome: &Outcome) -> String {
    report::chunk_line(&outcome.chunks)
}

/// `kept 90, relabelled 3, …`: the query changes of `outcome`.
#[must_use]
pub fn report_queries(outcome: &Outcome) -> String {
    report::query_line(&outcome.queries)
}

/// The ids of the queries the last refresh of `set` changed and queued for review.
///
/// # Errors
/// [`Error::Input`] when the set has no `refresh/changelog.jsonl` (no refresh ran);
/// [`Error::Malformed`] for a bad line.
pub fn changed_queries(set: &Path) -> Result<HashSet<String>> {
    #[derive(serde::Deserialize)]
    struct Entry {
        query_id: Option<String>,
        change: String,
    }
    let entries: Vec<Entry> = read_all(&set.join(CHANGELOG))?;
    let unqueued = [QueryChange::Kept, QueryChange::Remapped, QueryChange::Retired].map(QueryChange::label);
    Ok(entries
        .into_iter()
        .filter(|e| !unqueued.contains(&e.change.as_str()))
        .filter_map(|e| e.query_id)
        .collect())
}

/// Refreshes the set in `set` from `config.corpus` (`config` is the set's recorded settings, with
/// any overrides).
///
/// # Errors
/// An unreadable set (manifest, queries, qrels, corpus) or corpus, index or write failures, an
/// unusable endpoint.
pub fn refresh(config: &BuildConfig, set: &Path, options: Options, progress: &Progress) -> Result<Outcome> {
    if output::recover(set)? {
        progress.warn(&format!(
            "a publish into {} was cut short; its previous files were put back",
            set.display()
        ));
    }
    let manifest = read_manifest(set)?;
    let current = Version::read(set)?;
    let old = read_pieces(&set.join(CORPUS))?;
    let scratch =
        tempfile::tempdir().map_err(|source| Error::Output { path: std::env::temp_dir(), source })?;
    // A dry run chunks and indexes in a scratch folder: nothing in the set is touched.
    let work = if options.dry_run { scratch.path() } else { set };
    let mut timings = Timings::default();
    let staging = Staging::create(work)?;
    let (index, groups, corpus, _skipped) =
        pipeline::chunk_and_index(config, work, &staging, *progress, &mut timings)?;
    let new = read_pieces(&staging.path(CORPUS))?;
    let stage = progress.stage("map", old.len() as u64);
    let map = ChunkMap::build(&old, &new);
    let mut outcome = Outcome { chunks: map.counts(), ..Outcome::default() };
    stage.finish(&report::chunk_line(&outcome.chunks));
    if map.is_identity() {
        outcome.nothing_changed = true;
        return Ok(outcome);
    }
    let language = config.language.unwrap_or(corpus.language);
    let checks =
        Checks { language: Some(language), hop_terms: matches!(config.generator, GeneratorConfig::Offline) };
    let runs = PoolRuns::read(&config.pool_runs, &index)?;
    let filter = RoundTrip::new(&index, &groups, config.filter, checks).with_runs(&runs);
    let candidates_path = set.join(CANDIDATES);
    let candidates: Vec<Judged> =
        if candidates_path.is_file() { read_all(&candidates_path)? } else { Vec::new() };
    let stage = progress.stage("recheck", current.queries.len() as u64);
    let checked = recheck_all(&current, &candidates, &Recheck::new(&map, &index, &filter), &stage)?;
    stage.finish(&format!("{} queries re-checked", checked.len()));
    for c in &checked {
        *outcome.queries.entry(c.change).or_default() += 1;
    }

    let added: HashSet<usize> = map.added.iter().filter_map(|id| index.position(id)).collect();
    let in_set = checked.iter().filter(|c| c.line.is_some()).count();
    outcome.new_wanted = match options.new_queries {
        NewQueries::Count(n) => n,
        NewQueries::Auto => (in_set as f64 * new_share(&new, &map)).ceil() as usize,
    };
    let mut fresh = Fresh { config, index: &index, filter: &filter, work, language, progress: *progress };
    if options.dry_run {
        outcome.estimate = fresh.estimate(&groups, &added, outcome.new_wanted)?;
        outcome.llm_calls = outcome.estimate.map_or(0, |e| e.calls + e.judge_calls);
        return Ok(outcome);
    }
    let rounds = fresh.generate(&groups, &added, outcome.new_wanted, &checked, &mut timings)?;
    let written = Written { map: &map, checked: &checked, rounds: &rounds.0, index: &index, language };
    if let Some(llm) = &rounds.1 {
        (outcome.llm_calls, outcome.llm_cache_hits) = (llm.network.requests, llm.network.cache_hits);
    }
    let new_count = rounds.0.judged.iter().filter(|j| j.in_set()).count();
    if new_count > 0 {
        outcome.queries.insert(QueryChange::New, new_count);
    }
    outcome.in_set = in_set + new_count;
    outcome.human_share = written.human_share();
    let mut staging = staging;
    outcome.review_items = written.stage(&staging, set, &candidates, &groups)?;
    let mut manifest = manifest;
    outcome.version = Some(current_version(&manifest) + 1);
    update_manifest(&mut manifest, config, &corpus, &outcome)?;
    report::stage(&staging, set, &outcome, &config.corpus)?;
    output::write_json(&staging.path(MANIFEST), &manifest)?;
    version::stage_rebuild(set, &mut staging, MadeBy::Refresh)?;
    staging.publish(&[])?;
    Ok(outcome)
}

/// Every query of `current`, in file order.
fn recheck_all(
    current: &Version,
    candidates: &[Judged],
    recheck: &Recheck<'_>,
    stage: &crate::progress::Stage,
) -> Result<Vec<Checked>> {
    let by_id: HashMap<&QueryId, &Judged> = candidates.iter().map(|j| (&j.candidate.id, j)).collect();
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

/// The share of the new corpus's text in added chunks.
fn new_share(new: &[Piece], map: &ChunkMap) -> f64 {
    let added: HashSet<&ChunkId> = map.added.iter().collect();
    let total: usize = new.iter().map(|p| p.text.len()).sum();
    let fresh: usize = new.iter().filter(|p| added.contains(&p.id)).map(|p| p.text.len()).sum();
    if total == 0 { 0.0 } else { fresh as f64 / total as f64 }
}

/// Chunk ids and texts of a `corpus.jsonl`.
fn read_pieces(path: &Path) -> Result<Vec<Piece>> {
    let mut pieces = Vec::new();
    corpus::read_prechunked(path, |chunk| {
        pieces.push(Piece { id: chunk.id, text: chunk.text });
        Ok(())
    })?;
    Ok(pieces)
}

fn current_version(manifest: &SetManifest) -> u32 {
    manifest.review.as_ref().map_or(1, |log| log.version)
}

/// The new queries: the build's planner (over the added chunks only), generator and rounds.
struct Fresh<'a> {
    config: &'a BuildConfig,
    index: &'a ChunkIndex,
    filter: &'a RoundTrip<'a>,
    work: &'a Path,
    language: crate::text::Language,
    progress: Progress,
}

type Generated = (Rounds, Option<crate::generate::LlmReport>);

impl Fresh<'_> {
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
        let docs: HashSet<_> = added.iter().map(|&p| &self.index.meta(p).doc_id).collect();
        let cap = self.config.per_doc_cap.unwrap_or_else(|| crate::generate::auto_cap(n, docs.len()));
        Planner::new(self.index, groups, Some(cap.max(group)), n, group, self.config.seed).only(added)
    }

    fn estimate(
        &mut self,
        groups: &crate::dedup::ChunkGroups,
        added: &HashSet<usize>,
        n: usize,
    ) -> Result<Option<Estimate>> {
        if n == 0 || added.is_empty() {
            return Ok(None);
        }
        let generator =
            pipeline::make_generator(self.config, self.index, self.work, self.language, self.progress)?;
        let group = generator.queries_per_call();
        let requests = self.planner(groups, added, n, group).plan(&self.config.mix.quotas(n), 1, group)?;
        generator.estimate(&requests).map(Some)
    }

    fn generate(
        &mut self,
        groups: &crate::dedup::ChunkGroups,
        added: &HashSet<usize>,
        n: usize,
        checked: &[Checked],
        timings: &mut Timings,
    ) -> Result<Generated> {
        let quotas = self.config.mix.quotas(n);
        let mut rounds = Rounds::new(&quotas, self.config.dedup_threshold, self.config.judge);
        if n == 0 || added.is_empty() {
            return Ok((rounds, None));
        }
        // The queries kept are in the set already: a new one must not repeat them.
        for c in checked.iter().filter(|c| c.line.is_some()) {
            if let Some(j) = &c.judged {
                rounds.seen.insert(j.candidate.id.clone());
                rounds.dedup.check_and_keep(&j.candidate.id, &j.candidate.text);
            }
        }
        let mut generator =
            pipeline::make_generator(self.config, self.index, self.work, self.language, self.progress)?;
        let group = generator.queries_per_call();
        let mut planner = self.planner(groups, added, n, group);
        for round in 1..=self.config.max_rounds {
            let wanted = rounds.to_plan(crate::generate::Margin::of_round(round, self.config.max_rounds));
            let requests =
                if wanted.is_empty() { Vec::new() } else { planner.plan(&wanted, round, group)? };
            if requests.is_empty() {
                break;
            }
            rounds.run(
                round,
                generator.as_mut(),
                self.filter,
                self.index,
                &requests,
                self.progress,
                timings,
            )?;
        }
        let llm = generator.llm_report();
        Ok((rounds, llm))
    }
}

/// What the refresh writes, from what it found.
struct Written<'a> {
    map: &'a ChunkMap,
    checked: &'a [Checked],
    rounds: &'a Rounds,
    index: &'a ChunkIndex,
    language: crate::text::Language,
}

impl Written<'_> {
    fn new_set(&self) -> impl Iterator<Item = &Judged> {
        self.rounds.judged.iter().filter(|j| j.in_set())
    }

    fn qrels(&self) -> Vec<Qrel> {
        let mut qrels: Vec<Qrel> = self.checked.iter().flat_map(|c| c.qrels.iter().cloned()).collect();
        qrels.extend(output::qrels(self.new_set()));
        qrels
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

    /// The review queue: what changed, `may_be_answerable` first, then retargeted, relabelled,
    /// pool and new queries, by type within each.
    fn queue(&self) -> Vec<&Judged> {
        let mut queued: Vec<(QueryChange, QueryType, &Judged)> = self
            .checked
            .iter()
            .filter(|c| c.change.queued())
            .filter_map(|c| c.judged.as_ref().map(|j| (c.change, c.query_type, j)))
            .collect();
        queued.extend(self.new_set().map(|j| (QueryChange::New, j.query_type(), j)));
        queued.sort_by_key(|(change, t, _)| (*change, *t));
        queued.into_iter().map(|(_, _, j)| j).collect()
    }

    /// Stages every file of the new version but the manifest; returns the queue's size.
    fn stage(
        &self,
        staging: &Staging,
        set: &Path,
        candidates: &[Judged],
        groups: &crate::dedup::ChunkGroups,
    ) -> Result<usize> {
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
        let queue = crate::sample::review_items(&self.queue(), self.index)?;
        output::write_jsonl(&staging.path(QUEUE), &queue)?;
        output::write_jsonl(&staging.path(CANDIDATES), self.candidates(candidates))?;
        let mut rejects: Vec<serde_json::Value> =
            if set.join(REJECTS).is_file() { read_all(&set.join(REJECTS))? } else { Vec::new() };
        rejects.extend(self.rounds.rejects.iter().filter_map(|r| serde_json::to_value(r).ok()));
        output::write_jsonl(&staging.path(REJECTS), &rejects)?;
        let chunk_groups: Vec<Vec<&ChunkId>> =
            groups.groups().iter().map(|g| g.iter().map(|&c| &self.index.meta(c).id).collect()).collect();
        output::write_jsonl(&staging.path(CHUNK_GROUPS), &chunk_groups)?;
        output::write_text(&staging.path(CHUNK_MAP), &self.map.tsv())?;
        output::write_jsonl(
            &staging.path(CHANGELOG),
            report::changelog(self.map, self.checked, self.new_set()),
        )?;
        Ok(queue.len())
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
    fn candidates<'c>(&'c self, old: &'c [Judged]) -> impl Iterator<Item = &'c Judged> {
        let changed: HashMap<&QueryId, &Judged> = self
            .checked
            .iter()
            .filter(|c| matches!(c.change, QueryChange::Relabelled | QueryChange::Retargeted))
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
) -> Result<()> {
    let value = |v: std::result::Result<serde_json::Value, serde_json::Error>| {
        v.map_err(|e| Error::Output { path: MANIFEST.into(), source: e.into() })
    };
    manifest.rest.insert("corpus".to_owned(), value(serde_json::to_value(corpus))?);
    manifest.rest.insert("config".to_owned(), value(serde_json::to_value(config))?);
    manifest.rest.insert("refresh".to_owned(), value(serde_json::to_value(outcome))?);
    Ok(())
}
