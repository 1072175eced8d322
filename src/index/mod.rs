//! Stage 3, index: a tantivy BM25 index of every chunk, kept on disk in the output folder.
//!
//! Input: the chunks, in their canonical order. Output: a [`ChunkIndex`] that searches and
//! answers term statistics. Invariants: only this module imports tantivy; hits name chunks by
//! their position in the chunk list; equal scores rank by that position, so results are
//! deterministic; the index is rebuilt only when the chunks (or the analyzer) change.

mod analyzer;

pub use analyzer::{Analyzer, Token};

use crate::error::{Error, Result};
use crate::progress::Stage;
use crate::record::Chunk;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tantivy::collector::TopDocs;
use tantivy::columnar::ColumnValues;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{FAST, Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::{Index, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term};

/// File in the index folder recording which chunks it holds.
const FINGERPRINT_FILE: &str = "qrelgen-fingerprint";
/// Memory budget of the (single-threaded, hence deterministic) index writer.
const WRITER_MEMORY: usize = 200_000_000;
/// Extra hits fetched so that score ties at the cut-off are broken by chunk position.
const TIE_MARGIN: usize = 16;

/// A search result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Position of the chunk in the chunk list.
    pub chunk: usize,
    /// BM25 score.
    pub score: f32,
}

/// How a term of a text is distributed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermStat {
    /// The indexed term.
    pub term: String,
    /// Its first written form in the text, lower-cased.
    pub surface: String,
    /// Occurrences in the text.
    pub tf: u32,
    /// Chunks that contain it.
    pub df: u64,
}

/// Whether [`ChunkIndex::open_or_build`] reused the index on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// The chunks had not changed.
    Reused,
    /// Built from the chunks.
    Built,
}

impl std::fmt::Display for Provenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Reused => "reused, chunks unchanged",
            Self::Built => "built",
        })
    }
}

/// The BM25 index of all chunks.
pub struct ChunkIndex {
    dir: PathBuf,
    searcher: Searcher,
    text: Field,
    ords: Vec<Arc<dyn ColumnValues<u64>>>,
    analyzer: Analyzer,
}

impl ChunkIndex {
    /// Opens the index in `dir` if it holds exactly these chunks, else builds it there.
    ///
    /// `fingerprint` identifies the chunk list (e.g. a hash of ids and texts).
    ///
    /// # Errors
    /// [`Error::Index`] when tantivy fails, [`Error::Output`] when the folder cannot be written.
    pub fn open_or_build(
        dir: &Path,
        chunks: &[Chunk],
        fingerprint: &str,
        progress: &Stage,
    ) -> Result<(Self, Provenance)> {
        let stamp = format!("{}\n{fingerprint}\n", analyzer::NAME);
        let stamp_path = dir.join(FINGERPRINT_FILE);
        if fs_err::read_to_string(&stamp_path).is_ok_and(|s| s == stamp) {
            if let Ok(index) = Self::open(dir) {
                progress.inc(chunks.len() as u64);
                return Ok((index, Provenance::Reused));
            }
        }
        reset_dir(dir)?;
        build(dir, chunks, progress)?;
        fs_err::write(&stamp_path, stamp).map_err(|source| output_error(&stamp_path, source))?;
        Ok((Self::open(dir)?, Provenance::Built))
    }

    fn open(dir: &Path) -> Result<Self> {
        let err = |source| Error::Index { path: dir.to_owned(), source };
        let index = Index::open_in_dir(dir).map_err(err)?;
        register(&index);
        let text = index.schema().get_field("text").map_err(err)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(err)?;
        let searcher = reader.searcher();
        let ords = searcher
            .segment_readers()
            .iter()
            .map(|s| s.fast_fields().column_first_or_default::<u64>("ord"))
            .collect::<tantivy::Result<_>>()
            .map_err(err)?;
        Ok(Self { dir: dir.to_owned(), searcher, text, ords, analyzer: Analyzer::default() })
    }

    /// The analyzer the index uses.
    #[must_use]
    pub fn analyzer(&self) -> &Analyzer {
        &self.analyzer
    }

    /// Number of chunks indexed.
    #[must_use]
    pub fn num_chunks(&self) -> u64 {
        self.searcher.num_docs()
    }

    /// The top `limit` chunks for a free-text query, best first.
    ///
    /// # Errors
    /// [`Error::Index`] when tantivy fails.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<Hit>> {
        self.search_terms(&self.analyzer.terms(query), limit)
    }

    /// The top `limit` chunks for already-analyzed terms (each counted once), best first.
    ///
    /// # Errors
    /// [`Error::Index`] when tantivy fails.
    pub fn search_terms(&self, terms: &[String], limit: usize) -> Result<Vec<Hit>> {
        let mut unique: Vec<&String> = terms.iter().collect();
        unique.sort();
        unique.dedup();
        if unique.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = unique
            .into_iter()
            .map(|t| {
                let term = Term::from_field_text(self.text, t);
                let query = TermQuery::new(term, IndexRecordOption::WithFreqs);
                (Occur::Should, Box::new(query) as Box<dyn Query>)
            })
            .collect();
        let collector = TopDocs::with_limit(limit + TIE_MARGIN).order_by_score();
        let top = self
            .searcher
            .search(&BooleanQuery::new(clauses), &collector)
            .map_err(|source| self.error(source))?;
        let mut hits: Vec<Hit> = top
            .into_iter()
            .map(|(score, addr)| Hit {
                chunk: usize::try_from(self.ords[addr.segment_ord as usize].get_val(addr.doc_id))
                    .unwrap_or(usize::MAX),
                score,
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.chunk.cmp(&b.chunk)));
        hits.truncate(limit);
        Ok(hits)
    }

    /// Number of chunks that contain `term` (an analyzed term).
    ///
    /// # Errors
    /// [`Error::Index`] when tantivy fails.
    pub fn doc_freq(&self, term: &str) -> Result<u64> {
        self.searcher
            .doc_freq(&Term::from_field_text(self.text, term))
            .map_err(|source| self.error(source))
    }

    /// Per-term statistics of `text`, sorted by term.
    ///
    /// # Errors
    /// [`Error::Index`] when tantivy fails.
    pub fn term_stats(&self, text: &str) -> Result<Vec<TermStat>> {
        let mut by_term: BTreeMap<String, (String, u32)> = BTreeMap::new();
        for token in self.analyzer.tokens(text) {
            by_term.entry(token.term).or_insert((token.surface, 0)).1 += 1;
        }
        by_term
            .into_iter()
            .map(|(term, (surface, tf))| {
                let df = self.doc_freq(&term)?;
                Ok(TermStat { term, surface, tf, df })
            })
            .collect()
    }

    /// BM25's inverse document frequency of a term found in `df` chunks.
    #[must_use]
    pub fn idf(&self, df: u64) -> f64 {
        let n = self.num_chunks() as f64;
        let df = df as f64;
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    fn error(&self, source: tantivy::TantivyError) -> Error {
        Error::Index { path: self.dir.clone(), source }
    }
}

fn schema() -> (Schema, Field, Field) {
    let mut builder = Schema::builder();
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(analyzer::NAME)
        .set_index_option(IndexRecordOption::WithFreqs);
    let text = builder.add_text_field("text", TextOptions::default().set_indexing_options(indexing));
    let ord = builder.add_u64_field("ord", FAST);
    (builder.build(), text, ord)
}

fn register(index: &Index) {
    index.tokenizers().register(analyzer::NAME, Analyzer::default().inner());
}

fn build(dir: &Path, chunks: &[Chunk], progress: &Stage) -> Result<()> {
    let err = |source| Error::Index { path: dir.to_owned(), source };
    let (schema, text, ord) = schema();
    let index = Index::create_in_dir(dir, schema).map_err(err)?;
    register(&index);
    let mut writer: IndexWriter = index.writer_with_num_threads(1, WRITER_MEMORY).map_err(err)?;
    for (position, chunk) in chunks.iter().enumerate() {
        let mut doc = TantivyDocument::default();
        doc.add_text(text, &chunk.title);
        doc.add_text(text, &chunk.text);
        doc.add_u64(ord, position as u64);
        writer.add_document(doc).map_err(err)?;
        progress.inc(1);
    }
    writer.commit().map_err(err)?;
    writer.wait_merging_threads().map_err(err)?;
    Ok(())
}

/// Empties the index folder, refusing to touch a folder that is not an index.
fn reset_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        let ours = dir.join("meta.json").exists() || dir.join(FINGERPRINT_FILE).exists();
        let empty = fs_err::read_dir(dir).map_err(|e| output_error(dir, e))?.next().is_none();
        if !ours && !empty {
            return Err(output_error(
                dir,
                std::io::Error::other("the folder exists and is not a qrelgen index; move it away"),
            ));
        }
        fs_err::remove_dir_all(dir).map_err(|e| output_error(dir, e))?;
    }
    fs_err::create_dir_all(dir).map_err(|e| output_error(dir, e))
}

fn output_error(path: &Path, source: std::io::Error) -> Error {
    Error::Output { path: path.to_owned(), source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{ChunkId, DocId};

    fn chunk(i: usize, text: &str) -> Chunk {
        let id = ChunkId::parse(&format!("c{i}")).unwrap_or_else(|e| panic!("{e}"));
        Chunk { id, doc_id: DocId::sanitized("d"), ordinal: 0, title: String::new(), text: text.into() }
    }

    fn build_index(dir: &Path, texts: &[&str]) -> (ChunkIndex, Provenance) {
        let chunks: Vec<_> = texts.iter().enumerate().map(|(i, t)| chunk(i, t)).collect();
        ChunkIndex::open_or_build(dir, &chunks, &texts.join("|"), &Stage::hidden())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn ranks_by_bm25_and_breaks_ties_by_position() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (index, _) = build_index(
            dir.path(),
            &["quota exceeded error", "apple banana", "quota", "apple banana", "quota quota"],
        );
        let hits: Vec<_> = index.search("Quotas", 10).unwrap_or_else(|e| panic!("{e}"));
        let order: Vec<_> = hits.iter().map(|h| h.chunk).collect();
        assert_eq!(order, [4, 2, 0]);
        let ties: Vec<_> = index.search("banana", 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ties.iter().map(|h| h.chunk).collect::<Vec<_>>(), [1]);
        assert_eq!(index.doc_freq("quota").unwrap_or_default(), 3);
        assert!(index.search("the of", 5).unwrap_or_else(|e| panic!("{e}")).is_empty());
    }

    #[test]
    fn rebuilds_only_when_chunks_change() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("index");
        assert_eq!(build_index(&path, &["one", "two"]).1, Provenance::Built);
        assert_eq!(build_index(&path, &["one", "two"]).1, Provenance::Reused);
        let (index, provenance) = build_index(&path, &["one", "two", "three"]);
        assert_eq!(provenance, Provenance::Built);
        assert_eq!(index.num_chunks(), 3);
    }

    #[test]
    fn refuses_to_wipe_a_foreign_folder() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs_err::write(dir.path().join("notes.txt"), "mine").unwrap_or_else(|e| panic!("{e}"));
        let chunks = [chunk(0, "x")];
        let result = ChunkIndex::open_or_build(dir.path(), &chunks, "f", &Stage::hidden());
        assert!(result.is_err());
        assert!(dir.path().join("notes.txt").exists());
    }

    #[test]
    fn term_stats_count_tf_and_df() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (index, _) = build_index(dir.path(), &["sync files", "sync"]);
        let stats = index.term_stats("Syncing files and syncs").unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<_> = stats.iter().map(|s| (s.term.as_str(), s.surface.as_str(), s.tf, s.df)).collect();
        assert_eq!(got, [("file", "files", 1, 1), ("sync", "syncing", 2, 2)]);
    }
}
