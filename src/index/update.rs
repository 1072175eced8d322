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
use crate::progress::Stage;
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
        progress: &Stage,
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
        progress: &Stage,
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
mod tests {
    use super::*;
    use crate::id::ChunkId;
    use crate::index::{Hit, test_chunks};

    /// Chunks named by their text's first word, so that one text keeps its id in every list.
    fn named(texts: &[&str]) -> Vec<Chunk> {
        let mut chunks = test_chunks(texts);
        for (chunk, text) in chunks.iter_mut().zip(texts) {
            let name = text.split(' ').next().unwrap_or_default();
            chunk.id = ChunkId::parse(name).unwrap();
        }
        chunks
    }

    fn fingerprint(chunks: &[Chunk]) -> String {
        let parts: Vec<String> =
            chunks.iter().map(|c| format!("{}\n{}\n{}", c.id, c.title, c.text)).collect();
        crate::id::content_hash(&parts.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn index(dir: &Path, chunks: &[Chunk], earlier: Option<Earlier<'_>>) -> (ChunkIndex, IndexOrigin) {
        let metas: ChunkList = chunks.iter().collect();
        let feed = |add: &mut dyn FnMut(&Chunk) -> Result<()>| chunks.iter().try_for_each(add);
        let (analyzer, stage, print) = (Analyzer::default(), Stage::hidden(), fingerprint(chunks));
        match earlier {
            Some(earlier) => {
                let (index, origin, unchanged) =
                    ChunkIndex::update_or_build(dir, metas, &print, earlier, analyzer, 2, &stage, feed)
                        .unwrap();
                assert_eq!(unchanged.is_some(), origin == IndexOrigin::Updated);
                if let Some(unchanged) = unchanged {
                    for (position, chunk) in chunks.iter().enumerate() {
                        let was = earlier.chunks.iter().find(|old| *old.id == chunk.id);
                        let same = was.is_some_and(|old| old.title == chunk.title && old.text == chunk.text);
                        assert_eq!(unchanged.at(position), same, "{}", chunk.id);
                    }
                }
                (index, origin)
            }
            None => ChunkIndex::open_or_build(dir, metas, &print, analyzer, 2, &stage, feed).unwrap(),
        }
    }

    fn olds(chunks: &[Chunk]) -> Vec<OldChunk<'_>> {
        chunks.iter().map(OldChunk::from).collect()
    }

    fn bits(hits: &[Hit]) -> Vec<(usize, u32)> {
        hits.iter().map(|h| (h.chunk, h.score.to_bits())).collect()
    }

    const QUERIES: [&str; 5] =
        ["quota storage", "sync error links", "password", "folder upload quota", "kidney"];

    #[test]
    fn an_updated_index_searches_exactly_as_a_rebuilt_one() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&[
            "alpha quota storage sync error",
            "bravo storage links password links",
            "charlie sync sync error folder",
            "delta upload folder quota quota quota",
            "echo password upload links",
            "foxtrot quota error",
        ]);
        // bravo and echo deleted; golf and hotel added between the kept ones.
        let v2 = named(&[
            "golf storage quota kidney",
            "alpha quota storage sync error",
            "charlie sync sync error folder",
            "hotel links links links password error upload",
            "delta upload folder quota quota quota",
            "foxtrot quota error",
        ]);
        // And again: charlie deleted, india added (an update of an updated index).
        let v3: Vec<Chunk> = v2
            .iter()
            .filter(|c| c.id.as_str() != "charlie")
            .cloned()
            .chain(named(&["india kidney quota sync"]))
            .collect();
        let live = dir.path().join("live");
        index(&live, &v1, None);
        for (before, after) in [(&v1, &v2), (&v2, &v3)] {
            let earlier = Earlier { fingerprint: &fingerprint(before), chunks: &olds(before) };
            let (updated, origin) = index(&live, after, Some(earlier));
            assert_eq!(origin, IndexOrigin::Updated);
            let rebuilt_dir = tempfile::tempdir().unwrap();
            let (rebuilt, _) = index(rebuilt_dir.path(), after, None);
            assert_eq!(updated.len(), after.len());
            for query in QUERIES {
                for limit in [1, 2, 3, 10] {
                    let got = bits(&updated.search(query, limit).unwrap());
                    assert_eq!(got, bits(&rebuilt.search(query, limit).unwrap()), "{query} @{limit}");
                }
                let term = &updated.analyzer().terms(query)[0];
                assert_eq!(updated.doc_freq(term).unwrap(), rebuilt.doc_freq(term).unwrap(), "{term}");
            }
            for (position, chunk) in after.iter().enumerate() {
                assert_eq!(updated.text(position).unwrap(), chunk.text);
                assert_eq!(updated.position(&chunk.id), Some(position));
            }
        }
        // The index as it stands opens again as these chunks (reused, not rebuilt).
        assert_eq!(index(&live, &v3, None).1, IndexOrigin::Reused);
    }

    #[test]
    fn an_index_of_another_chunk_list_is_built_again() {
        let dir = tempfile::tempdir().unwrap();
        let (v1, v2) = (named(&["alpha quota", "bravo sync"]), named(&["alpha quota", "charlie links"]));
        index(dir.path(), &v1, None);
        let wrong = Earlier { fingerprint: "not the index's", chunks: &olds(&v1) };
        assert_eq!(index(dir.path(), &v2, Some(wrong)).1, IndexOrigin::Built);
    }

    /// Updates the index in `dir` of `before` to `after`, and checks it against a rebuild.
    fn update_and_compare(dir: &Path, before: &[Chunk], after: &[Chunk]) -> ChunkIndex {
        let earlier = Earlier { fingerprint: &fingerprint(before), chunks: &olds(before) };
        let (updated, origin) = index(dir, after, Some(earlier));
        assert_eq!(origin, IndexOrigin::Updated);
        let rebuilt_dir = tempfile::tempdir().unwrap();
        let (rebuilt, _) = index(rebuilt_dir.path(), after, None);
        // Limits below the chunk count too: the top-k heap fills and MaxScore prunes.
        for query in QUERIES.iter().chain(&["renamed title", "bravo", "kidney kidney"]) {
            for limit in [1, 2, 3, 10] {
                let got = bits(&updated.search(query, limit).unwrap());
                assert_eq!(got, bits(&rebuilt.search(query, limit).unwrap()), "{query} @{limit}");
            }
        }
        // Every term of either list, those only deleted chunks held included.
        for chunk in before.iter().chain(after) {
            for term in updated.analyzer().terms(&format!("{} {}", chunk.title, chunk.text)) {
                assert_eq!(updated.doc_freq(&term).unwrap(), rebuilt.doc_freq(&term).unwrap(), "{term}");
                for limit in [1, 2, 3, 10] {
                    let got = updated.search(&term, limit).unwrap();
                    assert_eq!(got, rebuilt.search(&term, limit).unwrap(), "{term} @{limit}");
                }
            }
        }
        for (position, chunk) in after.iter().enumerate() {
            let stored = updated.stored(position).unwrap();
            assert_eq!(
                (stored.title.as_str(), stored.text.as_str()),
                (chunk.title.as_str(), chunk.text.as_str())
            );
        }
        updated
    }

    fn segments(dir: &Path) -> usize {
        Index::open_in_dir(dir).unwrap().searchable_segment_ids().unwrap().len()
    }

    const V1: [&str; 4] = [
        "alpha quota storage sync",
        "bravo storage links password",
        "charlie sync error",
        "delta upload folder",
    ];

    #[test]
    fn a_deleted_chunk_counts_the_tokens_and_terms_of_its_title_and_text() {
        let analyzer = Analyzer::default();
        let (title, text) = ("Quota sync", "the quota stops syncs, quota links");
        let (mut deleted, mut words) = (SegmentDeletions::default(), WordTerms::new(&analyzer));
        let tokens = deleted.add(&mut words, title, text);
        assert_eq!(tokens, analyzer.chunk_tokens(title, text).len() as u64);
        assert_eq!(token_count(&mut words, title, text), tokens);
        assert_eq!(
            (deleted.documents, deleted.terms.get("quota"), deleted.terms.get("link")),
            (1, Some(&1), Some(&1))
        );
        deleted.add(&mut words, "", "quota");
        assert_eq!((deleted.documents, deleted.terms.get("quota"), deleted.terms.len()), (2, Some(&2), 4));
    }

    #[test]
    fn a_title_changed_under_kept_ids_is_updated_as_a_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&V1);
        let mut v2 = v1.clone();
        v2[1].title = "renamed title".to_owned();
        v2[2].title = "renamed".to_owned();
        index(dir.path(), &v1, None);
        update_and_compare(dir.path(), &v1, &v2);
    }

    #[test]
    fn a_text_changed_under_a_kept_id_is_updated_as_a_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&V1);
        let v2 = named(&[
            "alpha quota storage sync",
            "bravo kidney kidney quota",
            "charlie sync error",
            "delta upload",
        ]);
        index(dir.path(), &v1, None);
        update_and_compare(dir.path(), &v1, &v2);
        // And an update of that updated index, with one more change.
        let v3 = named(&["alpha quota", "bravo kidney kidney quota", "charlie sync error", "delta upload"]);
        update_and_compare(dir.path(), &v2, &v3);
    }

    #[test]
    fn a_damaged_index_is_built_again() {
        let dir = tempfile::tempdir().unwrap();
        let (v1, v2) = (named(&V1), named(&["alpha quota", "echo links"]));
        index(dir.path(), &v1, None);
        for entry in fs_err::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "term") {
                fs_err::remove_file(path).unwrap();
            }
        }
        let earlier = Earlier { fingerprint: &fingerprint(&v1), chunks: &olds(&v1) };
        let (rebuilt, origin) = index(dir.path(), &v2, Some(earlier));
        assert_eq!(origin, IndexOrigin::Built);
        assert_eq!(rebuilt.text(1).unwrap(), "echo links");
    }

    #[test]
    fn an_index_whose_documents_do_not_fit_its_chunks_is_built_again_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&V1);
        index(dir.path(), &v1, None);
        // Every key at position 0: the stamp fits, the documents do not.
        let now = opstamp(dir.path());
        write_side(&dir.path().join(POSITIONS_FILE), now, &[0u8; 16]).unwrap();
        write_side(&dir.path().join(TOKENS_FILE), now, &9u64.to_le_bytes()).unwrap();
        assert_eq!(index(dir.path(), &v1, None).1, IndexOrigin::Built);
        assert_eq!(index(dir.path(), &v1, None).1, IndexOrigin::Reused);
    }

    #[test]
    fn an_updated_index_without_its_token_count_is_built_again() {
        let dir = tempfile::tempdir().unwrap();
        let (v1, v2) = (named(&V1), named(&["alpha quota storage sync", "charlie sync error", "echo links"]));
        index(dir.path(), &v1, None);
        update_and_compare(dir.path(), &v1, &v2);
        assert!(!dir.path().join(format!("{TOKENS_FILE}.partial")).exists());
        fs_err::remove_file(dir.path().join(TOKENS_FILE)).unwrap();
        let v3 = named(&["alpha quota storage sync", "echo links"]);
        let earlier = Earlier { fingerprint: &fingerprint(&v2), chunks: &olds(&v2) };
        assert_eq!(index(dir.path(), &v3, Some(earlier)).1, IndexOrigin::Built);
        fs_err::remove_file(dir.path().join(TOKENS_FILE)).ok();
        assert_eq!(index(dir.path(), &v3, None).1, IndexOrigin::Reused, "an index as built has none");
    }

    #[test]
    fn additions_only_add_segments_and_are_never_merged() {
        let dir = tempfile::tempdir().unwrap();
        let mut chunks = named(&["alpha quota"]);
        index(dir.path(), &chunks, None);
        let start = segments(dir.path());
        // More updates than tantivy's default merge policy lets stand unmerged (8).
        for (n, name) in ["b", "c", "d", "e", "f", "g", "h", "i", "j", "k"].iter().enumerate() {
            let before = chunks.clone();
            chunks.extend(named(&[&format!("{name} quota sync")]));
            update_and_compare(dir.path(), &before, &chunks);
            assert_eq!(segments(dir.path()), start + n + 1);
        }
    }

    /// The opstamp of the index in `dir`'s commit.
    fn opstamp(dir: &Path) -> u64 {
        Index::open_in_dir(dir).unwrap().load_metas().unwrap().opstamp
    }

    /// The deletions recorded for the index in `dir` as it stands.
    fn deleted_now(dir: &Path) -> Option<Deletions> {
        read_deleted(dir, opstamp(dir))
    }

    fn deleted_documents(dir: &Path) -> u32 {
        let index = Index::open_in_dir(dir).unwrap();
        let searcher = index.reader().unwrap().searcher();
        searcher.segment_readers().iter().map(tantivy::SegmentReader::num_deleted_docs).sum()
    }

    /// The index of `chunks` in one segment (one writer thread), which no single deletion empties.
    fn one_segment(dir: &Path, chunks: &[Chunk]) {
        let metas: ChunkList = chunks.iter().collect();
        let feed = |add: &mut dyn FnMut(&Chunk) -> Result<()>| chunks.iter().try_for_each(add);
        let (analyzer, stage, print) = (Analyzer::default(), Stage::hidden(), fingerprint(chunks));
        ChunkIndex::open_or_build(dir, metas, &print, analyzer, 1, &stage, feed).unwrap();
        assert_eq!(segments(dir), 1);
    }

    #[test]
    fn deleted_documents_stay_until_they_are_a_quarter_of_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&V1);
        // bravo deleted, echo added: 1 deleted of 5 documents.
        let mut v2: Vec<Chunk> = v1.iter().filter(|c| c.id.as_str() != "bravo").cloned().collect();
        v2.extend(named(&["echo links quota"]));
        // charlie deleted: 2 of 5, past a quarter.
        let v3: Vec<Chunk> = v2.iter().filter(|c| c.id.as_str() != "charlie").cloned().collect();
        let mut v4 = v3.clone();
        v4.extend(named(&["foxtrot sync password"]));
        one_segment(dir.path(), &v1);
        let start = segments(dir.path());
        update_and_compare(dir.path(), &v1, &v2);
        assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (start + 1, 1), "no merge");
        assert_eq!(deleted_terms(deleted_now(dir.path()).unwrap()).get("bravo"), Some(&1));
        update_and_compare(dir.path(), &v2, &v3);
        assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (1, 0), "merged");
        assert_eq!(deleted_now(dir.path()), Some(Deletions::new()));
        update_and_compare(dir.path(), &v3, &v4);
        assert_eq!(segments(dir.path()), 2, "an addition only adds a segment");
    }

    #[test]
    fn a_segment_whose_documents_all_went_takes_its_counts_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&V1);
        let mut v2 = v1.clone();
        v2.extend(named(&["echo quota links"]));
        // echo (alone in the second update's segment) and alpha go: the segment goes with echo.
        let v3: Vec<Chunk> = v2[1..4].to_vec();
        one_segment(dir.path(), &v1);
        update_and_compare(dir.path(), &v1, &v2);
        assert_eq!(segments(dir.path()), 2);
        update_and_compare(dir.path(), &v2, &v3);
        assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (1, 1));
        let deleted = deleted_terms(deleted_now(dir.path()).unwrap());
        assert_eq!((deleted.get("alpha"), deleted.get("echo")), (Some(&1), None));
    }

    #[test]
    fn an_index_with_deleted_documents_but_not_their_terms_is_built_again() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&V1);
        let v2: Vec<Chunk> = v1[1..].to_vec();
        one_segment(dir.path(), &v1);
        update_and_compare(dir.path(), &v1, &v2);
        assert_eq!(deleted_documents(dir.path()), 1);
        fs_err::remove_file(dir.path().join(DELETED_FILE)).unwrap();
        let v3: Vec<Chunk> = v2[1..].to_vec();
        let earlier = Earlier { fingerprint: &fingerprint(&v2), chunks: &olds(&v2) };
        assert_eq!(index(dir.path(), &v3, Some(earlier)).1, IndexOrigin::Built);
        assert_eq!(deleted_documents(dir.path()), 0);
    }

    #[test]
    fn a_damaged_deleted_terms_file_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let terms: DeletedTerms = [("quota".to_owned(), 2), ("sync".to_owned(), 1)].into_iter().collect();
        let deletions: Deletions = [
            ("a".to_owned(), SegmentDeletions { documents: 2, terms }),
            ("b".to_owned(), SegmentDeletions::default()),
        ]
        .into_iter()
        .collect();
        let path = dir.path().join(DELETED_FILE);
        write_side(&path, 7, &encode_deleted(&deletions)).unwrap();
        assert_eq!(read_deleted(dir.path(), 7), Some(deletions));
        let bytes = fs_err::read(&path).unwrap();
        // Into the content, into the opstamp, into the mark.
        for cut in [bytes.len() - 1, SIDE_MARK.len() + 8 + 9, SIDE_MARK.len() + 3, 5, 0] {
            fs_err::write(&path, &bytes[..cut]).unwrap();
            assert_eq!(read_deleted(dir.path(), 7), None, "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        fs_err::write(&path, &longer).unwrap();
        assert_eq!(read_deleted(dir.path(), 7), None);
    }

    /// Eight chunks in one segment; `quota` is in most, and `hotel` (short, `quota` three
    /// times) would be `quota`'s best score.
    const EIGHT: [&str; 8] = [
        "alpha quota storage sync error links",
        "bravo storage links password upload",
        "charlie sync error folder quota",
        "delta upload folder quota storage links",
        "echo password upload links quota sync",
        "foxtrot quota error storage",
        "golf quota kidney",
        "hotel quota quota quota",
    ];

    #[test]
    fn a_deleted_short_chunk_that_repeats_a_term_is_not_its_best_score() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&EIGHT);
        let v2: Vec<Chunk> = v1.iter().filter(|c| c.id.as_str() != "hotel").cloned().collect();
        one_segment(dir.path(), &v1);
        let updated = update_and_compare(dir.path(), &v1, &v2);
        assert_eq!(deleted_documents(dir.path()), 1, "not merged");
        let rebuilt_dir = tempfile::tempdir().unwrap();
        let (rebuilt, _) = index(rebuilt_dir.path(), &v2, None);
        for query in ["quota", "quota quota", "hotel quota", "quota kidney", "quota storage sync"] {
            for limit in [1, 2, 3] {
                let got = bits(&updated.search(query, limit).unwrap());
                assert_eq!(got, bits(&rebuilt.search(query, limit).unwrap()), "{query} @{limit}");
            }
        }
    }

    #[test]
    fn two_updates_in_a_row_with_deletions_in_two_segments_search_as_rebuilds() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&EIGHT);
        // hotel deleted (quota), india and juliet added: 1 deleted of 10.
        let mut v2: Vec<Chunk> = v1.iter().filter(|c| c.id.as_str() != "hotel").cloned().collect();
        v2.extend(named(&["india quota quota sync", "juliet links password quota"]));
        // india deleted from the second segment (quota again), kilo added: 2 deleted of 11.
        let mut v3: Vec<Chunk> = v2.iter().filter(|c| c.id.as_str() != "india").cloned().collect();
        v3.extend(named(&["kilo storage quota"]));
        one_segment(dir.path(), &v1);
        update_and_compare(dir.path(), &v1, &v2);
        assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (2, 1));
        update_and_compare(dir.path(), &v2, &v3);
        assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (3, 2), "not merged");
        let deletions = deleted_now(dir.path()).unwrap();
        assert_eq!(deletions.len(), 2, "deletions in two segments");
        let deleted = deleted_terms(deletions);
        assert_eq!((deleted.get("quota"), deleted.get("sync")), (Some(&2), Some(&1)));
    }

    #[test]
    fn side_files_of_another_commit_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&V1);
        let v2: Vec<Chunk> = v1[1..].to_vec();
        one_segment(dir.path(), &v1);
        update_and_compare(dir.path(), &v1, &v2);
        let now = opstamp(dir.path());
        assert!(read_positions(dir.path(), now).unwrap().is_some());
        assert!(read_tokens(dir.path(), now).is_some());
        assert_eq!(read_deleted(dir.path(), now).map(|d| d.len()), Some(1));
        for other in [now - 1, now + 1] {
            assert_eq!(read_positions(dir.path(), other), Err(()), "{other}");
            assert_eq!(read_tokens(dir.path(), other), None, "{other}");
            assert_eq!(read_deleted(dir.path(), other), None, "{other}");
        }
        // A file without the mark (of an older qrelgen) is no file of this commit either.
        fs_err::write(dir.path().join(TOKENS_FILE), 9u64.to_le_bytes()).unwrap();
        assert_eq!(read_tokens(dir.path(), now), None);
    }

    #[test]
    fn a_token_count_left_from_the_commit_before_is_refused_and_the_index_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = named(&V1);
        let v2 = named(&["alpha quota storage sync", "bravo kidney kidney quota", "charlie sync error"]);
        let v3 = named(&["alpha quota", "bravo kidney kidney quota", "charlie sync error", "echo links"]);
        index(dir.path(), &v1, None);
        update_and_compare(dir.path(), &v1, &v2);
        let tokens = dir.path().join(TOKENS_FILE);
        let before = fs_err::read(&tokens).unwrap();
        update_and_compare(dir.path(), &v2, &v3);
        assert_ne!(fs_err::read(&tokens).unwrap(), before);
        // tantivy's commit reached the disk, the new count's rename did not.
        fs_err::write(&tokens, &before).unwrap();
        let (opened, origin) = index(dir.path(), &v3, None);
        assert_eq!(origin, IndexOrigin::Built, "the count of the commit before is not used");
        let rebuilt_dir = tempfile::tempdir().unwrap();
        let (rebuilt, _) = index(rebuilt_dir.path(), &v3, None);
        for query in QUERIES {
            assert_eq!(bits(&opened.search(query, 10).unwrap()), bits(&rebuilt.search(query, 10).unwrap()));
        }
    }
}
