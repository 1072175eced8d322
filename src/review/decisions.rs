//! Reads a decisions file, JSONL, CSV or a Label Studio JSON export, into [`Judgment`]s.
//!
//! Every format is first read into [`RawRow`]s (the decision fields as written), which one
//! function checks for form: known decision, grades 0–3, ids without whitespace or `#`, a reason
//! for a rejection, a text for an edit, an answering chunk for `answerable`. Every problem of every
//! row is collected with its line (JSONL), row (CSV, the header is row 1) or task (Label Studio);
//! one problem anywhere and the file yields no judgment at all. Rows with no decision and no grade
//! are pending and skipped.

use super::{
    ChunkGrade, Decision, Format, GRADE_MAX, Judgment, Located, Location, Problem, Slot, field, slot_field,
};
use crate::error::{Error, Result};
use crate::id::{ChunkId, QueryId};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// A decisions file, read and checked for form.
#[derive(Debug, Clone)]
pub struct Decisions {
    /// The file.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// Its bytes (hashed and kept with the version it makes).
    pub bytes: Vec<u8>,
    /// Its judgments, in file order.
    pub judgments: Vec<Located>,
}

/// Reads `path` in `format` (by default the one its extension implies). Judgments name
/// `reviewer`, else the row's `reviewer` field, else the file's stem.
///
/// # Errors
/// [`Error::Input`] if the file cannot be read, [`Error::InvalidSetting`] if the format is
/// unknown, [`Error::Decisions`] listing every bad row.
pub fn read(path: &Path, format: Option<Format>, reviewer: Option<&str>) -> Result<Decisions> {
    let format = format.or_else(|| Format::from_path(path)).ok_or_else(|| Error::InvalidSetting {
        flag: "--format",
        message: format!(
            "cannot tell the format of {} from its extension (.jsonl, .csv, .json)",
            path.display()
        ),
    })?;
    let bytes = fs_err::read(path).map_err(|source| Error::Input { path: path.to_owned(), source })?;
    let rows = match format {
        Format::Jsonl => jsonl_rows(&bytes),
        Format::Csv => csv_rows(&bytes),
        Format::LabelStudio => super::label_studio::rows(&bytes),
    };
    let stem = path.file_stem().map_or_else(|| "reviewer".to_owned(), |s| s.to_string_lossy().into_owned());
    let judgments = rows.and_then(|rows| check_rows(rows, reviewer, &stem));
    match judgments {
        Ok(judgments) => Ok(Decisions { path: path.to_owned(), format, bytes, judgments }),
        Err(problems) => Err(Error::Decisions { path: path.to_owned(), problems }),
    }
}

/// The decision fields of one row, as written (trimmed; empty means not given).
#[derive(Debug, Clone)]
pub(crate) struct RawRow {
    pub at: Location,
    pub query_id: String,
    pub reviewer: String,
    pub decision: String,
    pub reject_reason: String,
    pub edited_text: String,
    pub add: String,
    pub grades: Vec<RawGrade>,
}

impl RawRow {
    /// An empty row at `at`.
    pub fn new(at: Location) -> Self {
        Self {
            at,
            query_id: String::new(),
            reviewer: String::new(),
            decision: String::new(),
            reject_reason: String::new(),
            edited_text: String::new(),
            add: String::new(),
            grades: Vec::new(),
        }
    }

    /// Sets the decision field `name` (one of [`field`]); `false` if it is not one.
    pub fn set(&mut self, name: &str, value: &str) -> bool {
        let slot = match name {
            field::QUERY_ID => &mut self.query_id,
            field::REVIEWER => &mut self.reviewer,
            field::DECISION => &mut self.decision,
            field::REJECT_REASON => &mut self.reject_reason,
            field::EDITED_TEXT => &mut self.edited_text,
            field::ADD => &mut self.add,
            _ => return false,
        };
        value.trim().clone_into(slot);
        true
    }
}

/// A grade as written, with the chunk it is for.
#[derive(Debug, Clone)]
pub(crate) struct RawGrade {
    /// The field it was read from, for messages.
    pub field: String,
    pub chunk_id: String,
    pub grade: String,
}

/// Checks every row; returns the judgments, or every problem found.
fn check_rows(
    rows: Vec<RawRow>,
    reviewer: Option<&str>,
    stem: &str,
) -> std::result::Result<Vec<Located>, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut judgments: Vec<Located> = Vec::new();
    let mut seen: HashMap<(QueryId, String), Location> = HashMap::new();
    for row in rows {
        let at = row.at;
        match judgment(row, reviewer, stem) {
            Ok(None) => {}
            Ok(Some(j)) => match seen.insert((j.query_id.clone(), j.reviewer.clone()), at) {
                Some(first) => problems.push(Problem::new(
                    at,
                    format!("{} was already judged by {} ({first})", j.query_id, j.reviewer),
                )),
                None => judgments.push(Located { at, judgment: j }),
            },
            Err(mut found) => problems.append(&mut found),
        }
    }
    if problems.is_empty() { Ok(judgments) } else { Err(problems) }
}

/// The judgment a row holds (`None` for a row with no decision and no grade), or its problems.
fn judgment(
    row: RawRow,
    reviewer: Option<&str>,
    stem: &str,
) -> std::result::Result<Option<Judgment>, Vec<Problem>> {
    let mut problems = Vec::new();
    let at = row.at;
    let mut problem = |message: String| problems.push(Problem::new(at, message));
    let decision = match row.decision.as_str() {
        "" => None,
        label => Decision::from_label(label).or_else(|| {
            problem(format!("unknown decision {label:?} (accept, edit, answerable or reject)"));
            None
        }),
    };
    let grades = grades(&row, &mut problem);
    let undecided = row.decision.is_empty();
    if undecided && grades.is_empty() && row.reject_reason.is_empty() && row.edited_text.is_empty() {
        return if problems.is_empty() { Ok(None) } else { Err(problems) };
    }
    let query_id = QueryId::parse(&row.query_id).map_err(|e| format!("query_id: {e}"));
    if let Err(message) = &query_id {
        problem(message.clone());
    }
    rules(&row, decision, &grades, &mut problem);
    let reviewer = [reviewer.unwrap_or_default(), &row.reviewer, stem].into_iter().find(|r| !r.is_empty());
    match query_id {
        Ok(query_id) if problems.is_empty() => Ok(Some(Judgment {
            query_id,
            reviewer: reviewer.unwrap_or(stem).to_owned(),
            decision,
            reject_reason: Some(row.reject_reason).filter(|r| !r.is_empty()),
            edited_text: Some(row.edited_text).filter(|t| !t.is_empty()),
            grades,
        })),
        _ => Err(problems),
    }
}

/// What each decision needs, and fields that need a decision.
fn rules(row: &RawRow, decision: Option<Decision>, grades: &[ChunkGrade], problem: &mut impl FnMut(String)) {
    let answered = grades.iter().any(|g| g.grade >= 1);
    match decision {
        Some(Decision::Reject) if row.reject_reason.is_empty() => {
            problem("reject needs a reject_reason".to_owned());
        }
        Some(Decision::Edit) if row.edited_text.is_empty() => problem("edit needs an edited_text".to_owned()),
        Some(Decision::Answerable) if !answered => {
            problem("answerable needs the chunk that answers it: grade it 1–3, or list it in add".to_owned());
        }
        _ => {}
    }
    if !row.edited_text.is_empty() && decision != Some(Decision::Edit) {
        problem("edited_text is given but the decision is not edit".to_owned());
    }
    if !row.reject_reason.is_empty() && decision != Some(Decision::Reject) {
        problem("reject_reason is given but the decision is not reject".to_owned());
    }
}

/// The grades of a row, shown chunks and `add` together, sorted by chunk; reports bad ones.
fn grades(row: &RawRow, problem: &mut impl FnMut(String)) -> Vec<ChunkGrade> {
    let added = row.add.split_whitespace().map(|item| {
        let (id, grade) = item.rsplit_once('=').unwrap_or((item, "3"));
        RawGrade { field: field::ADD.to_owned(), chunk_id: id.to_owned(), grade: grade.to_owned() }
    });
    let mut by_chunk: BTreeMap<ChunkId, (u8, String)> = BTreeMap::new();
    for raw in row.grades.iter().filter(|g| !g.grade.is_empty()).cloned().chain(added) {
        let grade = raw.grade.parse::<u8>().ok().filter(|&g| g <= GRADE_MAX);
        let chunk = ChunkId::parse(&raw.chunk_id);
        match (grade, chunk) {
            (None, _) => problem(format!("{}: bad grade {:?} (0–{GRADE_MAX})", raw.field, raw.grade)),
            (_, Err(e)) => problem(format!("{}: chunk id: {e}", raw.field)),
            (Some(grade), Ok(chunk)) => match by_chunk.get(&chunk) {
                Some((other, first)) if *other != grade => {
                    problem(format!("{}: {chunk} is graded {grade} here and {other} in {first}", raw.field));
                }
                _ => {
                    by_chunk.insert(chunk, (grade, raw.field));
                }
            },
        }
    }
    by_chunk.into_iter().map(|(chunk_id, (grade, _))| ChunkGrade { chunk_id, grade }).collect()
}

/// A JSONL decisions line: an exported item, filled in (unknown fields are ignored).
#[derive(Deserialize)]
struct JsonRow {
    #[serde(default)]
    query_id: Option<String>,
    #[serde(default)]
    reviewer: Option<String>,
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    reject_reason: Option<String>,
    #[serde(default)]
    edited_text: Option<String>,
    #[serde(default)]
    add: Option<String>,
    #[serde(default)]
    sources: Vec<JsonChunk>,
    #[serde(default)]
    pool: Vec<JsonChunk>,
}

#[derive(Deserialize)]
struct JsonChunk {
    chunk_id: String,
    #[serde(default)]
    grade: Option<JsonGrade>,
}

/// A grade as a number or as text; checked later, so `7` and `"x"` get the same message.
#[derive(Deserialize)]
#[serde(untagged)]
enum JsonGrade {
    Number(serde_json::Number),
    Text(String),
}

fn jsonl_rows(bytes: &[u8]) -> std::result::Result<Vec<RawRow>, Vec<Problem>> {
    let text = String::from_utf8_lossy(bytes);
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = Location::Line(i + 1);
        match serde_json::from_str::<JsonRow>(line) {
            Ok(json) => rows.push(json_row(at, json)),
            Err(e) => problems.push(Problem::new(at, format!("malformed JSON: {e}"))),
        }
    }
    if problems.is_empty() { Ok(rows) } else { Err(problems) }
}

fn json_row(at: Location, json: JsonRow) -> RawRow {
    let mut row = RawRow::new(at);
    for (name, value) in [
        (field::QUERY_ID, json.query_id),
        (field::REVIEWER, json.reviewer),
        (field::DECISION, json.decision),
        (field::REJECT_REASON, json.reject_reason),
        (field::EDITED_TEXT, json.edited_text),
        (field::ADD, json.add),
    ] {
        row.set(name, value.as_deref().unwrap_or_default());
    }
    let shown = [("sources", json.sources), ("pool", json.pool)];
    for (list, chunks) in shown {
        for (i, chunk) in chunks.into_iter().enumerate() {
            let grade = match chunk.grade {
                None => String::new(),
                Some(JsonGrade::Number(n)) => n.to_string(),
                Some(JsonGrade::Text(t)) => t.trim().to_owned(),
            };
            let field = format!("{list}[{i}].{}", slot_field::GRADE);
            row.grades.push(RawGrade { field, chunk_id: chunk.chunk_id, grade });
        }
    }
    row
}

fn csv_rows(bytes: &[u8]) -> std::result::Result<Vec<RawRow>, Vec<Problem>> {
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    let mut reader = csv::ReaderBuilder::new().from_reader(bytes);
    let headers = reader.headers().map_err(|e| vec![Problem::new(Location::Row(1), e.to_string())])?.clone();
    if !headers.iter().any(|h| h == field::QUERY_ID) {
        return Err(vec![Problem::new(Location::Row(1), format!("no {} column", field::QUERY_ID))]);
    }
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let at = Location::Row(i + 2);
        match record {
            Ok(record) => rows.push(csv_row(at, headers.iter().zip(record.iter()))),
            Err(e) => problems.push(Problem::new(at, format!("malformed CSV: {e}"))),
        }
    }
    if problems.is_empty() { Ok(rows) } else { Err(problems) }
}

fn csv_row<'a>(at: Location, cells: impl Iterator<Item = (&'a str, &'a str)>) -> RawRow {
    let mut row = RawRow::new(at);
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut grades: Vec<(String, String, String)> = Vec::new();
    for (name, value) in cells {
        if row.set(name, value) {
            continue;
        }
        match Slot::parse_field(name) {
            Some((slot, slot_field::ID)) => {
                ids.insert(slot.name(), value.trim().to_owned());
            }
            Some((slot, slot_field::GRADE)) => {
                grades.push((slot.name(), name.to_owned(), value.trim().to_owned()));
            }
            _ => {}
        }
    }
    for (slot, field, grade) in grades {
        let chunk_id = ids.get(&slot).cloned().unwrap_or_default();
        row.grades.push(RawGrade { field, chunk_id, grade });
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_str(format: Format, text: &str) -> std::result::Result<Vec<Judgment>, Vec<String>> {
        let rows = match format {
            Format::Jsonl => jsonl_rows(text.as_bytes()),
            Format::Csv => csv_rows(text.as_bytes()),
            Format::LabelStudio => super::super::label_studio::rows(text.as_bytes()),
        };
        rows.and_then(|rows| check_rows(rows, None, "ann"))
            .map(|js| js.into_iter().map(|j| j.judgment).collect())
            .map_err(|ps| ps.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn jsonl_rows_become_judgments() {
        let text = r#"{"query_id":"direct-1","decision":"Accept","sources":[{"chunk_id":"a:1","grade":2}],"pool":[{"chunk_id":"b:2","grade":null}]}

{"query_id":"direct-2","decision":"reject","reject_reason":"nonsense","reviewer":"bob"}
{"query_id":"direct-3","decision":null,"sources":[{"chunk_id":"a:1","grade":null}]}
{"query_id":"no_answer-4","decision":"answerable","add":"c:9 d:1=1"}"#;
        let judgments = read_str(Format::Jsonl, text).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(judgments.len(), 3, "the pending line is skipped");
        assert_eq!(judgments[0].decision, Some(Decision::Accept));
        assert_eq!(
            judgments[0].grades,
            [ChunkGrade { chunk_id: ChunkId::parse("a:1").unwrap_or_else(|e| panic!("{e}")), grade: 2 }]
        );
        assert_eq!((judgments[0].reviewer.as_str(), judgments[1].reviewer.as_str()), ("ann", "bob"));
        let added: Vec<(String, u8)> =
            judgments[2].grades.iter().map(|g| (g.chunk_id.to_string(), g.grade)).collect();
        assert_eq!(added, [("c:9".to_owned(), 3), ("d:1".to_owned(), 1)]);
    }

    #[test]
    fn every_bad_row_is_reported_with_its_place() {
        let text = r#"{"query_id":"direct-1","decision":"acept"}
{"query_id":"direct-2","decision":"reject"}
{"query_id":"direct 3","decision":"accept"}
{"query_id":"direct-4","sources":[{"chunk_id":"a:1","grade":7}]}
{"query_id":"direct-5","decision":"edit"}
{"query_id":"direct-6","decision":"accept","edited_text":"new"}
{"query_id":"direct-7","decision":"answerable"}
not json
{"query_id":"direct-1","decision":"accept","add":"x:1=2 x:1=3"}
{"query_id":"direct-8","decision":"accept"}
{"query_id":"direct-8","decision":"reject","reject_reason":"r"}"#;
        let problems = read_str(Format::Jsonl, text).err().unwrap_or_default();
        assert_eq!(problems.len(), 1, "malformed JSON is reported before anything else: {problems:?}");
        assert!(problems[0].starts_with("line 8: malformed JSON"), "{problems:?}");
        let text = text.replace("not json\n", "");
        let problems = read_str(Format::Jsonl, &text).err().unwrap_or_default();
        let expected = [
            "line 1: unknown decision \"acept\"",
            "line 2: reject needs a reject_reason",
            "line 3: query_id: the id \"direct 3\" contains whitespace or '#'",
            "line 4: sources[0].grade: bad grade \"7\" (0–3)",
            "line 5: edit needs an edited_text",
            "line 6: edited_text is given but the decision is not edit",
            "line 7: answerable needs the chunk",
            "line 8: add: x:1 is graded 3 here and 2 in add",
            "line 10: direct-8 was already judged by ann (line 9)",
        ];
        assert_eq!(problems.len(), expected.len(), "{problems:#?}");
        for (problem, start) in problems.iter().zip(expected) {
            assert!(problem.starts_with(start), "{problem:?} should start with {start:?}");
        }
    }

    #[test]
    fn csv_rows_map_slots_and_count_rows_like_a_spreadsheet() {
        let text = "\u{feff}query_id,source_1_id,source_1_text,source_1_grade,pool_1_id,pool_1_grade,decision,reject_reason,note\n\
                    direct-1,a:1,\"multi\nline\",3,b:2,1,accept,,fine\n\
                    direct-2,a:1,x,,b:2,,,,\n\
                    direct-3,a:1,x,9,b:2,,reject,,\n";
        let problems = read_str(Format::Csv, text).err().unwrap_or_default();
        assert_eq!(
            problems,
            ["row 4: source_1_grade: bad grade \"9\" (0–3)", "row 4: reject needs a reject_reason"]
        );
        let fixed = text.replace(",9,b:2,,reject,,", ",0,b:2,,reject,off topic,");
        let judgments = read_str(Format::Csv, &fixed).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(judgments.len(), 2);
        let grades: Vec<(String, u8)> =
            judgments[0].grades.iter().map(|g| (g.chunk_id.to_string(), g.grade)).collect();
        assert_eq!(grades, [("a:1".to_owned(), 3), ("b:2".to_owned(), 1)]);
        assert_eq!(judgments[1].reject_reason.as_deref(), Some("off topic"));
    }

    #[test]
    fn csv_without_query_ids_is_refused() {
        assert_eq!(
            read_str(Format::Csv, "id,decision\nx,accept\n"),
            Err(vec!["row 1: no query_id column".to_owned()])
        );
    }
}
