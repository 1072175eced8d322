//! The chunking of an ingest: items chunked in batches over the threads, each taken from the
//! earlier run's chunking when unchanged, and this run's chunking recorded for the next one.

use super::corpus_file::{Collected, ItemLines, LinesAt, corpus_lines};
use crate::chunk::{self, Chunker, ChunkingWriter, Lines, SavedChunking, SavedItem};
use crate::config::BuildConfig;
use crate::corpus::Item;
use crate::dedup::Signature;
use crate::error::{Error, Result};
use crate::output::{self, layout};
use crate::record::{Chunk, Document};
use crate::text::Language;
use std::path::Path;

/// The chunker, with the items an earlier run chunked (taken from there when unchanged) and
/// the record of this run's chunking for the next one.
pub(super) struct Chunking {
    chunker: Chunker,
    saved: SavedChunking,
    writer: ChunkingWriter,
    path: std::path::PathBuf,
    /// Items whose chunks were reused.
    reused: usize,
    /// Every chunk and item's lines, when asked for.
    collected: Option<Collected>,
}

/// The items `ingest::read_and_chunk` chunks at once (over the threads): up to
/// [`CHUNK_BATCH_BYTES`] of their ids, titles and text, and no more than [`CHUNK_BATCH_ITEMS`]
/// of them (so many tiny items do not make a batch without bound).
#[derive(Default)]
pub(super) struct ChunkBatch {
    items: Vec<Item>,
    bytes: usize,
}

impl ChunkBatch {
    /// Adds `item`; whether the batch is now full.
    pub(super) fn push(&mut self, item: Item) -> bool {
        let (ids, source_id, title, text) = match &item {
            Item::Document(doc) => (doc.id.as_str().len(), &doc.source_id, &doc.title, &doc.text),
            Item::Chunk(unit) => (
                unit.id.as_str().len() + unit.doc_id.as_str().len(),
                &unit.source_id,
                &unit.title,
                &unit.text,
            ),
        };
        self.bytes += ids + source_id.as_ref().map_or(0, String::len) + title.len() + text.len();
        self.items.push(item);
        self.bytes >= CHUNK_BATCH_BYTES || self.items.len() >= CHUNK_BATCH_ITEMS
    }

    /// The items, leaving the batch empty.
    pub(super) fn take(&mut self) -> Vec<Item> {
        self.bytes = 0;
        std::mem::take(&mut self.items)
    }
}

/// Bytes of ids, titles and text in a chunk batch.
const CHUNK_BATCH_BYTES: usize = 1 << 20;

/// Items in a chunk batch.
const CHUNK_BATCH_ITEMS: usize = 4096;

/// What [`Chunking::make`] made of an item: its digest and chunking, where its lines lay in
/// the earlier run's `corpus.jsonl` when that chunking is the earlier run's, a document's
/// chunks, and the item's `corpus.jsonl` lines (none when they are the earlier run's and the
/// chunks are collected).
pub(super) struct Made {
    digest: chunk::Digest,
    item: SavedItem,
    earlier: Option<std::ops::Range<usize>>,
    chunks: Vec<Chunk>,
    pub(super) lines: Vec<u8>,
}

/// What [`Chunking`] leaves when it is finished.
pub(super) struct FinishedChunking {
    /// The chunking record, for the next refresh.
    pub(super) file: chunk::ChunkingFile,
    /// Items whose chunks were reused from the saved chunking.
    pub(super) reused: usize,
    /// The chunks and lines, when asked for.
    pub(super) collected: Option<Collected>,
}

impl Chunking {
    /// With `collect`, the chunks and the record are held in memory (nothing staged yet), else
    /// the record is written into `staging` as the items are chunked.
    pub(super) fn new(
        config: &BuildConfig,
        out: &Path,
        staging: &output::Staging,
        saved: SavedChunking,
        collect: bool,
    ) -> Result<Self> {
        let stamp = chunk::settings_stamp(config.chunking, config.prechunked);
        let (writer, path) = if collect {
            (ChunkingWriter::in_memory(&stamp), out.join(layout::INDEX_DIR).join(chunk::CHUNKING_FILE))
        } else {
            let path = staging.path(chunk::CHUNKING_FILE);
            let writer = ChunkingWriter::create(&staging.path(""), &stamp)
                .map_err(|source| Error::Output { path: path.clone(), source })?;
            (writer, path)
        };
        let collected = collect.then(Collected::default);
        Ok(Self { chunker: Chunker::new(config.chunking)?, saved, writer, path, reused: 0, collected })
    }

    /// Takes the items of `batch` (leaving it empty), each with what its chunking is: the
    /// earlier run's when it is unchanged, else made now, and its chunks and `corpus.jsonl`
    /// lines (none for an unchanged item when the chunks are collected: its lines are copied
    /// from the earlier run's file later); the items of the batch on up to `threads` threads at
    /// once (each item's digest, chunking, chunks and lines are its own; the items stay in
    /// order).
    pub(super) fn make(
        &self,
        batch: &mut Vec<Item>,
        threads: usize,
        stage: &crate::progress::StageProgress,
    ) -> Result<Vec<(Item, Made)>> {
        let (chunker, earlier) = (&self.chunker, &self.saved);
        // Collected chunks of an unchanged item get the earlier run's lines at the index stage
        // (`corpus_file::stage_corpus_while`), so none are made here for them.
        let collecting = self.collected.is_some();
        let make = |item: Item| -> Result<(Item, Made)> {
            let (id, digest, text) = match &item {
                Item::Document(doc) => (doc.id.as_str(), chunk::document_digest(doc), &doc.text),
                Item::Chunk(unit) => (unit.id.as_str(), chunk::text_digest(&unit.text), &unit.text),
            };
            let reused = earlier.get(id, &digest, text).filter(|(k, _)| match &item {
                Item::Chunk(_) => k.signatures.len() == 1,
                Item::Document(_) => true,
            });
            if let (Some(_), Item::Document(doc)) = (&reused, &item) {
                stage.inc(doc.text.len() as u64);
            }
            let (mut made, earlier) = match reused {
                Some((saved, lines)) => (saved.clone(), Some(lines)),
                None => (chunker.item(&item, &mut |bytes| stage.inc(bytes as u64)), None),
            };
            let chunks = match &item {
                Item::Document(doc) => chunk::chunks_at(doc, &made.spans),
                Item::Chunk(_) => Vec::new(),
            };
            let lines = if collecting && earlier.is_some() {
                Vec::new()
            } else {
                let units = match &item {
                    Item::Document(_) => chunks.as_slice(),
                    Item::Chunk(unit) => std::slice::from_ref(unit),
                };
                let lines = corpus_lines(units)?;
                made.lines = Lines::of(&lines);
                lines
            };
            Ok((item, Made { digest, item: made, earlier, chunks, lines }))
        };
        crate::threads::map_in_order(std::mem::take(batch), threads, make).into_iter().collect()
    }

    /// The chunks of `doc` and their signatures, from what [`Chunking::make`] made of it.
    pub(super) fn document(
        &mut self,
        doc: &Document,
        made: Made,
    ) -> Result<(Vec<Chunk>, Vec<Option<Signature>>, Language)> {
        let Made { digest, item, earlier, chunks, lines } = made;
        self.record(doc.id.as_str(), &digest, &item, earlier, lines, chunks.len())?;
        Ok((chunks, item.signatures, item.language))
    }

    /// The signature and language of a pre-chunked unit, from what [`Chunking::make`] made of
    /// it.
    pub(super) fn unit(&mut self, unit: &Chunk, made: Made) -> Result<(Option<Signature>, Language)> {
        let Made { digest, item, earlier, lines, .. } = made;
        self.record(unit.id.as_str(), &digest, &item, earlier, lines, 1)?;
        Ok((item.signatures[0], item.language))
    }

    /// Records an item's chunking for the next run and, when the chunks are collected, where
    /// the lines of its `chunks` chunks are.
    fn record(
        &mut self,
        id: &str,
        digest: &chunk::Digest,
        item: &SavedItem,
        earlier: Option<std::ops::Range<usize>>,
        lines: Vec<u8>,
        chunks: usize,
    ) -> Result<()> {
        if earlier.is_some() {
            self.reused += 1;
        }
        if let Some(collected) = &mut self.collected {
            let lines = match earlier {
                Some(range) if lines.is_empty() => LinesAt::Earlier(range, item.lines.digest),
                _ => LinesAt::Made(lines),
            };
            collected.lines.push(ItemLines { chunks, lines });
        }
        self.writer.item(id, digest, item).map_err(|source| Error::Output { path: self.path.clone(), source })
    }

    /// Keeps `chunk` when the chunks are asked for, as chunked.
    pub(super) fn collect(&mut self, chunk: Chunk) {
        if let Some(collected) = &mut self.collected {
            collected.chunks.push(chunk);
        }
    }

    /// The finished record, the items whose chunks were reused, and the chunks and lines if asked
    /// for.
    pub(super) fn finish(self, fingerprint: &str) -> Result<FinishedChunking> {
        let file =
            self.writer.finish(fingerprint).map_err(|source| Error::Output { path: self.path, source })?;
        Ok(FinishedChunking { file, reused: self.reused, collected: self.collected })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_unit(i: usize, title: &str) -> Item {
        Item::Chunk(Chunk {
            id: crate::id::ChunkId::parse(&format!("d{i}:0")).unwrap(),
            doc_id: crate::id::DocId::sanitized(&format!("d{i}")),
            source_id: None,
            ordinal: 0,
            title: title.to_owned(),
            text: "x".to_owned(),
            section: None,
        })
    }

    /// Items a fresh batch takes before it is full.
    fn fill(mut item: impl FnMut(usize) -> Item) -> usize {
        let mut batch = ChunkBatch::default();
        (1..=10 * CHUNK_BATCH_ITEMS).find(|&i| batch.push(item(i))).unwrap_or(usize::MAX)
    }

    #[test]
    fn a_chunk_batch_is_bounded_by_count_and_by_ids_titles_and_text() {
        assert_eq!(fill(|i| tiny_unit(i, "")), CHUNK_BATCH_ITEMS);
        let title = "t".repeat(CHUNK_BATCH_BYTES / 4);
        assert!(fill(|i| tiny_unit(i, &title)) <= 4, "long titles count");
        let mut batch = ChunkBatch::default();
        batch.push(tiny_unit(0, ""));
        assert_eq!((batch.take().len(), batch.items.len(), batch.bytes), (1, 0, 0));
    }
}
