//! Apply: decisions become the next version of the set.
//!
//! Input: the set and one batch of judgments (a decisions file, or two resolved into one). Every
//! judgment is checked against the set first (known query, known chunks, `answerable` only for
//! `no_answer` queries); one problem and nothing is written. The new version is then derived from
//! the base version (what the last build made) and the ledger since, later judgments overriding
//! earlier ones:
//!
//! - `reject` removes the query and its qrels; `edit` replaces its text (the id stays);
//! - a human grade replaces the machine's (or adds a row) with provenance `human`; grade 0 stays
//!   in `qrels/provenance.tsv` but leaves `qrels.trec` and `qrels/test.tsv`;
//! - `answerable` keeps a `no_answer` query with the chunks graded 1–3 as its qrels and makes it a
//!   `direct` query (`metadata.type`, with `metadata.generated_as: "no_answer"`, as the build's
//!   `--reclassify` does); `accept` or `edit` of a `no_answer` query confirms it has none (its
//!   human grades 0 stay in `qrels/provenance.tsv`);
//! - a query that stays in the set must keep a chunk graded 1–3 (`no_answer` queries aside);
//! - a row whose query text differs from the set's is refused unless its decision is `edit`;
//! - `no_answer.txt` lists the `no_answer` queries left without a relevant chunk;
//! - a decided query's `metadata.review` records the decision, the reviewer and, after an edit,
//!   the original text.
//!
//! The same input twice (same bytes, same policy) is a no-op; so is a batch that would leave every
//! file as it is.

use super::agreement::Policy;
use super::decisions::Decisions;
use super::rules;
use super::set::{QueryLine, ReviewSet, Version, malformed};
use super::version::{self, Counts, Entry, Input, InputFile, MadeBy, VersionRecord};
use super::{Decision, Judgment, Located};
use crate::error::{Error, Result};
use crate::id::{ChunkId, ContentHasher, QueryId};
use crate::output::layout::APPLIED_DIR;
use crate::record::{Provenance, Qrel, QueryType};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// What applying a batch did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ApplySummary {
    /// A new version was written.
    Applied {
        /// Its number.
        version: u32,
        /// What the decisions did.
        counts: Counts,
    },
    /// The same input was applied before; nothing was written.
    AlreadyApplied {
        /// The version it made.
        version: u32,
    },
    /// The decisions would leave every file as it is; nothing was written.
    NoChange,
}

/// Judgments to apply together, with the files they come from.
#[derive(Debug)]
pub struct Batch<'a> {
    /// The decisions files (one, or two resolved).
    pub inputs: Vec<&'a Decisions>,
    /// The judgments to apply.
    pub judgments: Vec<Located>,
    /// How two reviewers were merged, if they were.
    pub resolve: Option<Policy>,
}

impl<'a> Batch<'a> {
    /// The batch of one decisions file.
    #[must_use]
    pub fn single(decisions: &'a Decisions) -> Self {
        Self { inputs: vec![decisions], judgments: decisions.judgments.clone(), resolve: None }
    }
}

/// Applies `batch` to `set`: checks it, and writes the next version unless the same input was
/// applied before or nothing would change.
///
/// # Errors
/// [`Error::Decisions`] when a judgment does not fit the set; [`Error::Output`] when writing
/// fails (nothing is published then).
pub fn apply(set: &ReviewSet, batch: &Batch<'_>) -> Result<ApplySummary> {
    let inputs: Vec<InputFile> = batch.inputs.iter().map(|d| input_file(d)).collect();
    let key = batch_key(&inputs, batch.resolve);
    let history = set.log().into_iter().flat_map(|log| &log.history);
    if let Some(done) = history.into_iter().find(|record| record.key == key) {
        return Ok(ApplySummary::AlreadyApplied { version: done.version });
    }
    let mut problems = rules::against_set(set, &batch.judgments);
    problems.append(&mut rules::resolved_form(&batch.judgments));
    problems.append(&mut rules::repeats(&batch.judgments));
    problems.sort_by_key(|p| p.at);
    if !problems.is_empty() {
        let path = batch.inputs.first().map_or_else(|| set.dir.clone(), |d| d.path.clone());
        return Err(Error::Decisions { path, problems });
    }
    let next = set.version() + 1;
    let mut ledger = set.ledger.clone();
    ledger.extend(batch.judgments.iter().map(|l| Entry {
        version: next,
        at: l.at,
        judgment: l.judgment.clone(),
    }));
    let folded = fold(set, &ledger)?;
    if folded == set.current {
        return Ok(ApplySummary::NoChange);
    }
    let judgments: Vec<Judgment> = batch.judgments.iter().map(|l| l.judgment.clone()).collect();
    let mut counts = Counts::of(&judgments);
    counts.queries = folded.queries.len();
    counts.qrels = folded.qrels.iter().filter(|q| q.grade >= 1).count();
    let mut reviewers: Vec<String> =
        batch.inputs.iter().flat_map(|d| d.judgments.iter().map(|l| l.judgment.reviewer.clone())).collect();
    reviewers.sort();
    reviewers.dedup();
    let record = VersionRecord {
        version: next,
        parent: set.version(),
        made_by: MadeBy::Review,
        key,
        inputs: inputs.clone(),
        reviewers,
        resolve: batch.resolve,
        counts: counts.clone(),
    };
    let stored: Vec<Input<'_>> =
        inputs.into_iter().zip(&batch.inputs).map(|(file, d)| Input { file, bytes: &d.bytes }).collect();
    version::write_next(set, &folded, &ledger, record, &stored)?;
    Ok(ApplySummary::Applied { version: next, counts })
}

fn input_file(decisions: &Decisions) -> InputFile {
    let blake3 = blake3::hash(&decisions.bytes).to_hex().to_string();
    let name = decisions.path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let stored = format!("{APPLIED_DIR}/{}.{}", &blake3[..12], decisions.format.extension());
    InputFile { name, stored, blake3, format: decisions.format }
}

/// The key of a batch: the file's hash, or for several files (resolved) a hash of their hashes
/// and the policy.
fn batch_key(inputs: &[InputFile], resolve: Option<Policy>) -> String {
    if let ([one], None) = (inputs, resolve) {
        return one.blake3.clone();
    }
    let mut hasher = ContentHasher::default();
    hasher.update(&inputs.iter().map(|i| i.blake3.as_str()).collect::<Vec<_>>());
    hasher.update(&[resolve.map_or("", Policy::label)]);
    hasher.finish()
}

/// `metadata.review` of a decided query.
#[derive(Serialize)]
struct HumanReview<'a> {
    decision: Decision,
    reviewer: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    original_text: Option<&'a str>,
}

/// The version that the base and the ledger make: later entries override earlier ones.
fn fold(set: &ReviewSet, ledger: &[Entry]) -> Result<Version> {
    let mut latest: HashMap<&QueryId, &Judgment> = HashMap::new();
    let mut human: HashMap<&QueryId, BTreeMap<&ChunkId, u8>> = HashMap::new();
    for j in ledger.iter().map(|e| &e.judgment) {
        if j.decision.is_some() {
            latest.insert(&j.query_id, j);
        }
        let grades = human.entry(&j.query_id).or_default();
        grades.extend(j.grades.iter().map(|g| (&g.chunk_id, g.grade)));
    }
    let mut machine: HashMap<&QueryId, Vec<&Qrel>> = HashMap::new();
    for q in &set.base.qrels {
        machine.entry(&q.query_id).or_default().push(q);
    }
    let mut next = Version { queries: Vec::new(), qrels: Vec::new() };
    for query in &set.base.queries {
        let decision = latest.get(&query.id).copied();
        let line = match decision {
            Some(j) if j.decision == Some(Decision::Reject) => continue,
            Some(j) => reviewed_line(set, query, j)?,
            None => query.clone(),
        };
        let confirmed_no_answer = query.query_type == QueryType::NoAnswer
            && decision.is_some_and(|j| j.decision != Some(Decision::Answerable));
        let empty = BTreeMap::new();
        let grades = human.get(&query.id).unwrap_or(&empty);
        let rows = query_qrels(&query.id, machine.get(&query.id).map_or(&[][..], Vec::as_slice), grades);
        if confirmed_no_answer {
            // It has no relevant chunk; the human grades 0 that say so stay in provenance.tsv.
            next.qrels.extend(rows.into_iter().filter(|q| q.grade == 0 && q.provenance == Provenance::Human));
        } else {
            next.qrels.extend(rows);
        }
        next.queries.push(line);
    }
    Ok(next)
}

/// A query's judgments: the machine's rows, human grades replacing theirs, then human grades of
/// chunks the machine did not judge, in chunk order.
fn query_qrels(query: &QueryId, machine: &[&Qrel], human: &BTreeMap<&ChunkId, u8>) -> Vec<Qrel> {
    let as_human = |chunk_id: &ChunkId, grade: u8| Qrel {
        query_id: query.clone(),
        chunk_id: chunk_id.clone(),
        grade,
        provenance: Provenance::Human,
    };
    let mut rows: Vec<Qrel> = machine
        .iter()
        .map(|q| human.get(&q.chunk_id).map_or_else(|| (*q).clone(), |&g| as_human(&q.chunk_id, g)))
        .collect();
    let added = human.iter().filter(|(c, _)| !machine.iter().any(|q| q.chunk_id == ***c));
    rows.extend(added.map(|(c, &g)| as_human(c, g)));
    rows
}

/// The query line with its decision recorded in `metadata.review` (and an edit's text; an
/// answerable `no_answer` query becomes `direct`).
fn reviewed_line(set: &ReviewSet, query: &QueryLine, judgment: &Judgment) -> Result<QueryLine> {
    let path = set.base_queries_path();
    let bad = |message: String| malformed(&path, query.line, format!("{}: {message}", query.id));
    let mut object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&query.raw).map_err(|e| bad(e.to_string()))?;
    let edited = judgment.edited_text.as_deref().filter(|_| judgment.decision == Some(Decision::Edit));
    let text = edited.unwrap_or(&query.text).to_owned();
    let decision = judgment.decision.unwrap_or(Decision::Accept);
    let review = HumanReview {
        decision,
        reviewer: &judgment.reviewer,
        original_text: edited.map(|_| query.text.as_str()),
    };
    let review = serde_json::to_value(&review).map_err(|e| bad(e.to_string()))?;
    object.insert("text".to_owned(), serde_json::Value::String(text.clone()));
    let metadata = object.get_mut("metadata").and_then(serde_json::Value::as_object_mut);
    let metadata = metadata.ok_or_else(|| bad("no metadata object".to_owned()))?;
    metadata.insert("review".to_owned(), review);
    let mut query_type = query.query_type;
    if decision == Decision::Answerable && query_type == QueryType::NoAnswer {
        query_type = QueryType::Direct;
        let label = |t: QueryType| serde_json::Value::String(t.label().to_owned());
        metadata.insert("type".to_owned(), label(query_type));
        metadata.insert("generated_as".to_owned(), label(QueryType::NoAnswer));
    }
    let raw = serde_json::to_string(&object).map_err(|e| bad(e.to_string()))?;
    Ok(QueryLine { text, query_type, raw, ..query.clone() })
}
