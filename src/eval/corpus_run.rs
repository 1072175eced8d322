//! A BM25 run over a collection the user brought (`qrelgen run --corpus --queries`): a BEIR
//! `corpus.jsonl` (or any corpus `qrelgen build` reads) and a `queries.jsonl`, so that a
//! collection with its own qrels gets the same first number a set gets from `qrelgen run --set`.
//!
//! Input: the corpus, the queries (`{"_id", "text"}` lines, BEIR's format) and a folder for the
//! index. Output: each query's top k *documents* with their scores. Invariants: documents are
//! chunked as the build chunks them (sizes by each document's detected language) and indexed
//! by the build's analyzer (Chinese segmented by jieba or bigrams); a document's score is its
//! best chunk's (MaxP), so the run names the corpus's document ids, as its qrels do; the ranking
//! is exact (chunks are searched deeper until k distinct documents are found or none is left)
//! and deterministic (ties rank by the best chunk's position in the corpus); the index is reused
//! when the folder already holds exactly these chunks.

use super::baseline::{self, Ranked};
use crate::chunk::{ChunkConfig, Chunker};
use crate::corpus::{self, Item};
use crate::error::{Error, Result};
use crate::id::{DocId, QueryId};
use crate::index::{ChunkIndex, IndexOrigin, Segmenter};
use crate::output::{self, AtomicFile};
use crate::progress::Progress;
use crate::review::set::read_jsonl;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The chunks of the corpus, in the index folder (the feed of the index, and what its
/// fingerprint is computed from).
pub const CHUNKS_FILE: &str = "chunks.jsonl";
/// The tantivy index, in the index folder.
pub const INDEX_SUBDIR: &str = "index";

/// What to search and how.
#[derive(Debug, Clone)]
pub struct CorpusRunConfig {
    /// A folder or a JSONL corpus (BEIR `corpus.jsonl`: `_id`, `title`, `text`).
    pub corpus: PathBuf,
    /// A JSONL file of queries (`_id` or `id`, `text`).
    pub queries: PathBuf,
    /// Documents per query.
    pub k: usize,
    /// How documents are split (the build's settings).
    pub chunking: ChunkConfig,
    /// How Chinese text is split into terms.
    pub segmenter: Segmenter,
}

/// The run: documents, not chunks.
#[derive(Debug)]
pub struct CorpusRun {
    /// Every query, in file order, with its top documents.
    pub results: Vec<Ranked<DocId>>,
    /// Reused or built.
    pub index: IndexOrigin,
    /// Documents read.
    pub documents: usize,
    /// Chunks indexed.
    pub chunks: usize,
}

#[derive(Deserialize)]
struct QueryLine {
    #[serde(rename = "_id", alias = "id")]
    id: serde_json::Value,
    text: String,
}

/// Chunks and indexes the corpus in `index_dir` (its [`CHUNKS_FILE`] and [`INDEX_SUBDIR`]),
/// then searches every query for its top `k` documents.
///
/// # Errors
/// [`Error::CorpusUnreadable`]/[`Error::EmptyCorpus`] for the corpus, [`Error::Input`] /
/// [`Error::Malformed`] for the queries (a line without an id or text, an id TREC files cannot
/// hold, an id used twice), [`Error::Output`] and [`Error::Index`] for the index folder.
pub fn bm25_documents(config: &CorpusRunConfig, index_dir: &Path, progress: &Progress) -> Result<CorpusRun> {
    let queries = read_queries(&config.queries)?;
    let chunks_file = index_dir.join(CHUNKS_FILE);
    let documents = write_chunks(config, index_dir, &chunks_file, *progress)?;
    let (index, origin) =
        baseline::open_chunk_index(&chunks_file, &index_dir.join(INDEX_SUBDIR), config.segmenter, progress)?;
    let stage = progress.stage("search", queries.len() as u64);
    let mut results = Vec::with_capacity(queries.len());
    for (query, text) in queries {
        let hits = top_documents(&index, &text, config.k)?;
        results.push(Ranked { query, hits });
        stage.inc(1);
    }
    stage.finish(&format!("{} queries, top {} documents (MaxP over chunks)", results.len(), config.k));
    Ok(CorpusRun { results, index: origin, documents, chunks: index.len() })
}

/// The queries of a BEIR `queries.jsonl`, in file order.
fn read_queries(path: &Path) -> Result<Vec<(QueryId, String)>> {
    let malformed = |line: usize, message: String| Error::Malformed { path: path.to_owned(), line, message };
    let mut queries = Vec::new();
    let mut seen = HashSet::new();
    read_jsonl(path, |line, _, q: QueryLine| {
        let raw = match q.id {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) => n.to_string(),
            _ => return Err(malformed(line, "\"_id\" must be a string or a number".to_owned())),
        };
        let id = QueryId::parse(&raw).map_err(|e| malformed(line, format!("query id: {e}")))?;
        if !seen.insert(id.clone()) {
            return Err(malformed(line, format!("query id {id} was already used on an earlier line")));
        }
        queries.push((id, q.text));
        Ok(())
    })?;
    if queries.is_empty() {
        return Err(malformed(0, "no queries: expected {\"_id\": …, \"text\": …} lines".to_owned()));
    }
    Ok(queries)
}

/// Reads and chunks the corpus into `chunks_file` (the lines of a set's `corpus.jsonl`); the
/// number of documents read.
fn write_chunks(
    config: &CorpusRunConfig,
    index_dir: &Path,
    chunks_file: &Path,
    progress: Progress,
) -> Result<usize> {
    let chunker = Chunker::new(config.chunking)?;
    let size =
        fs_err::metadata(&config.corpus).ok().filter(std::fs::Metadata::is_file).map_or(0, |m| m.len());
    let stage = progress.stage_bytes("chunk", size);
    let mut file = AtomicFile::create(chunks_file)?;
    let mut chunks = 0usize;
    // An index folder inside a corpus folder is not part of the corpus.
    let report = corpus::read(&config.corpus, false, Some(index_dir), |item| {
        let Item::Document(doc) = item else { return Ok(()) };
        for mut chunk in chunker.chunk_reporting(&doc, &mut |bytes| stage.inc(bytes as u64)) {
            // As the build indexes it: a blank title is the document's id.
            if chunk.title.trim().is_empty() {
                chunk.title = chunk.doc_id.to_string();
            }
            file.write_json_line(&output::corpus_line(&chunk))?;
            chunks += 1;
        }
        Ok(())
    })?;
    file.commit()?;
    for skipped in &report.skipped {
        progress.warn(&format!("skipped {skipped}"));
    }
    for renamed in &report.renamed {
        progress.warn(&renamed.to_string());
    }
    stage.finish(&format!("{} documents → {chunks} chunks", report.documents));
    Ok(report.documents)
}

/// The top `k` documents for `text`, a document scored by its best chunk (MaxP). Chunks are
/// fetched in the index's total order (score, then position), so a document's first chunk is
/// its best; the search goes deeper until `k` documents are found or no chunk is left, so the
/// ranking is the one all chunks would give.
fn top_documents(index: &ChunkIndex, text: &str, k: usize) -> Result<Vec<(DocId, f32)>> {
    let mut depth = k.saturating_mul(4);
    loop {
        let hits = index.search(text, depth)?;
        let exhausted = hits.len() < depth || depth >= index.len();
        let mut seen = HashSet::new();
        let mut docs = Vec::with_capacity(k);
        for hit in hits {
            let doc = index.doc_id(hit.chunk);
            if seen.insert(doc) {
                docs.push((doc.clone(), hit.score));
                if docs.len() == k {
                    return Ok(docs);
                }
            }
        }
        if exhausted {
            return Ok(docs);
        }
        depth = depth.saturating_mul(4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::SizeUnit;

    fn config(dir: &Path, corpus: &str, queries: &str, k: usize) -> CorpusRunConfig {
        fs_err::write(dir.join("corpus.jsonl"), corpus).unwrap();
        fs_err::write(dir.join("queries.jsonl"), queries).unwrap();
        CorpusRunConfig {
            corpus: dir.join("corpus.jsonl"),
            queries: dir.join("queries.jsonl"),
            k,
            // Small chunks: every document below is several chunks.
            chunking: ChunkConfig { size: 40, overlap: 0, size_zh: 20, overlap_zh: 0, unit: SizeUnit::Chars },
            segmenter: Segmenter::Jieba,
        }
    }

    const CORPUS: &str = concat!(
        "{\"_id\":\"d1\",\"title\":\"\",\"text\":\"Zebras graze on the plains. Lions sleep all day long. Nothing else here.\"}\n",
        "{\"_id\":\"d2\",\"title\":\"Birds\",\"text\":\"Zebras zebras zebras in a zoo. Penguins swim in cold water today.\"}\n",
        "{\"_id\":\"d3\",\"title\":\"Fish\",\"text\":\"Salmon swim upstream every year. Trout hide under rocks.\"}\n",
    );

    #[test]
    fn documents_are_named_once_with_their_best_chunk_s_score() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(
            dir.path(),
            CORPUS,
            "{\"_id\":\"q1\",\"text\":\"zebras\"}\n{\"_id\":7,\"text\":\"swim\"}\n",
            10,
        );
        let run = bm25_documents(&config, &dir.path().join("idx"), &Progress::hidden()).unwrap();
        assert!(run.chunks > run.documents, "the documents were split: {} chunks", run.chunks);
        assert_eq!(run.documents, 3);
        let q1 = &run.results[0];
        assert_eq!(q1.query.as_str(), "q1");
        let ids: Vec<&str> = q1.hits.iter().map(|(d, _)| d.as_str()).collect();
        // d2 says zebras three times in a short chunk; d3 never does.
        assert_eq!(ids, ["d2", "d1"]);
        assert!(q1.hits[0].1 > q1.hits[1].1);
        let q7 = &run.results[1];
        assert_eq!(q7.query.as_str(), "7");
        let mut ids: Vec<&str> = q7.hits.iter().map(|(d, _)| d.as_str()).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["d2", "d3"]);
    }

    #[test]
    fn k_counts_documents_not_chunks_and_the_index_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        // Every chunk of every document matches "the"/"in": more chunks than k documents.
        let config = config(dir.path(), CORPUS, "{\"_id\":\"q\",\"text\":\"zebras swim in the\"}\n", 2);
        let first = bm25_documents(&config, &dir.path().join("idx"), &Progress::hidden()).unwrap();
        assert_eq!(first.results[0].hits.len(), 2);
        assert_eq!(first.index, IndexOrigin::Built);
        let again = bm25_documents(&config, &dir.path().join("idx"), &Progress::hidden()).unwrap();
        assert_eq!(again.index, IndexOrigin::Reused);
        assert_eq!(again.results, first.results);
    }

    #[test]
    fn chinese_documents_are_segmented() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = concat!(
            "{\"_id\":\"z1\",\"title\":\"数据库\",\"text\":\"数据库备份需要定期进行。恢复时先停止服务。\"}\n",
            "{\"_id\":\"z2\",\"title\":\"网络\",\"text\":\"防火墙规则决定哪些端口可以访问。\"}\n",
        );
        let config = config(dir.path(), corpus, "{\"_id\":\"q\",\"text\":\"如何配置防火墙端口\"}\n", 5);
        let run = bm25_documents(&config, &dir.path().join("idx"), &Progress::hidden()).unwrap();
        assert_eq!(run.results[0].hits.first().map(|(d, _)| d.as_str()), Some("z2"));
    }

    #[test]
    fn bad_query_lines_name_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let bad = [
            ("{\"_id\":\"a b\",\"text\":\"x\"}\n", 1),
            ("{\"_id\":\"a\",\"text\":\"x\"}\n{\"_id\":\"a\",\"text\":\"y\"}\n", 2),
            ("{\"_id\":\"a\",\"text\":\"x\"}\n{\"text\":\"y\"}\n", 2),
            ("\n", 0),
        ];
        for (queries, line) in bad {
            let config = config(dir.path(), CORPUS, queries, 3);
            match bm25_documents(&config, &dir.path().join("idx"), &Progress::hidden()) {
                Err(Error::Malformed { line: at, .. }) => assert_eq!(at, line, "{queries}"),
                other => panic!("{queries}: {other:?}"),
            }
        }
    }
}
