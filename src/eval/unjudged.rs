//! The unjudged pool: documents that runs put in their top k without any judgment, written as a
//! decisions file that `qrelgen review apply` reads (JSONL, one line per query: the query, and a
//! `pool` of chunks with an empty `grade` to fill in 0–3).
//!
//! Invariants: one line per answerable query with unjudged chunks; each chunk once per query,
//! with its best rank over the runs and the runs that retrieved it; no decision is set, so a
//! graded line only adds judgments (provenance `human`) and an ungraded one is skipped.

use super::collection::{Collection, Level, QueryClass};
use super::error::{EvalError, Result};
use super::files;
use super::run::Run;
use crate::review::set::read_jsonl;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// One chunk to judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolEntry {
    /// The chunk.
    pub chunk_id: String,
    /// Its best rank over the runs.
    pub rank: usize,
    /// The runs that put it in their top k.
    pub runs: Vec<String>,
    /// Its document title (when the corpus is at hand).
    pub title: String,
    /// Its text.
    pub text: String,
    /// Always empty: there is no judgment yet.
    pub machine_grade: Option<u8>,
    /// To fill in: 0–3.
    pub grade: Option<u8>,
}

/// One query's unjudged chunks: a line of the file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolItem {
    /// The query.
    pub query_id: String,
    /// Its text (shown; `review apply` does not compare it).
    pub query: String,
    /// Its type, when known.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub query_type: Option<String>,
    /// The chunks to judge, best rank first.
    pub pool: Vec<PoolEntry>,
    /// Left empty: grading chunks needs no decision.
    pub decision: Option<String>,
    /// To fill in: who judged.
    pub reviewer: Option<String>,
}

/// The unjudged chunks in the top `k` of `runs`, per answerable query.
///
/// # Errors
/// [`EvalError::Setting`] at document level (review grades chunks).
pub fn pool(collection: &Collection, runs: &[&Run], k: usize) -> Result<Vec<PoolItem>> {
    if collection.level == Level::Doc {
        return Err(EvalError::Setting {
            flag: "--export-unjudged",
            message: "review grades chunks: export the pool of a chunk-level evaluation".to_owned(),
        });
    }
    let mut items = Vec::new();
    for (q, info) in collection.queries.iter().enumerate().filter(|(_, i)| i.class == QueryClass::Answerable)
    {
        let mut entries: BTreeMap<&str, PoolEntry> = BTreeMap::new();
        for run in runs {
            for (rank, hit) in run.rankings[q].iter().take(k).enumerate() {
                let doc = run.doc(hit);
                if collection.qrels.grade(q, doc).is_some() {
                    continue;
                }
                let entry = entries.entry(doc).or_insert_with(|| PoolEntry {
                    chunk_id: doc.to_owned(),
                    rank: rank + 1,
                    runs: Vec::new(),
                    title: String::new(),
                    text: String::new(),
                    machine_grade: None,
                    grade: None,
                });
                entry.rank = entry.rank.min(rank + 1);
                entry.runs.push(run.name.clone());
            }
        }
        if entries.is_empty() {
            continue;
        }
        let mut pool: Vec<PoolEntry> = entries.into_values().collect();
        pool.sort_by(|a, b| a.rank.cmp(&b.rank).then_with(|| a.chunk_id.cmp(&b.chunk_id)));
        items.push(PoolItem {
            query_id: info.id.clone(),
            query: String::new(),
            query_type: info.query_type.map(|t| t.label().to_owned()),
            pool,
            decision: None,
            reviewer: None,
        });
    }
    Ok(items)
}

#[derive(Deserialize)]
struct TextLine {
    #[serde(rename = "_id")]
    id: serde_json::Value,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

fn id_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Fills in query texts from `queries.jsonl` and chunk titles and texts from `corpus.jsonl`
/// (files of a set folder, or the loose files given).
///
/// # Errors
/// Unreadable or malformed files.
pub fn fill_texts(items: &mut [PoolItem], queries: Option<&Path>, corpus: Option<&Path>) -> Result<()> {
    let wanted_queries: HashSet<String> = items.iter().map(|i| i.query_id.clone()).collect();
    let wanted_chunks: HashSet<String> =
        items.iter().flat_map(|i| i.pool.iter().map(|e| e.chunk_id.clone())).collect();
    let texts =
        |path: Option<&Path>, wanted: &HashSet<String>| -> Result<HashMap<String, (String, String)>> {
            let mut found = HashMap::new();
            if let Some(path) = path {
                read_jsonl(path, |_, _, line: TextLine| {
                    let id = id_text(&line.id);
                    if wanted.contains(&id) {
                        found.insert(id, (line.title.unwrap_or_default(), line.text.unwrap_or_default()));
                    }
                    Ok(())
                })?;
            }
            Ok(found)
        };
    let query_texts = texts(queries, &wanted_queries)?;
    let chunk_texts = texts(corpus, &wanted_chunks)?;
    for item in items {
        if let Some((_, text)) = query_texts.get(&item.query_id) {
            item.query.clone_from(text);
        }
        for entry in &mut item.pool {
            if let Some((title, text)) = chunk_texts.get(&entry.chunk_id) {
                entry.title.clone_from(title);
                entry.text.clone_from(text);
            }
        }
    }
    Ok(())
}

/// The set files that hold the texts, for [`fill_texts`].
#[must_use]
pub fn set_text_files(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    (dir.join(files::QUERIES), dir.join(files::CORPUS))
}
