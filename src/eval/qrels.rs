//! Reads qrels files: TREC (`qid iter docid grade`, whitespace-separated) or BEIR TSV (with its
//! `query-id corpus-id score` header), told apart by the first line.
//!
//! Output: [`QrelRow`]s in file order. Invariants: every bad line is a [`Problem`] with its line
//! (wrong field count, a grade that is not an integer, a (query, document) pair given twice);
//! one problem and the file yields no rows.

use super::error::{EvalError, Problem, Result, unreadable};
use foldhash::{HashMap, HashMapExt as _};
use std::path::Path;

/// The header of a BEIR qrels TSV.
const TSV_HEADER: [&str; 3] = ["query-id", "corpus-id", "score"];

/// One judgment as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QrelRow {
    /// The query id.
    pub query: String,
    /// The judged document (or chunk) id.
    pub doc: String,
    /// The grade (below 1: judged not relevant).
    pub grade: i32,
    /// Its 1-based line.
    pub line: usize,
}

/// Reads a TREC or BEIR TSV qrels file.
///
/// # Errors
/// [`EvalError::Set`] if the file cannot be read, [`EvalError::Problems`] listing every bad line.
pub fn read(path: &Path) -> Result<Vec<QrelRow>> {
    let text = crate::lines::read_text(path, crate::lines::RECORD_LINE).map_err(|e| unreadable(path, e))?;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l)).peekable();
    let tsv = lines.peek().is_some_and(|(_, first)| first.trim_end().split('\t').eq(TSV_HEADER));
    if tsv {
        lines.next();
    }
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
    for (line, text) in lines.filter(|(_, l)| !l.trim().is_empty()) {
        match parse_line(text, tsv) {
            Err(message) => problems.push(Problem::new(path, line, message)),
            Ok((query, doc, grade)) => {
                if let Some(first) = seen.insert((query, doc), line) {
                    problems.push(Problem::new(
                        path,
                        line,
                        format!("({query}, {doc}) is judged again (first on line {first})"),
                    ));
                } else {
                    rows.push(QrelRow { query: query.to_owned(), doc: doc.to_owned(), grade, line });
                }
            }
        }
    }
    if rows.is_empty() && problems.is_empty() {
        problems.push(Problem::new(path, 0, "no judgments in the file"));
    }
    if problems.is_empty() { Ok(rows) } else { Err(EvalError::Problems(problems)) }
}

fn parse_line(line: &str, tsv: bool) -> std::result::Result<(&str, &str, i32), String> {
    let fields: Vec<&str> =
        if tsv { line.trim_end().split('\t').collect() } else { line.split_whitespace().collect() };
    let (query, doc, grade) = match (tsv, fields.as_slice()) {
        (true, [q, d, g]) | (false, [q, _, d, g]) => (*q, *d, *g),
        (true, _) => return Err(format!("expected 3 tab-separated fields, found {}", fields.len())),
        (false, _) => {
            return Err(format!("expected 4 fields (qid iter docid grade), found {}", fields.len()));
        }
    };
    let grade = grade.parse::<i32>().map_err(|_| format!("grade {grade:?} is not an integer"))?;
    Ok((query, doc, grade))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_str(text: &str) -> std::result::Result<Vec<(String, String, i32)>, Vec<String>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.trec");
        fs_err::write(&path, text).unwrap();
        match read(&path) {
            Ok(rows) => Ok(rows.into_iter().map(|r| (r.query, r.doc, r.grade)).collect()),
            Err(EvalError::Problems(ps)) => {
                Err(ps.iter().map(|p| format!("{}: {}", p.line, p.message)).collect())
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn reads_trec_and_beir_tsv() {
        let rows = read_str("q1 0 d1 3\nq1 0 d2 0\n\nq2 Q0 d1 -1\n").unwrap_or_default();
        assert_eq!(rows[2], ("q2".into(), "d1".into(), -1));
        let tsv = read_str("query-id\tcorpus-id\tscore\nq1\td 1\t2\n").unwrap_or_default();
        assert_eq!(tsv, [("q1".into(), "d 1".into(), 2)]);
    }

    #[test]
    fn every_bad_line_is_named() {
        let problems = read_str("q1 0 d1 3\nq1 0 d1 2\nq1 0 d2 x\nq1 d3 1\n").err().unwrap_or_default();
        assert_eq!(
            problems,
            [
                "2: (q1, d1) is judged again (first on line 1)",
                "3: grade \"x\" is not an integer",
                "4: expected 4 fields (qid iter docid grade), found 3",
            ]
        );
        assert_eq!(read_str("\n").err().unwrap_or_default(), ["0: no judgments in the file"]);
    }
}
