//! The index of an earlier chunk list, brought to a new one in place: the chunks that went are
//! deleted, the new ones (and those whose title or text changed under their id) added, the
//! rest stay as they are, not analysed again. An update writes one new segment and marks the
//! deleted documents; segments are merged only once deleted documents are a quarter of the
//! index's (a merge rewrites the whole index, which costs more than the rest of an update).
//!
//! Each document's `ord` is a key that never changes; `qrelgen-positions` maps keys to chunk
//! positions (an index as built has no such file: its keys are its positions). A deleted
//! document stays in its segment's postings until a merge, and in tantivy's statistics, so
//! qrelgen keeps its own: `qrelgen-deleted` counts, per segment, its deleted documents and,
//! per term, those that hold it (tantivy drops a segment whose documents are all deleted, and
//! its counts go with it), which BM25 and [`ChunkIndex::doc_freq`] take off tantivy's document
//! frequencies; BM25
//! counts only live documents and skips deleted ones in postings; and the exact total token
//! count (the old total, minus the deleted chunks' tokens, plus the new ones'; tantivy's counts
//! deleted documents, and after a merge is only estimated from quantized field lengths) is kept
//! in `qrelgen-tokens`. So chunk count, document frequencies and average length are exactly a
//! rebuild's: every score has a rebuild's bits, every ranking is a rebuild's.
//!
//! Each of these files begins with the opstamp of the tantivy commit it was written for
//! (`meta.json`'s); one of another commit (a power loss between tantivy's commit and the
//! files' renames, either way round) is not used: the index is rebuilt, as for a damaged one.

use super::analyzer::WordTerms;
use super::bm25::DeletedTerms;
use super::chunks::ChunkList;
use super::error::{IndexError, Result};
use super::{
    Analyzer, ChunkIndex, FINGERPRINT_FILE, IndexOrigin, Opened, WRITER_MEMORY_PER_THREAD, write_error,
};
use crate::id::ChunkId;
use crate::progress::StageProgress;
use crate::record::Chunk;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::Path;
use tantivy::schema::Field;
use tantivy::{Index, IndexWriter, Searcher, Term};

/// Key → chunk position (`u32::MAX` for a deleted key), little-endian `u32`s.
pub(super) const POSITIONS_FILE: &str = "qrelgen-positions";
/// The exact number of tokens in the index's search field, a little-endian `u64`.
pub(super) const TOKENS_FILE: &str = "qrelgen-tokens";
/// Per segment with deleted documents: its id, their count, and per term (by term order) how
/// many of them hold it (little-endian `u64`s, texts length-prefixed, each list after its
/// length).
pub(super) const DELETED_FILE: &str = "qrelgen-deleted";
/// The first bytes of each of the files above: a mark of their format, then (a little-endian
/// `u64`) the opstamp of the tantivy commit they go with.
const SIDE_MARK: &[u8; 8] = b"qrelgen\x01";
/// Segments are merged (and deleted documents dropped) once more than this share of the
/// index's documents are deleted.
const MERGE_PAST_DELETED: f64 = 0.25;

/// A chunk of the corpus a model was built on, in its position.
#[derive(Debug, Clone, Copy)]
pub struct OldChunk<'a> {
    /// Its id.
    pub id: &'a ChunkId,
    /// Its document title.
    pub title: &'a str,
    /// Its text.
    pub text: &'a str,
}

impl<'a> From<&'a Chunk> for OldChunk<'a> {
    fn from(chunk: &'a Chunk) -> Self {
        Self { id: &chunk.id, title: &chunk.title, text: &chunk.text }
    }
}

/// The chunk list an index on disk was built (or last updated) for.
#[derive(Debug, Clone, Copy)]
pub struct Earlier<'a> {
    /// Its fingerprint.
    pub fingerprint: &'a str,
    /// Its chunks, in their positions.
    pub chunks: &'a [OldChunk<'a>],
}

/// Which chunks an update in place kept as the earlier list had them (the same id, title and
/// text), by their position in the new list: the others were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unchanged(Vec<bool>);

impl Unchanged {
    /// Whether the chunk at `position` is the earlier list's chunk of its id, as it was.
    #[must_use]
    pub fn at(&self, position: usize) -> bool {
        self.0.get(position).copied().unwrap_or(false)
    }
}

impl ChunkIndex {
    /// As [`ChunkIndex::open_or_build`], but when `dir` holds the index of the `earlier` chunk
    /// list (made with `analyzer`), updates it in place instead of building it again: only
    /// the chunks new to the list, or whose title or text changed under their id, are
    /// analysed, taken from `feed` (which hands over every chunk, in order). Searches then
    /// give exactly what a rebuilt index gives (see the module docs). An index that cannot be
    /// read as the earlier list's is built again. An index updated in place comes with the
    /// chunks it kept as they were.
    ///
    /// # Errors
    /// As [`ChunkIndex::open_or_build`].
    #[allow(clippy::too_many_arguments)]
    pub fn update_or_build<E: From<IndexError>>(
        dir: &Path,
        chunks: ChunkList,
        fingerprint: &str,
        earlier: Earlier<'_>,
        analyzer: Analyzer,
        threads: usize,
        progress: &StageProgress,
        feed: impl FnOnce(&mut dyn FnMut(&Chunk) -> Result<()>) -> Result<(), E>,
    ) -> Result<(Self, IndexOrigin, Option<Unchanged>), E> {
        let stamp_path = dir.join(FINGERPRINT_FILE);
        let on_disk = fs_err::read_to_string(&stamp_path).unwrap_or_default();
        let updatable = on_disk == Self::stamp(&analyzer, earlier.fingerprint)
            && on_disk != Self::stamp(&analyzer, fingerprint);
        let plan = if updatable { Plan::of(dir, &analyzer, &chunks, earlier) } else { None };
        let Some(plan) = plan else {
            return Self::open_or_build(dir, chunks, fingerprint, analyzer, threads, progress, feed)
                .map(|(index, origin)| (index, origin, None));
        };
        // Without its stamp, an index cut short here is rebuilt by the next run.
        fs_err::remove_file(&stamp_path).map_err(|e| write_error(&stamp_path, e))?;
        let unchanged = plan.apply(dir, &analyzer, earlier, progress, feed)?;
        let index = Opened::open(dir, &analyzer)?.attach(dir, chunks, fingerprint, analyzer, threads)?;
        let stamp = index.own_stamp();
        write_atomically(&stamp_path, stamp.as_bytes())?;
        Ok((index, IndexOrigin::Updated, Some(unchanged)))
    }
}

/// What changes: per key, the new position of its chunk (`None`: deleted); per new position,
/// the key, earlier position and segment of the document that holds its id; the keys (with
/// positions and segments) whose chunks went; the exact token count so far; and each
/// segment's id and deleted documents so far.
struct Plan {
    index: Index,
    ord: Field,
    moved_to: Vec<Option<u32>>,
    from: Vec<Option<(u64, u32, u32)>>,
    gone: Vec<(u64, u32, u32)>,
    tokens: u64,
    segments: Vec<String>,
    deletions: Deletions,
}

/// Per segment id, its deleted documents.
pub(super) type Deletions = BTreeMap<String, SegmentDeletions>;

/// A segment's deleted documents: how many, and per term how many hold it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SegmentDeletions {
    documents: u32,
    terms: DeletedTerms,
}

impl SegmentDeletions {
    /// Counts a chunk's document as deleted (analysed by `words`); returns its token count.
    fn add(&mut self, words: &mut WordTerms<'_>, title: &str, text: &str) -> u64 {
        let (mut tokens, mut terms) = (0, foldhash::HashSet::<String>::default());
        for part in [title, text] {
            words.each(part, |term, _| {
                tokens += 1;
                if !terms.contains(term) {
                    terms.insert(term.to_owned());
                }
            });
        }
        for term in terms {
            match self.terms.get_mut(&term) {
                Some(count) => *count += 1,
                None => drop(self.terms.insert(term, 1)),
            }
        }
        self.documents += 1;
        tokens
    }
}

/// The number of analyzed tokens of a chunk as the index holds it (its title's and text's).
fn token_count(words: &mut WordTerms<'_>, title: &str, text: &str) -> u64 {
    let mut tokens = 0;
    for part in [title, text] {
        words.each(part, |_, _| tokens += 1);
    }
    tokens
}

/// The deletions of `searcher`'s segments (see [`DELETED_FILE`]), the index at commit
/// `opstamp`; `None` when a segment has deleted documents that the file does not count.
pub(super) fn deletions_of(dir: &Path, opstamp: u64, searcher: &Searcher) -> Option<Deletions> {
    let with_deletions: Vec<(String, u32)> = searcher
        .segment_readers()
        .iter()
        .filter(|r| r.num_deleted_docs() > 0)
        .map(|r| (r.segment_id().uuid_string(), r.num_deleted_docs()))
        .collect();
    if with_deletions.is_empty() {
        return Some(Deletions::new());
    }
    let mut deletions = read_deleted(dir, opstamp)?;
    deletions.retain(|id, _| with_deletions.iter().any(|(with, _)| with == id));
    let counted = |(id, n): &(String, u32)| deletions.get(id).is_some_and(|d| d.documents == *n);
    with_deletions.iter().all(counted).then_some(deletions)
}

/// Per term, the deleted documents of all segments that hold it.
pub(super) fn deleted_terms(deletions: Deletions) -> DeletedTerms {
    let mut all = DeletedTerms::default();
    for (_, segment) in deletions {
        for (term, n) in segment.terms {
            *all.entry(term).or_default() += n;
        }
    }
    all
}

impl Plan {
    /// The plan for the index in `dir`; `None` when it cannot be updated (an older schema, a
    /// position past the earlier list, an updated index without its token count, a damaged
    /// index): then it is rebuilt.
    fn of(dir: &Path, analyzer: &Analyzer, chunks: &ChunkList, earlier: Earlier<'_>) -> Option<Self> {
        let opened = Opened::open(dir, analyzer).ok()?;
        let index = opened.searcher.index().clone();
        let schema = index.schema();
        let (ord, search) = (opened.fields.ord, opened.fields.search);
        if !schema.get_field_entry(ord).is_indexed() {
            return None;
        }
        let keys = read_positions(dir, opened.opstamp).ok()?;
        let exact = read_tokens(dir, opened.opstamp);
        // An updated index's own token count is only estimated: without the exact one, rebuild.
        if keys.is_some() && exact.is_none() {
            return None;
        }
        let now: HashMap<&str, u32> = (0..chunks.len()).map(|at| (chunks.id_str(at), at as u32)).collect();
        let mut moved_to = vec![None; keys.as_ref().map_or(earlier.chunks.len(), Vec::len)];
        let (mut from, mut gone, mut tokens) = (vec![None; chunks.len()], Vec::new(), 0);
        let segments = opened.searcher.segment_readers();
        let mut ords = Vec::with_capacity(segments.len());
        for segment in segments {
            tokens += segment.inverted_index(search).ok()?.total_num_tokens();
            ords.push(segment.fast_fields().column_first_or_default::<u64>("ord").ok()?);
        }
        for (segment, doc, position) in opened.live() {
            let key = ords[segment as usize].get_val(doc);
            let old = earlier.chunks.get(position as usize)?;
            let slot = moved_to.get_mut(usize::try_from(key).ok()?)?;
            *slot = now.get(old.id.as_str()).copied();
            match *slot {
                Some(at) => *from.get_mut(at as usize)? = Some((key, position, segment)),
                None => gone.push((key, position, segment)),
            }
        }
        let segments = segments.iter().map(|s| s.segment_id().uuid_string()).collect();
        let deletions = opened.deletions;
        Some(Self { index, ord, moved_to, from, gone, tokens: exact.unwrap_or(tokens), segments, deletions })
    }

    /// Deletes the chunks that went or changed, adds the new and changed ones, merges the
    /// segments when many documents are deleted, and writes the key, token and deleted-term
    /// files. Returns the chunks kept as they were.
    fn apply<E: From<IndexError>>(
        self,
        dir: &Path,
        analyzer: &Analyzer,
        earlier: Earlier<'_>,
        progress: &StageProgress,
        feed: impl FnOnce(&mut dyn FnMut(&Chunk) -> Result<()>) -> Result<(), E>,
    ) -> Result<Unchanged, E> {
        let err = |source| IndexError::Tantivy { path: dir.to_owned(), source };
        let Self { index, ord, mut moved_to, from, gone, mut tokens, segments, mut deletions } = self;
        let mut writer: IndexWriter =
            index.writer_with_num_threads(1, WRITER_MEMORY_PER_THREAD).map_err(err)?;
        writer.set_merge_policy(Box::new(tantivy::indexer::NoMergePolicy));
        let old = |position: u32| earlier.chunks.get(position as usize);
        // Deletes the document of `key` in `segment`, whose chunk was `was`.
        let mut words = WordTerms::new(analyzer);
        let mut delete = |writer: &IndexWriter, key: u64, segment: u32, was: &OldChunk<'_>, words: &mut _| {
            writer.delete_term(Term::from_field_u64(ord, key));
            let id = segments[segment as usize].clone();
            deletions.entry(id).or_default().add(words, was.title, was.text)
        };
        for &(key, position, segment) in &gone {
            let Some(was) = old(position) else { continue };
            tokens -= delete(&writer, key, segment, was, &mut words).min(tokens);
        }
        let fields = super::schema().1;
        let mut position = 0usize;
        let mut unchanged = vec![false; from.len()];
        feed(&mut |chunk| {
            let at = position;
            position += 1;
            progress.inc(1);
            if let Some((key, was, segment)) = from.get(at).copied().flatten() {
                let Some(was) = old(was) else { return Ok(()) };
                if was.title == chunk.title && was.text == chunk.text {
                    unchanged[at] = true;
                    return Ok(());
                }
                // The same id with another title or text: its document is replaced.
                tokens -= delete(&writer, key, segment, was, &mut words).min(tokens);
                moved_to[key as usize] = None;
            }
            let key = moved_to.len() as u64;
            moved_to.push(Some(at as u32));
            tokens += token_count(&mut words, &chunk.title, &chunk.text);
            writer.add_document(super::document(fields, chunk, key)).map_err(err)?;
            Ok(())
        })?;
        writer.commit().map_err(err)?;
        // tantivy drops a segment whose documents are all deleted.
        let metas = index.searchable_segment_metas().map_err(err)?;
        deletions.retain(|id, _| metas.iter().any(|m| m.id().uuid_string() == *id));
        let documents: u32 = metas.iter().map(tantivy::SegmentMeta::max_doc).sum();
        let deleted: u32 = metas.iter().map(tantivy::SegmentMeta::num_deleted_docs).sum();
        if f64::from(deleted) > f64::from(documents) * MERGE_PAST_DELETED {
            let ids: Vec<_> = metas.iter().map(tantivy::SegmentMeta::id).collect();
            writer.merge(&ids).wait().map_err(err)?;
            deletions.clear();
        }
        writer.wait_merging_threads().map_err(err)?;
        // A merge keeps the commit's opstamp; `meta.json`'s is the one an open checks.
        let opstamp = index.load_metas().map_err(err)?.opstamp;
        let keys: Vec<u8> = moved_to.iter().flat_map(|p| p.unwrap_or(u32::MAX).to_le_bytes()).collect();
        write_side(&dir.join(POSITIONS_FILE), opstamp, &keys)?;
        write_side(&dir.join(TOKENS_FILE), opstamp, &tokens.to_le_bytes())?;
        write_side(&dir.join(DELETED_FILE), opstamp, &encode_deleted(&deletions))?;
        // The renames reach the disk before the stamp is written (power loss cannot keep the
        // stamp and lose a rename).
        super::sync_folder(dir).map_err(|e| write_error(dir, e))?;
        Ok(Unchanged(unchanged))
    }
}

/// Writes `bytes` to `path` whole or not at all: to a file beside it, flushed to disk, then
/// renamed over it.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let write = || -> std::io::Result<()> {
        let mut file = fs_err::File::create(&partial)?;
        std::io::Write::write_all(&mut file, bytes)?;
        file.sync_all()?;
        fs_err::rename(&partial, path)
    };
    write().map_err(|e| write_error(path, e))
}

/// Writes the side file `path` of the index at commit `opstamp`: [`SIDE_MARK`], the opstamp,
/// then `content` (whole or not at all).
fn write_side(path: &Path, opstamp: u64, content: &[u8]) -> Result<()> {
    let mut bytes = Vec::with_capacity(SIDE_MARK.len() + 8 + content.len());
    bytes.extend(SIDE_MARK);
    bytes.extend(opstamp.to_le_bytes());
    bytes.extend(content);
    write_atomically(path, &bytes)
}

/// What the side file at `path` holds for the index at commit `opstamp`.
#[derive(Debug, PartialEq, Eq)]
enum Side {
    /// There is none (an index as built).
    Absent,
    /// It was written for another commit, or its mark is not [`SIDE_MARK`]: not to be used.
    Foreign,
    /// Its content, written for this commit.
    Ours(Vec<u8>),
}

fn read_side(path: &Path, opstamp: u64) -> Side {
    let Ok(mut bytes) = fs_err::read(path) else { return Side::Absent };
    let ours = bytes.len() >= SIDE_MARK.len() + 8
        && bytes.starts_with(SIDE_MARK)
        && bytes[SIDE_MARK.len()..SIDE_MARK.len() + 8] == opstamp.to_le_bytes();
    if !ours {
        return Side::Foreign;
    }
    bytes.drain(..SIDE_MARK.len() + 8);
    Side::Ours(bytes)
}

/// The key → position map of an updated index at commit `opstamp`; `None` for one as built;
/// `Err` for one of another commit, or damaged (then the index cannot be read).
pub(super) fn read_positions(dir: &Path, opstamp: u64) -> Result<Option<Vec<u32>>, ()> {
    match read_side(&dir.join(POSITIONS_FILE), opstamp) {
        Side::Absent => Ok(None),
        Side::Ours(bytes) if bytes.len() % 4 == 0 => {
            Ok(Some(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()))
        }
        Side::Ours(_) | Side::Foreign => Err(()),
    }
}

/// The exact token count of an updated index at commit `opstamp`; `None` for one as built,
/// and for a count of another commit or a damaged one.
pub(super) fn read_tokens(dir: &Path, opstamp: u64) -> Option<u64> {
    let Side::Ours(bytes) = read_side(&dir.join(TOKENS_FILE), opstamp) else { return None };
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// The deletions `qrelgen-deleted` records for the index at commit `opstamp`; `None` without
/// it (an index as built), for one of another commit or a damaged one.
fn read_deleted(dir: &Path, opstamp: u64) -> Option<Deletions> {
    let Side::Ours(bytes) = read_side(&dir.join(DELETED_FILE), opstamp) else { return None };
    let mut input = crate::codec::Decoder::new(&bytes);
    let mut deletions = Deletions::new();
    for _ in 0..input.size()? {
        let id = input.text()?.to_owned();
        let documents = input.small()?;
        let n = input.size()?;
        // Each term takes at least 16 bytes: a count past that is damage, not a size to reserve.
        let mut terms = DeletedTerms::default();
        terms.reserve(n.min(input.rest().len() / 16));
        for _ in 0..n {
            let term = input.text()?;
            terms.insert(term.to_owned(), input.small()?);
        }
        deletions.insert(id, SegmentDeletions { documents, terms });
    }
    input.rest().is_empty().then_some(deletions)
}

/// The bytes of `qrelgen-deleted` for `deletions`.
fn encode_deleted(deletions: &Deletions) -> Vec<u8> {
    let mut bytes = Vec::new();
    let number = |bytes: &mut Vec<u8>, n: u64| bytes.extend(n.to_le_bytes());
    number(&mut bytes, deletions.len() as u64);
    for (id, segment) in deletions {
        number(&mut bytes, id.len() as u64);
        bytes.extend(id.as_bytes());
        number(&mut bytes, u64::from(segment.documents));
        let mut terms: Vec<(&String, &u32)> = segment.terms.iter().collect();
        terms.sort_unstable();
        number(&mut bytes, terms.len() as u64);
        for (term, count) in terms {
            number(&mut bytes, term.len() as u64);
            bytes.extend(term.as_bytes());
            number(&mut bytes, u64::from(*count));
        }
    }
    bytes
}

#[cfg(test)]
mod tests;
