//! Label Studio: the labeling config and tasks that export writes, and the reading of Label
//! Studio's JSON export back into decision rows.
//!
//! Every task has the same fields: the query, a heading, and a fixed number of source and pool
//! slots (as many as the fullest item needs), each with its HTML, heading and chunk id; an empty
//! slot has empty values. Controls are named after the decision fields ([`super::field`]) and
//! the slots (`source_1_grade`, `pool_3_grade`); the reader refuses a control it does not know,
//! so a config and a reader that drift apart fail loudly.

use super::decisions::{RawGrade, RawRow};
use super::export::{ExportItem, escape_html};
use super::{Decision, GRADE_MAX, Location, Problem, Role, Slot, field, slot_field};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How many source and pool slots every task has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// Source slots.
    pub sources: usize,
    /// Pool slots.
    pub pool: usize,
}

/// Task data fields that are not slots.
mod data {
    /// Type, status, reason, absent term and id, on one line.
    pub const HEADING: &str = "heading";
    /// The query text.
    pub const QUERY: &str = "query";
    /// A slot's heading: role, title, chunk id, machine grade.
    pub const SLOT_HEADING: &str = "heading";
}

/// One Label Studio task: `{"data": {...}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Task {
    /// The fields the config refers to as `$name`, plus `query_id` and each slot's chunk id.
    pub data: BTreeMap<String, String>,
}

/// The task for an export item.
#[must_use]
pub fn task(item: &ExportItem, slots: Slots) -> Task {
    let mut data = BTreeMap::new();
    data.insert(field::QUERY_ID.to_owned(), item.query_id.to_string());
    data.insert(data::QUERY.to_owned(), item.text.clone());
    data.insert(data::HEADING.to_owned(), heading(item));
    for slot in Slot::all(slots.sources, slots.pool) {
        let chunk = item.chunk(slot);
        let html = chunk.map(|c| format!("<div style=\"white-space: pre-wrap\">{}</div>", c.html));
        data.insert(slot.name(), html.unwrap_or_default());
        data.insert(slot.field(slot_field::ID), chunk.map(|c| c.chunk_id.to_string()).unwrap_or_default());
        let slot_heading = chunk.map_or_else(
            || "(no chunk here: leave its grade empty)".to_owned(),
            |c| {
                let role = match (slot.role, item.query_type) {
                    (Role::Source, crate::record::QueryType::NoAnswer) => {
                        "modelled on (not relevant)".to_owned()
                    }
                    (Role::Source, _) => format!("source {}", slot.index),
                    (Role::Pool, _) => format!("retrieved at rank {}", c.rank.unwrap_or_default()),
                };
                let machine = c.machine_grade.map_or_else(|| "none".to_owned(), |g| g.to_string());
                format!("{role} · {} · {} · machine grade {machine}", c.title, c.chunk_id)
            },
        );
        data.insert(slot.field(data::SLOT_HEADING), slot_heading);
    }
    Task { data }
}

fn heading(item: &ExportItem) -> String {
    let mut heading = format!("{} · {} · {}", item.query_type, item.status.label(), item.reason.label());
    if let Some(term) = &item.absent_term {
        let _ = write!(heading, " · absent term: {term}");
    }
    let _ = write!(heading, " · {}", item.query_id);
    heading
}

/// The labeling config (XML) for tasks with `slots`.
#[must_use]
pub fn config(slots: Slots) -> String {
    let mut xml = String::from("<View>\n");
    let _ = writeln!(xml, "  <Header value=\"${}\" size=\"5\"/>", data::HEADING);
    let _ = writeln!(xml, "  <Text name=\"{}\" value=\"${}\"/>", data::QUERY, data::QUERY);
    for slot in Slot::all(slots.sources, slots.pool) {
        let name = slot.name();
        let _ = writeln!(xml, "  <View style=\"border-top: 1px solid #ccc; margin-top: 8px\">");
        let _ = writeln!(xml, "    <Header value=\"${}\" size=\"6\"/>", slot.field(data::SLOT_HEADING));
        let _ = writeln!(xml, "    <HyperText name=\"{name}\" value=\"${name}\"/>");
        let _ = writeln!(
            xml,
            "    <Choices name=\"{}\" toName=\"{name}\" choice=\"single\" showInline=\"true\">",
            slot.field(slot_field::GRADE)
        );
        for (grade, hint) in (0..=GRADE_MAX).zip(["not relevant", "related", "answers part", "fully answers"])
        {
            let _ = writeln!(xml, "      <Choice value=\"{grade}\" hint=\"{hint}\"/>");
        }
        let _ = writeln!(xml, "    </Choices>\n  </View>");
    }
    let _ = writeln!(xml, "  <Header value=\"Decision\" size=\"5\"/>");
    let _ = writeln!(
        xml,
        "  <Choices name=\"{}\" toName=\"{}\" choice=\"single\" showInline=\"true\">",
        field::DECISION,
        data::QUERY
    );
    for decision in Decision::ALL {
        let _ = writeln!(xml, "    <Choice value=\"{decision}\"/>");
    }
    let _ = writeln!(xml, "  </Choices>");
    for (name, placeholder) in [
        (field::REJECT_REASON, "reject: why"),
        (field::EDITED_TEXT, "edit: the corrected query"),
        (
            field::ADD,
            "relevant chunks not shown, CHUNK_ID=GRADE separated by spaces (answerable: the chunk that answers it)",
        ),
    ] {
        let _ = writeln!(
            xml,
            "  <TextArea name=\"{name}\" toName=\"{}\" placeholder=\"{}\" rows=\"2\" maxSubmissions=\"1\" editable=\"true\"/>",
            data::QUERY,
            escape_html(placeholder)
        );
    }
    xml.push_str("</View>\n");
    xml
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

/// The decision rows of a Label Studio JSON export: one per annotation not cancelled.
pub(crate) fn rows(bytes: &[u8]) -> Result<Vec<RawRow>, Vec<Problem>> {
    let bytes = super::decisions::without_bom(bytes);
    let tasks: Vec<ExportedTask> = serde_json::from_slice(bytes).map_err(|e| {
        let at = Location::Line(e.line());
        vec![Problem::new(at, format!("not a Label Studio JSON export (a list of tasks): {e}"))]
    })?;
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
    let data = |name: &str| task.data.get(name).and_then(serde_json::Value::as_str).unwrap_or_default();
    let mut row = RawRow::new(at);
    row.set(field::QUERY_ID, data(field::QUERY_ID));
    row.set(field::REVIEWER, &reviewer(annotation.completed_by.as_ref()));
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

/// A reviewer name from `completed_by`: an email, or `label-studio-user-<id>`.
fn reviewer(completed_by: Option<&serde_json::Value>) -> String {
    match completed_by {
        Some(serde_json::Value::Number(id)) => format!("label-studio-user-{id}"),
        Some(serde_json::Value::Object(user)) => user
            .get("email")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .or_else(|| user.get("id").map(|id| format!("label-studio-user-{id}")))
            .unwrap_or_default(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!((rows[0].reviewer.as_str(), rows[0].decision.as_str()), ("label-studio-user-3", "reject"));
        assert_eq!(rows[0].reject_reason, "off\ntopic");
        assert_eq!((rows[0].grades[0].chunk_id.as_str(), rows[0].grades[0].grade.as_str()), ("a:1", "1"));
        assert_eq!(rows[1].reviewer, "bob@example.org");
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
