//! The baseline run: every query of a set searched in the set's own BM25 index, so that a new
//! user gets a first number with no retriever of their own.
//!
//! Input: a set folder (`queries.jsonl`, `corpus.jsonl`, `index/`, `manifest.json` for the
//! Chinese segmenter). Output: each query's top k chunks with their BM25 scores, written as a
//! TREC run. Invariants: the index is reused when it holds exactly the chunks of
//! `corpus.jsonl` (the same fingerprint the build uses), else rebuilt from `corpus.jsonl` in
//! the set's `index/` folder; results are deterministic (ties rank by chunk position).

use super::files;
use crate::corpus;
use crate::error::{Error, Result};
use crate::id::{ChunkId, ContentHasher, QueryId};
use crate::index::{Analyzer, ChunkIndex, IndexOrigin, Segmenter};
use crate::progress::Progress;
use crate::record::Chunk;
use crate::review::set::read_jsonl;
use serde::Deserialize;
use std::io::Write;
use std::path::Path;

/// The tag in the last column of the run.
pub const TAG: &str = "qrelgen-bm25";

/// Whether the file at `path` is a run this module wrote (empty, or its first line tagged
/// [`TAG`]): what `qrelgen run --to` may replace without `--force`.
#[must_use]
pub fn is_our_run(path: &Path) -> bool {
    use std::io::Read as _;
    let mut head = Vec::new();
    let Ok(file) = std::fs::File::open(path) else { return false };
    if file.take(4096).read_to_end(&mut head).is_err() {
        return false;
    }
    let head = String::from_utf8_lossy(&head);
    head.is_empty() || head.lines().next().is_some_and(|line| line.split_whitespace().nth(5) == Some(TAG))
}

/// One query's results: chunks (a set's run) or documents (a collection's).
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked<Id = ChunkId> {
    /// The query.
    pub query: QueryId,
    /// Its top chunks or documents, best first, with BM25 scores.
    pub hits: Vec<(Id, f32)>,
}

/// The baseline run, and whether the index was reused.
#[derive(Debug)]
pub struct BaselineRun {
    /// Every query of the set, in file order.
    pub results: Vec<Ranked>,
    /// Reused or rebuilt.
    pub index: IndexOrigin,
}

/// The manifest fields the baseline needs.
#[derive(Deserialize, Default)]
struct ManifestFields {
    #[serde(default)]
    config: ConfigFields,
}

#[derive(Deserialize, Default)]
struct ConfigFields {
    #[serde(default)]
    segmenter: Segmenter,
}

#[derive(Deserialize)]
struct QueryFields {
    #[serde(rename = "_id")]
    id: QueryId,
    text: String,
}

/// Searches every query of the set in `dir` for its top `k` chunks.
///
/// # Errors
/// [`Error::Input`]/[`Error::Malformed`] for missing or broken set files, [`Error::Index`] when
/// the index cannot be opened or rebuilt.
pub fn bm25_run(dir: &Path, k: usize, progress: &Progress) -> Result<BaselineRun> {
    let (index, provenance) = open_set_index(dir, progress)?;
    let mut queries = Vec::new();
    read_jsonl(&dir.join(files::QUERIES), |_, _, q: QueryFields| {
        queries.push(q);
        Ok(())
    })?;
    let stage = progress.stage("search", queries.len() as u64);
    let mut results = Vec::with_capacity(queries.len());
    for q in queries {
        let hits = index.search(&q.text, k)?;
        let hits = hits.into_iter().map(|h| (index.chunk_id(h.chunk), h.score)).collect();
        results.push(Ranked { query: q.id, hits });
        stage.inc(1);
    }
    stage.finish(&format!("{} queries, top {k}", results.len()));
    Ok(BaselineRun { results, index: provenance })
}

/// The index of the set in `dir`: its `index/` folder when it holds exactly the chunks of
/// `corpus.jsonl`, else rebuilt there from `corpus.jsonl`; with where it came from.
///
/// # Errors
/// [`Error::Input`]/[`Error::Malformed`] for a missing or broken `corpus.jsonl` or manifest,
/// [`Error::Index`] when the index cannot be opened or rebuilt.
pub fn open_set_index(dir: &Path, progress: &Progress) -> Result<(ChunkIndex, IndexOrigin)> {
    let corpus_file = dir.join(files::CORPUS);
    if !corpus_file.is_file() {
        return Err(Error::Input {
            path: corpus_file,
            source: std::io::Error::other("not found: is this a set folder (the --out of qrelgen build)?"),
        });
    }
    let segmenter = read_segmenter(&dir.join(files::MANIFEST))?;
    open_chunk_index(&corpus_file, &dir.join(files::INDEX_DIR), segmenter, progress)
}

/// The index in `index_dir` of the chunks in `chunks_file` (a `corpus.jsonl`): reused when it
/// holds exactly those chunks (and was made with `segmenter`), else built there.
///
/// # Errors
/// [`Error::Input`]/[`Error::Malformed`] for a missing or broken `chunks_file`, [`Error::Index`]
/// when the index cannot be opened or built.
pub fn open_chunk_index(
    chunks_file: &Path,
    index_dir: &Path,
    segmenter: Segmenter,
    progress: &Progress,
) -> Result<(ChunkIndex, IndexOrigin)> {
    let stage = progress.stage("index", 0);
    let (metas, fingerprint) = chunk_list(chunks_file)?;
    let (index, provenance) = ChunkIndex::open_or_build(
        index_dir,
        metas,
        &fingerprint,
        Analyzer::new(segmenter),
        crate::config::all_cores().get(),
        &stage,
        |add| corpus::read_prechunked(chunks_file, |c| Ok(add(&c)?)).map(drop),
    )?;
    stage.finish(&format!("{} chunks, index {provenance}", index.len()));
    Ok((index, provenance))
}

/// The segmenter the set was built with (the default without a manifest).
fn read_segmenter(path: &Path) -> Result<Segmenter> {
    let Ok(text) = fs_err::read_to_string(path) else { return Ok(Segmenter::default()) };
    let fields: ManifestFields = serde_json::from_str(&text).map_err(|e| Error::Malformed {
        path: path.to_owned(),
        line: e.line(),
        message: e.to_string(),
    })?;
    Ok(fields.config.segmenter)
}

/// The chunk list of `corpus.jsonl` and its fingerprint, as the build computes it.
fn chunk_list(corpus_file: &Path) -> Result<(crate::index::ChunkList, String)> {
    let mut metas = crate::index::ChunkList::default();
    let mut hash = ContentHasher::default();
    let skipped = corpus::read_prechunked(corpus_file, |chunk: Chunk| {
        hash.update(&[chunk.id.as_str(), &chunk.title, &chunk.text]);
        metas.push(&chunk);
        Ok(())
    })?;
    if let Some(first) = skipped.first() {
        return Err(Error::Malformed {
            path: corpus_file.to_owned(),
            line: first.line.unwrap_or(0),
            message: first.reason.clone(),
        });
    }
    Ok((metas, hash.finish()))
}

/// Writes the run in TREC format: `qid Q0 docid rank score tag`.
///
/// # Errors
/// The writer's.
pub fn write_trec(w: &mut dyn Write, run: &BaselineRun) -> std::io::Result<()> {
    write_ranked(w, &run.results)
}

/// Writes ranked chunks or documents in TREC format: `qid Q0 id rank score tag`.
///
/// # Errors
/// The writer's.
pub fn write_ranked<Id: std::fmt::Display>(w: &mut dyn Write, results: &[Ranked<Id>]) -> std::io::Result<()> {
    for ranked in results {
        for (rank, (id, score)) in ranked.hits.iter().enumerate() {
            writeln!(w, "{} Q0 {id} {} {score} {TAG}", ranked.query, rank + 1)?;
        }
    }
    Ok(())
}
