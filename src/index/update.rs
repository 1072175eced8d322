//! The index of an earlier chunk list, brought to a new one in place: the chunks that went are
//! deleted, the new ones added, the rest stay as they are (no re-analysis, no re-writing).
//!
//! Each document's `ord` is a key that never changes; `qrelgen-positions` maps keys to chunk
//! positions (an index as built has no such file: its keys are its positions). Once deleted
//! documents are in it, the index is merged into one segment, so they leave its statistics:
//! chunk count and document frequencies are then exactly a rebuild's. The total token count
//! after such a merge is only estimated by tantivy (from quantized field lengths), so the exact
//! one (the old total, minus the deleted chunks' tokens, plus the new ones') is kept in
//! `qrelgen-tokens` and BM25 uses it: every score has a rebuild's bits, every ranking is a
//! rebuild's.

use super::error::{IndexError, Result};
use super::fold::OldChunk;
use super::{
    Analyzer, ChunkIndex, FINGERPRINT_FILE, IndexOrigin, Opened, WRITER_MEMORY_PER_THREAD, register,
    write_error,
};
use crate::id::ChunkId;
use crate::progress::Stage;
use crate::record::{Chunk, ChunkMeta};
use std::collections::HashMap;
use std::path::Path;
use tantivy::schema::Field;
use tantivy::{Index, IndexWriter, Term};

/// Key → chunk position (`u32::MAX` for a deleted key), little-endian `u32`s.
pub(super) const POSITIONS_FILE: &str = "qrelgen-positions";
/// The exact number of tokens in the index's search field, a little-endian `u64`.
pub(super) const TOKENS_FILE: &str = "qrelgen-tokens";

/// The chunk list an index on disk was built (or last updated) for.
#[derive(Debug, Clone, Copy)]
pub struct Earlier<'a> {
    /// Its fingerprint.
    pub fingerprint: &'a str,
    /// Its chunks, in their positions.
    pub chunks: &'a [OldChunk<'a>],
}

impl ChunkIndex {
    /// As [`ChunkIndex::open_or_build`], but when `dir` holds the index of the `earlier` chunk
    /// list (made with `analyzer`), updates it in place instead of building it again: only
    /// the chunks new to the list are analysed, taken from `feed` (which hands over every chunk,
    /// in order). Searches then give exactly what a rebuilt index gives (see the module docs).
    ///
    /// # Errors
    /// As [`ChunkIndex::open_or_build`].
    #[allow(clippy::too_many_arguments)]
    pub fn update_or_build<E: From<IndexError>>(
        dir: &Path,
        chunks: Vec<ChunkMeta>,
        fingerprint: &str,
        earlier: Earlier<'_>,
        analyzer: Analyzer,
        threads: usize,
        progress: &Stage,
        feed: impl FnOnce(&mut dyn FnMut(Chunk) -> Result<()>) -> Result<(), E>,
    ) -> Result<(Self, IndexOrigin), E> {
        let stamp_path = dir.join(FINGERPRINT_FILE);
        let on_disk = fs_err::read_to_string(&stamp_path).unwrap_or_default();
        let updatable = on_disk == Self::stamp(&analyzer, earlier.fingerprint)
            && on_disk != Self::stamp(&analyzer, fingerprint);
        let plan = if updatable { Plan::of(dir, &analyzer, &chunks, earlier)? } else { None };
        let Some(plan) = plan else {
            return Self::open_or_build(dir, chunks, fingerprint, analyzer, threads, progress, feed);
        };
        // Without its stamp, an index cut short here is rebuilt by the next run.
        fs_err::remove_file(&stamp_path).map_err(|e| write_error(&stamp_path, e))?;
        plan.apply(dir, &analyzer, &chunks, earlier, progress, feed)?;
        let stamp = Self::stamp(&analyzer, fingerprint);
        fs_err::write(&stamp_path, stamp).map_err(|source| write_error(&stamp_path, source))?;
        let index = Opened::open(dir, &analyzer)?.attach(dir, chunks, fingerprint, analyzer, threads)?;
        Ok((index, IndexOrigin::Updated))
    }
}

/// What changes: per key, the new position of its chunk (`None`: deleted), and the exact token
/// count so far.
struct Plan {
    index: Index,
    ord: Field,
    moved_to: Vec<Option<u32>>,
    tokens: u64,
}

impl Plan {
    /// The plan for the index in `dir`; `None` when it cannot be updated (an older schema, a
    /// position past the earlier list): then it is rebuilt.
    fn of(
        dir: &Path,
        analyzer: &Analyzer,
        chunks: &[ChunkMeta],
        earlier: Earlier<'_>,
    ) -> Result<Option<Self>> {
        let err = |source| IndexError::Tantivy { path: dir.to_owned(), source };
        let Ok(index) = Index::open_in_dir(dir) else { return Ok(None) };
        register(&index, analyzer);
        let schema = index.schema();
        let Ok(ord) = schema.get_field("ord") else { return Ok(None) };
        if !schema.get_field_entry(ord).is_indexed() {
            return Ok(None);
        }
        let opened = Opened::open(dir, analyzer)?;
        let keys = read_u32s(&dir.join(POSITIONS_FILE));
        let now: HashMap<&ChunkId, u32> =
            chunks.iter().enumerate().map(|(at, c)| (&c.id, at as u32)).collect();
        let mut moved_to = vec![None; keys.as_ref().map_or(earlier.chunks.len(), Vec::len)];
        let mut tokens = 0;
        let search = schema.get_field("search").map_err(err)?;
        for (segment, positions) in opened.searcher.segment_readers().iter().zip(&opened.positions) {
            tokens += segment.inverted_index(search).map_err(err)?.total_num_tokens();
            let ords = segment.fast_fields().column_first_or_default::<u64>("ord").map_err(err)?;
            for (doc, &position) in positions.iter().enumerate() {
                let key = ords.get_val(doc as u32) as usize;
                let Some(old) = earlier.chunks.get(position as usize) else { return Ok(None) };
                let Some(slot) = moved_to.get_mut(key) else { return Ok(None) };
                *slot = now.get(old.id).copied();
            }
        }
        if let Some(exact) = read_tokens(dir) {
            tokens = exact;
        }
        Ok(Some(Self { index, ord, moved_to, tokens }))
    }

    /// Deletes the chunks that went, adds the new ones, merges away the deleted documents and
    /// writes the key and token files.
    fn apply<E: From<IndexError>>(
        mut self,
        dir: &Path,
        analyzer: &Analyzer,
        chunks: &[ChunkMeta],
        earlier: Earlier<'_>,
        progress: &Stage,
        feed: impl FnOnce(&mut dyn FnMut(Chunk) -> Result<()>) -> Result<(), E>,
    ) -> Result<(), E> {
        let err = |source| IndexError::Tantivy { path: dir.to_owned(), source };
        let count =
            |title: &str, text: &str| (analyzer.tokens(title).len() + analyzer.tokens(text).len()) as u64;
        let kept: std::collections::HashSet<&ChunkId> = chunks.iter().map(|c| &c.id).collect();
        for gone in earlier.chunks.iter().filter(|c| !kept.contains(c.id)) {
            self.tokens -= count(gone.title, gone.text).min(self.tokens);
        }
        let mut writer: IndexWriter =
            self.index.writer_with_num_threads(1, WRITER_MEMORY_PER_THREAD).map_err(err)?;
        let deleted: Vec<usize> = (0..self.moved_to.len()).filter(|&k| self.moved_to[k].is_none()).collect();
        for &key in &deleted {
            writer.delete_term(Term::from_field_u64(self.ord, key as u64));
        }
        let mut present = vec![false; chunks.len()];
        for &position in self.moved_to.iter().flatten() {
            present[position as usize] = true;
        }
        let fields = super::schema().1;
        let mut position = 0usize;
        feed(&mut |chunk| {
            if !present.get(position).copied().unwrap_or(true) {
                let key = self.moved_to.len() as u64;
                self.moved_to.push(Some(position as u32));
                self.tokens += count(&chunk.title, &chunk.text);
                writer.add_document(super::document(fields, &chunk, key)).map_err(err)?;
            }
            position += 1;
            progress.inc(1);
            Ok(())
        })?;
        writer.commit().map_err(err)?;
        if !deleted.is_empty() {
            let segments = self.index.searchable_segment_ids().map_err(err)?;
            writer.merge(&segments).wait().map_err(err)?;
        }
        writer.wait_merging_threads().map_err(err)?;
        let keys: Vec<u8> = self.moved_to.iter().flat_map(|p| p.unwrap_or(u32::MAX).to_le_bytes()).collect();
        let path = dir.join(POSITIONS_FILE);
        fs_err::write(&path, keys).map_err(|e| write_error(&path, e))?;
        let path = dir.join(TOKENS_FILE);
        fs_err::write(&path, self.tokens.to_le_bytes()).map_err(|e| write_error(&path, e))?;
        Ok(())
    }
}

/// The key → position map of an updated index; `None` for one as built.
pub(super) fn read_u32s(path: &Path) -> Option<Vec<u32>> {
    let bytes = fs_err::read(path).ok()?;
    Some(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

/// The exact token count of an updated index; `None` for one as built.
pub(super) fn read_tokens(dir: &Path) -> Option<u64> {
    let bytes = fs_err::read(dir.join(TOKENS_FILE)).ok()?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
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
        crate::id::content_hash(&chunks.iter().map(|c| c.id.as_str()).collect::<Vec<_>>())
    }

    fn index(dir: &Path, chunks: &[Chunk], earlier: Option<Earlier<'_>>) -> (ChunkIndex, IndexOrigin) {
        let metas = chunks.iter().map(Chunk::meta).collect();
        let feed = |add: &mut dyn FnMut(Chunk) -> Result<()>| chunks.iter().cloned().try_for_each(add);
        let (analyzer, stage, print) = (Analyzer::default(), Stage::hidden(), fingerprint(chunks));
        match earlier {
            Some(earlier) => {
                ChunkIndex::update_or_build(dir, metas, &print, earlier, analyzer, 2, &stage, feed).unwrap()
            }
            None => ChunkIndex::open_or_build(dir, metas, &print, analyzer, 2, &stage, feed).unwrap(),
        }
    }

    fn olds(chunks: &[Chunk]) -> Vec<OldChunk<'_>> {
        chunks.iter().map(|c| OldChunk { id: &c.id, title: &c.title, text: &c.text }).collect()
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
                let got = bits(&updated.search(query, 10).unwrap());
                assert_eq!(got, bits(&rebuilt.search(query, 10).unwrap()), "{query}");
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
}
