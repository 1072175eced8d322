//! Label Studio: the labeling config and tasks that export writes, and the reading of Label
//! Studio's exports (JSON, and JSON-MIN) back into decision rows.
//!
//! Every task has the same fields: the query, a heading, and a fixed number of source and pool
//! slots (as many as the fullest item needs), each with its HTML (heading included), chunk id
//! and grade options; when some item was queued by a refresh, also the refresh's change as HTML
//! (empty for the other items). An empty slot has no HTML and no grade options: its chunk is inline
//! HyperText and its grade buttons come from the task (dynamic choices), so Label Studio shows
//! nothing for it. Controls are named after the decision fields ([`super::field`]) and the slots
//! (`source_1_grade`, `pool_3_grade`); choices show words and store our labels (`alias`); the
//! reader refuses a control it does not know, so a config and a reader that drift apart fail
//! loudly.

use super::export::{self, ExportItem, Slots};
use super::raw::{RawGrade, RawRow, without_bom};
use super::{Decision, GRADE_MAX, Location, Problem, Role, Slot, field, slot_field};
use crate::html;
use crate::record::RefreshNote;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

/// Task data fields that are not slots, and the suffix of a slot's grade options.
mod data {
    /// Type, status, reason, absent term and id, on one line.
    pub const HEADING: &str = "heading";
    /// The query text.
    pub const QUERY: &str = "query";
    /// What a refresh changed, as HTML (tasks of an export with a refreshed item only).
    pub const REFRESH: &str = "refresh";
    /// A slot's grade options (`source_1_grades`): Label Studio's dynamic choices.
    pub const GRADES: &str = "grades";
}

/// What each grade means, as the grade buttons show it.
const GRADE_WORDS: [&str; GRADE_MAX as usize + 1] =
    ["not relevant", "on the topic, does not answer", "answers part", "answers fully"];

/// The instructions at the top of the config, one paragraph each, in the annotators' words.
const INSTRUCTIONS: [&str; 4] = [
    "Read the query, then each chunk below it, and grade the chunk for the query: 0 = not relevant, \
     1 = on the topic but does not answer it, 2 = answers part of it, 3 = answers it fully. \
     Leave a grade empty to keep the machine's grade shown in the chunk's heading.",
    "Then decide. Accept: a real question, right as it is (with your grades). Edit: a good question, \
     badly worded: write the better wording below. Answerable: only for a query written to have no \
     answer here (its heading starts with no_answer) that a chunk does answer: grade that chunk 1-3, \
     or add it below. Reject: not a real question, or not about these documents: say why below.",
    "A chunk marked \"modelled on (not relevant)\" is what a no-answer query was written from: \
     the query should not be answerable from it.",
    "A relevant chunk that is not shown: add it by its id as CHUNK_ID=GRADE (several separated by spaces).",
];

/// What each decision is called on its button.
fn decision_words(decision: Decision) -> &'static str {
    match decision {
        Decision::Accept => "Accept as it is",
        Decision::Edit => "Edit the wording",
        Decision::Answerable => "Answerable after all",
        Decision::Reject => "Reject the query",
    }
}

/// One Label Studio task: `{"data": {...}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Task {
    /// The fields the config refers to as `$name`, plus `query_id` and each slot's chunk id.
    pub data: BTreeMap<String, Value>,
}

/// The task for an export item.
#[must_use]
pub fn task(item: &ExportItem, slots: Slots) -> Task {
    let mut data = BTreeMap::new();
    data.insert(field::QUERY_ID.to_owned(), json!(item.query_id.as_str()));
    data.insert(data::QUERY.to_owned(), json!(item.text));
    data.insert(data::HEADING.to_owned(), json!(heading(item)));
    if slots.refresh {
        data.insert(
            data::REFRESH.to_owned(),
            json!(item.refresh.as_ref().map(refresh_html).unwrap_or_default()),
        );
    }
    let options: Vec<Value> = (0..=GRADE_MAX)
        .zip(GRADE_WORDS)
        .map(|(grade, words)| json!({"value": format!("{grade} = {words}"), "alias": grade.to_string()}))
        .collect();
    for slot in Slot::all(slots.sources, slots.pool) {
        let chunk = item.chunk(slot);
        let html = chunk.map(|c| {
            let role = match (slot.role, item.query_type) {
                (Role::Source, crate::record::QueryType::NoAnswer) => "modelled on (not relevant)".to_owned(),
                (Role::Source, _) => format!("source {}", slot.index),
                (Role::Pool, _) => format!("retrieved at rank {}", c.rank.unwrap_or_default()),
            };
            let machine = c.machine_grade.map_or_else(|| "none".to_owned(), |g| g.to_string());
            let heading = format!("{role} · {} · {} · machine grade {machine}", c.place(), c.chunk_id);
            format!(
                "<div style=\"border-top: 1px solid #ccc; margin-top: 8px; padding-top: 4px\">\
                 <div style=\"font-weight: bold\">{}</div><div style=\"white-space: pre-wrap\">{}</div></div>",
                html::escape(&heading),
                c.html
            )
        });
        data.insert(slot.name(), json!(html.unwrap_or_default()));
        data.insert(
            slot.field(slot_field::ID),
            json!(chunk.map(|c| c.chunk_id.to_string()).unwrap_or_default()),
        );
        let grades = if chunk.is_some() { options.clone() } else { Vec::new() };
        data.insert(slot.field(data::GRADES), Value::Array(grades));
    }
    Task { data }
}

fn heading(item: &ExportItem) -> String {
    let mut heading = format!("{} · {} · {}", item.query_type, item.status.label(), item.reason.label());
    if let Some(term) = &item.absent_term {
        let _ = write!(heading, " · absent term: {term}");
    }
    if let Some(note) = &item.refresh {
        let _ = write!(heading, " · refresh: {}", note.change.label());
    }
    let _ = write!(heading, " · {}", item.query_id);
    heading
}

/// A refresh's change as HTML: the change and the version it made, the reason, the old sources.
/// The reason and the chunk ids come from corpora and replies: every piece is escaped.
fn refresh_html(note: &RefreshNote) -> String {
    let mut html = format!(
        "<div style=\"background: #fff4e5; padding: 4px 8px; margin-top: 8px\"><b>Changed by the refresh to version {}: {}</b>",
        note.version,
        html::escape(note.change.label())
    );
    if !note.reason.is_empty() {
        let _ = write!(html, "<div>{}</div>", html::escape(&note.reason));
    }
    if !note.old_sources.is_empty() {
        let old: Vec<String> = note.old_sources.iter().map(|id| html::escape(id.as_str())).collect();
        let _ = write!(html, "<div>old sources: {}</div>", old.join(", "));
    }
    html.push_str("</div>");
    html
}

/// The labeling config (XML) for tasks with `slots`.
#[must_use]
pub fn config(slots: Slots) -> String {
    let mut xml = String::from("<View>\n");
    let _ = writeln!(
        xml,
        "  <View style=\"background: #f4f6fa; padding: 8px 12px; border-radius: 4px; margin-bottom: 12px\">"
    );
    let _ = writeln!(xml, "    <Header value=\"How to review\" size=\"5\"/>");
    for (i, paragraph) in INSTRUCTIONS.iter().enumerate() {
        let _ = writeln!(
            xml,
            "    <Text name=\"instructions_{}\" value=\"{}\"/>",
            i + 1,
            html::escape(paragraph)
        );
    }
    let _ = writeln!(xml, "  </View>");
    let _ = writeln!(xml, "  <Header value=\"${}\" size=\"5\"/>", data::HEADING);
    let _ = writeln!(xml, "  <Text name=\"{}\" value=\"${}\"/>", data::QUERY, data::QUERY);
    if slots.refresh {
        let name = data::REFRESH;
        let _ = writeln!(xml, "  <HyperText name=\"{name}\" value=\"${name}\" inline=\"true\"/>");
    }
    for slot in Slot::all(slots.sources, slots.pool) {
        let name = slot.name();
        let _ = writeln!(xml, "  <HyperText name=\"{name}\" value=\"${name}\" inline=\"true\"/>");
        let _ = writeln!(
            xml,
            "  <Choices name=\"{}\" toName=\"{name}\" choice=\"single-radio\" showInline=\"true\" value=\"${}\"/>",
            slot.field(slot_field::GRADE),
            slot.field(data::GRADES)
        );
    }
    let _ = writeln!(xml, "  <Header value=\"Decision\" size=\"5\"/>");
    let _ = writeln!(
        xml,
        "  <Choices name=\"{}\" toName=\"{}\" choice=\"single-radio\" showInline=\"true\">",
        field::DECISION,
        data::QUERY
    );
    for &decision in <Decision as strum::VariantArray>::VARIANTS {
        let _ = writeln!(xml, "    <Choice value=\"{}\" alias=\"{decision}\"/>", decision_words(decision));
    }
    let _ = writeln!(xml, "  </Choices>");
    for (name, placeholder) in [
        (field::REJECT_REASON, "Reject: why"),
        (field::EDITED_TEXT, "Edit: the better wording of the query"),
        (
            field::ADD,
            "Relevant chunks not shown, as CHUNK_ID=GRADE separated by spaces (Answerable: the chunk that answers it)",
        ),
    ] {
        let _ = writeln!(
            xml,
            "  <TextArea name=\"{name}\" toName=\"{}\" placeholder=\"{}\" rows=\"2\" maxSubmissions=\"1\" editable=\"true\"/>",
            data::QUERY,
            html::escape(placeholder)
        );
    }
    xml.push_str("</View>\n");
    xml
}

/// Writes the Label Studio tasks (a JSON array) to `tasks` and the labeling config to `config`.
///
/// # Errors
/// The writers' errors.
pub fn write(items: &[ExportItem], tasks: &mut dyn Write, config: &mut dyn Write) -> std::io::Result<()> {
    let slots = export::slots(items);
    let all: Vec<Task> = items.iter().map(|item| task(item, slots)).collect();
    serde_json::to_writer_pretty(&mut *tasks, &all)?;
    tasks.write_all(b"\n")?;
    config.write_all(self::config(slots).as_bytes())
}

/// A task of a Label Studio JSON export (unknown fields ignored).
#[derive(Deserialize)]
struct ExportedTask {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    data: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    annotations: Vec<Annotation>,
}

#[derive(Deserialize)]
struct Annotation {
    #[serde(default)]
    completed_by: Option<serde_json::Value>,
    #[serde(default)]
    was_cancelled: bool,
    #[serde(default)]
    result: Vec<Region>,
}

#[derive(Deserialize)]
struct Region {
    from_name: String,
    #[serde(default)]
    value: RegionValue,
}

#[derive(Default, Deserialize)]
struct RegionValue {
    #[serde(default)]
    choices: Vec<String>,
    #[serde(default)]
    text: Texts,
}

/// A TextArea's value: a list of strings (or, in some exports, one).
#[derive(Deserialize)]
#[serde(untagged)]
enum Texts {
    Many(Vec<String>),
    One(String),
}

impl Default for Texts {
    fn default() -> Self {
        Self::Many(Vec::new())
    }
}

impl RegionValue {
    fn as_text(&self) -> String {
        match (&self.choices[..], &self.text) {
            ([first, ..], _) => first.clone(),
            (_, Texts::Many(texts)) => texts.join("\n"),
            (_, Texts::One(text)) => text.clone(),
        }
    }
}

/// The decision rows of a Label Studio export, JSON (one per annotation not cancelled) or
/// JSON-MIN (one per record).
pub(crate) fn rows(bytes: &[u8]) -> Result<Vec<RawRow>, Vec<Problem>> {
    let bytes = without_bom(bytes);
    let not_an_export = |e: serde_json::Error| {
        let at = Location::Line(e.line());
        vec![Problem::new(at, format!("not a Label Studio JSON export (a list of tasks): {e}"))]
    };
    let records: Vec<Value> = serde_json::from_slice(bytes).map_err(not_an_export)?;
    let is_min = |r: &Value| r.get("annotator").is_some() || r.get("annotation_id").is_some();
    let is_full = |r: &Value| r.get("data").is_some() || r.get("annotations").is_some();
    if !records.iter().any(is_full) && records.iter().any(is_min) {
        return min_rows(records);
    }
    let tasks: Vec<ExportedTask> = serde_json::from_value(Value::Array(records)).map_err(not_an_export)?;
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for (t, task) in tasks.iter().enumerate() {
        for (a, annotation) in task.annotations.iter().enumerate().filter(|(_, a)| !a.was_cancelled) {
            let at = Location::Task { task: t + 1, id: task.id, annotation: a + 1 };
            rows.push(row(at, task, annotation, &mut problems));
        }
    }
    if problems.is_empty() { Ok(rows) } else { Err(problems) }
}

fn row(at: Location, task: &ExportedTask, annotation: &Annotation, problems: &mut Vec<Problem>) -> RawRow {
    let data = |name: &str| task.data.get(name).and_then(Value::as_str).unwrap_or_default();
    let mut row = RawRow::new(at);
    row.set(field::QUERY_ID, data(field::QUERY_ID));
    annotator(&mut row, annotation.completed_by.as_ref());
    for region in &annotation.result {
        let name = region.from_name.as_str();
        let value = region.value.as_text();
        if name != field::QUERY_ID && name != field::REVIEWER && row.set(name, &value) {
            continue;
        }
        match Slot::parse_field(name) {
            Some((slot, slot_field::GRADE)) => row.grades.push(RawGrade {
                field: name.to_owned(),
                chunk_id: data(&slot.field(slot_field::ID)).to_owned(),
                grade: value.trim().to_owned(),
            }),
            _ => problems.push(Problem::new(at, format!("unknown control {name:?}"))),
        }
    }
    row
}

/// Label Studio's own fields of a JSON-MIN record.
const MIN_META: [&str; 6] = ["id", "annotator", "annotation_id", "created_at", "updated_at", "lead_time"];

/// The rows of a JSON-MIN export: each record is one annotation, the task's data and the
/// controls' values side by side, so a key is a control when it is not one of the fields the
/// tasks carry (or Label Studio's own).
fn min_rows(records: Vec<Value>) -> Result<Vec<RawRow>, Vec<Problem>> {
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let mut tasks: Vec<Option<u64>> = Vec::new();
    let mut annotations: BTreeMap<usize, usize> = BTreeMap::new();
    for record in records {
        let Value::Object(record) = record else {
            problems.push(Problem::new(
                Location::Task { task: tasks.len() + 1, id: None, annotation: 1 },
                "not an object",
            ));
            continue;
        };
        let id = record.get("id").and_then(Value::as_u64);
        let task = if let Some(i) = tasks.iter().position(|&t| t.is_some() && t == id) {
            i + 1
        } else {
            tasks.push(id);
            tasks.len()
        };
        let annotation = annotations.entry(task).or_default();
        *annotation += 1;
        let at = Location::Task { task, id, annotation: *annotation };
        let text = |name: &str| record.get(name).and_then(min_text).unwrap_or_default();
        let mut row = RawRow::new(at);
        row.set(field::QUERY_ID, &text(field::QUERY_ID));
        annotator(&mut row, record.get("annotator"));
        for (name, value) in &record {
            if MIN_META.contains(&name.as_str()) || name == field::QUERY_ID || is_task_field(name) {
                continue;
            }
            let Some(value) = min_text(value) else {
                problems
                    .push(Problem::new(at, format!("{name}: a value Label Studio does not write: {value}")));
                continue;
            };
            if name != field::REVIEWER && row.set(name, &value) {
                continue;
            }
            match Slot::parse_field(name) {
                Some((slot, slot_field::GRADE)) => row.grades.push(RawGrade {
                    field: name.clone(),
                    chunk_id: text(&slot.field(slot_field::ID)),
                    grade: value.trim().to_owned(),
                }),
                _ => problems.push(Problem::new(at, format!("unknown control {name:?} (JSON-MIN)"))),
            }
        }
        rows.push(row);
    }
    if problems.is_empty() { Ok(rows) } else { Err(problems) }
}

/// Whether `name` is a field of the tasks export writes (not a control).
fn is_task_field(name: &str) -> bool {
    let is_slot =
        || Slot::parse_field(&format!("{name}_{}", slot_field::ID)).is_some_and(|(s, _)| s.name() == name);
    match Slot::parse_field(name) {
        Some((_, suffix)) => suffix != slot_field::GRADE,
        None => name == data::QUERY || name == data::HEADING || name == data::REFRESH || is_slot(),
    }
}

/// A JSON-MIN value as text: a string or number; a list of texts (one per line); or
/// `{"text": […]}` / `{"choices": […]}`, as Label Studio writes a control with several values.
fn min_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null => Some(String::new()),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(|l| l.join("\n")),
        Value::Object(map) => map.get("text").or_else(|| map.get("choices")).and_then(min_text),
        Value::Bool(_) => None,
    }
}

/// The annotator of a row: an email (older exports) names them; a bare number is a Label Studio
/// user id, named later from `--reviewer` or `--reviewer-map`.
fn annotator(row: &mut RawRow, completed_by: Option<&Value>) {
    match completed_by {
        Some(Value::Number(id)) => row.user = id.as_u64(),
        Some(Value::String(name)) => name.trim().clone_into(&mut row.reviewer),
        Some(Value::Object(user)) => match user.get("email").and_then(Value::as_str) {
            Some(email) => email.trim().clone_into(&mut row.reviewer),
            None => row.user = user.get("id").and_then(Value::as_u64),
        },
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{ChunkId, QueryId};
    use crate::record::{QueryChange, QueryType, Reason, Status};

    fn item(refresh: Option<RefreshNote>) -> ExportItem {
        ExportItem {
            query_id: QueryId::parse("direct-1").unwrap(),
            text: "how long are events kept".to_owned(),
            query_type: QueryType::Direct,
            status: Status::Flagged,
            reason: Reason::SourceInTopN,
            refresh,
            absent_term: None,
            evidence: Vec::new(),
            sources: Vec::new(),
            pool: Vec::new(),
            decision: None,
            reject_reason: None,
            edited_text: None,
            add: None,
            reviewer: None,
        }
    }

    #[test]
    fn a_refreshs_change_is_shown_escaped_and_only_in_exports_that_have_one() {
        let note = RefreshNote {
            version: 4,
            change: QueryChange::Retargeted,
            reason: "its chunks changed <script>alert('x')</script> & more".to_owned(),
            old_sources: vec![ChunkId::parse("a<b>.md:1").unwrap(), ChunkId::parse("c.md:2").unwrap()],
        };
        let items = [item(Some(note)), item(None)];
        let slots = export::slots(&items);
        assert_eq!(slots, Slots { sources: 0, pool: 0, refresh: true });
        let changed = task(&items[0], slots);
        assert_eq!(
            changed.data[data::REFRESH],
            "<div style=\"background: #fff4e5; padding: 4px 8px; margin-top: 8px\"><b>Changed by the refresh \
             to version 4: retargeted</b><div>its chunks changed &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; \
             &amp; more</div><div>old sources: a&lt;b&gt;.md:1, c.md:2</div></div>"
        );
        assert_eq!(
            changed.data[data::HEADING],
            "direct · flagged · source_in_top_n · refresh: retargeted · direct-1"
        );
        assert_eq!(task(&items[1], slots).data[data::REFRESH], "", "an item the refresh did not queue");
        assert!(config(slots).contains("<HyperText name=\"refresh\" value=\"$refresh\" inline=\"true\"/>"));
        let before = export::slots(&items[1..]);
        assert!(!task(&items[1], before).data.contains_key(data::REFRESH));
        assert!(!config(before).contains("refresh"), "an export without a refreshed item is as it was");
        assert!(is_task_field(data::REFRESH), "JSON-MIN exports carry it beside the controls");
    }

    #[test]
    fn an_export_with_two_annotators_gives_two_rows() {
        let export = r#"[{"id": 7, "data": {"query_id": "direct-1", "source_1_id": "a:1", "pool_1_id": ""},
          "annotations": [
            {"completed_by": 3, "result": [
              {"from_name": "decision", "to_name": "query", "type": "choices", "value": {"choices": ["reject"]}},
              {"from_name": "reject_reason", "to_name": "query", "type": "textarea", "value": {"text": ["off", "topic"]}},
              {"from_name": "source_1_grade", "to_name": "source_1", "type": "choices", "value": {"choices": ["1"]}}]},
            {"completed_by": {"id": 4, "email": "bob@example.org"}, "result": [
              {"from_name": "decision", "value": {"choices": ["accept"]}}]},
            {"completed_by": 5, "was_cancelled": true, "result": []}]}]"#;
        let rows = rows(export.as_bytes()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].user, rows[0].reviewer.as_str(), rows[0].decision.as_str()),
            (Some(3), "", "reject")
        );
        assert_eq!(rows[0].reject_reason, "off\ntopic");
        assert_eq!((rows[0].grades[0].chunk_id.as_str(), rows[0].grades[0].grade.as_str()), ("a:1", "1"));
        assert_eq!(rows[1].reviewer, "bob@example.org");
    }

    #[test]
    fn json_min_records_are_annotations_with_the_task_data_beside_them() {
        let export = r#"[
          {"id": 7, "query_id": "direct-1", "query": "q", "heading": "h", "source_1": "<div/>", "source_1_id": "a:1",
           "source_1_grades": [{"value": "0 = not relevant", "alias": "0"}], "source_2": "", "source_2_id": "",
           "source_1_grade": "2", "decision": "reject", "reject_reason": {"text": ["off", "topic"]},
           "annotator": 1, "annotation_id": 3, "created_at": "x", "updated_at": "x", "lead_time": null},
          {"id": 7, "query_id": "direct-1", "source_1_id": "a:1", "decision": "accept", "annotator": "bob@example.org", "annotation_id": 2},
          {"id": 8, "query_id": "direct-2", "decision": "accept", "mood": "fine", "annotator": 2, "annotation_id": 4}]"#;
        let problems = rows(export.as_bytes()).err().unwrap_or_default();
        assert_eq!(
            problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["task 2 (id 8), annotation 1: unknown control \"mood\" (JSON-MIN)"]
        );
        let rows =
            rows(export.replace(r#""mood": "fine", "#, "").as_bytes()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[0].user, rows[0].decision.as_str(), rows[0].reject_reason.as_str()),
            (Some(1), "reject", "off\ntopic")
        );
        assert_eq!((rows[0].grades[0].chunk_id.as_str(), rows[0].grades[0].grade.as_str()), ("a:1", "2"));
        assert_eq!(rows[1].at, Location::Task { task: 1, id: Some(7), annotation: 2 });
        assert_eq!((rows[1].user, rows[1].reviewer.as_str()), (None, "bob@example.org"));
        assert_eq!(rows[2].at, Location::Task { task: 2, id: Some(8), annotation: 1 });
    }

    #[test]
    fn unknown_controls_and_non_exports_are_refused() {
        let export = r#"[{"data": {"query_id": "q"}, "annotations": [{"result": [{"from_name": "sentiment", "value": {}}]}]}]"#;
        let problems = rows(export.as_bytes()).err().unwrap_or_default();
        assert_eq!(
            problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["task 1, annotation 1: unknown control \"sentiment\""]
        );
        let export = format!(
            "\u{feff}{}",
            r#"[{"id": 102, "data": {"query_id": "q"}, "annotations": [{"result": [{"from_name": "mood", "value": {}}]}]}]"#
        );
        let problems = rows(export.as_bytes()).err().unwrap_or_default();
        assert_eq!(
            problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["task 1 (id 102), annotation 1: unknown control \"mood\""],
            "a byte order mark is skipped and the task is named by its id too"
        );
        assert!(rows(b"{\"query_id\": 1}").is_err());
    }
}
