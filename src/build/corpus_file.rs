//! The corpus file of an ingest, `corpus.jsonl`: where the chunks go as they are made (the
//! chunking sink), the chunks and lines kept in memory for a refresh, and the file staged from
//! them or read back to build the index.

use crate::chunk;
use crate::corpus;
use crate::dedup::{ChunkGroups, Signature};
use crate::error::{Error, Result};
use crate::id::StreamHasher;
use crate::index::{ChunkList, IndexError};
use crate::output::{self, layout};
use crate::record::Chunk;
use std::path::Path;

/// The chunks of a corpus in memory, and each item's `corpus.jsonl` lines.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) chunks: Vec<Chunk>,
    pub(super) lines: Vec<ItemLines>,
}

/// An item's `corpus.jsonl` lines in a [`Collected`]: the lines of its `chunks` (that many of
/// [`Collected::chunks`], after the earlier items').
pub(super) struct ItemLines {
    pub(super) chunks: usize,
    pub(super) lines: LinesAt,
}

/// Where the lines of an item are.
pub(super) enum LinesAt {
    /// Made now.
    Made(Vec<u8>),
    /// In the earlier run's `corpus.jsonl`, at this byte range, with this digest (as the item
    /// was chunked as before; made again if the file no longer has them there).
    Earlier(std::ops::Range<usize>, chunk::Digest),
}

/// Where the chunks go as they are made: `corpus.jsonl`, the duplicate groups, and the metadata
/// that stays in memory; their hash is taken on the way.
pub(super) struct ChunkSink {
    /// `corpus.jsonl` (none when the chunks are kept in memory: written from there later).
    pub(super) file: Option<output::AtomicFile>,
    pub(super) groups: ChunkGroups,
    pub(super) metas: ChunkList,
    pub(super) hash: StreamHasher,
}

impl ChunkSink {
    pub(super) fn create(corpus_file: Option<&Path>, dup_threshold: f64) -> Result<Self> {
        Ok(Self {
            file: corpus_file.map(output::AtomicFile::create).transpose()?,
            groups: ChunkGroups::new(dup_threshold),
            metas: ChunkList::default(),
            hash: StreamHasher::default(),
        })
    }

    /// Writes `lines` (an item's, made by `Chunking::make`) to `corpus.jsonl`.
    pub(super) fn write(&mut self, lines: &[u8]) -> Result<()> {
        match &mut self.file {
            Some(file) => file.write_bytes(lines),
            None => Ok(()),
        }
    }

    /// Keeps `chunk` (its line written), whose near-duplicate signature is `signature`.
    pub(super) fn keep(&mut self, chunk: &Chunk, signature: Option<&Signature>) {
        self.hash.update(&[chunk.id.as_str(), &chunk.title, &chunk.text]);
        self.groups.add_signature(signature);
        self.metas.push(chunk);
    }
}

/// The `corpus.jsonl` lines of `chunks`.
pub(super) fn corpus_lines(chunks: &[Chunk]) -> Result<Vec<u8>> {
    let mut lines = Vec::new();
    for chunk in chunks {
        serde_json::to_writer(&mut lines, &output::corpus_line(chunk))
            .map_err(|e| Error::Output { path: layout::CORPUS.into(), source: e.into() })?;
        lines.push(b'\n');
    }
    Ok(lines)
}

/// What a refresh's `corpus.jsonl` is staged from: the chunks in memory, each item's lines, and
/// the earlier run's `corpus.jsonl`, which holds the lines of the items chunked as before.
#[derive(Clone, Copy)]
pub(super) struct CorpusLines<'a> {
    pub(super) chunks: &'a [Chunk],
    pub(super) lines: &'a [ItemLines],
    pub(super) earlier: Option<&'a [u8]>,
}

impl CorpusLines<'_> {
    /// Writes `corpus.jsonl` to `path`: each item's lines made now, or copied from the earlier
    /// run's file where they still have their digest there (else made again from its chunks).
    fn write(self, path: &Path) -> Result<()> {
        let mut file = output::AtomicFile::create(path)?;
        let mut chunks = self.chunks;
        for item in self.lines {
            let (mine, rest) = chunks.split_at_checked(item.chunks).unwrap_or((chunks, &[]));
            chunks = rest;
            let earlier = match &item.lines {
                LinesAt::Made(lines) => Some(lines.as_slice()),
                LinesAt::Earlier(range, digest) => self
                    .earlier
                    .and_then(|bytes| bytes.get(range.clone()))
                    .filter(|lines| blake3::hash(lines).as_bytes() == digest),
            };
            match earlier {
                Some(lines) => file.write_bytes(lines)?,
                None => file.write_bytes(&corpus_lines(mine)?)?,
            }
        }
        file.commit()
    }
}

/// Stages `corpus.jsonl` from `lines` and runs `beside` with their chunks, each on a thread of
/// its own, while `index` indexes the chunks on this one; the first error of the write and the
/// index (the write's first), else what the index and `beside` returned.
pub(super) fn stage_corpus_while<T, B: Send>(
    staging: &output::Staging,
    lines: CorpusLines<'_>,
    beside: impl FnOnce(&[Chunk]) -> B + Send,
    index: impl FnOnce(&[Chunk]) -> Result<T>,
) -> Result<(T, B)> {
    let path = staging.path(layout::CORPUS);
    std::thread::scope(|scope| {
        let written = scope.spawn(|| lines.write(&path));
        let beside = scope.spawn(|| beside(lines.chunks));
        let indexed = index(lines.chunks);
        let written = crate::threads::join(written);
        let beside = crate::threads::join(beside);
        written.and(indexed).map(|indexed| (indexed, beside))
    })
}

/// Streams the chunks back from the `corpus.jsonl` this run wrote (to build the index).
pub(super) fn reread_chunks(
    corpus_file: &Path,
    add: &mut dyn FnMut(&Chunk) -> Result<(), IndexError>,
) -> Result<()> {
    let skipped = corpus::read_prechunked(corpus_file, |chunk| Ok(add(&chunk)?))?;
    match skipped.first() {
        None => Ok(()),
        Some(line) => Err(Error::Output {
            path: corpus_file.to_owned(),
            source: std::io::Error::other(format!("cannot read back what was written: {line}")),
        }),
    }
}
