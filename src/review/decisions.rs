//! Reads a decisions file, JSONL, CSV or a Label Studio JSON export, into [`Judgment`]s.
//!
//! Every format is first read into `RawRow`s (`raw.rs`: the decision fields as written), which one
//! function checks for form: known decision, grades 0–3, ids without whitespace or `#`, a reason
//! for a rejection, a text for an edit, an answering chunk for `answerable`. Every problem of every
//! row is collected with its line (JSONL), row (CSV, the header is row 1) or task (Label Studio);
//! one problem anywhere and the file yields no judgment at all. Rows with no decision and no grade
//! are pending and skipped. [`read_for`] also checks the judgments against the set and reports
//! those problems together with the form problems.

use super::raw::{RawGrade, RawRow, without_bom};
use super::rules::{self, Fields};
use super::set::ReviewSet;
use super::{
    ChunkGrade, Decision, Format, GRADE_MAX, Judgment, Located, Location, Problem, Slot, field, slot_field,
};
use crate::error::{Error, Result};
use crate::id::{ChunkId, QueryId};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    /// Whether it has a row at all (a Label Studio file: an annotation).
    pub annotated: bool,
    /// What was read but ignored, one message each (a grade on an empty slot).
    pub warnings: Vec<String>,
}

/// Who judged the rows that do not name their reviewer.
#[derive(Debug, Clone, Default)]
pub struct Reviewers {
    /// `--reviewer`: the name for rows without a reviewer, and for the one Label Studio user of
    /// an export that names its annotators by number.
    pub name: Option<String>,
    /// `--reviewer-map`: names for Label Studio user ids.
    pub map: Option<ReviewerMap>,
}

/// Label Studio user ids and the names they stand for, from a file of `ID=NAME` lines (blank
/// lines and lines starting with `#` skipped).
#[derive(Debug, Clone)]
pub struct ReviewerMap {
    /// The file.
    pub path: PathBuf,
    /// Id → name.
    pub names: BTreeMap<u64, String>,
}

impl ReviewerMap {
    /// Reads a map file.
    ///
    /// # Errors
    /// [`Error::Input`] if it cannot be read, [`Error::Malformed`] for a line that is not
    /// `ID=NAME` or names an id twice.
    pub fn read(path: &Path) -> Result<Self> {
        let text = crate::lines::read_text(path, crate::lines::RECORD_LINE)
            .map_err(|source| Error::Input { path: path.to_owned(), source })?;
        let malformed =
            |line: usize, message: String| Error::Malformed { path: path.to_owned(), line, message };
        let mut names = BTreeMap::new();
        for (i, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let parsed = line
                .split_once('=')
                .and_then(|(id, name)| Some((id.trim().parse::<u64>().ok()?, name.trim())));
            match parsed {
                Some((id, name)) if !name.is_empty() => {
                    if names.insert(id, name.to_owned()).is_some() {
                        return Err(malformed(i, format!("Label Studio user {id} is named twice")));
                    }
                }
                _ => {
                    return Err(malformed(
                        i,
                        format!("{line:?} is not ID=NAME (a Label Studio user id, a name)"),
                    ));
                }
            }
        }
        Ok(Self { path: path.to_owned(), names })
    }
}

/// Reads `path` in `format` (by default the one its extension implies) and checks it for form.
/// Judgments name the row's `reviewer` field (for Label Studio, the annotator: an email, or a
/// user id named by `reviewers`), else `reviewers.name`, else the file's stem.
///
/// # Errors
/// [`Error::Input`] if the file cannot be read, [`Error::InvalidSetting`] if the format is
/// unknown or the annotators' user ids cannot be named as asked, [`Error::Decisions`] listing
/// every bad row.
pub fn read(path: &Path, format: Option<Format>, reviewers: &Reviewers) -> Result<Decisions> {
    let (decisions, problems) = parse(path, format, reviewers)?;
    if problems.is_empty() {
        Ok(decisions)
    } else {
        Err(Error::Decisions { path: path.to_owned(), problems })
    }
}

/// As [`read`], and checks the judgments against `set` (known ids, decisions that fit the query,
/// a relevant chunk left, no text changed without `edit`): every problem of the file at once.
///
/// # Errors
/// As [`read`]; [`Error::NoJudgments`] when every row is pending.
pub fn read_for(
    set: &ReviewSet,
    path: &Path,
    format: Option<Format>,
    reviewers: &Reviewers,
) -> Result<Decisions> {
    let (decisions, mut problems) = parse(path, format, reviewers)?;
    problems.extend(rules::against_set(set, &decisions.judgments));
    problems.sort_by_key(|p| p.at);
    if !problems.is_empty() {
        return Err(Error::Decisions { path: path.to_owned(), problems });
    }
    if decisions.judgments.is_empty() {
        let hint = if decisions.format == Format::LabelStudio && !decisions.annotated {
            "the file has no annotations: is it the tasks file that review export wrote? Apply the \
             export Label Studio makes after annotating (Export → JSON)"
        } else {
            "fill in a decision (or a chunk grade) in the rows reviewed, save, and run the command again"
        };
        return Err(Error::NoJudgments { path: path.to_owned(), hint });
    }
    Ok(decisions)
}

/// The file's judgments (those of rows without problems) and every form problem.
fn parse(path: &Path, format: Option<Format>, reviewers: &Reviewers) -> Result<(Decisions, Vec<Problem>)> {
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
    let (annotated, CheckedRows { judgments, problems, warnings }) = match rows {
        Ok(mut rows) => {
            let annotated = !rows.is_empty();
            let mut warnings = name_users(&mut rows, reviewers)?;
            let mut checked = check_rows(rows, reviewers.name.as_deref(), &stem);
            warnings.append(&mut checked.warnings);
            checked.warnings = warnings;
            (annotated, checked)
        }
        Err(problems) => (false, CheckedRows { problems, ..CheckedRows::default() }),
    };
    Ok((Decisions { path: path.to_owned(), format, bytes, judgments, annotated, warnings }, problems))
}

/// Names the rows whose annotator is only a Label Studio user id: from `reviewers.map`, or
/// `reviewers.name` when the file has one such user; without either, `label-studio-user-<id>`
/// and a warning. Returns the warnings.
fn name_users(rows: &mut [RawRow], reviewers: &Reviewers) -> Result<Vec<String>> {
    let ids: BTreeSet<u64> = rows.iter().filter(|r| r.reviewer.is_empty()).filter_map(|r| r.user).collect();
    let list = |ids: &[u64]| {
        let joined = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        format!("Label Studio user{} {joined}", if ids.len() == 1 { "" } else { "s" })
    };
    let all: Vec<u64> = ids.iter().copied().collect();
    let mut warnings = Vec::new();
    let names: BTreeMap<u64, String> = match (&reviewers.map, &reviewers.name) {
        _ if ids.is_empty() => return Ok(warnings),
        (Some(map), _) => {
            let missing: Vec<u64> = all.iter().copied().filter(|id| !map.names.contains_key(id)).collect();
            if !missing.is_empty() {
                return Err(Error::InvalidSetting {
                    flag: "--reviewer-map",
                    message: format!(
                        "{} not in {}: add a line ID=NAME for each",
                        list(&missing),
                        map.path.display()
                    ),
                });
            }
            map.names.clone()
        }
        (None, Some(name)) if ids.len() == 1 => all.iter().map(|&id| (id, name.clone())).collect(),
        (None, Some(_)) => {
            return Err(Error::InvalidSetting {
                flag: "--reviewer",
                message: format!(
                    "the export has {} annotators ({}) and --reviewer names one: name each with \
                     --reviewer-map FILE (lines ID=NAME)",
                    ids.len(),
                    list(&all)
                ),
            });
        }
        (None, None) => {
            warnings.push(format!(
                "annotators are known only as {} (recorded as label-studio-user-<id>): name them with \
                 --reviewer NAME (one annotator) or --reviewer-map FILE (lines ID=NAME)",
                list(&all)
            ));
            all.iter().map(|&id| (id, format!("label-studio-user-{id}"))).collect()
        }
    };
    for row in rows.iter_mut().filter(|r| r.reviewer.is_empty()) {
        if let Some(name) = row.user.and_then(|id| names.get(&id)) {
            name.clone_into(&mut row.reviewer);
        }
    }
    Ok(warnings)
}

/// The rows of a file, checked: the judgments of the good rows, every problem found and what
/// was ignored.
#[derive(Default)]
struct CheckedRows {
    judgments: Vec<Located>,
    problems: Vec<Problem>,
    warnings: Vec<String>,
}

/// Checks every row.
fn check_rows(rows: Vec<RawRow>, reviewer: Option<&str>, stem: &str) -> CheckedRows {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let mut judgments: Vec<Located> = Vec::new();
    let mut seen: HashMap<(QueryId, String), Location> = HashMap::new();
    for row in rows {
        let (at, shown_text) = (row.at, row.shown_text.clone());
        let mut warn = |message: String| warnings.push(Problem::new(at, message).to_string());
        match judgment(row, reviewer, stem, &mut warn) {
            Ok(None) => {}
            Ok(Some(j)) => match seen.insert((j.query_id.clone(), j.reviewer.clone()), at) {
                Some(first) => problems.push(Problem::new(
                    at,
                    format!("{} was already judged by {} ({first})", j.query_id, j.reviewer),
                )),
                None => judgments.push(Located { at, judgment: j, shown_text }),
            },
            Err(mut found) => problems.append(&mut found),
        }
    }
    CheckedRows { judgments, problems, warnings }
}

/// The judgment a row holds (`None` for a row with no decision and no grade), or its problems.
fn judgment(
    row: RawRow,
    reviewer: Option<&str>,
    stem: &str,
    warn: &mut impl FnMut(String),
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
    let grades = grades(&row, &mut problem, warn);
    let undecided = row.decision.is_empty();
    if undecided && grades.is_empty() && row.reject_reason.is_empty() && row.edited_text.is_empty() {
        return if problems.is_empty() { Ok(None) } else { Err(problems) };
    }
    let query_id = QueryId::parse(&row.query_id).map_err(|e| format!("query_id: {e}"));
    if let Err(message) = &query_id {
        problem(message.clone());
    }
    rules::form(
        Fields {
            decision,
            reject_reason: &row.reject_reason,
            edited_text: &row.edited_text,
            grades: &grades,
        },
        &mut problem,
    );
    // The row's own reviewer (or Label Studio annotator) wins; --reviewer fills in empty ones.
    let reviewer = [&row.reviewer, reviewer.unwrap_or_default(), stem].into_iter().find(|r| !r.is_empty());
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

/// The grades of a row, shown chunks and `add` together, sorted by chunk; reports bad ones. A
/// grade given where no chunk was shown (an empty slot) is ignored with a warning.
fn grades(row: &RawRow, problem: &mut impl FnMut(String), warn: &mut impl FnMut(String)) -> Vec<ChunkGrade> {
    let added = row.add.split_whitespace().map(|item| {
        let (id, grade) = item.rsplit_once('=').unwrap_or((item, "3"));
        RawGrade { field: field::ADD.to_owned(), chunk_id: id.to_owned(), grade: grade.to_owned() }
    });
    let mut by_chunk: BTreeMap<ChunkId, (u8, String)> = BTreeMap::new();
    for raw in row.grades.iter().filter(|g| !g.grade.is_empty()).cloned().chain(added) {
        if raw.chunk_id.trim().is_empty() && raw.field != field::ADD {
            warn(format!("{}: a grade on an empty slot (no chunk shown there): ignored", raw.field));
            continue;
        }
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
    /// The query text as exported.
    #[serde(default)]
    text: Option<String>,
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
    let text = String::from_utf8_lossy(without_bom(bytes));
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
    row.shown_text = json.text;
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

/// What is wrong with a header row that lacks `query_id` or `decision`, naming the columns it
/// has, or the separator it uses when that is not a comma (a spreadsheet set to `;`).
fn missing_columns(headers: &csv::StringRecord) -> Option<String> {
    let missing: Vec<&str> =
        [field::QUERY_ID, field::DECISION].into_iter().filter(|c| !headers.iter().any(|h| h == *c)).collect();
    if missing.is_empty() {
        return None;
    }
    let columns = format!("no {} column", missing.join(" or "));
    let only = headers.iter().next().filter(|_| headers.len() == 1).unwrap_or_default();
    if let Some(separator) = [';', '\t', '|'].into_iter().find(|&d| only.contains(d)) {
        return Some(format!(
            "{columns}: the header row is separated by {separator:?}, not ','; save the file as comma-separated CSV"
        ));
    }
    let found: Vec<String> = headers.iter().map(str::to_owned).collect();
    Some(format!("{columns} (the columns are {})", crate::output::list(&found)))
}

fn csv_rows(bytes: &[u8]) -> std::result::Result<Vec<RawRow>, Vec<Problem>> {
    let bytes = without_bom(bytes);
    let mut reader = csv::ReaderBuilder::new().from_reader(bytes);
    let headers = reader.headers().map_err(|e| vec![Problem::new(Location::Row(1), e.to_string())])?.clone();
    if let Some(message) = missing_columns(&headers) {
        return Err(vec![Problem::new(Location::Row(1), message)]);
    }
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    // A spreadsheet shows one row per record and per blank line: the record's line, less the
    // line breaks inside quoted cells before it.
    let mut breaks = headers.iter().map(|h| h.matches('\n').count()).sum::<usize>();
    let mut record = csv::StringRecord::new();
    let mut previous = 1;
    loop {
        let read = reader.read_record(&mut record);
        let row = |position: Option<&csv::Position>, breaks: usize| {
            position.map_or(previous + 1, |p| spreadsheet_row(bytes, p, breaks).max(previous + 1))
        };
        match read {
            Ok(false) => break,
            Ok(true) => {
                let at = row(record.position(), breaks);
                rows.push(csv_row(Location::Row(at), headers.iter().zip(record.iter())));
                breaks += record.iter().map(|cell| cell.matches('\n').count()).sum::<usize>();
                previous = at;
            }
            Err(e) => {
                let at = row(e.position(), breaks);
                problems.push(Problem::new(Location::Row(at), format!("malformed CSV: {e}")));
                previous = at;
            }
        }
    }
    if problems.is_empty() { Ok(rows) } else { Err(problems) }
}

/// The spreadsheet row of a record the reader started reading at `position`: the reader counts
/// the lines before it but not the blank lines it skips, nor (as a spreadsheet does) the line
/// breaks inside quoted cells (`breaks` of them so far).
fn spreadsheet_row(bytes: &[u8], position: &csv::Position, breaks: usize) -> usize {
    let start = usize::try_from(position.byte()).unwrap_or(usize::MAX);
    let rest = bytes.get(start..).unwrap_or_default();
    let blank = rest.iter().take_while(|&&b| b == b'\n' || b == b'\r').filter(|&&b| b == b'\n').count();
    let line = usize::try_from(position.line()).unwrap_or(usize::MAX);
    line.saturating_add(blank).saturating_sub(breaks)
}

fn csv_row<'a>(at: Location, cells: impl Iterator<Item = (&'a str, &'a str)>) -> RawRow {
    let mut row = RawRow::new(at);
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut grades: Vec<(String, String, String)> = Vec::new();
    for (name, value) in cells {
        if row.set(name, value) {
            continue;
        }
        if name == "query" {
            row.shown_text = Some(value.to_owned());
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
        let checked = check_rows(rows.map_err(|ps| strings(&ps))?, None, "ann");
        if checked.problems.is_empty() {
            Ok(checked.judgments.into_iter().map(|j| j.judgment).collect())
        } else {
            Err(strings(&checked.problems))
        }
    }

    fn strings(problems: &[Problem]) -> Vec<String> {
        problems.iter().map(ToString::to_string).collect()
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
        assert_eq!(judgments[0].grades, [ChunkGrade { chunk_id: ChunkId::parse("a:1").unwrap(), grade: 2 }]);
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
            "line 3: query_id: the id \"direct 3\" contains whitespace, a control character, '#' or '`'",
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
    fn csv_rows_count_blank_lines_and_not_line_breaks_in_cells() {
        // Row 1 header, row 2 a record over two lines, row 3 blank, row 4 the bad record.
        let text = "query_id,query,decision\ndirect-1,\"two\nlines\",accept\n\ndirect-2,x,acept\n";
        let problems = read_str(Format::Csv, text).err().unwrap_or_default();
        assert_eq!(problems, ["row 4: unknown decision \"acept\" (accept, edit, answerable or reject)"]);
        let crlf = "query_id,decision\r\n\r\n\r\ndirect-2,acept\r\n";
        let problems = read_str(Format::Csv, crlf).err().unwrap_or_default();
        assert!(problems[0].starts_with("row 4: "), "{problems:?}");
    }

    #[test]
    fn a_byte_order_mark_is_skipped_and_the_shown_text_kept() {
        let text = "\u{feff}{\"query_id\":\"direct-1\",\"decision\":\"accept\",\"text\":\"how long\"}\n";
        let rows = jsonl_rows(text.as_bytes()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(rows[0].shown_text.as_deref(), Some("how long"));
        let CheckedRows { judgments, problems, .. } = check_rows(rows, Some("ann"), "file");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(judgments[0].shown_text.as_deref(), Some("how long"));
        assert_eq!(judgments[0].judgment.reviewer, "ann", "--reviewer fills in an empty reviewer");
    }

    #[test]
    fn a_reviewer_map_is_id_equals_name_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("annotators.txt");
        fs_err::write(&path, "# who is who\n\n1 = Ann Lee\n2=bob\n").unwrap();
        let map = ReviewerMap::read(&path).unwrap();
        assert_eq!(map.names, BTreeMap::from([(1, "Ann Lee".to_owned()), (2, "bob".to_owned())]));
        for (text, message) in [
            ("ann=1\n", ":1: \"ann=1\" is not ID=NAME"),
            ("1=a\n1=b\n", ":2: Label Studio user 1 is named twice"),
        ] {
            fs_err::write(&path, text).unwrap();
            let err = ReviewerMap::read(&path).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(message), "{err}");
        }
    }

    #[test]
    fn user_ids_are_named_once_and_never_guessed() {
        let row = |user| RawRow { user: Some(user), ..RawRow::new(Location::Line(1)) };
        let named = |rows: &[RawRow]| rows.iter().map(|r| r.reviewer.clone()).collect::<Vec<_>>();
        let mut rows = vec![row(1), row(1)];
        let one = Reviewers { name: Some("ann".into()), map: None };
        assert!(name_users(&mut rows, &one).is_ok_and(|w| w.is_empty()));
        assert_eq!(named(&rows), ["ann", "ann"]);
        let mut rows = vec![row(1), row(2)];
        assert!(matches!(name_users(&mut rows, &one), Err(Error::InvalidSetting { flag: "--reviewer", .. })));
        let warnings = name_users(&mut rows, &Reviewers::default()).unwrap_or_default();
        assert_eq!(named(&rows), ["label-studio-user-1", "label-studio-user-2"]);
        assert!(warnings[0].contains("Label Studio users 1, 2"), "{warnings:?}");
    }

    #[test]
    fn csv_without_query_ids_is_refused() {
        assert_eq!(
            read_str(Format::Csv, "id,decision\nx,accept\n"),
            Err(vec!["row 1: no query_id column (the columns are id, decision)".to_owned()])
        );
        assert_eq!(
            read_str(Format::Csv, "query_id,reviewer\nq1,ann\n"),
            Err(vec!["row 1: no decision column (the columns are query_id, reviewer)".to_owned()])
        );
        let semicolons = read_str(Format::Csv, "query_id;decision;reviewer\nq1;accept;ann\n");
        assert_eq!(
            semicolons,
            Err(vec![
                "row 1: no query_id or decision column: the header row is separated by ';', not ','; save the file \
                 as comma-separated CSV"
                    .to_owned()
            ])
        );
    }
}
