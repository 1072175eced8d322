//! `qrelgen pool`: judge the pools of the systems being compared, as TREC does. Each run's top
//! `depth` chunks for each answerable query join that query's pool; the pairs nobody has judged
//! yet are graded (by the LLM judge, the one-shot labeller, or not at all), and the result is
//! the next version of the set.
//!
//! Input: a set folder (its current version, `qrels/pooled.tsv` of earlier pools, the index)
//! and TREC runs. Output: the next version: the judgments with the new grades
//! (`qrels/provenance.tsv` with provenance `judge` or `one_shot`, `qrels.trec` with the
//! judged non-relevant pairs as relevance 0), `qrels/pooled.tsv` (every pooled pair, which runs
//! pooled it at which rank, its grade and who gave it), `manifest.json` → `pools` (one record
//! per run and step), and a stratified sample of the new machine-graded pairs in the review
//! queue, their grade hidden.
//!
//! Invariants: queries, their ids and every human judgment stay as they are; a pair already
//! judged (qrels, earlier pools, reviewers) is never graded again; `no_answer` queries (and
//! queries without a relevant chunk) get no pool; a step that adds nothing writes nothing; the
//! version is published as review versions are (`review::version`), all or none.

pub mod one_shot;

use crate::error::{Error, Result};
use crate::id::{ChunkId, QueryId};
use crate::index::ChunkIndex;
use crate::judge::{Ask, Judge, LlmJudge};
use crate::output::layout::{CANDIDATES, MANIFEST, POOLED_TSV, QUEUE};
use crate::progress::Progress;
use crate::record::{Checked, PoolChunk, Pooled, Provenance, Qrel, QueryType, ReviewItem};
use crate::review::set::{ReviewSet, Version, read_all};
use crate::review::version::{Made, MadeBy, write_made};
use crate::runs::{PoolRunConfig, PoolRuns};
use crate::set::pooled::{PooledPair, pooled_text, read_pooled};
use crate::topics::CorpusModel;
use rand::seq::SliceRandom as _;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Top chunks of each run pooled per query by default. Deeper pools cut the bias against
/// systems that find what the others miss (Zobel, SIGIR 1998); on MED with the oracle judge,
/// depth 20 matches or beats 10 at every judge error rate measured (docs/validity.md), for twice
/// the judge calls.
pub const DEFAULT_DEPTH: usize = 20;

/// Who grades the pairs new to the pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolJudge {
    /// The LLM judge of the build (`prompts/<lang>/judge.md`), through the LLM session.
    Llm,
    /// The one-shot labeller ([`one_shot`]): offline.
    OneShot,
    /// Nobody: the pairs are recorded unjudged (for review, or a later `pool --judge`).
    None,
}

impl PoolJudge {
    /// The label in the manifest and `qrels/pooled.tsv`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Llm => "llm",
            Self::OneShot => "one_shot",
            Self::None => "none",
        }
    }

    /// The provenance of the grades it gives.
    fn provenance(self) -> Option<Provenance> {
        match self {
            Self::Llm => Some(Provenance::Judge),
            Self::OneShot => Some(Provenance::OneShot),
            Self::None => None,
        }
    }
}

/// What to pool and how.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The TREC runs.
    pub runs: Vec<PathBuf>,
    /// Top chunks of each run pooled per query.
    pub depth: usize,
    /// Who grades the new pairs.
    pub judge: PoolJudge,
    /// New machine-graded pairs sampled into the review queue per stratum (run, grade).
    pub review_per_stratum: usize,
    /// Seed of the review sample and of the one-shot labeller's chance level.
    pub seed: u64,
}

/// One run pooled into a set: a record of `manifest.json` → `pools`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRecord {
    /// The run's file name.
    pub run: String,
    /// blake3 of the run file's bytes.
    pub blake3: String,
    /// Top chunks pooled per query.
    pub depth: usize,
    /// The version the step made.
    pub version: u32,
    /// Who graded the new pairs.
    pub judge: PoolJudge,
    /// Queries the run has pooled chunks for.
    pub queries: usize,
    /// Pairs (query, chunk) it pooled.
    pub pairs: usize,
    /// Of those, pairs no earlier judgment or pool had.
    pub new_pairs: usize,
    /// Its pairs' grades after the step (`0`…`3`, `unjudged`).
    pub grades: BTreeMap<String, usize>,
    /// Judge calls the step made (for all its runs).
    pub judge_calls: usize,
    /// Prompt tokens of those calls (the LLM judge's, from the server's usage).
    pub judge_tokens: u64,
}

/// What a pool step did.
#[derive(Debug, Clone, Default)]
pub struct PoolSummary {
    /// The version written; `None` when the step added nothing (nothing written).
    pub version: Option<u32>,
    /// One record per run.
    pub records: Vec<PoolRecord>,
    /// Pairs new to the pools.
    pub new_pairs: usize,
    /// Of those, graded in this step.
    pub graded: usize,
    /// Of those, relevant (relevance ≥ 1).
    pub relevant: usize,
    /// New machine-graded pairs sampled into the review queue.
    pub queued: usize,
    /// The one-shot labeller's cut-off, when it drew one.
    pub cutoff: Option<one_shot::Cutoff>,
    /// Judge calls made.
    pub judge_calls: usize,
    /// Their prompt tokens.
    pub judge_tokens: u64,
}

/// Pools `config.runs` into the set in `dir` (its index `index`, see
/// `eval::baseline::open_set_index`): connects the LLM judge for [`PoolJudge::Llm`] with the settings `llm`
/// (the set's recorded ones under the flags; one session: cache, limits, budget, batch), and
/// runs [`pool`].
///
/// # Errors
/// Those of [`pool`]; an unusable endpoint.
pub fn run(
    dir: &Path,
    index: &ChunkIndex,
    config: &PoolConfig,
    llm: Option<&crate::BuildConfig>,
    progress: &Progress,
) -> Result<PoolSummary> {
    let mut judge = match (config.judge, llm) {
        (PoolJudge::Llm, Some(build)) => {
            let manifest = crate::review::set::read_manifest(dir)?;
            let language = manifest
                .rest
                .get("language")
                .and_then(|l| serde_json::from_value(l.clone()).ok())
                .unwrap_or(crate::text::Language::En);
            crate::build::stages::make_stages(build, index, dir, language, *progress, None)?.judge
        }
        _ => None,
    };
    pool(dir, index, config, judge.as_mut(), progress)
}

/// Pools `config.runs` into the set in `dir` (its index `index`) and grades the new pairs with
/// `config.judge` (`llm` must be given for [`PoolJudge::Llm`]).
///
/// # Errors
/// [`Error::Input`]/[`Error::Malformed`] for unreadable set or run files (a run line that is not
/// TREC, an id that is not the corpus's, naming file and line); [`Error::InvalidSetting`] for the LLM
/// judge without an LLM; the judge's fatal errors (endpoint, budget); publishing errors.
pub fn pool(
    dir: &Path,
    index: &ChunkIndex,
    config: &PoolConfig,
    llm: Option<&mut LlmJudge<'_>>,
    progress: &Progress,
) -> Result<PoolSummary> {
    let set = ReviewSet::load(dir)?;
    let runs = PoolRuns::read(&PoolRunConfig { files: config.runs.clone(), depth: config.depth }, index)?;
    let mut pooled = read_pooled(&dir.join(POOLED_TSV))?;
    // Pairs of queries the set no longer holds (a `build --force` since) are not its pools.
    let queries: HashSet<&QueryId> = set.current.queries.iter().map(|q| &q.id).collect();
    pooled.retain(|p| queries.contains(&p.query));
    let plan = Plan::make(&set.current, &runs, index, &mut pooled);
    let mut summary = PoolSummary { new_pairs: plan.new.len(), ..PoolSummary::default() };
    let ungraded: Vec<usize> = plan.ungraded(&pooled);
    let grades = grade(&set.current, index, config, llm, &pooled, &ungraded, &plan, *progress, &mut summary)?;
    let mut rows = Vec::new();
    let mut machine = Vec::new();
    if let Some(provenance) = config.judge.provenance() {
        for (&at, grade) in ungraded.iter().zip(grades) {
            let Some(grade) = grade else { continue };
            let pair = &mut pooled[at];
            pair.grade = Some(grade);
            pair.graded_by = Some(provenance.label().to_owned());
            let row = Qrel { query_id: pair.query.clone(), chunk_id: pair.chunk.clone(), grade, provenance };
            summary.graded += 1;
            summary.relevant += usize::from(crate::output::relevance(&row) >= 1);
            rows.push(row);
            machine.push(at);
        }
    }
    if plan.new.is_empty() && rows.is_empty() && plan.added_sources == 0 {
        return Ok(summary);
    }
    let next = Version { queries: set.current.queries.clone(), qrels: with_rows(&set.current, rows) };
    let version = set.version() + 1;
    let sampled = sample(&pooled, &machine, config);
    let queue = queued(&set, index, &pooled, &sampled)?;
    summary.queued = sampled.len();
    summary.records = records(config, &runs, &pooled, &plan, version, &summary)?;
    let mut manifest = set.manifest.clone();
    let mut all: Vec<serde_json::Value> =
        manifest.rest.get("pools").and_then(serde_json::Value::as_array).cloned().unwrap_or_default();
    for record in &summary.records {
        let value = serde_json::to_value(record)
            .map_err(|e| Error::Output { path: dir.join(MANIFEST), source: std::io::Error::other(e) })?;
        all.push(value);
    }
    manifest.rest.insert("pools".to_owned(), serde_json::Value::Array(all));
    let key = pool_key(config, &runs)?;
    let made = Made { manifest, made_by: MadeBy::Pool, key };
    write_made(&set, &next, made, |staging| {
        crate::output::write_text(&staging.path(POOLED_TSV), &pooled_text(&pooled))?;
        crate::output::write_jsonl(&staging.path(QUEUE), &queue)
    })?;
    summary.version = Some(version);
    Ok(summary)
}

/// Which pairs the runs add and which are still to be graded.
struct Plan {
    /// Indexes (in the pooled pairs) of the pairs new to the pools.
    new: Vec<usize>,
    /// Run sources added to pairs already pooled.
    added_sources: usize,
    /// Pairs each run pooled: (run, indexes).
    by_run: BTreeMap<String, Vec<usize>>,
    /// Every pooled pair's known judgment (the current version's), by (query, chunk).
    judged: HashMap<(QueryId, ChunkId), (u8, Provenance)>,
}

impl Plan {
    /// Adds the runs' top chunks of each answerable query of `version` to `pooled`.
    fn make(version: &Version, runs: &PoolRuns, index: &ChunkIndex, pooled: &mut Vec<PooledPair>) -> Self {
        let judged: HashMap<(QueryId, ChunkId), (u8, Provenance)> = version
            .qrels
            .iter()
            .map(|q| ((q.query_id.clone(), q.chunk_id.clone()), (q.grade, q.provenance)))
            .collect();
        let answerable: HashSet<&QueryId> =
            version.qrels.iter().filter(|q| crate::output::relevance(q) >= 1).map(|q| &q.query_id).collect();
        let mut at: HashMap<(QueryId, ChunkId), usize> =
            pooled.iter().enumerate().map(|(i, p)| ((p.query.clone(), p.chunk.clone()), i)).collect();
        let mut plan = Self { new: Vec::new(), added_sources: 0, by_run: BTreeMap::new(), judged };
        for query in &version.queries {
            if query.query_type == QueryType::NoAnswer || !answerable.contains(&query.id) {
                continue;
            }
            for hit in runs.hits(query.id.as_str()) {
                let key = (query.id.clone(), index.chunk_id(hit.chunk));
                let i = *at.entry(key.clone()).or_insert_with(|| {
                    plan.new.push(pooled.len());
                    let (grade, by) = plan
                        .judged
                        .get(&key)
                        .map_or((None, None), |&(g, p)| (Some(g), Some(p.label().to_owned())));
                    pooled.push(PooledPair {
                        query: key.0,
                        chunk: key.1,
                        grade,
                        graded_by: by,
                        runs: Vec::new(),
                    });
                    pooled.len() - 1
                });
                let pair = &mut pooled[i];
                if !pair.runs.iter().any(|(r, _)| *r == hit.run) {
                    pair.runs.push((hit.run.clone(), hit.rank));
                    plan.added_sources += 1;
                }
                let run = plan.by_run.entry(hit.run.clone()).or_default();
                if !run.contains(&i) {
                    run.push(i);
                }
            }
        }
        plan
    }

    /// The pooled pairs the version holds no judgment of. An earlier pool's grade counts only
    /// through the row it made: a pair whose row is gone (a `build --force` since) is graded
    /// again (through the LLM cache, at no cost).
    fn ungraded(&self, pooled: &[PooledPair]) -> Vec<usize> {
        let mut out: Vec<usize> = self.by_run.values().flatten().copied().collect();
        out.sort_unstable();
        out.dedup();
        out.retain(|&i| !self.judged.contains_key(&(pooled[i].query.clone(), pooled[i].chunk.clone())));
        out
    }
}

/// Grades the pairs at `ungraded`, in order; `None` for a pair left unjudged.
#[expect(clippy::too_many_arguments, reason = "one step's inputs, passed once")]
fn grade(
    version: &Version,
    index: &ChunkIndex,
    config: &PoolConfig,
    llm: Option<&mut LlmJudge<'_>>,
    pooled: &[PooledPair],
    ungraded: &[usize],
    plan: &Plan,
    progress: Progress,
    summary: &mut PoolSummary,
) -> Result<Vec<Option<u8>>> {
    if ungraded.is_empty() {
        return Ok(Vec::new());
    }
    match config.judge {
        PoolJudge::None => Ok(vec![None; ungraded.len()]),
        PoolJudge::Llm => {
            let judge = llm.ok_or_else(|| Error::InvalidSetting {
                flag: "--judge",
                message: "llm needs an LLM endpoint: give --base-url and --model (or --judge one-shot)"
                    .to_owned(),
            })?;
            let texts: HashMap<&QueryId, &str> =
                version.queries.iter().map(|q| (&q.id, q.text.as_str())).collect();
            let asks: Vec<Ask> = ungraded
                .iter()
                .filter_map(|&i| {
                    let p = &pooled[i];
                    Some(Ask { query: (*texts.get(&p.query)?).to_owned(), chunk: index.position(&p.chunk)? })
                })
                .collect();
            let before = judge.usage().prompt_tokens;
            let stage = progress.stage("judge", asks.len() as u64);
            let grades = judge.grade(&asks, &stage)?;
            let answered = grades.iter().filter(|g| g.is_ok()).count();
            stage.finish(&format!("{answered} of {} pairs graded", asks.len()));
            summary.judge_calls = asks.len();
            summary.judge_tokens = judge.usage().prompt_tokens.saturating_sub(before);
            Ok(grades.into_iter().map(Result::ok).collect())
        }
        PoolJudge::OneShot => {
            one_shot_grades(version, index, config, pooled, ungraded, plan, progress, summary)
        }
    }
}

/// The one-shot labeller's grades of the pairs at `ungraded` (see [`one_shot`]).
#[expect(clippy::too_many_arguments, reason = "one step's inputs, passed once")]
fn one_shot_grades(
    version: &Version,
    index: &ChunkIndex,
    config: &PoolConfig,
    pooled: &[PooledPair],
    ungraded: &[usize],
    plan: &Plan,
    progress: Progress,
    summary: &mut PoolSummary,
) -> Result<Vec<Option<u8>>> {
    let stage = progress.stage("one-shot", 0);
    let model = match CorpusModel::load(index.dir(), &index.own_stamp(), index.threads()) {
        Some(model) => model,
        None => CorpusModel::build(index)?,
    };
    let mut known: HashMap<&QueryId, Vec<usize>> = HashMap::new();
    for row in version.qrels.iter().filter(|q| q.grade >= 1) {
        let sure = matches!(row.provenance, Provenance::Source | Provenance::Duplicate | Provenance::Human);
        if let (true, Some(at)) = (sure, index.position(&row.chunk_id)) {
            known.entry(&row.query_id).or_default().push(at);
        }
    }
    // Every pair the runs pooled (judged or not) shapes the distribution the cut-off is read from.
    let mut all: Vec<usize> = plan.by_run.values().flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    let mut queries: Vec<one_shot::Query> = Vec::new();
    let mut slot: HashMap<usize, (usize, usize)> = HashMap::new();
    let mut by_query: HashMap<&QueryId, usize> = HashMap::new();
    for &i in &all {
        let p = &pooled[i];
        let Some(chunk) = index.position(&p.chunk) else { continue };
        let Some(sure) = known.get(&p.query) else { continue };
        if sure.contains(&chunk) {
            continue;
        }
        let q = *by_query.entry(&p.query).or_insert_with(|| {
            queries.push(one_shot::Query { known: sure.clone(), pooled: Vec::new() });
            queries.len() - 1
        });
        slot.insert(i, (q, queries[q].pooled.len()));
        queries[q].pooled.push(chunk);
    }
    let similarities = one_shot::similarities(&model.space, &queries)?;
    let flat: Vec<f32> = similarities.iter().flatten().copied().collect();
    let cutoff = one_shot::cutoff(&model.space, &queries, &flat, config.seed)?;
    summary.cutoff = cutoff;
    let Some(cutoff) = cutoff else {
        stage.finish(&format!(
            "{} pooled pairs: too few to read a cut-off from (at least {}); left unjudged",
            flat.len(),
            one_shot::MIN_PAIRS
        ));
        return Ok(vec![None; ungraded.len()]);
    };
    stage.finish(&format!(
        "cut-off {:.3} (Otsu {:.3}, chance {:.3}) from {} pooled pairs",
        cutoff.threshold, cutoff.otsu, cutoff.chance, cutoff.pairs
    ));
    Ok(ungraded
        .iter()
        .map(|i| slot.get(i).map(|&(q, k)| one_shot::grade(similarities[q][k], &cutoff)))
        .collect())
}

/// The version's judgments with `rows` added, each after the rows of its query (queries in
/// their file order).
fn with_rows(version: &Version, rows: Vec<Qrel>) -> Vec<Qrel> {
    if rows.is_empty() {
        return version.qrels.clone();
    }
    let order: HashMap<&QueryId, usize> =
        version.queries.iter().enumerate().map(|(i, q)| (&q.id, i)).collect();
    let rank = |q: &Qrel| order.get(&q.query_id).copied().unwrap_or(usize::MAX);
    let mut all: Vec<(usize, usize, Qrel)> =
        version.qrels.iter().cloned().chain(rows).enumerate().map(|(i, q)| (rank(&q), i, q)).collect();
    // Rows keep their order within a query; existing rows come first, as they were read.
    all.sort_by_key(|(r, i, _)| (*r, *i));
    all.into_iter().map(|(_, _, q)| q).collect()
}

/// A stratified sample of the new machine-graded pairs for review: up to
/// `config.review_per_stratum` of each stratum (the first run that pooled the pair, its
/// grade), drawn with the seeded stream `pool/review`; in pooled order.
fn sample(pooled: &[PooledPair], machine: &[usize], config: &PoolConfig) -> Vec<usize> {
    let mut strata: BTreeMap<(String, u8), Vec<usize>> = BTreeMap::new();
    for &i in machine {
        let p = &pooled[i];
        if let (Some((run, _)), Some(grade)) = (p.runs.first(), p.grade) {
            strata.entry((run.clone(), grade)).or_default().push(i);
        }
    }
    let mut rng = crate::rng::stream(config.seed, "pool/review");
    let mut out: Vec<usize> = strata
        .into_values()
        .flat_map(|mut members| {
            members.shuffle(&mut rng);
            members.truncate(config.review_per_stratum);
            members
        })
        .collect();
    out.sort_unstable();
    out
}

/// The review queue with the `sampled` pairs added, grade hidden: each to its query's item,
/// a new item (from `candidates.jsonl`) for a query not in the queue.
fn queued(
    set: &ReviewSet,
    index: &ChunkIndex,
    pooled: &[PooledPair],
    sampled: &[usize],
) -> Result<Vec<ReviewItem>> {
    let mut queue: Vec<ReviewItem> = set.queue.clone();
    let mut missing: BTreeMap<&QueryId, Vec<Pooled>> = BTreeMap::new();
    for &i in sampled {
        let p = &pooled[i];
        let entry = Pooled {
            chunk_id: p.chunk.clone(),
            rank: p.runs.iter().map(|(_, k)| *k).min().unwrap_or(0),
            grade: None,
            pooled_by: p.runs.iter().map(|(r, k)| format!("{r}:{k}")).collect(),
        };
        match queue.iter_mut().find(|item| item.query_id == p.query) {
            Some(item) if item.pool.iter().any(|c| c.pooled.chunk_id == p.chunk) => {}
            Some(item) => {
                let Some(at) = index.position(&p.chunk) else { continue };
                let stored = index.stored(at)?;
                item.pool.push(PoolChunk {
                    pooled: entry,
                    title: stored.title,
                    text: stored.text,
                    section: stored.section,
                });
            }
            None => missing.entry(&p.query).or_default().push(entry),
        }
    }
    if !missing.is_empty() {
        let candidates: Vec<Checked> = read_all(&set.dir.join(CANDIDATES))?;
        let mut added: Vec<Checked> = candidates
            .into_iter()
            .filter_map(|mut c| {
                let pool = missing.remove(&c.candidate.id)?;
                c.verdict.pool = pool;
                Some(c)
            })
            .collect();
        // Pooled chunks only: the item asks about them, as the queue's own items show theirs.
        added.sort_by(|a, b| a.candidate.id.cmp(&b.candidate.id));
        let refs: Vec<&Checked> = added.iter().collect();
        queue.extend(crate::sample::review_items(&refs, index)?);
    }
    Ok(queue)
}

/// One record per run: its pairs, their grades after the step, and the step's judge cost.
fn records(
    config: &PoolConfig,
    runs: &PoolRuns,
    pooled: &[PooledPair],
    plan: &Plan,
    version: u32,
    summary: &PoolSummary,
) -> Result<Vec<PoolRecord>> {
    let new: HashSet<usize> = plan.new.iter().copied().collect();
    runs.names()
        .iter()
        .zip(&config.runs)
        .map(|(name, file)| {
            let pairs = plan.by_run.get(name).map_or(&[][..], Vec::as_slice);
            let mut grades = BTreeMap::new();
            for &i in pairs {
                let key = pooled[i].grade.map_or_else(|| "unjudged".to_owned(), |g| g.to_string());
                *grades.entry(key).or_insert(0) += 1;
            }
            let queries: HashSet<&QueryId> = pairs.iter().map(|&i| &pooled[i].query).collect();
            Ok(PoolRecord {
                run: file.file_name().map_or_else(|| name.clone(), |n| n.to_string_lossy().into_owned()),
                blake3: file_digest(file)?,
                depth: config.depth,
                version,
                judge: config.judge,
                queries: queries.len(),
                pairs: pairs.len(),
                new_pairs: pairs.iter().filter(|i| new.contains(i)).count(),
                grades,
                judge_calls: summary.judge_calls,
                judge_tokens: summary.judge_tokens,
            })
        })
        .collect()
}

/// blake3 of a file's bytes.
///
/// # Errors
/// [`Error::Input`] when it cannot be read.
pub fn file_digest(file: &Path) -> Result<String> {
    let bytes = fs_err::read(file).map_err(|source| Error::Input { path: file.to_owned(), source })?;
    Ok(blake3::hash(&bytes).to_hex().to_string())
}

/// What makes two pool steps the same: the runs' digests, the depth and the judge.
fn pool_key(config: &PoolConfig, runs: &PoolRuns) -> Result<String> {
    let mut hasher = blake3::Hasher::new();
    for (name, file) in runs.names().iter().zip(&config.runs) {
        hasher.update(name.as_bytes());
        hasher.update(file_digest(file)?.as_bytes());
    }
    hasher.update(&config.depth.to_le_bytes());
    hasher.update(config.judge.label().as_bytes());
    Ok(format!("pool:{}", hasher.finalize().to_hex()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::set::pooled::tests::pair;

    #[test]
    fn the_review_sample_takes_at_most_n_per_run_and_grade() {
        let pooled: Vec<PooledPair> = (0..10)
            .map(|i| {
                pair(
                    "q",
                    &format!("d:{i}"),
                    Some(u8::from(i % 2 == 0)),
                    &[(if i < 6 { "a" } else { "b" }, 1)],
                )
            })
            .collect();
        let config = PoolConfig {
            runs: Vec::new(),
            depth: 10,
            judge: PoolJudge::OneShot,
            review_per_stratum: 2,
            seed: 1,
        };
        let all: Vec<usize> = (0..10).collect();
        let picked = sample(&pooled, &all, &config);
        // Strata: (a, 0) 3, (a, 1) 3, (b, 0) 2, (b, 1) 2: two of each.
        assert_eq!(picked.len(), 8);
        let count = |run: &str, g: u8| {
            picked.iter().filter(|&&i| pooled[i].runs[0].0 == run && pooled[i].grade == Some(g)).count()
        };
        assert_eq!([count("a", 0), count("a", 1), count("b", 0), count("b", 1)], [2, 2, 2, 2]);
        assert_eq!(picked, sample(&pooled, &all, &config), "seeded");
    }
}
