//! A set folder as the review loop reads it: the queries and judgments of a version, the review
//! queue, the chunk ids, the manifest and the review history.
//!
//! Records are read tolerantly: fields this module does not know are ignored, and query lines are
//! kept verbatim so that lines no decision touches are written back byte for byte.

use super::log::{Entry, ReviewLog, version_dir};
use crate::error::{Error, Result};
use crate::id::{ChunkId, QueryId};
use crate::output::layout::{
    CORPUS, LEDGER, MANIFEST, PROVENANCE_HEADER, PROVENANCE_TSV, QUERIES, QUEUE, VERSIONS_DIR,
};
use crate::record::{Provenance, Qrel, QueryType, ReviewItem, Status};
use serde::Deserialize;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// One line of `queries.jsonl`: the fields the review loop uses, and the line as written.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryLine {
    /// The query id.
    pub id: QueryId,
    /// Its text.
    pub text: String,
    /// Its type.
    pub query_type: QueryType,
    /// Kept or flagged.
    pub status: Status,
    /// The line, verbatim.
    pub raw: String,
    /// Its 1-based line number in the file it was read from.
    pub line: usize,
}

#[derive(Deserialize)]
struct QueryFields {
    #[serde(rename = "_id")]
    id: QueryId,
    text: String,
    metadata: MetaFields,
}

#[derive(Deserialize)]
struct MetaFields {
    #[serde(rename = "type")]
    query_type: QueryType,
    status: Status,
}

/// The content of one version of a set: its queries and every judgment (grade 0 included).
/// Two versions are equal when their files would be: the same query lines and judgments.
#[derive(Debug, Clone)]
pub struct Version {
    /// `queries.jsonl`, in file order.
    pub queries: Vec<QueryLine>,
    /// `qrels/provenance.tsv`, in file order.
    pub qrels: Vec<Qrel>,
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.qrels == other.qrels
            && self.queries.iter().map(|q| &q.raw).eq(other.queries.iter().map(|q| &q.raw))
    }
}

impl Version {
    /// Reads `queries.jsonl` and `qrels/provenance.tsv` from `dir`.
    ///
    /// # Errors
    /// [`Error::Input`] or [`Error::Malformed`] naming the file and line.
    pub fn read(dir: &Path) -> Result<Self> {
        let mut queries = Vec::new();
        read_jsonl(&dir.join(QUERIES), |line, raw, q: QueryFields| {
            let (query_type, status) = (q.metadata.query_type, q.metadata.status);
            let raw = raw.to_owned();
            queries.push(QueryLine { id: q.id, text: q.text, query_type, status, raw, line });
            Ok(())
        })?;
        Ok(Self { queries, qrels: read_provenance(&dir.join(PROVENANCE_TSV))? })
    }
}

/// `manifest.json`: the review log, and every other field kept as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetManifest {
    /// Everything but the review log (the build's fields), written back unchanged.
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
    /// The review history; `None` before the first decisions are applied.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub review: Option<ReviewLog>,
}

impl SetManifest {
    /// The number of the current version (1 before any review or refresh).
    #[must_use]
    pub fn version(&self) -> u32 {
        self.review.as_ref().map_or(1, |log| log.version)
    }
}

/// A set folder, ready for review commands.
#[derive(Debug)]
pub struct ReviewSet {
    /// The folder.
    pub dir: PathBuf,
    /// `manifest.json`, with the review history.
    pub manifest: SetManifest,
    /// What the machine made: version 1, or the version the last `build --force` made.
    pub base: Version,
    /// The current version.
    pub current: Version,
    /// The review queue, as sampled by the build.
    pub queue: Vec<ReviewItem>,
    /// Every chunk id of the corpus.
    pub chunks: HashSet<ChunkId>,
    /// Every judgment applied to the base since it was built, oldest first.
    pub ledger: Vec<Entry>,
    /// Judgments of the versions before the base (an earlier build's queries): kept in the
    /// ledger file, not applied.
    pub earlier_ledger: Vec<Entry>,
}

impl ReviewSet {
    /// Reads the set in `dir`.
    ///
    /// # Errors
    /// [`Error::Input`]/[`Error::Malformed`] for unreadable files, [`Error::ReviewHistory`] when
    /// `versions/` or the ledger exist but the manifest has no review log (the set was rebuilt).
    pub fn load(dir: &Path) -> Result<Self> {
        // A publish a killed command left half done is rolled back before anything is read.
        crate::output::recover(dir)?;
        let manifest = read_manifest(dir)?;
        let leftover = dir.join(VERSIONS_DIR).exists() || dir.join(LEDGER).exists();
        if manifest.review.is_none() && leftover && !failed_first_apply(dir) {
            return Err(Error::ReviewHistory {
                path: dir.to_owned(),
                message:
                    "versions/ and review/ are left from an earlier build: the set was rebuilt after a review"
                        .to_owned(),
                hint: "move versions/ and review/ out of the folder to start a new review of this build",
            });
        }
        let current = Version::read(dir)?;
        let (base, ledger, earlier_ledger) = match &manifest.review {
            None => (current.clone(), Vec::new(), Vec::new()),
            Some(log) => {
                if let Some(seal) = &log.ledger {
                    crate::set::ledger::check(dir, seal, log.version)?;
                }
                let mut ledger: Vec<Entry> = read_all(&dir.join(LEDGER))?;
                // Entries of a version whose publishing failed are not part of the set.
                ledger.retain(|e| e.version <= log.version);
                let earlier = ledger.iter().take_while(|e| e.version <= log.base).count();
                let ledger_now = ledger.split_off(earlier);
                let base = if log.base == log.version {
                    current.clone()
                } else {
                    Version::read(&version_dir(dir, log.base))?
                };
                (base, ledger_now, ledger)
            }
        };
        Ok(Self {
            dir: dir.to_owned(),
            manifest,
            base,
            current,
            queue: read_all(&dir.join(QUEUE))?,
            chunks: read_chunk_ids(&dir.join(CORPUS))?,
            ledger,
            earlier_ledger,
        })
    }

    /// The review history; `None` before the first decisions are applied.
    #[must_use]
    pub fn log(&self) -> Option<&ReviewLog> {
        self.manifest.review.as_ref()
    }

    /// The `queries.jsonl` that the base version was read from.
    #[must_use]
    pub fn base_queries_path(&self) -> PathBuf {
        let dir = match self.log() {
            Some(log) if log.base != log.version => version_dir(&self.dir, log.base),
            Some(_) | None => self.dir.clone(),
        };
        dir.join(QUERIES)
    }

    /// The number of the current version (1 before any review).
    #[must_use]
    pub fn version(&self) -> u32 {
        self.manifest.version()
    }
}

/// Reads `manifest.json` of the set in `dir`.
///
/// # Errors
/// [`Error::Input`] or [`Error::Malformed`] naming the file.
pub(crate) fn read_manifest(dir: &Path) -> Result<SetManifest> {
    let path = dir.join(MANIFEST);
    let text = fs_err::read_to_string(&path).map_err(|source| Error::Input { path: path.clone(), source })?;
    serde_json::from_str(&text).map_err(|e| malformed(&path, e.line(), e.to_string()))
}

/// Whether `versions/v1/` is what a first apply that failed to publish left: a copy of the files
/// in place (the same `manifest.json`), not the history of an earlier build.
fn failed_first_apply(dir: &Path) -> bool {
    let kept = fs_err::read(version_dir(dir, 1).join(MANIFEST));
    kept.is_ok_and(|kept| fs_err::read(dir.join(MANIFEST)).is_ok_and(|now| now == kept))
}

/// Calls `each(line number, line, record)` for every non-blank line of a JSONL file.
///
/// # Errors
/// [`Error::Input`] if the file cannot be read, [`Error::Malformed`] naming the first line that
/// does not parse, or whatever `each` returns.
pub fn read_jsonl<T: DeserializeOwned>(
    path: &Path,
    mut each: impl FnMut(usize, &str, T) -> Result<()>,
) -> Result<()> {
    let file = fs_err::File::open(path).map_err(|source| Error::Input { path: path.to_owned(), source })?;
    let mut input = std::io::BufReader::new(file);
    let mut line = String::new();
    for i in 0.. {
        line.clear();
        let read = crate::lines::read_line(&mut input, &mut line, i + 1, crate::lines::DOCUMENT_LINE)
            .map_err(|source| Error::Input { path: path.to_owned(), source })?;
        if read == 0 {
            break;
        }
        let line = line.strip_suffix('\n').map_or(line.as_str(), |l| l.strip_suffix('\r').unwrap_or(l));
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(line).map_err(|e| malformed(path, i + 1, e.to_string()))?;
        each(i + 1, line, record)?;
    }
    Ok(())
}

/// Every record of a JSONL file.
///
/// # Errors
/// As [`read_jsonl`].
pub fn read_all<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    let mut all = Vec::new();
    read_jsonl(path, |_, _, record| {
        all.push(record);
        Ok(())
    })?;
    Ok(all)
}

#[derive(Deserialize)]
struct CorpusId {
    #[serde(rename = "_id")]
    id: ChunkId,
}

fn read_chunk_ids(path: &Path) -> Result<HashSet<ChunkId>> {
    let mut ids = HashSet::new();
    read_jsonl(path, |_, _, line: CorpusId| {
        ids.insert(line.id);
        Ok(())
    })?;
    Ok(ids)
}

/// Reads `qrels/provenance.tsv`.
///
/// # Errors
/// [`Error::Input`], or [`Error::Malformed`] naming the line.
pub fn read_provenance(path: &Path) -> Result<Vec<Qrel>> {
    let text = crate::lines::read_text(path, crate::lines::RECORD_LINE)
        .map_err(|source| Error::Input { path: path.to_owned(), source })?;
    let mut lines = text.lines().enumerate();
    if lines.next().map(|(_, header)| header) != Some(PROVENANCE_HEADER) {
        return Err(malformed(path, 1, format!("the header is not {PROVENANCE_HEADER:?}")));
    }
    lines.map(|(i, line)| parse_provenance_line(line).map_err(|m| malformed(path, i + 1, m))).collect()
}

fn parse_provenance_line(line: &str) -> std::result::Result<Qrel, String> {
    let [query, chunk, grade, provenance] = line.split('\t').collect::<Vec<_>>()[..] else {
        return Err("expected 4 tab-separated fields".to_owned());
    };
    Ok(Qrel {
        query_id: QueryId::parse(query).map_err(|e| e.to_string())?,
        chunk_id: ChunkId::parse(chunk).map_err(|e| e.to_string())?,
        grade: grade.parse().map_err(|_| format!("bad grade {grade:?}"))?,
        provenance: Provenance::from_label(provenance)
            .ok_or_else(|| format!("bad provenance {provenance:?}"))?,
    })
}

/// An [`Error::Malformed`].
pub(crate) fn malformed(path: &Path, line: usize, message: impl Into<String>) -> Error {
    Error::Malformed { path: path.to_owned(), line, message: message.into() }
}
