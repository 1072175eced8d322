//! Validate: checks a set folder, or a qrels file, for what breaks evaluation tools.
//!
//! Checks: ids without whitespace or `#`; no id twice in `corpus.jsonl` or `queries.jsonl`; no
//! qrels row judging a document whose id is its query's (BEIR's evaluator drops such hits; a query
//! id may otherwise equal a corpus id, as in ArguAna or Quora); qrels lines of the right shape;
//! grades 0–3; no (query, chunk) pair twice; no qrels id missing from `queries.jsonl` or `corpus.jsonl`; `qrels.trec` and
//! `qrels/test.tsv` holding the same judgments; `no_answer.txt` listing only queries of
//! `queries.jsonl` without a relevant chunk. Each problem is a [`Finding`] naming the file and
//! line; reading stops only when a file cannot be opened.

use crate::error::{Error, Result};
use crate::output::layout::{
    CORPUS, LEDGER, MANIFEST, NO_ANSWER, PROVENANCE_HEADER, PROVENANCE_TSV, QRELS_HEADER, QRELS_TREC,
    QRELS_TSV, QUERIES,
};
use crate::record::Provenance;
use crate::review::GRADE_MAX;
use serde::Deserialize;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file, as named to the user.
    pub file: PathBuf,
    /// 1-based line, if the problem has one.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// Collects findings for one file.
struct Findings<'a> {
    file: &'a Path,
    all: &'a mut Vec<Finding>,
}

impl Findings<'_> {
    fn at(&mut self, line: usize, message: impl Into<String>) {
        self.all.push(Finding { file: self.file.to_owned(), line: Some(line), message: message.into() });
    }
}

/// Checks every file of the set in `dir`.
///
/// # Errors
/// [`Error::Input`] if `corpus.jsonl`, `queries.jsonl` or a qrels file cannot be read.
pub fn check_set(dir: &Path) -> Result<Vec<Finding>> {
    let mut all = Vec::new();
    check_manifest(dir, &mut all);
    let named = |name: &str| (dir.join(name), PathBuf::from(name));
    let corpus = read_ids(named(CORPUS), "corpus", &mut all)?;
    let queries = read_ids(named(QUERIES), "query", &mut all)?;
    let known = Known { queries: Some(&queries), corpus: Some(&corpus) };
    let trec = check_qrels_file(named(QRELS_TREC), &known, &mut all)?;
    let tsv = check_qrels_file(named(QRELS_TSV), &known, &mut all)?;
    if dir.join(PROVENANCE_TSV).exists() {
        check_qrels_file(named(PROVENANCE_TSV), &known, &mut all)?;
    }
    if dir.join(NO_ANSWER).is_file() {
        check_no_answer(named(NO_ANSWER), &queries, &trec, &mut all)?;
    }
    for (file, rows, other, other_rows) in
        [(QRELS_TREC, &trec, QRELS_TSV, &tsv), (QRELS_TSV, &tsv, QRELS_TREC, &trec)]
    {
        for (q, c, g) in rows.difference(other_rows) {
            let message = format!("({q}, {c}, grade {g}) is not in {other}");
            all.push(Finding { file: PathBuf::from(file), line: None, message });
        }
    }
    Ok(all)
}

/// `manifest.json`: there, readable, of a format this qrelgen reads, and, for a reviewed set,
/// with a review ledger that matches its seal.
fn check_manifest(dir: &Path, all: &mut Vec<Finding>) {
    let mut problem = |file: &str, message: String| {
        all.push(Finding { file: PathBuf::from(file), line: None, message });
    };
    if !dir.join(MANIFEST).is_file() {
        problem(
            MANIFEST,
            "missing: without it the files beside it are not known to belong together (a build cut short?); \
             build the set again"
                .to_owned(),
        );
        return;
    }
    let manifest = match crate::review::set::read_manifest(dir) {
        Ok(manifest) => manifest,
        Err(e) => return problem(MANIFEST, e.to_string()),
    };
    if manifest.rest.get("format_version").and_then(serde_json::Value::as_u64).is_none() {
        problem(MANIFEST, "records no format_version".to_owned());
    } else if let Err(Error::SetFormat { message, hint, .. }) = crate::set::check_format(dir) {
        problem(MANIFEST, format!("{message}: {hint}"));
    }
    if let Some(log) = &manifest.review
        && let Some(seal) = &log.ledger
        && let Err(e) = crate::set::ledger::check(dir, seal, log.version)
    {
        problem(LEDGER, e.to_string().replace('\n', " "));
    }
}

/// `no_answer.txt`: every id in `queries.jsonl`, none with a relevant chunk in `qrels.trec`.
fn check_no_answer(
    (path, name): (PathBuf, PathBuf),
    queries: &Ids,
    qrels: &BTreeSet<(String, String, String)>,
    all: &mut Vec<Finding>,
) -> Result<()> {
    let text = crate::lines::read_text(&path, crate::lines::RECORD_LINE)
        .map_err(|source| Error::Input { path: path.clone(), source })?;
    let answered: HashMap<&str, &str> = qrels
        .iter()
        .filter(|(_, _, g)| g.parse::<i64>().is_ok_and(|g| g >= 1))
        .map(|(q, c, _)| (q.as_str(), c.as_str()))
        .collect();
    let mut findings = Findings { file: &name, all };
    for (i, id) in text.lines().enumerate().map(|(i, l)| (i, l.trim())).filter(|(_, l)| !l.is_empty()) {
        if !queries.lines.contains_key(id) {
            findings.at(i + 1, format!("{id} is not in {}", queries.file.display()));
        }
        if let Some(chunk) = answered.get(id) {
            findings.at(
                i + 1,
                format!("{id} is listed as no_answer but has a relevant chunk ({chunk} in {QRELS_TREC})"),
            );
        }
    }
    Ok(())
}

/// Checks one qrels file (TREC, BEIR TSV or `provenance.tsv`), and its ids against the corpus and
/// queries files when given.
///
/// # Errors
/// [`Error::Input`] if a file cannot be read.
pub fn check_qrels(path: &Path, corpus: Option<&Path>, queries: Option<&Path>) -> Result<Vec<Finding>> {
    let mut all = Vec::new();
    let corpus = corpus.map(|p| read_ids((p.to_owned(), p.to_owned()), "corpus", &mut all)).transpose()?;
    let queries = queries.map(|p| read_ids((p.to_owned(), p.to_owned()), "query", &mut all)).transpose()?;
    let known = Known { queries: queries.as_ref(), corpus: corpus.as_ref() };
    check_qrels_file((path.to_owned(), path.to_owned()), &known, &mut all)?;
    Ok(all)
}

/// Ids of a JSONL file, with the line each first appears on.
struct Ids {
    file: PathBuf,
    lines: HashMap<String, usize>,
}

#[derive(Deserialize)]
struct IdLine {
    #[serde(rename = "_id")]
    id: String,
}

/// Reads the `_id`s of `(path, name)`, reporting bad and repeated ones.
fn read_ids((path, name): (PathBuf, PathBuf), kind: &str, all: &mut Vec<Finding>) -> Result<Ids> {
    let text = crate::lines::read_text(&path, crate::lines::RECORD_LINE)
        .map_err(|source| Error::Input { path: path.clone(), source })?;
    let mut lines: HashMap<String, usize> = HashMap::new();
    let mut findings = Findings { file: &name, all };
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let n = i + 1;
        match serde_json::from_str::<IdLine>(line) {
            Err(e) => findings.at(n, format!("malformed line: {e}")),
            Ok(IdLine { id }) => {
                if let Some(problem) = id_problem(&id) {
                    findings.at(n, format!("{kind} id {id:?} {problem}"));
                }
                match lines.get(&id) {
                    Some(first) => {
                        findings.at(n, format!("duplicate {kind} id {id} (first on line {first})"));
                    }
                    None => {
                        lines.insert(id, n);
                    }
                }
            }
        }
    }
    Ok(Ids { file: name, lines })
}

/// Why an id cannot be written to TREC or BEIR files, if it cannot.
fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("is empty")
    } else if id.chars().any(char::is_whitespace) {
        Some("contains whitespace")
    } else if id.contains('#') {
        Some("contains '#'")
    } else {
        None
    }
}

/// The ids qrels may refer to (`None`: not checked).
struct Known<'a> {
    queries: Option<&'a Ids>,
    corpus: Option<&'a Ids>,
}

/// The shape of a qrels file, told by its first line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Trec,
    Tsv,
    Provenance,
}

/// Checks a qrels file; returns its (query, chunk, grade) rows.
fn check_qrels_file(
    (path, name): (PathBuf, PathBuf),
    known: &Known<'_>,
    all: &mut Vec<Finding>,
) -> Result<BTreeSet<(String, String, String)>> {
    let text = crate::lines::read_text(&path, crate::lines::RECORD_LINE)
        .map_err(|source| Error::Input { path: path.clone(), source })?;
    let mut findings = Findings { file: &name, all };
    let first = text.lines().next().unwrap_or_default();
    let (shape, skip) = match first {
        QRELS_HEADER => (Shape::Tsv, 1),
        PROVENANCE_HEADER => (Shape::Provenance, 1),
        _ if first.split('\t').count() == 3 => {
            findings.at(1, format!("no header: a BEIR qrels TSV starts with the line {QRELS_HEADER:?}"));
            (Shape::Tsv, 0)
        }
        _ => (Shape::Trec, 0),
    };
    let mut pairs: HashMap<(String, String), usize> = HashMap::new();
    let mut rows = BTreeSet::new();
    for (i, line) in text.lines().enumerate().skip(skip).filter(|(_, l)| !l.trim().is_empty()) {
        let n = i + 1;
        let Some((query, chunk, grade)) = fields(line, shape, &mut |m| findings.at(n, m)) else { continue };
        check_row(n, (query, chunk, grade), known, &mut findings);
        match pairs.get(&(query.to_owned(), chunk.to_owned())) {
            Some(first) => {
                findings.at(n, format!("duplicate pair ({query}, {chunk}), first on line {first}"));
            }
            None => {
                pairs.insert((query.to_owned(), chunk.to_owned()), n);
            }
        }
        rows.insert((query.to_owned(), chunk.to_owned(), grade.to_owned()));
    }
    Ok(rows)
}

/// The query, chunk and grade of a line, or `None` after reporting its shape.
fn fields<'l>(
    line: &'l str,
    shape: Shape,
    report: &mut dyn FnMut(String),
) -> Option<(&'l str, &'l str, &'l str)> {
    match shape {
        Shape::Trec => match line.split_whitespace().collect::<Vec<_>>()[..] {
            [q, _, c, g] => Some((q, c, g)),
            ref f => {
                report(format!(
                    "expected 4 fields (query 0 doc grade), found {}: ids cannot hold whitespace",
                    f.len()
                ));
                None
            }
        },
        Shape::Tsv | Shape::Provenance => {
            let f: Vec<&str> = line.split('\t').collect();
            let expected = if shape == Shape::Tsv { 3 } else { 4 };
            if f.len() != expected {
                report(format!("expected {expected} tab-separated fields, found {}", f.len()));
                return None;
            }
            if shape == Shape::Provenance && Provenance::from_label(f[3]).is_none() {
                report(format!("unknown provenance {:?}", f[3]));
            }
            Some((f[0], f[1], f[2]))
        }
    }
}

fn check_row(
    n: usize,
    (query, chunk, grade): (&str, &str, &str),
    known: &Known<'_>,
    findings: &mut Findings<'_>,
) {
    for (kind, id) in [("query", query), ("corpus", chunk)] {
        if let Some(problem) = id_problem(id) {
            findings.at(n, format!("{kind} id {id:?} {problem}"));
        }
    }
    if query == chunk {
        findings.at(
            n,
            format!("query {query} judges a document with its own id: BEIR's evaluator ignores such hits (ignore_identical_ids), so this row never counts there"),
        );
    }
    match grade.parse::<i64>() {
        Ok(g) if (0..=i64::from(GRADE_MAX)).contains(&g) => {}
        Ok(g) => findings.at(n, format!("grade {g} is out of range 0–{GRADE_MAX}")),
        Err(_) => findings.at(n, format!("grade {grade:?} is not an integer")),
    }
    for (kind, id, ids) in [("query", query, known.queries), ("corpus", chunk, known.corpus)] {
        if let Some(ids) = ids.filter(|ids| !ids.lines.contains_key(id)) {
            findings.at(n, format!("dangling {kind} id {id} (not in {})", ids.file.display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beir_tsv_without_its_header_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("test.tsv");
        fs_err::write(&path, "q1\tc1\t3\nq1\tc2\t1\n").unwrap();
        let findings = check_qrels(&path, None, None).unwrap();
        let lines: Vec<String> = findings.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [format!(
                "{}:1: no header: a BEIR qrels TSV starts with the line {QRELS_HEADER:?}",
                path.display()
            )],
            "one finding, and the rows are read as TSV rows"
        );
    }
}
