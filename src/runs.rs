//! Runs of the user's own retrievers, pooled into each query's judging pool (`--pool-run`), as
//! TREC pools the runs of the systems it compares: a system is then not punished for finding
//! what BM25 did not, because what it found is judged (by the LLM judge, or in review).
//!
//! Input: TREC run files (`qid Q0 docid rank score tag`), naming chunks or documents of the
//! corpus; a document stands for all its chunks, in order, at the document's rank. Output:
//! [`PoolRuns`], each query's top-k chunks per run. Invariants: a run is read whole or not at
//! all (any bad line is an error naming the file and line); ranks come from the rank column,
//! ties in file order; a chunk appears once per run, at its best rank.

use crate::error::{Error, Result};
use crate::index::ChunkIndex;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The name of the round trip's own BM25 top hits among a pool's sources.
pub const ROUND_TRIP_POOL: &str = "round_trip";

/// Whether a pool source (`name:rank`) is a `--pool-run` run, not the round trip.
#[must_use]
pub fn is_run_source(source: &str) -> bool {
    source.rsplit_once(':').map_or(source, |(name, _)| name) != ROUND_TRIP_POOL
}

/// The runs to pool and how deep.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PoolRunConfig {
    /// TREC run files (`--pool-run`).
    pub files: Vec<PathBuf>,
    /// Top chunks of each run pooled per query (`--pool-run-depth`).
    pub depth: usize,
}

/// One run's contribution to a query's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHit {
    /// The run's name (its file name without the extension).
    pub run: String,
    /// Position of the chunk.
    pub chunk: usize,
    /// 1-based rank of the chunk in the run (of its document, for a document id).
    pub rank: u32,
}

/// Every run's top-k chunks per query.
#[derive(Debug, Clone, Default)]
pub struct PoolRuns {
    names: Vec<String>,
    by_query: HashMap<String, Vec<RunHit>>,
}

impl PoolRuns {
    /// Reads the runs of `config` against the chunks of `index`.
    ///
    /// # Errors
    /// [`Error::Input`] for an unreadable file; [`Error::Malformed`] for a line that is not a
    /// TREC run line, a rank that is not a number, an id that is neither a chunk nor a
    /// document of the corpus, or two runs with the same name.
    pub fn read(config: &PoolRunConfig, index: &ChunkIndex) -> Result<Self> {
        let mut by_doc: HashMap<&str, Vec<usize>> = HashMap::new();
        for position in 0..index.len() {
            by_doc.entry(index.doc_id(position).as_str()).or_default().push(position);
        }
        let mut runs = Self::default();
        for file in &config.files {
            let name = run_name(file);
            if runs.names.contains(&name) || name == ROUND_TRIP_POOL {
                let taken = if name == ROUND_TRIP_POOL { "the round trip's own pool" } else { "another run" };
                return Err(malformed(
                    file,
                    0,
                    format!("the run name {name:?} is taken by {taken}; rename the file"),
                ));
            }
            let text =
                fs_err::read_to_string(file).map_err(|source| Error::Input { path: file.clone(), source })?;
            for (query, hits) in parse(file, &text, index, &by_doc, config.depth)? {
                let entry = runs.by_query.entry(query).or_default();
                entry.extend(hits.into_iter().map(|(chunk, rank)| RunHit { run: name.clone(), chunk, rank }));
            }
            runs.names.push(name);
        }
        Ok(runs)
    }

    /// The runs' names, in the order given.
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether no run was given.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The runs' top chunks for `query`: run by run, best rank first.
    #[must_use]
    pub fn hits(&self, query: &str) -> &[RunHit] {
        self.by_query.get(query).map_or(&[], Vec::as_slice)
    }
}

/// A run's name: its file name without the last extension.
fn run_name(file: &Path) -> String {
    file.file_stem().map_or_else(|| file.display().to_string(), |s| s.to_string_lossy().into_owned())
}

/// Each query's top `depth` chunks in one run file, with their ranks.
fn parse(
    file: &Path,
    text: &str,
    index: &ChunkIndex,
    by_doc: &HashMap<&str, Vec<usize>>,
    depth: usize,
) -> Result<BTreeMap<String, Vec<(usize, u32)>>> {
    let mut ranked: BTreeMap<String, Vec<(u32, usize, Vec<usize>)>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let [query, _, id, rank, _, _] = fields[..] else {
            return Err(malformed(
                file,
                n + 1,
                format!("expected 6 fields (qid Q0 docid rank score tag), got {}", fields.len()),
            ));
        };
        let rank: u32 =
            rank.parse().map_err(|_| malformed(file, n + 1, format!("rank {rank:?} is not a number")))?;
        let chunks = crate::id::ChunkId::parse(id)
            .ok()
            .and_then(|chunk| index.position(&chunk))
            .map(|p| vec![p])
            .or_else(|| by_doc.get(id).cloned())
            .ok_or_else(|| {
                malformed(
                    file,
                    n + 1,
                    format!("{id:?} is neither a chunk id nor a document id of this corpus"),
                )
            })?;
        ranked.entry(query.to_owned()).or_default().push((rank, n, chunks));
    }
    Ok(ranked
        .into_iter()
        .map(|(query, mut lines)| {
            lines.sort_by_key(|&(rank, line, _)| (rank, line));
            let mut top: Vec<(usize, u32)> = Vec::new();
            for (rank, _, chunks) in lines {
                for chunk in chunks {
                    if top.len() < depth && !top.iter().any(|&(c, _)| c == chunk) {
                        top.push((chunk, rank));
                    }
                }
            }
            (query, top)
        })
        .collect())
}

fn malformed(path: &Path, line: usize, message: String) -> Error {
    Error::Malformed { path: path.to_owned(), line, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{from_chunks, test_chunks};

    fn with_index(check: impl FnOnce(&ChunkIndex, &Path)) {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = from_chunks(&dir.path().join("index"), &test_chunks(&["a", "b", "c", "d"]));
        check(&index, dir.path());
    }

    #[test]
    fn reads_chunk_and_document_ids_by_rank_to_the_depth() {
        with_index(|index, dir| {
            let file = dir.join("dense.run");
            // Out of rank order on purpose; "d2" is the document of chunk c2.
            fs_err::write(
                &file,
                "q1 Q0 c3 2 0.8 dense\nq1 Q0 d2 1 0.9 dense\nq1 Q0 c0 3 0.7 dense\nq2 Q0 c1 1 1 dense\n",
            )
            .unwrap();
            let config = PoolRunConfig { files: vec![file], depth: 2 };
            let runs = PoolRuns::read(&config, index).unwrap();
            assert_eq!(runs.names(), ["dense"]);
            let got: Vec<(usize, u32)> = runs.hits("q1").iter().map(|h| (h.chunk, h.rank)).collect();
            assert_eq!(got, [(2, 1), (3, 2)], "two deep, best rank first");
            assert_eq!(runs.hits("q2").len(), 1);
            assert!(runs.hits("q9").is_empty());
        });
    }

    #[test]
    fn a_bad_line_names_the_file_and_line() {
        with_index(|index, dir| {
            for (text, expected) in [
                ("q1 Q0 c0 1 1 x\nq1 Q0 c1\n", "bad.run:2:"),
                ("q1 Q0 c0 first 1 x\n", "is not a number"),
                ("q1 Q0 nowhere 1 1 x\n", "neither a chunk id nor a document id"),
            ] {
                let file = dir.join("bad.run");
                fs_err::write(&file, text).unwrap();
                let config = PoolRunConfig { files: vec![file], depth: 5 };
                let err =
                    PoolRuns::read(&config, index).map_or_else(|e| e.to_string(), |_| "read".to_owned());
                assert!(err.contains("bad.run") && err.contains(expected), "{err}");
            }
        });
    }
}
