//! Stages 1–3 of a build, ingest: the corpus read and chunked (near-identical chunks grouped on
//! the way) into the staged `corpus.jsonl`, then indexed. What is tallied of the corpus as it
//! is read (hash, languages) becomes the manifest's corpus summary.

use super::chunking::{ChunkBatch, Chunking, FinishedChunking};
use super::corpus_file::{ChunkSink, Collected, CorpusLines, reread_chunks, stage_corpus_while};
use crate::chunk::{self, SavedChunking};
use crate::config::BuildConfig;
use crate::corpus::{self, Item, ReadReport, Skipped};
use crate::dedup::ChunkGroups;
use crate::error::{Error, Result};
use crate::id::StreamHasher;
use crate::index::{Analyzer, ChunkIndex, ChunkList, Earlier, IndexError, Unchanged};
use crate::output::{self, CorpusSummary, layout};
use crate::progress::{Progress, Timings};
use crate::record::Chunk;
use crate::text::Language;
use std::collections::BTreeMap;
use std::path::Path;

/// Stages 1–3 of a build: reads and chunks the corpus into the staged `corpus.jsonl` (grouping
/// near-identical chunks on the way), then builds (or reuses) the index. The chunking is saved
/// in the index folder for the next refresh (which calls [`chunk`] and
/// [`ChunkedCorpus::index`] itself, with the earlier run's chunking and chunks).
pub(crate) fn chunk_and_index(
    config: &BuildConfig,
    out: &Path,
    staging: &output::Staging,
    progress: Progress,
    timings: &mut Timings,
) -> Result<IndexedCorpus> {
    let chunked = chunk(config, out, staging, None, false, progress, timings)?;
    chunked.index(config, out, staging, None, progress, timings, |_| ()).map(|(chunked, _)| chunked)
}

/// Stages 1–2 of [`chunk_and_index`]: the corpus read and chunked, the index not yet touched.
/// With `collect` (a refresh, which maps the chunks against the old ones), every chunk is held
/// in memory, and the index is fed from there rather than from `corpus.jsonl`; then nothing is
/// written (`staging` stays unmade) until [`ChunkedCorpus::index`], so a refresh that finds the
/// corpus unchanged writes nothing.
pub(crate) fn chunk(
    config: &BuildConfig,
    out: &Path,
    staging: &output::Staging,
    saved: Option<SavedChunking>,
    collect: bool,
    progress: Progress,
    timings: &mut Timings,
) -> Result<ChunkedCorpus> {
    // In bytes: a single large file shows its progress too.
    let size =
        fs_err::metadata(&config.corpus).ok().filter(std::fs::Metadata::is_file).map_or(0, |m| m.len());
    let stage = progress.stage_bytes("chunk", size);
    let corpus_file = (!collect).then(|| staging.path(layout::CORPUS));
    let chunking = Chunking::new(config, out, staging, saved.unwrap_or_default(), collect)?;
    let (chunks, groups, corpus, read, FinishedChunking { file: chunking, reused, collected }) =
        read_and_chunk(config, out, corpus_file.as_deref(), chunking, &stage)?;
    // No corpus file exactly when the chunks are collected.
    let texts = match corpus_file {
        Some(file) => ChunkTexts::Staged(file),
        None => ChunkTexts::Memory(collected.unwrap_or_default()),
    };
    for s in &read.skipped {
        progress.warn(&format!("skipped {s}"));
    }
    for renamed in &read.renamed {
        progress.warn(&renamed.to_string());
    }
    if read.ignored > 0 {
        progress.warn(&format!(
            "{} file(s) with extensions qrelgen does not read were ignored: {}",
            read.ignored,
            corpus::extensions(&read.ignored_by_extension)
        ));
    }
    let reused = match reused {
        0 => String::new(),
        n => format!(" ({n} unchanged, their chunks reused)"),
    };
    timings.add(
        "chunk",
        stage.finish(&format!("{} documents → {} chunks{reused}", corpus.documents, chunks.len())),
    );
    Ok(ChunkedCorpus { chunks, groups, corpus, skipped: read.skipped, chunking, texts })
}

/// Where the chunks of a [`ChunkedCorpus`] are.
enum ChunkTexts {
    /// In memory, as chunked (a refresh's): `corpus.jsonl` is staged from them (and the set's
    /// own, for the items chunked as before) once the run goes on to index them.
    Memory(Collected),
    /// Only in the staged `corpus.jsonl`, at this path.
    Staged(std::path::PathBuf),
}

/// What [`chunk`] made: the chunks, not yet indexed.
pub(crate) struct ChunkedCorpus {
    chunks: ChunkList,
    groups: ChunkGroups,
    corpus: CorpusSummary,
    skipped: Vec<Skipped>,
    chunking: chunk::ChunkingFile,
    texts: ChunkTexts,
}

impl ChunkedCorpus {
    /// What was read of the corpus (its hash among it).
    pub(crate) fn corpus(&self) -> &CorpusSummary {
        &self.corpus
    }

    /// Stage 3 of [`chunk_and_index`]: builds (or reuses, or with `earlier` updates) the index
    /// and keeps the chunking beside it. With the chunks in memory (a refresh's), meanwhile
    /// `corpus.jsonl` is staged, the lines of the items chunked as before copied from
    /// `earlier`'s (the set's `corpus.jsonl`, whose bytes come with it), and `beside` runs with
    /// the chunks, each on a thread of its own; what `beside` returns comes back with the index
    /// (`None` when the chunks are not in memory).
    #[expect(clippy::too_many_arguments, reason = "the stage's inputs, and the work beside it")]
    pub(crate) fn index<T: Send>(
        self,
        config: &BuildConfig,
        out: &Path,
        staging: &output::Staging,
        earlier: Option<(Earlier<'_>, &[u8])>,
        progress: Progress,
        timings: &mut Timings,
        beside: impl FnOnce(&[Chunk]) -> T + Send,
    ) -> Result<(IndexedCorpus, Option<T>)> {
        let Self { chunks, groups, corpus, skipped, chunking, texts } = self;
        let stage = progress.stage("index", chunks.len() as u64);
        let dir = out.join(layout::INDEX_DIR);
        let (earlier, earlier_corpus) = earlier.unzip();
        let index =
            |feed: Feed<'_>| index_chunks(&dir, chunks, &corpus.chunks_hash, earlier, config, &stage, feed);
        let ((index, provenance, unchanged), texts, beside) = match texts {
            ChunkTexts::Memory(Collected { chunks: mut texts, lines }) => {
                let corpus_lines = CorpusLines { chunks: &texts, lines: &lines, earlier: earlier_corpus };
                let (indexed, beside) = stage_corpus_while(staging, corpus_lines, beside, |texts| {
                    index(&|add| {
                        texts.iter().try_for_each(|chunk| match title_for_index(chunk) {
                            Some(title) => Ok(add(&Chunk { title, ..chunk.clone() })?),
                            None => Ok(add(chunk)?),
                        })
                    })
                })?;
                for chunk in &mut texts {
                    if let Some(title) = title_for_index(chunk) {
                        chunk.title = title;
                    }
                }
                (indexed, Some(texts), Some(beside))
            }
            ChunkTexts::Staged(file) => (index(&|add| reread_chunks(&file, add))?, None, None),
        };
        chunking
            .place(&dir)
            .map_err(|source| Error::Output { path: dir.join(chunk::CHUNKING_FILE), source })?;
        timings.add("index", stage.finish(&format!("{} chunks, index {provenance}", index.len())));
        Ok((IndexedCorpus { index, groups, corpus, skipped, unchanged, chunks: texts }, beside))
    }
}

/// What [`chunk_and_index`] made.
pub(crate) struct IndexedCorpus {
    pub(crate) index: ChunkIndex,
    pub(crate) groups: ChunkGroups,
    pub(crate) corpus: CorpusSummary,
    pub(crate) skipped: Vec<Skipped>,
    /// With an index updated in place: the chunks it kept as they were.
    pub(crate) unchanged: Option<Unchanged>,
    /// For a refresh, every chunk, as `corpus.jsonl` reads back.
    pub(crate) chunks: Option<Vec<Chunk>>,
}

/// Reads the corpus, chunks each document as it arrives and streams the chunks to
/// `corpus_file` (`corpus.jsonl`; none when [`Chunking`] keeps them); only their metadata stays
/// in memory.
fn read_and_chunk(
    config: &BuildConfig,
    out: &Path,
    corpus_file: Option<&Path>,
    mut chunking: Chunking,
    stage: &crate::progress::StageProgress,
) -> Result<(ChunkList, ChunkGroups, CorpusSummary, ReadReport, FinishedChunking)> {
    let mut sink = ChunkSink::create(corpus_file, config.chunk_dup_threshold)?;
    let mut tally = CorpusTally::default();
    let mut keep = |mut batch: Vec<Item>, chunking: &mut Chunking| -> Result<()> {
        for (item, made) in chunking.make(&mut batch, config.threads, stage)? {
            sink.write(&made.lines)?;
            let language = match &item {
                Item::Document(doc) => {
                    let (chunks, signatures, language) = chunking.document(doc, made)?;
                    for (chunk, signature) in chunks.into_iter().zip(&signatures) {
                        sink.keep(&chunk, signature.as_ref());
                        chunking.collect(chunk);
                    }
                    language
                }
                Item::Chunk(chunk) => {
                    let (signature, language) = chunking.unit(chunk, made)?;
                    sink.keep(chunk, signature.as_ref());
                    stage.inc(chunk.text.len() as u64);
                    language
                }
            };
            tally.add(&item, language);
            if let Item::Chunk(chunk) = item {
                chunking.collect(chunk);
            }
        }
        Ok(())
    };
    // The corpus is read a batch ahead of the chunking, on a thread of its own.
    let read = |hand: &mut dyn FnMut(Vec<Item>) -> Result<()>| {
        let mut batch = ChunkBatch::default();
        let report = corpus::read(&config.corpus, config.prechunked, Some(out), |item| {
            if batch.push(item) {
                hand(batch.take())?;
            }
            Ok(())
        })?;
        hand(batch.take())?;
        Ok(report)
    };
    let report = crate::threads::ahead(read, |batch| keep(batch, &mut chunking))?;
    let ChunkSink { file, mut groups, metas, hash } = sink;
    file.map(output::AtomicFile::commit).transpose()?;
    groups.seal();
    let summary = tally.summary(&report, &metas, &groups, &hash);
    let chunked = chunking.finish(&summary.chunks_hash)?;
    Ok((metas, groups, summary, report, chunked))
}

/// Adds a document (or pre-chunked unit) to the corpus hash.
fn hash_item(hasher: &mut StreamHasher, item: &Item) {
    match item {
        Item::Document(doc) => hasher.update(&[doc.id.as_str(), &doc.title, &doc.text]),
        Item::Chunk(chunk) => hasher.update(&[chunk.id.as_str(), &chunk.title, &chunk.text]),
    }
}

/// What is tallied of the corpus as it is read, before chunking: its hash and its languages.
#[derive(Default)]
struct CorpusTally {
    hash: StreamHasher,
    languages: Languages,
}

impl CorpusTally {
    /// Adds a document (or, prechunked, a chunk) to the corpus hash (the manifest's
    /// `corpus.hash`), and its text in `language` (its text's [`Language::detect`]).
    fn add(&mut self, item: &Item, language: Language) {
        hash_item(&mut self.hash, item);
        let text = match item {
            Item::Document(doc) => &doc.text,
            Item::Chunk(chunk) => &chunk.text,
        };
        self.languages.add(text, language);
    }

    fn summary(
        self,
        report: &ReadReport,
        metas: &ChunkList,
        groups: &ChunkGroups,
        chunks_hash: &StreamHasher,
    ) -> CorpusSummary {
        CorpusSummary {
            documents: report.documents,
            skipped: report.skipped.len(),
            ignored: report.ignored,
            hash: self.hash.finish(),
            chunks: metas.len(),
            chunks_hash: chunks_hash.finish(),
            language: self.languages.corpus(),
            languages: self.languages.documents,
            duplicate_groups: groups.groups().len(),
            chunks_in_groups: groups.groups().iter().map(Vec::len).sum(),
        }
    }
}

/// Languages of the documents read, detected one by one.
#[derive(Default)]
struct Languages {
    documents: BTreeMap<Language, usize>,
    characters: BTreeMap<Language, usize>,
}

impl Languages {
    fn add(&mut self, text: &str, language: Language) {
        *self.documents.entry(language).or_default() += 1;
        *self.characters.entry(language).or_default() += text.chars().count();
    }

    /// The language of most of the text (English on a tie).
    fn corpus(&self) -> Language {
        let zh = self.characters.get(&Language::Zh).copied().unwrap_or(0);
        let en = self.characters.get(&Language::En).copied().unwrap_or(0);
        if zh > en { Language::Zh } else { Language::En }
    }
}

/// Hands every chunk, in order, to the index's callback.
type Feed<'a> = &'a dyn Fn(&mut dyn FnMut(&Chunk) -> Result<(), IndexError>) -> Result<()>;

/// Indexes the chunks `feed` hands over: updates the index in `dir` in place when it holds
/// the `earlier` list's, else opens or builds it.
fn index_chunks(
    dir: &Path,
    chunks: ChunkList,
    fingerprint: &str,
    earlier: Option<Earlier<'_>>,
    config: &BuildConfig,
    stage: &crate::progress::StageProgress,
    feed: Feed<'_>,
) -> Result<(ChunkIndex, crate::index::IndexOrigin, Option<Unchanged>)> {
    let (analyzer, threads) = (Analyzer::new(config.segmenter), config.threads);
    let feed = |add: &mut dyn FnMut(&Chunk) -> Result<(), IndexError>| feed(add);
    match earlier {
        Some(earlier) => {
            ChunkIndex::update_or_build(dir, chunks, fingerprint, earlier, analyzer, threads, stage, feed)
        }
        None => ChunkIndex::open_or_build(dir, chunks, fingerprint, analyzer, threads, stage, feed)
            .map(|(index, origin)| (index, origin, None)),
    }
}

/// The title the index (and the rest of the run) gives `chunk` when its own is blank: its
/// document's id.
fn title_for_index(chunk: &Chunk) -> Option<String> {
    chunk.title.trim().is_empty().then(|| chunk.doc_id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blank_title_is_indexed_as_the_document_id() {
        let mut chunk = Chunk {
            id: crate::id::ChunkId::parse("d3:0").unwrap(),
            doc_id: crate::id::DocId::sanitized("d3"),
            source_id: None,
            ordinal: 0,
            title: " \t".to_owned(),
            text: "x".to_owned(),
            section: None,
        };
        assert_eq!(title_for_index(&chunk).as_deref(), Some("d3"));
        chunk.title = "Kept".to_owned();
        assert_eq!(title_for_index(&chunk), None);
    }
}
