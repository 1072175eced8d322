//! The chunk list: what the pipeline keeps of each chunk once its text is in the index's
//! document store. Per chunk that is its id (in one shared buffer), its document (a number into
//! the list of documents, each document id held once) and its position in the document: about
//! the id's length plus 16 bytes, where a `Vec` of owned ids and document ids took some 200.
//! The ids it hands out share that buffer (see [`ChunkId`]), so the ids that candidates, pools
//! and topics hold cost no allocation each.

use crate::id::{ChunkId, DocId};
use crate::record::Chunk;
use foldhash::{HashMap, HashMapExt as _};
use std::sync::Arc;

/// The chunks of a corpus in order, without their texts.
#[derive(Debug, Default)]
pub struct ChunkList {
    /// Every chunk id, one after the other, shared with the ids handed out.
    ids: Arc<String>,
    /// Where each chunk's id ends in `ids`.
    ends: Vec<usize>,
    /// Each chunk's document, as its number in `docs`.
    doc: Vec<u32>,
    /// Each chunk's position in its document.
    ordinal: Vec<u32>,
    /// The documents, each once, in order of their first chunk.
    docs: Vec<DocId>,
    /// While chunks are pushed: each document's number.
    numbers: HashMap<DocId, u32>,
}

impl ChunkList {
    /// Adds the next chunk (its text is not kept).
    ///
    /// Ids handed out before must not be held while pushing: the buffer they share would be
    /// copied.
    pub fn push(&mut self, chunk: &Chunk) {
        Arc::make_mut(&mut self.ids).push_str(chunk.id.as_str());
        self.ends.push(self.ids.len());
        let doc = if self.docs.last() == Some(&chunk.doc_id) {
            self.docs.len() - 1
        } else if let Some(&number) = self.numbers.get(&chunk.doc_id) {
            number as usize
        } else {
            self.numbers.insert(chunk.doc_id.clone(), self.docs.len() as u32);
            self.docs.push(chunk.doc_id.clone());
            self.docs.len() - 1
        };
        self.doc.push(doc as u32);
        self.ordinal.push(chunk.ordinal);
    }

    /// Frees what only [`ChunkList::push`] needs, and the spare capacity of the growing buffers.
    pub(super) fn seal(&mut self) {
        self.numbers = HashMap::new();
        Arc::make_mut(&mut self.ids).shrink_to_fit();
        self.ends.shrink_to_fit();
        self.doc.shrink_to_fit();
        self.ordinal.shrink_to_fit();
        self.docs.shrink_to_fit();
    }

    /// Number of chunks.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the list holds no chunk.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The id of the chunk at `position`, as written in files.
    ///
    /// # Panics
    /// If `position` is not below [`ChunkList::len`].
    #[must_use]
    pub fn id_str(&self, position: usize) -> &str {
        let start = if position == 0 { 0 } else { self.ends[position - 1] };
        &self.ids[start..self.ends[position]]
    }

    /// The id of the chunk at `position`, sharing the list's buffer (no allocation).
    ///
    /// # Panics
    /// If `position` is not below [`ChunkList::len`].
    #[must_use]
    pub fn id(&self, position: usize) -> ChunkId {
        let start = if position == 0 { 0 } else { self.ends[position - 1] };
        let end = self.ends[position];
        match (u32::try_from(start), u32::try_from(end)) {
            (Ok(start), Ok(end)) => ChunkId::shared(Arc::clone(&self.ids), start..end),
            // Beyond 4 GiB of ids a range does not fit: the id gets its own copy.
            _ => ChunkId::owned(self.id_str(position).to_owned()),
        }
    }

    /// The document of the chunk at `position`.
    ///
    /// # Panics
    /// If `position` is not below [`ChunkList::len`].
    #[must_use]
    pub fn doc_id(&self, position: usize) -> &DocId {
        &self.docs[self.doc[position] as usize]
    }

    /// The position of the chunk at `position` within its document.
    ///
    /// # Panics
    /// If `position` is not below [`ChunkList::len`].
    #[must_use]
    pub fn ordinal(&self, position: usize) -> u32 {
        self.ordinal[position]
    }

    /// Bytes held, capacity included.
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.ids.capacity()
            + self.ends.capacity() * size_of::<usize>()
            + (self.doc.capacity() + self.ordinal.capacity()) * size_of::<u32>()
            + self.docs.capacity() * size_of::<DocId>()
            + self.docs.iter().map(|d| d.as_str().len()).sum::<usize>()
            + self.numbers.capacity() * (size_of::<DocId>() + size_of::<u32>())
    }
}

#[cfg(test)]
impl<'a> FromIterator<&'a Chunk> for ChunkList {
    fn from_iter<I: IntoIterator<Item = &'a Chunk>>(chunks: I) -> Self {
        let mut list = Self::default();
        chunks.into_iter().for_each(|chunk| list.push(chunk));
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: &str, doc: &str, ordinal: u32, text: &str) -> Chunk {
        Chunk {
            id: ChunkId::parse(id).unwrap(),
            doc_id: DocId::sanitized(doc),
            source_id: None,
            ordinal,
            title: "A title that is not kept".into(),
            text: text.into(),
            section: None,
        }
    }

    #[test]
    fn keeps_ids_documents_and_ordinals_in_order() {
        let chunks = [
            chunk("a.md:1", "a.md", 0, "first"),
            chunk("a.md:2", "a.md", 1, "second"),
            chunk("b.md:1", "b.md", 0, "third"),
            chunk("a.md:3", "a.md", 2, "a document met again"),
        ];
        let list: ChunkList = chunks.iter().collect();
        assert_eq!(list.len(), 4);
        let got: Vec<(ChunkId, &str, u32)> =
            (0..4).map(|p| (list.id(p), list.doc_id(p).as_str(), list.ordinal(p))).collect();
        let expected: Vec<(ChunkId, &str, u32)> =
            chunks.iter().map(|c| (c.id.clone(), c.doc_id.as_str(), c.ordinal)).collect();
        assert_eq!(got, expected);
        assert_eq!(list.docs.len(), 2, "each document once");
    }

    #[test]
    fn ids_share_the_list_buffer() {
        let chunks = [chunk("a.md:1", "a.md", 0, "first"), chunk("b.md:2", "b.md", 0, "second")];
        let mut list: ChunkList = chunks.iter().collect();
        list.seal();
        let buffer = list.ids.as_bytes().as_ptr_range();
        let ids: Vec<ChunkId> = (0..2).map(|p| list.id(p)).collect();
        for (id, chunk) in ids.iter().zip(&chunks) {
            assert_eq!(id, &chunk.id);
            let bytes = id.as_str().as_bytes().as_ptr_range();
            assert!(
                buffer.start <= bytes.start && bytes.end <= buffer.end,
                "{id} is not in the list's buffer"
            );
        }
        assert_eq!(Arc::strong_count(&list.ids), 3, "the list and its two ids");
        let clone = ids[1].clone();
        assert_eq!(clone.as_str().as_ptr(), ids[1].as_str().as_ptr(), "a clone shares the buffer too");
    }

    #[test]
    fn holds_no_texts_and_a_few_bytes_beyond_the_id_per_chunk() {
        let long_text = "words of a chunk that the index stores ".repeat(40);
        let chunks: Vec<Chunk> = (0..10_000)
            .map(|i| {
                chunk(
                    &format!("docs/page-{}.md:{i:012x}", i / 8),
                    &format!("docs/page-{}.md", i / 8),
                    i % 8,
                    &long_text,
                )
            })
            .collect();
        let mut list: ChunkList = chunks.iter().collect();
        list.seal();
        assert!(!list.ids.contains("words of a chunk"));
        let id_bytes: usize = chunks.iter().map(|c| c.id.as_str().len()).sum();
        let per_chunk_overhead = (list.heap_bytes() - id_bytes) / chunks.len();
        // 16 bytes of offsets and numbers, and each document's id once per eight chunks.
        assert!(per_chunk_overhead <= 24, "{per_chunk_overhead} bytes per chunk beyond the id");
    }
}
