//! Stage 3, index: a tantivy BM25 index of every chunk, kept on disk in the output folder. It is
//! also where chunk texts live once the corpus is chunked: the pipeline keeps only the
//! [`ChunkList`] (ids, documents, ordinals) in memory and fetches texts from the index's document
//! store.
//!
//! Input: the chunk list (metadata) and a way to stream the chunks. Output: a [`ChunkIndex`]
//! that searches, serves texts and answers term statistics. Invariants: only this module
//! imports tantivy; chunks are named by their position in the chunk list; equal scores rank by
//! that position, so results are deterministic; the index is rebuilt only when the chunks (or
//! the analyzer) change.

mod analyzer;
mod bm25;
mod chunks;
mod directory;
mod error;
mod retriever;
mod segment;
mod update;

pub(crate) use analyzer::WordTerms;
pub use analyzer::{Analyzer, Token};
pub use chunks::ChunkList;
pub(crate) use directory::sync_folder;
pub(crate) use directory::{read_at, write_at};
pub use error::IndexError;
pub use retriever::Retriever;
pub use segment::{Segmenter, release_dictionary};
pub use update::OldChunk;
pub use update::{Earlier, Unchanged};

use crate::id::{ChunkId, DocId};
use crate::progress::StageProgress;
use crate::record::Chunk;
use bm25::Bm25;
use error::Result;
use hashbrown::HashTable;
use std::collections::BTreeMap;
use std::hash::BuildHasher as _;
use std::path::{Path, PathBuf};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::{DocAddress, Index, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term};

/// File in the index folder recording which chunks it holds.
const FINGERPRINT_FILE: &str = "qrelgen-fingerprint";
/// Memory budget of each index writer thread: a thread writes its segment to disk when its
/// postings reach it, so a larger corpus makes more segments, not a larger heap (tantivy wants
/// at least 15 MB).
const WRITER_MEMORY_PER_THREAD: usize = 32_000_000;
/// Most index writer threads.
const WRITER_THREADS: usize = 8;
/// Decompressed blocks of the document store each segment keeps (tantivy's default is 100,
/// about 1.6 MB a segment). Texts are read in chunk order (the topic space's passes) or at
/// random (the sources of queries), which a few blocks serve as well as many.
const STORE_CACHE_BLOCKS: usize = 8;

/// A search result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Position of the chunk in the chunk list.
    pub chunk: usize,
    /// BM25 score: the sum of tantivy's term scores in sorted term order, the same bits
    /// whatever the index's segments.
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

/// A chunk's stored title, text and section.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredText {
    /// Document title.
    pub title: String,
    /// Chunk text.
    pub text: String,
    /// Its section heading ([`Chunk::section`]).
    pub section: Option<String>,
}

/// Whether [`ChunkIndex::open_or_build`] reused the index on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexOrigin {
    /// The chunks had not changed.
    Reused,
    /// Built from the chunks.
    Built,
    /// The index of an earlier chunk list, brought to these chunks in place.
    Updated,
}

impl std::fmt::Display for IndexOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Reused => "reused, chunks unchanged",
            Self::Built => "built",
            Self::Updated => "updated in place",
        })
    }
}

#[derive(Clone, Copy)]
struct Fields {
    search: Field,
    title: Field,
    text: Field,
    /// The chunk's section heading; `None` in an index written before it was stored.
    section: Option<Field>,
    ord: Field,
}

/// An index opened from disk, not yet tied to a chunk list.
struct Opened {
    searcher: Searcher,
    fields: Fields,
    /// Per segment, each document's chunk position (its `ord`, or the position an updated
    /// index's key file gives that key).
    positions: Vec<Vec<u32>>,
    /// The exact token count of an updated index (whose own may be estimated).
    tokens: Option<u64>,
    /// Its segments' deleted documents, which tantivy's statistics still count.
    deletions: update::Deletions,
    /// The opstamp of its tantivy commit, which its side files must carry.
    opstamp: u64,
}

impl Opened {
    fn open(dir: &Path, analyzer: &Analyzer) -> Result<Self> {
        let err = |source| IndexError::Tantivy { path: dir.to_owned(), source };
        let directory = directory::IndexDirectory::open(dir)
            .map_err(|e| IndexError::Tantivy { path: dir.to_owned(), source: e.into() })?;
        let index = Index::open(directory).map_err(err)?;
        register(&index, analyzer);
        let schema = index.schema();
        let field = |name| schema.get_field(name).map_err(err);
        let fields = Fields {
            search: field("search")?,
            title: field("title")?,
            text: field("text")?,
            section: schema.get_field("section").ok(),
            ord: field("ord")?,
        };
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .doc_store_cache_num_blocks(STORE_CACHE_BLOCKS)
            .try_into()
            .map_err(err)?;
        let searcher = reader.searcher();
        let mismatch = || IndexError::Mismatch { path: dir.to_owned(), chunks: searcher.num_docs() as usize };
        let opstamp = index.load_metas().map_err(err)?.opstamp;
        // Side files of another commit are not this index's.
        let keys = update::read_positions(dir, opstamp).map_err(|()| mismatch())?;
        let tokens = update::read_tokens(dir, opstamp);
        let deletions = update::deletions_of(dir, opstamp, &searcher);
        // An updated index without its exact token count would score with an estimate, one
        // without its deleted documents' terms with their document frequencies.
        let (true, Some(deletions)) = (keys.is_none() || tokens.is_some(), deletions) else {
            return Err(mismatch());
        };
        let position = |key: u64| match &keys {
            None => key.min(u64::from(u32::MAX)) as u32,
            Some(keys) => usize::try_from(key).ok().and_then(|k| keys.get(k)).copied().unwrap_or(u32::MAX),
        };
        let mut positions = Vec::new();
        for segment in searcher.segment_readers() {
            let ords = segment.fast_fields().column_first_or_default::<u64>("ord").map_err(err)?;
            // A position past the chunk list is caught by `attach`.
            positions.push((0..ords.num_vals()).map(|doc| position(ords.get_val(doc))).collect());
        }
        Ok(Self { searcher, fields, positions, tokens, deletions, opstamp })
    }

    /// Each segment's documents that are not deleted, with their chunk positions.
    fn live(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.searcher.segment_readers().iter().zip(&self.positions).enumerate().flat_map(
            |(segment, (reader, positions))| {
                let alive = reader.alive_bitset();
                positions
                    .iter()
                    .enumerate()
                    .filter(move |&(doc, _)| alive.is_none_or(|a| a.is_alive(doc as u32)))
                    .map(move |(doc, &position)| (segment as u32, doc as u32, position))
            },
        )
    }

    /// Each of `chunks` positions' document; `None` unless every position has exactly one.
    fn addresses(&self, chunks: usize) -> Option<Vec<DocAddress>> {
        if self.searcher.num_docs() != chunks as u64 {
            return None;
        }
        let mut addresses = vec![DocAddress::new(u32::MAX, u32::MAX); chunks];
        for (segment, doc, position) in self.live() {
            *addresses.get_mut(position as usize)? = DocAddress::new(segment, doc);
        }
        // Two documents claiming one position leave another without a document.
        addresses.iter().all(|a| a.segment_ord != u32::MAX).then_some(addresses)
    }

    /// Ties the index to the chunk list it was built from: every position has one document.
    fn attach(
        self,
        dir: &Path,
        mut chunks: ChunkList,
        fingerprint: &str,
        analyzer: Analyzer,
        threads: usize,
    ) -> Result<ChunkIndex> {
        chunks.seal();
        let addresses = self
            .addresses(chunks.len())
            .ok_or_else(|| IndexError::Mismatch { path: dir.to_owned(), chunks: chunks.len() })?;
        let deleted = update::deleted_terms(self.deletions);
        let bm25 = Bm25::new(&self.searcher, self.fields.search, self.positions, self.tokens, deleted)
            .map_err(|source| IndexError::Tantivy { path: dir.to_owned(), source })?;
        let mut by_id = HashTable::with_capacity(chunks.len());
        for position in 0..chunks.len() as u32 {
            let hash = id_hash(chunks.id_str(position as usize));
            by_id.insert_unique(hash, position, |&p: &u32| id_hash(chunks.id_str(p as usize)));
        }
        Ok(ChunkIndex {
            dir: dir.to_owned(),
            searcher: self.searcher,
            fields: self.fields,
            bm25,
            addresses,
            chunks,
            by_id,
            fingerprint: fingerprint.to_owned(),
            analyzer,
            threads,
        })
    }
}

/// The BM25 index of all chunks, and the store of their texts.
pub struct ChunkIndex {
    dir: PathBuf,
    searcher: Searcher,
    fields: Fields,
    bm25: Bm25,
    addresses: Vec<DocAddress>,
    chunks: ChunkList,
    /// Chunk positions, hashed by chunk id.
    by_id: HashTable<u32>,
    fingerprint: String,
    analyzer: Analyzer,
    threads: usize,
}

impl ChunkIndex {
    /// Opens the index in `dir` if it holds exactly these chunks, else builds it there from the
    /// chunks that `feed` hands over, in the order of `chunks`, with `threads` writer threads.
    ///
    /// `fingerprint` identifies the chunk list (a hash of ids, titles and texts). The number of
    /// threads changes how documents fall into segments, never a score or a ranking: BM25
    /// statistics are index-wide, a chunk's term scores are summed in one order and ties rank
    /// by chunk position.
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when tantivy fails, [`IndexError::Mismatch`] when the fed chunks
    /// don't match `chunks`, [`IndexError::Write`] when the folder cannot be written (all as
    /// `E`); the errors of `feed`.
    pub fn open_or_build<E: From<IndexError>>(
        dir: &Path,
        chunks: ChunkList,
        fingerprint: &str,
        analyzer: Analyzer,
        threads: usize,
        progress: &StageProgress,
        feed: impl FnOnce(&mut dyn FnMut(&Chunk) -> Result<()>) -> Result<(), E>,
    ) -> Result<(Self, IndexOrigin), E> {
        let stamp = Self::stamp(&analyzer, fingerprint);
        let stamp_path = dir.join(FINGERPRINT_FILE);
        if fs_err::read_to_string(&stamp_path).is_ok_and(|s| s == stamp)
            && let Ok(opened) = Opened::open(dir, &analyzer)
            && opened.addresses(chunks.len()).is_some()
        {
            progress.inc(chunks.len() as u64);
            return Ok((opened.attach(dir, chunks, fingerprint, analyzer, threads)?, IndexOrigin::Reused));
        }
        reset_dir(dir)?;
        build(dir, &analyzer, threads, progress, feed)?;
        fs_err::write(&stamp_path, stamp).map_err(|source| write_error(&stamp_path, source))?;
        Ok((
            Opened::open(dir, &analyzer)?.attach(dir, chunks, fingerprint, analyzer, threads)?,
            IndexOrigin::Built,
        ))
    }

    /// What names an index of the chunk list with this `fingerprint` analysed by `analyzer`
    /// (also the stamp of the corpus model kept beside it).
    #[must_use]
    pub fn stamp(analyzer: &Analyzer, fingerprint: &str) -> String {
        format!("{}\n{fingerprint}\n", analyzer.version())
    }

    /// The folder the index lives in.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The stamp of this index's chunk list and analyzer (see [`ChunkIndex::stamp`]).
    #[must_use]
    pub fn own_stamp(&self) -> String {
        Self::stamp(&self.analyzer, &self.fingerprint)
    }

    /// The threads its users may read it with (those it was built with).
    #[must_use]
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The analyzer the index uses.
    #[must_use]
    pub fn analyzer(&self) -> &Analyzer {
        &self.analyzer
    }

    /// Number of chunks.
    #[must_use]
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Whether the index holds no chunk.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The id of the chunk at `position`.
    ///
    /// # Panics
    /// If `position` is not below [`ChunkIndex::len`] (positions come from this index).
    #[must_use]
    pub fn chunk_id(&self, position: usize) -> ChunkId {
        self.chunks.id(position)
    }

    /// The id of the chunk at `position`, borrowed (no allocation).
    ///
    /// # Panics
    /// If `position` is not below [`ChunkIndex::len`] (positions come from this index).
    #[must_use]
    pub fn chunk_id_str(&self, position: usize) -> &str {
        self.chunks.id_str(position)
    }

    /// The document of the chunk at `position`.
    ///
    /// # Panics
    /// If `position` is not below [`ChunkIndex::len`].
    #[must_use]
    pub fn doc_id(&self, position: usize) -> &DocId {
        self.chunks.doc_id(position)
    }

    /// The position of the chunk at `position` within its document.
    ///
    /// # Panics
    /// If `position` is not below [`ChunkIndex::len`].
    #[must_use]
    pub fn ordinal(&self, position: usize) -> u32 {
        self.chunks.ordinal(position)
    }

    /// The position of the chunk with this id.
    #[must_use]
    pub fn position(&self, id: &ChunkId) -> Option<usize> {
        let found =
            self.by_id.find(id_hash(id.as_str()), |&p| self.chunks.id_str(p as usize) == id.as_str())?;
        Some(*found as usize)
    }

    /// The stored title, text and section of the chunk at `position`.
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when the document store cannot be read.
    pub fn stored(&self, position: usize) -> Result<StoredText> {
        let doc: TantivyDocument = self.searcher.doc(self.addresses[position]).map_err(|e| self.error(e))?;
        let get = |field| doc.get_first(field).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let section = self.fields.section.and_then(|f| doc.get_first(f)?.as_str().map(str::to_owned));
        Ok(StoredText { title: get(self.fields.title), text: get(self.fields.text), section })
    }

    /// The text of the chunk at `position`.
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when the document store cannot be read.
    pub fn text(&self, position: usize) -> Result<String> {
        self.stored(position).map(|s| s.text)
    }

    /// The top `limit` chunks for a free-text query, best first.
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when tantivy fails.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<Hit>> {
        self.search_terms(&self.analyzer.terms(query), limit)
    }

    /// The top `limit` chunks for already-analyzed terms (each counted once), best first, equal
    /// scores by position: a prefix of one total order, whatever `limit` and the segments.
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when tantivy fails.
    pub fn search_terms(&self, terms: &[String], limit: usize) -> Result<Vec<Hit>> {
        let mut unique: Vec<&String> = terms.iter().collect();
        unique.sort();
        unique.dedup();
        if unique.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        self.bm25.search(&unique, limit).map_err(|e| self.error(e))
    }

    /// Up to `limit` chunks that contain every one of `terms` (analyzed terms), by position;
    /// none for no terms.
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when tantivy fails.
    pub fn containing_all(&self, terms: &[String], limit: usize) -> Result<Vec<usize>> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| {
                let term = Term::from_field_text(self.fields.search, t);
                (Occur::Must, Box::new(TermQuery::new(term, IndexRecordOption::Basic)) as Box<dyn Query>)
            })
            .collect();
        let collector = TopDocs::with_limit(limit).order_by_score();
        let top = self.searcher.search(&BooleanQuery::new(clauses), &collector).map_err(|e| self.error(e))?;
        let mut found: Vec<usize> = top.into_iter().map(|(_, addr)| self.position_of(addr)).collect();
        found.sort_unstable();
        Ok(found)
    }

    /// Number of chunks that contain `term` (an analyzed term).
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when tantivy fails.
    pub fn doc_freq(&self, term: &str) -> Result<u64> {
        let all = self.searcher.doc_freq(&Term::from_field_text(self.fields.search, term));
        Ok(all.map_err(|e| self.error(e))?.saturating_sub(self.bm25.deleted_holding(term)))
    }

    /// Per-term statistics of `text`, sorted by term.
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when tantivy fails.
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
        let n = self.len() as f64;
        let df = df as f64;
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    fn position_of(&self, addr: DocAddress) -> usize {
        self.bm25.position(addr)
    }

    fn error(&self, source: tantivy::TantivyError) -> IndexError {
        IndexError::Tantivy { path: self.dir.clone(), source }
    }
}

/// The hash of a chunk id in [`ChunkIndex`]'s table of positions.
fn id_hash(id: &str) -> u64 {
    foldhash::fast::FixedState::default().hash_one(id)
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(analyzer::NAME)
        .set_index_option(IndexRecordOption::WithFreqs);
    let search = builder.add_text_field("search", TextOptions::default().set_indexing_options(indexing));
    let title = builder.add_text_field("title", STORED);
    let text = builder.add_text_field("text", STORED);
    let section = Some(builder.add_text_field("section", STORED));
    // Indexed too, so that an update can delete a document by its key.
    let ord = builder.add_u64_field("ord", FAST | INDEXED);
    (builder.build(), Fields { search, title, text, section, ord })
}

fn register(index: &Index, analyzer: &Analyzer) {
    index.tokenizers().register(analyzer::NAME, analyzer.inner());
}

fn build<E: From<IndexError>>(
    dir: &Path,
    analyzer: &Analyzer,
    threads: usize,
    progress: &StageProgress,
    feed: impl FnOnce(&mut dyn FnMut(&Chunk) -> Result<()>) -> Result<(), E>,
) -> Result<(), E> {
    let err = |source| IndexError::Tantivy { path: dir.to_owned(), source };
    let (schema, fields) = schema();
    let directory = directory::IndexDirectory::open(dir).map_err(|e| err(e.into()))?;
    let index = Index::create(directory, schema, tantivy::IndexSettings::default()).map_err(err)?;
    register(&index, analyzer);
    let threads = threads.clamp(1, WRITER_THREADS);
    let mut writer: IndexWriter =
        index.writer_with_num_threads(threads, threads * WRITER_MEMORY_PER_THREAD).map_err(err)?;
    // No merges: each writer thread leaves its segments as they are (a few per 100 MB of
    // text), which searching over costs less than merging them would.
    writer.set_merge_policy(Box::new(tantivy::indexer::NoMergePolicy));
    let mut position = 0u64;
    feed(&mut |chunk| {
        writer.add_document(document(fields, chunk, position)).map_err(err)?;
        position += 1;
        progress.inc(1);
        Ok(())
    })?;
    writer.commit().map_err(err)?;
    writer.wait_merging_threads().map_err(err)?;
    Ok(())
}

/// The index's document of `chunk`, under the key `ord` (its position, in an index as built).
fn document(fields: Fields, chunk: &Chunk, ord: u64) -> TantivyDocument {
    let mut doc = TantivyDocument::default();
    doc.add_text(fields.search, &chunk.title);
    doc.add_text(fields.search, &chunk.text);
    doc.add_text(fields.title, &chunk.title);
    doc.add_text(fields.text, &chunk.text);
    if let (Some(field), Some(section)) = (fields.section, &chunk.section) {
        doc.add_text(field, section);
    }
    doc.add_u64(fields.ord, ord);
    doc
}

/// Empties the index folder, refusing to touch a folder that is not an index.
fn reset_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        let ours = dir.join("meta.json").exists() || dir.join(FINGERPRINT_FILE).exists();
        let empty = fs_err::read_dir(dir).map_err(|e| write_error(dir, e))?.next().is_none();
        if !ours && !empty {
            return Err(write_error(
                dir,
                std::io::Error::other("the folder exists and is not a qrelgen index; move it away"),
            ));
        }
        fs_err::remove_dir_all(dir).map_err(|e| write_error(dir, e))?;
    }
    fs_err::create_dir_all(dir).map_err(|e| write_error(dir, e))
}

fn write_error(path: &Path, source: std::io::Error) -> IndexError {
    IndexError::Write { path: path.to_owned(), source }
}

/// Builds (or reuses) an index over in-memory chunks: for tests.
#[cfg(test)]
pub(crate) fn from_chunks(dir: &Path, chunks: &[Chunk]) -> (ChunkIndex, IndexOrigin) {
    let metas = chunks.iter().collect();
    let fingerprint = crate::id::content_hash(&chunks.iter().map(|c| c.text.as_str()).collect::<Vec<_>>());
    ChunkIndex::open_or_build(
        dir,
        metas,
        &fingerprint,
        Analyzer::default(),
        2,
        &StageProgress::hidden(),
        |add| chunks.iter().try_for_each(add),
    )
    .unwrap()
}

/// Chunks `c0`, `c1`, … of document `d<i>` with the given texts: for tests.
#[cfg(test)]
pub(crate) fn test_chunks(texts: &[&str]) -> Vec<Chunk> {
    use crate::id::DocId;
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| Chunk {
            id: ChunkId::parse(&format!("c{i}")).unwrap(),
            doc_id: DocId::sanitized(&format!("d{i}")),
            source_id: None,
            ordinal: 0,
            title: String::new(),
            text: (*t).to_owned(),
            section: None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
