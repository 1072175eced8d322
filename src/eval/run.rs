//! Reads runs: TREC run files (`qid Q0 docid rank score tag`) or JSONL
//! (`{"qid": …, "hits": [{"id": …, "score": …}]}`, one query per line), told apart by the first
//! character.
//!
//! Output: a [`Run`] with each query's hits in the order they are scored, by the [`Ties`]
//! rule: as trec_eval (by score, highest first, ties broken by document id in reverse byte
//! order; the rank column is ignored, as trec_eval ignores it), or in the order the run lists
//! them (TREC: by the rank column, then file order; JSONL: list order). Invariants: every
//! problem is listed with its line: a line of the wrong shape, a score that is not a finite
//! number, a rank that is not a whole number (run order only), a (query, document) pair given
//! twice, a query the collection does not know (once per query, with its row count), ids of
//! the other level (once per run, with a hint); one problem and the run is refused. Queries the
//! run does not name stay empty and are reported as missing, never dropped.

use super::collection::{Collection, IdKind, Level};
use super::error::{EvalError, Problem, Result, unreadable};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// How a run's hits are ordered before they are scored (`--ties`). Every output states the
/// rule in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ties {
    /// As trec_eval: by score, then by document id in reverse byte order; the rank column is
    /// ignored.
    #[default]
    TrecEval,
    /// In the order the run lists its hits: TREC by the rank column, then file order; JSONL in
    /// list order. Scores do not reorder them (as tools that score a ranked list, and the
    /// validity harness, do).
    RunOrder,
}

impl Ties {
    /// The rule in words, as outputs state it.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::TrecEval => {
                "ties in a run's scores are broken as trec_eval does: by score, then by document id in reverse byte order; the rank column is ignored"
            }
            Self::RunOrder => {
                "hits are scored in the order the run lists them (--ties run-order): TREC runs by the rank column, then file order, JSONL runs in list order; scores do not reorder them"
            }
        }
    }
}

/// One retrieved document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// The run's score.
    pub score: f64,
    /// Its place in the run's own order: the rank column (TREC; read only for
    /// [`Ties::RunOrder`]) or the position in the list (JSONL).
    rank: u32,
    /// Where its id starts in the run's names.
    start: u32,
    /// Its id's length in bytes.
    len: u32,
    /// The line it was read from.
    pub line: u32,
}

/// A run, aligned with the collection's queries.
#[derive(Debug)]
pub struct Run {
    /// Its name in outputs (the file stem, made unique).
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// Per query: the hits, best first (empty if the run does not name the query).
    pub rankings: Vec<Vec<Hit>>,
    /// The document ids of the hits, back to back (see [`Run::doc`]).
    names: String,
    /// Per query: whether the run names it.
    pub present: Vec<bool>,
    /// Rows read.
    pub rows: usize,
    /// Rows naming an id the corpus does not have.
    pub unknown_ids: usize,
}

impl Run {
    /// The document id of `hit`.
    #[must_use]
    pub fn doc(&self, hit: &Hit) -> &str {
        doc(&self.names, hit)
    }

    /// The most hits of any query.
    #[must_use]
    pub fn depth(&self) -> usize {
        self.rankings.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// What reading a run collects before it is checked.
struct Reader<'a> {
    path: &'a Path,
    collection: &'a Collection,
    ties: Ties,
    hits: Vec<Vec<Hit>>,
    names: String,
    present: Vec<bool>,
    problems: Vec<Problem>,
    /// Unknown query ids: first line, rows.
    unknown_queries: BTreeMap<String, (usize, usize)>,
    /// Rows naming ids of the other level: first line and id, rows.
    other_level: Option<(usize, String, usize)>,
    unknown_ids: usize,
    rows: usize,
    last: Option<(String, usize)>,
}

/// Reads the run at `path`, named `name`, against `collection`, its hits ordered by `ties`.
///
/// # Errors
/// [`EvalError::Set`] if the file cannot be read, [`EvalError::Problems`] listing every problem.
pub fn read(path: &Path, name: &str, collection: &Collection, ties: Ties) -> Result<Run> {
    let file = fs_err::File::open(path).map_err(|e| unreadable(path, e))?;
    let mut input = std::io::BufReader::with_capacity(1 << 20, file);
    let jsonl = input.fill_buf().map_err(|e| unreadable(path, e))?.iter().find(|b| !b.is_ascii_whitespace())
        == Some(&b'{');
    let n = collection.queries.len();
    let mut reader = Reader {
        path,
        collection,
        ties,
        hits: vec![Vec::new(); n],
        names: String::new(),
        present: vec![false; n],
        problems: Vec::new(),
        unknown_queries: BTreeMap::new(),
        other_level: None,
        unknown_ids: 0,
        rows: 0,
        last: None,
    };
    let mut line = String::new();
    let mut number = 0;
    loop {
        line.clear();
        let read = crate::lines::read_line(&mut input, &mut line, number + 1, crate::lines::RECORD_LINE);
        if read.map_err(|e| unreadable(path, e))? == 0 {
            break;
        }
        number += 1;
        if line.trim().is_empty() {
            continue;
        }
        if jsonl {
            reader.jsonl_line(number, &line);
        } else {
            reader.trec_line(number, &line);
        }
    }
    reader.finish(name)
}

/// A JSONL run line.
#[derive(Deserialize)]
struct JsonQuery {
    #[serde(alias = "query_id")]
    qid: serde_json::Value,
    hits: Vec<JsonHit>,
}

#[derive(Deserialize)]
struct JsonHit {
    #[serde(alias = "doc_id", alias = "docid")]
    id: serde_json::Value,
    score: serde_json::Value,
}

fn text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Reader<'_> {
    fn problem(&mut self, line: usize, message: String) {
        self.problems.push(Problem::new(self.path, line, message));
    }

    fn trec_line(&mut self, number: usize, line: &str) {
        let mut fields = line.split_ascii_whitespace();
        let mut next = || fields.next().unwrap_or_default();
        let [qid, _, doc, rank, score, tag] = [next(), next(), next(), next(), next(), next()];
        if tag.is_empty() || fields.next().is_some() {
            let found = line.split_ascii_whitespace().count();
            self.problem(number, format!("expected 6 fields (qid Q0 docid rank score tag), found {found}"));
            return;
        }
        // trec_eval ignores the rank column: it is read only for the run's own order.
        let rank = if self.ties == Ties::TrecEval {
            0
        } else if let Ok(rank) = rank.parse::<u32>() {
            rank
        } else {
            let message = format!(
                "rank {rank:?} is not a whole number (--ties run-order orders hits by the rank column)"
            );
            return self.problem(number, message);
        };
        match score.parse::<f64>() {
            Ok(score) if score.is_finite() => self.add(number, qid, doc, score, rank),
            _ => self.problem(number, format!("score {score:?} is not a number")),
        }
    }

    fn jsonl_line(&mut self, number: usize, line: &str) {
        let query: JsonQuery = match serde_json::from_str(line) {
            Ok(q) => q,
            Err(e) => {
                return self.problem(
                    number,
                    format!("expected {{\"qid\", \"hits\": [{{\"id\", \"score\"}}]}}: {e}"),
                );
            }
        };
        let qid = text(&query.qid);
        if self.collection.query(&qid).is_some_and(|q| self.present[q]) {
            self.problem(number, format!("query {qid} was already given on an earlier line"));
            return;
        }
        for (i, hit) in query.hits.iter().enumerate() {
            let rank = u32::try_from(i).unwrap_or(u32::MAX);
            match hit.score.as_f64() {
                Some(score) if score.is_finite() => self.add(number, &qid, &text(&hit.id), score, rank),
                _ => self.problem(number, format!("hits[{i}].score {} is not a number", hit.score)),
            }
        }
        if query.hits.is_empty() {
            self.mark_present(number, &qid);
        }
    }

    /// The position of query `qid`, marked as named by the run; `None` (and noted) if unknown.
    fn mark_present(&mut self, number: usize, qid: &str) -> Option<usize> {
        if let Some((last, q)) = &self.last
            && last == qid
        {
            return Some(*q);
        }
        let Some(q) = self.collection.query(qid) else {
            self.unknown_queries.entry(qid.to_owned()).or_insert((number, 0)).1 += 1;
            return None;
        };
        self.present[q] = true;
        self.last = Some((qid.to_owned(), q));
        Some(q)
    }

    fn add(&mut self, number: usize, qid: &str, doc: &str, score: f64, rank: u32) {
        self.rows += 1;
        let Some(q) = self.mark_present(number, qid) else { return };
        if self.collection.checks_ids() {
            match self.collection.id_kind(doc) {
                IdKind::Expected => {}
                IdKind::Unknown => self.unknown_ids += 1,
                IdKind::OtherLevel => {
                    self.other_level.get_or_insert_with(|| (number, doc.to_owned(), 0)).2 += 1;
                }
            }
        }
        let start = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.push_str(doc);
        let len = u32::try_from(doc.len()).unwrap_or(u32::MAX);
        let line = u32::try_from(number).unwrap_or(u32::MAX);
        self.hits[q].push(Hit { score, rank, start, len, line });
    }

    fn finish(mut self, name: &str) -> Result<Run> {
        for (qid, (line, rows)) in std::mem::take(&mut self.unknown_queries) {
            let known = self
                .collection
                .sources
                .set
                .as_ref()
                .map_or("the qrels or --queries", |_| "the set's queries.jsonl");
            self.problem(line, format!("unknown query id {qid} (not in {known}; {rows} row(s))"));
        }
        if let Some((line, id, rows)) = self.other_level.take() {
            let (names, flag) = match self.collection.level {
                Level::Chunk => ("document ids, not chunk ids", "--level doc"),
                Level::Doc => ("chunk ids, not document ids", "--level chunk"),
            };
            self.problem(line, format!("the run names {names} (e.g. {id}; {rows} row(s)): the qrels and the run are at different levels; pass {flag}"));
        }
        for hits in &mut self.hits {
            duplicates(hits, self.path, &self.names, &mut self.problems);
            match self.ties {
                Ties::TrecEval => hits.sort_unstable_by(|a, b| trec_order(a, b, &self.names)),
                Ties::RunOrder => hits.sort_unstable_by_key(|h| (h.rank, h.line)),
            }
        }
        if self.rows == 0 && self.problems.is_empty() {
            self.problem(0, "no results in the file".to_owned());
        }
        if !self.problems.is_empty() {
            self.problems.sort_by_key(|p| p.line);
            return Err(EvalError::Problems(self.problems));
        }
        Ok(Run {
            name: name.to_owned(),
            path: self.path.to_owned(),
            rankings: self.hits,
            names: self.names,
            present: self.present,
            rows: self.rows,
            unknown_ids: self.unknown_ids,
        })
    }
}

fn doc<'a>(names: &'a str, hit: &Hit) -> &'a str {
    names.get(hit.start as usize..(hit.start + hit.len) as usize).unwrap_or_default()
}

/// trec_eval's order: score descending, then document id descending (byte order).
fn trec_order(a: &Hit, b: &Hit, names: &str) -> Ordering {
    b.score.total_cmp(&a.score).then_with(|| doc(names, b).as_bytes().cmp(doc(names, a).as_bytes()))
}

/// Reports every (query, document) pair given twice in one query's hits (ids compared by a
/// hash first, so that only equal hashes compare bytes).
fn duplicates(hits: &[Hit], path: &Path, names: &str, problems: &mut Vec<Problem>) {
    use std::hash::BuildHasher as _;
    let hasher = foldhash::fast::FixedState::with_seed(13);
    let mut keys: Vec<(u64, u32, usize)> =
        hits.iter().enumerate().map(|(i, h)| (hasher.hash_one(doc(names, h)), h.line, i)).collect();
    keys.sort_unstable();
    for (i, &(hash, _, at)) in keys.iter().enumerate() {
        let name = doc(names, &hits[at]);
        let first =
            keys[..i].iter().rev().take_while(|k| k.0 == hash).find(|k| doc(names, &hits[k.2]) == name);
        if let Some(&(_, line, _)) = first {
            problems.push(Problem::new(
                path,
                hits[at].line as usize,
                format!("{name} is retrieved again for this query (first on line {line})"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::collection::LooseFiles;

    fn collection(dir: &Path) -> Collection {
        let qrels = dir.join("q.trec");
        fs_err::write(&qrels, "q1 0 a:1 1\nq2 0 b:1 1\n").unwrap();
        Collection::from_files(&LooseFiles { qrels, ..LooseFiles::default() }, Level::Chunk).unwrap()
    }

    /// The run `text` read under `ties` against [`collection`] (q1 judges only a:1, grade 1).
    fn read_with(text: &str, ties: Ties) -> (Collection, Result<Run>) {
        let dir = tempfile::tempdir().unwrap();
        let c = collection(dir.path());
        let path = dir.path().join("a.run");
        fs_err::write(&path, text).unwrap();
        let run = read(&path, "a", &c, ties);
        (c, run)
    }

    fn read_str(text: &str) -> std::result::Result<Vec<Vec<(String, f64)>>, Vec<String>> {
        read_as(text, Ties::TrecEval)
    }

    fn read_as(text: &str, ties: Ties) -> std::result::Result<Vec<Vec<(String, f64)>>, Vec<String>> {
        match read_with(text, ties).1 {
            Ok(run) => Ok(run
                .rankings
                .iter()
                .map(|hits| hits.iter().map(|h| (run.doc(h).to_owned(), h.score)).collect())
                .collect()),
            Err(EvalError::Problems(ps)) => {
                Err(ps.iter().map(|p| format!("{}: {}", p.line, p.message)).collect())
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn ties_break_like_trec_eval_and_the_rank_column_is_ignored() {
        let run = read_str("q1 Q0 a:1 1 0.5 t\nq1 Q0 b:2 2 0.5 t\nq1 Q0 c:3 3 0.9 t\nq1 Q0 a:10 9 0.5 t\n")
            .unwrap_or_default();
        let order: Vec<&str> = run[0].iter().map(|(d, _)| d.as_str()).collect();
        assert_eq!(order, ["c:3", "b:2", "a:10", "a:1"]);
        assert!(run[1].is_empty(), "q2 is missing: an empty ranking");
    }

    /// Worked example: the one relevant document, a:1, ties on score with x:1. trec_eval puts
    /// x:1 first ("x" > "a" in reverse byte order) and the higher-scored c:3 before both, so
    /// a:1 is 3rd: AP = RR = 1/3, nDCG@10 = (1/log2 4) / 1 = 0.5. In run order (rank column,
    /// then file order for the two rank-2 lines) a:1 is 2nd: AP = RR = 1/2, nDCG@10 = 1/log2 3.
    #[test]
    fn run_order_follows_the_rank_column_then_the_file_and_scores_differently() {
        use crate::eval::{Gain, Measure, score::Scores};
        let text = "q1 Q0 c:3 3 0.9 t\nq1 Q0 x:1 1 0.5 t\nq1 Q0 a:1 2 0.5 t\nq1 Q0 b:2 2 0.4 t\n";
        let measures = [Measure::Map(None), Measure::Mrr(10), Measure::Ndcg(10)];
        let mut values = Vec::new();
        for (ties, order) in
            [(Ties::TrecEval, ["c:3", "x:1", "a:1", "b:2"]), (Ties::RunOrder, ["x:1", "a:1", "b:2", "c:3"])]
        {
            let (c, run) = read_with(text, ties);
            let run = run.unwrap();
            let got: Vec<&str> = run.rankings[0].iter().map(|h| run.doc(h)).collect();
            assert_eq!(got, order, "{ties:?}");
            values.push(Scores::of(&run, &c.qrels, &[0], &measures, Gain::Linear).row(0).to_vec());
        }
        let close = |got: &[f64], want: [f64; 3]| got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12);
        assert!(close(&values[0], [1.0 / 3.0, 1.0 / 3.0, 0.5]), "{:?}", values[0]);
        assert!(close(&values[1], [0.5, 0.5, 1.0 / 3f64.log2()]), "{:?}", values[1]);
    }

    #[test]
    fn run_order_keeps_a_jsonl_list_and_needs_whole_ranks_in_trec() {
        let json =
            "{\"qid\":\"q1\",\"hits\":[{\"id\":\"a:1\",\"score\":1},{\"id\":\"x:9\",\"score\":2.5}]}\n";
        let listed = read_as(json, Ties::RunOrder).unwrap_or_default();
        assert_eq!(listed[0], [("a:1".to_owned(), 1.0), ("x:9".to_owned(), 2.5)]);
        let bad = "q1 Q0 a:1 1 0.5 t\nq1 Q0 b:1 two 0.4 t\n";
        assert_eq!(
            read_as(bad, Ties::RunOrder).err().unwrap_or_default(),
            ["2: rank \"two\" is not a whole number (--ties run-order orders hits by the rank column)"]
        );
        assert!(read_as(bad, Ties::TrecEval).is_ok(), "trec_eval ignores the rank column");
    }

    #[test]
    fn jsonl_runs_read_the_same() {
        let run = read_str("{\"qid\":\"q1\",\"hits\":[{\"id\":\"a:1\",\"score\":1},{\"id\":\"x:9\",\"score\":2.5}]}\n{\"qid\":\"q2\",\"hits\":[]}\n").unwrap_or_default();
        assert_eq!(run[0], [("x:9".to_owned(), 2.5), ("a:1".to_owned(), 1.0)]);
    }

    #[test]
    fn every_problem_has_its_line() {
        let problems = read_str(
            "q1 Q0 a:1 1 0.5 t\nq1 Q0 a:1 2 0.4 t\nq1 Q0 b:1 3 high t\nq9 Q0 a:1 1 1 t\nq9 Q0 b:1 2 1 t\nq2 Q0 b 1 1 t\nq2 a:1 1 1\n",
        )
        .err()
        .unwrap_or_default();
        assert_eq!(
            problems,
            [
                "2: a:1 is retrieved again for this query (first on line 1)",
                "3: score \"high\" is not a number",
                "4: unknown query id q9 (not in the qrels or --queries; 2 row(s))",
                "6: the run names document ids, not chunk ids (e.g. b; 1 row(s)): the qrels and the run are at different levels; pass --level doc",
                "7: expected 6 fields (qid Q0 docid rank score tag), found 4",
            ]
        );
        let json = read_str("{\"qid\":\"q1\",\"hits\":[{\"id\":\"a:1\",\"score\":\"x\"}]}\nnot json\n")
            .err()
            .unwrap_or_default();
        assert_eq!(json.len(), 2, "{json:?}");
        assert!(json[0].starts_with("1: hits[0].score \"x\" is not a number"), "{json:?}");
    }
}
