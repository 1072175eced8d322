//! The judged collection an evaluation runs against: every query with its class, type,
//! difficulty and provenance, the judgments at the evaluation level (chunks or documents), and
//! the corpus ids that tell the two levels apart.
//!
//! Input: a set folder (`queries.jsonl`, `qrels.trec` or `qrels/test.tsv`,
//! `qrels/provenance.tsv`, `no_answer.txt`, `corpus.jsonl`, `manifest.json`) or loose files
//! (`--qrels`, `--queries`, `--no-answer`, `--corpus`). Invariants: a query is *answerable* when
//! it has a judgment graded 1 or more, *no_answer* when the set (or `--no-answer`) lists it and
//! it has none, and *unjudged* otherwise (counted, never scored); at document level a document
//! takes the best grade of its chunks and is judged when any of its chunks is; judged grade-0
//! rows (`qrels/provenance.tsv`) count as judged, not relevant.

use super::error::{EvalError, Result, unreadable};
use super::files;
use super::metrics::Judgments;
use super::qrels::{self, QrelRow};
use crate::record::{Difficulty, Provenance, QueryType};
use crate::review::set::{read_jsonl, read_provenance};
use foldhash::{HashMap, HashMapExt as _, HashSet, HashSetExt as _};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::path::{Path, PathBuf};

/// Whether runs and qrels name chunks or documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Chunk ids, as in the set's qrels.
    #[default]
    Chunk,
    /// Document ids: a document takes the best grade of its chunks.
    Doc,
}

/// What the judgments make of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryClass {
    /// Has a relevant document: scored by every metric.
    Answerable,
    /// Has none, by design: scored for abstention.
    NoAnswer,
    /// Has no judgment and is not a no_answer query: not scored.
    Unjudged,
}

/// One query of the collection.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryInfo {
    /// Its id.
    pub id: String,
    /// Its class under the set's qrels.
    pub class: QueryClass,
    /// Its type, when the queries file says.
    pub query_type: Option<QueryType>,
    /// Its measured difficulty, when the queries file says.
    pub difficulty: Option<Difficulty>,
    /// Whether a person reviewed it (a decision in `metadata.review` or a human grade); `None`:
    /// not known (a query without qrelgen's metadata, e.g. of a collection with human qrels).
    pub reviewed: Option<bool>,
}

/// The judgments of every query, at the evaluation level. Each query keeps its own short list
/// of judged documents, so that looking up a retrieved document touches only that list.
#[derive(Debug, Default)]
pub struct QrelSet {
    /// Per query (collection order): `(document, grade)` sorted by document.
    pub grades: Vec<Vec<(Box<str>, i32)>>,
    /// Per query: the summary the metrics use.
    pub judgments: Vec<Judgments>,
}

impl QrelSet {
    /// The grade of `doc` for query `q`, if it is judged.
    #[must_use]
    pub fn grade(&self, q: usize, doc: &str) -> Option<i32> {
        let grades = &self.grades[q];
        grades.binary_search_by(|(d, _)| (**d).cmp(doc)).ok().map(|at| grades[at].1)
    }

    /// Whether query `q` has a relevant document.
    #[must_use]
    pub fn answerable(&self, q: usize) -> bool {
        self.judgments.get(q).is_some_and(|j| j.relevant > 0)
    }
}

/// The chunk and document ids of a corpus, and which document each chunk belongs to.
#[derive(Debug, Default)]
pub struct CorpusIds {
    chunk_doc: HashMap<String, String>,
    docs: HashSet<String>,
}

/// What an id of a run is at the evaluation level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// An id of the evaluation level.
    Expected,
    /// An id of the other level (a document id in a chunk-level evaluation, or the reverse).
    OtherLevel,
    /// Not in the corpus.
    Unknown,
}

/// Where the judgments come from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The set folder, if the evaluation is of a set.
    pub set: Option<PathBuf>,
    /// The qrels file read.
    pub qrels: PathBuf,
    /// blake3 of the set's `manifest.json`.
    pub manifest_blake3: Option<String>,
}

/// The loose files to evaluate against, when there is no set folder.
#[derive(Debug, Clone, Default)]
pub struct LooseFiles {
    /// TREC or BEIR TSV qrels.
    pub qrels: PathBuf,
    /// BEIR `queries.jsonl` (ids, and metadata when qrelgen wrote it).
    pub queries: Option<PathBuf>,
    /// Ids of queries that have no answer by design, one per line.
    pub no_answer: Option<PathBuf>,
    /// A `corpus.jsonl`, to tell chunk ids from document ids (needed at document level).
    pub corpus: Option<PathBuf>,
}

/// The judged collection.
#[derive(Debug)]
pub struct Collection {
    /// Every query: those of the queries file, then any only the qrels name.
    pub queries: Vec<QueryInfo>,
    index: HashMap<String, usize>,
    /// The set's judgments.
    pub qrels: QrelSet,
    /// Human judgments (`--human-qrels`), over the same queries.
    pub human: Option<QrelSet>,
    /// The evaluation level.
    pub level: Level,
    corpus: Option<CorpusIds>,
    /// Document parts (before the last `:`) of judged chunk ids: tells a document id in a run
    /// when no corpus is at hand.
    doc_parts: HashSet<String>,
    /// Where the judgments come from.
    pub sources: Sources,
}

/// A line of `queries.jsonl`: the fields the evaluation uses.
#[derive(Deserialize)]
struct QueryRecord {
    #[serde(rename = "_id", alias = "id")]
    id: serde_json::Value,
    #[serde(default)]
    metadata: Option<QueryMeta>,
}

#[derive(Deserialize)]
struct QueryMeta {
    #[serde(rename = "type", default)]
    query_type: Option<String>,
    #[serde(default)]
    difficulty: Option<String>,
    #[serde(default)]
    review: Option<IgnoredAny>,
}

/// A line of `corpus.jsonl`: its id and document.
#[derive(Deserialize)]
struct CorpusRecord {
    #[serde(rename = "_id", alias = "id")]
    id: serde_json::Value,
    #[serde(default)]
    metadata: Option<CorpusMeta>,
}

#[derive(Deserialize)]
struct CorpusMeta {
    #[serde(default)]
    doc_id: Option<String>,
}

/// An id written as a string or a number.
fn id_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Collection {
    /// Reads the set in `dir`: qrels from `qrels.trec` (or `qrels/test.tsv`), judged grade-0
    /// rows and human provenance from `qrels/provenance.tsv`, `no_answer.txt`, the queries and
    /// the corpus ids.
    ///
    /// # Errors
    /// Unreadable or malformed files, qrels problems.
    pub fn from_set(dir: &Path, level: Level) -> Result<Self> {
        let qrels_path = [files::QRELS_TREC, files::QRELS_TSV]
            .into_iter()
            .map(|name| dir.join(name))
            .find(|p| p.is_file())
            .unwrap_or_else(|| dir.join(files::QRELS_TREC));
        let mut rows = qrels::read(&qrels_path)?;
        let mut human_rated = HashSet::new();
        let provenance = dir.join(files::PROVENANCE_TSV);
        if provenance.is_file() {
            let known: HashSet<(String, String)> =
                rows.iter().map(|r| (r.query.clone(), r.doc.clone())).collect();
            for q in read_provenance(&provenance)? {
                if q.provenance == Provenance::Human {
                    human_rated.insert(q.query_id.to_string());
                }
                let key = (q.query_id.to_string(), q.chunk_id.to_string());
                if q.grade == 0 && !known.contains(&key) {
                    rows.push(QrelRow { query: key.0, doc: key.1, grade: 0, line: 0 });
                }
            }
        }
        let manifest = dir.join(files::MANIFEST);
        let manifest_blake3 = fs_err::read(&manifest).ok().map(|b| blake3::hash(&b).to_hex().to_string());
        let files = LooseFiles {
            qrels: qrels_path,
            queries: Some(dir.join(files::QUERIES)),
            no_answer: Some(dir.join(files::NO_ANSWER)).filter(|p| p.is_file()),
            corpus: Some(dir.join(files::CORPUS)),
        };
        let sources = Sources { set: Some(dir.to_owned()), qrels: files.qrels.clone(), manifest_blake3 };
        Self::build(&files, &rows, &human_rated, level, sources)
    }

    /// Reads loose files: `--qrels` with optional `--queries`, `--no-answer` and `--corpus`.
    ///
    /// # Errors
    /// Unreadable or malformed files, qrels problems; [`EvalError::Setting`] for document level
    /// without a corpus.
    pub fn from_files(files: &LooseFiles, level: Level) -> Result<Self> {
        let rows = qrels::read(&files.qrels)?;
        let sources = Sources { set: None, qrels: files.qrels.clone(), manifest_blake3: None };
        Self::build(files, &rows, &HashSet::new(), level, sources)
    }

    fn build(
        files: &LooseFiles,
        rows: &[QrelRow],
        human_rated: &HashSet<String>,
        level: Level,
        sources: Sources,
    ) -> Result<Self> {
        let corpus = files.corpus.as_deref().map(read_corpus).transpose()?;
        if level == Level::Doc && corpus.is_none() {
            return Err(EvalError::Setting {
                flag: "--level doc",
                message: "needs the corpus.jsonl that maps chunks to documents: pass --corpus".to_owned(),
            });
        }
        let mut collection = Self {
            queries: Vec::new(),
            index: HashMap::new(),
            qrels: QrelSet::default(),
            human: None,
            level,
            corpus,
            doc_parts: HashSet::new(),
            sources,
        };
        if let Some(path) = &files.queries {
            collection.read_queries(path, human_rated)?;
        }
        let no_answer = files.no_answer.as_deref().map(read_ids).transpose()?.unwrap_or_default();
        collection.qrels = collection.qrel_set(rows);
        for (q, info) in collection.queries.iter_mut().enumerate() {
            info.class = if collection.qrels.answerable(q) {
                QueryClass::Answerable
            } else if no_answer.contains(&info.id) {
                QueryClass::NoAnswer
            } else {
                QueryClass::Unjudged
            };
        }
        collection.doc_parts =
            rows.iter().filter_map(|r| r.doc.rsplit_once(':')).map(|(d, _)| d.to_owned()).collect();

        Ok(collection)
    }

    /// Adds human judgments (`--human-qrels`): their queries join the collection if they are
    /// new (unjudged by the set).
    ///
    /// # Errors
    /// Unreadable file, qrels problems.
    pub fn add_human(&mut self, path: &Path) -> Result<()> {
        let rows = qrels::read(path)?;
        let human = self.qrel_set(&rows);
        let n = self.queries.len();
        self.qrels.grades.resize_with(n, Vec::new);
        self.qrels.judgments.resize_with(n, Judgments::default);
        for (q, info) in self.queries.iter_mut().enumerate() {
            if human.answerable(q) {
                info.reviewed = Some(true);
            }
        }
        self.human = Some(human);
        Ok(())
    }

    fn read_queries(&mut self, path: &Path, human_rated: &HashSet<String>) -> Result<()> {
        read_jsonl(path, |_, _, record: QueryRecord| {
            let id = id_text(&record.id);
            let meta = record.metadata;
            let query_type =
                meta.as_ref().and_then(|m| m.query_type.as_deref()).and_then(QueryType::from_label);
            let difficulty = meta
                .as_ref()
                .and_then(|m| m.difficulty.as_deref())
                .and_then(|d| Difficulty::ALL.iter().copied().find(|x| x.label() == d));
            let reviewed = if human_rated.contains(&id) {
                Some(true)
            } else {
                // qrelgen's queries carry a type; a collection's own metadata says nothing of review.
                meta.as_ref().filter(|m| m.query_type.is_some()).map(|m| m.review.is_some())
            };
            self.add_query(QueryInfo { id, class: QueryClass::Unjudged, query_type, difficulty, reviewed });
            Ok(())
        })?;
        Ok(())
    }

    fn add_query(&mut self, info: QueryInfo) -> usize {
        if let Some(&q) = self.index.get(&info.id) {
            return q;
        }
        self.index.insert(info.id.clone(), self.queries.len());
        self.queries.push(info);
        self.queries.len() - 1
    }

    /// The judgments of `rows` at the evaluation level, over every query (queries only the
    /// qrels name join the collection).
    fn qrel_set(&mut self, rows: &[QrelRow]) -> QrelSet {
        let mut per_query: Vec<HashMap<Box<str>, i32>> = Vec::new();
        for row in rows {
            let q = self.add_query(QueryInfo {
                id: row.query.clone(),
                class: QueryClass::Unjudged,
                query_type: None,
                difficulty: None,
                reviewed: None,
            });
            let doc: Box<str> = self.at_level(&row.doc).into();
            if per_query.len() <= q {
                per_query.resize_with(q + 1, HashMap::new);
            }
            let grade = per_query[q].entry(doc).or_insert(row.grade);
            *grade = (*grade).max(row.grade);
        }
        per_query.resize_with(self.queries.len(), HashMap::new);
        let grades: Vec<Vec<(Box<str>, i32)>> = per_query
            .into_iter()
            .map(|m| {
                let mut v: Vec<(Box<str>, i32)> = m.into_iter().collect();
                v.sort_unstable();
                v
            })
            .collect();
        let judgments = grades.iter().map(|g| Judgments::from_grades(g.iter().map(|(_, g)| *g))).collect();
        QrelSet { grades, judgments }
    }

    /// A judged id at the evaluation level: at document level, a chunk's document.
    fn at_level<'a>(&'a self, id: &'a str) -> &'a str {
        match (self.level, &self.corpus) {
            (Level::Doc, Some(corpus)) => corpus.chunk_doc.get(id).map_or(id, String::as_str),
            _ => id,
        }
    }

    /// The position of query `id`.
    #[must_use]
    pub fn query(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// Whether telling run ids apart needs a lookup per row: with a corpus, or with judged ids
    /// that name their document (`doc:chunk`). Without either, every id counts as expected.
    #[must_use]
    pub fn checks_ids(&self) -> bool {
        self.corpus.is_some() || !self.doc_parts.is_empty()
    }

    /// What `id`, as a run names it, is at the evaluation level. Without a corpus nothing is
    /// unknown, and the document part of a judged chunk id is of the other level.
    #[must_use]
    pub fn id_kind(&self, id: &str) -> IdKind {
        let Some(corpus) = &self.corpus else {
            return if self.doc_parts.contains(id) { IdKind::OtherLevel } else { IdKind::Expected };
        };
        let (is_chunk, is_doc) = (corpus.chunk_doc.contains_key(id), corpus.docs.contains(id));
        match (self.level, is_chunk, is_doc) {
            (Level::Chunk, true, _) | (Level::Doc, _, true) => IdKind::Expected,
            (Level::Chunk, false, true) | (Level::Doc, true, false) => IdKind::OtherLevel,
            _ => IdKind::Unknown,
        }
    }
}

/// Every chunk id and document id of a `corpus.jsonl` (a line without `metadata.doc_id` is a
/// document of its own).
fn read_corpus(path: &Path) -> Result<CorpusIds> {
    let mut ids = CorpusIds::default();
    read_jsonl(path, |_, _, record: CorpusRecord| {
        let id = id_text(&record.id);
        let doc = record.metadata.and_then(|m| m.doc_id).unwrap_or_else(|| id.clone());
        ids.docs.insert(doc.clone());
        ids.chunk_doc.insert(id, doc);
        Ok(())
    })?;
    Ok(ids)
}

/// The ids of a one-id-per-line file.
fn read_ids(path: &Path) -> Result<HashSet<String>> {
    let text = crate::lines::read_text(path, crate::lines::RECORD_LINE).map_err(|e| unreadable(path, e))?;
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        fs_err::write(&path, text).unwrap();
        path
    }

    fn fixture(dir: &Path) -> LooseFiles {
        LooseFiles {
            qrels: write(dir, "q.trec", "q1 0 a:1 3\nq1 0 a:2 1\nq1 0 b:1 0\nq3 0 c:1 2\n"),
            queries: Some(write(
                dir,
                "queries.jsonl",
                "{\"_id\":\"q1\",\"metadata\":{\"type\":\"direct\",\"difficulty\":\"easy\",\"review\":{}}}\n\
                 {\"_id\":\"q2\",\"metadata\":{\"type\":\"no_answer\"}}\n{\"_id\":4}\n",
            )),
            no_answer: Some(write(dir, "no_answer.txt", "q2\n")),
            corpus: Some(write(
                dir,
                "corpus.jsonl",
                "{\"_id\":\"a:1\",\"metadata\":{\"doc_id\":\"a\"}}\n{\"_id\":\"a:2\",\"metadata\":{\"doc_id\":\"a\"}}\n\
                 {\"_id\":\"b:1\",\"metadata\":{\"doc_id\":\"b\"}}\n{\"_id\":\"c:1\",\"metadata\":{\"doc_id\":\"c\"}}\n",
            )),
        }
    }

    #[test]
    fn classes_metadata_and_levels() {
        let dir = tempfile::tempdir().unwrap();
        let c = Collection::from_files(&fixture(dir.path()), Level::Chunk).unwrap();
        let ids: Vec<(&str, QueryClass)> = c.queries.iter().map(|q| (q.id.as_str(), q.class)).collect();
        assert_eq!(
            ids,
            [
                ("q1", QueryClass::Answerable),
                ("q2", QueryClass::NoAnswer),
                ("4", QueryClass::Unjudged),
                ("q3", QueryClass::Answerable)
            ]
        );
        assert_eq!(
            (c.queries[0].query_type, c.queries[0].difficulty),
            (Some(QueryType::Direct), Some(Difficulty::Easy))
        );
        assert_eq!((c.queries[0].reviewed, c.queries[1].reviewed), (Some(true), Some(false)));
        assert_eq!(c.qrels.judgments[0], Judgments { relevant: 2, nonrelevant: 1, ideal: vec![3, 1] });
        assert_eq!(
            (c.id_kind("a:1"), c.id_kind("a"), c.id_kind("zz")),
            (IdKind::Expected, IdKind::OtherLevel, IdKind::Unknown)
        );

        let d = Collection::from_files(&fixture(dir.path()), Level::Doc).unwrap();
        // Document a takes the best grade of its chunks; b stays judged, not relevant.
        assert_eq!(d.qrels.judgments[0], Judgments { relevant: 1, nonrelevant: 1, ideal: vec![3] });
        assert_eq!(d.qrels.grade(0, "a"), Some(3));
        assert_eq!((d.id_kind("a"), d.id_kind("a:1")), (IdKind::Expected, IdKind::OtherLevel));
    }

    #[test]
    fn document_level_needs_a_corpus() {
        let dir = tempfile::tempdir().unwrap();
        let files = LooseFiles { corpus: None, ..fixture(dir.path()) };
        let err = Collection::from_files(&files, Level::Doc).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("--corpus"), "{err}");
        let c = Collection::from_files(&files, Level::Chunk).unwrap();
        assert_eq!(
            (c.id_kind("a:1"), c.id_kind("a"), c.id_kind("x")),
            (IdKind::Expected, IdKind::OtherLevel, IdKind::Expected)
        );
    }
}
