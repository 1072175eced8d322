//! Export: the review queue as items for annotators, in JSONL, CSV or Label Studio tasks.
//!
//! Input: the set (queue, version-1 grades). Output: one item per queue entry with the query, its
//! type, status and reason, what a refresh changed (for the queries a refresh queued: the change,
//! its reason and the old sources), its source chunks with the evidence quotes marked (`[[…]]` in
//! JSONL and CSV, `<mark>` in Label Studio), its pooled chunks, each chunk's machine grade and an
//! empty `grade`, and empty decision fields ([`super::field`]). Items show what the machine made:
//! the text and grades of version 1, whatever was applied since.

use super::set::ReviewSet;
use super::{Decision, Role, Slot, field, slot_field};
use crate::html;
use crate::id::{ChunkId, QueryId};
use crate::record::{Pooled, Provenance, QueryType, Reason, RefreshNote, ReviewItem, Status};
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;

/// One queue entry as annotators get it (one JSONL line).
#[derive(Debug, Clone, Serialize)]
pub struct ExportItem {
    /// The query.
    pub query_id: QueryId,
    /// Its text.
    pub text: String,
    /// Its type.
    #[serde(rename = "type")]
    pub query_type: QueryType,
    /// Kept or flagged.
    pub status: Status,
    /// The filter's reason.
    pub reason: Reason,
    /// What a refresh changed, for a query a refresh queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh: Option<RefreshNote>,
    /// For `no_answer`: the term that makes it unanswerable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absent_term: Option<String>,
    /// The evidence quotes (LLM queries), marked in the chunks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// The chunks it was written from (for `no_answer`: modelled on, not relevant).
    pub sources: Vec<ExportChunk>,
    /// Other chunks it retrieves.
    pub pool: Vec<ExportChunk>,
    /// To fill in: accept, edit, answerable or reject.
    pub decision: Option<Decision>,
    /// To fill in with reject.
    pub reject_reason: Option<String>,
    /// To fill in with edit.
    pub edited_text: Option<String>,
    /// To fill in: `CHUNK_ID=GRADE …` for relevant chunks not shown.
    pub add: Option<String>,
    /// To fill in: who decided.
    pub reviewer: Option<String>,
}

/// A chunk shown with an item.
#[derive(Debug, Clone, Serialize)]
pub struct ExportChunk {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// Its BM25 rank (pooled chunks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Its document title.
    pub title: String,
    /// Its section heading in the document (a PDF's page, a Word heading), if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// Its text, evidence quotes in `[[…]]`.
    pub text: String,
    /// Its text as HTML, evidence quotes in `<mark>`.
    #[serde(skip)]
    pub html: String,
    /// The machine's grade (version 1); `None`: not judged.
    pub machine_grade: Option<u8>,
    /// To fill in: 0–3, or empty to keep the machine's.
    pub grade: Option<u8>,
}

impl ExportChunk {
    /// Where it is: its document's title, and its section when it has one (`Manual › Page 3`).
    #[must_use]
    pub fn place(&self) -> String {
        match &self.section {
            Some(section) => format!("{} › {section}", self.title),
            None => self.title.clone(),
        }
    }
}

/// A chunk's document title and section.
type Place<'a> = (&'a str, Option<&'a String>);

/// The export items of the queries of the set's review queue that `keep` keeps, in queue
/// order.
#[must_use]
pub fn items(set: &ReviewSet, keep: impl Fn(&QueryId) -> bool) -> Vec<ExportItem> {
    let grades: HashMap<(&QueryId, &ChunkId), (u8, Provenance)> =
        set.base.qrels.iter().map(|q| ((&q.query_id, &q.chunk_id), (q.grade, q.provenance))).collect();
    set.queue.iter().filter(|item| keep(&item.query_id)).map(|item| export_item(item, &grades)).collect()
}

/// The machine grades shown beside a chunk: its grade in the base version, but not a machine
/// grade of a pair `qrelgen pool` queued without it (its review checks the machine judge, so the
/// reviewer must not see its answer).
fn export_item(item: &ReviewItem, grades: &HashMap<(&QueryId, &ChunkId), (u8, Provenance)>) -> ExportItem {
    let hidden = |p: &Pooled| {
        p.grade.is_none()
            && grades
                .get(&(&item.query_id, &p.chunk_id))
                .is_some_and(|(_, by)| matches!(by, Provenance::Judge | Provenance::OneShot))
    };
    let chunk =
        |chunk_id: &ChunkId, rank: Option<u32>, (title, section): Place<'_>, text: &str, hide: bool| {
            let marks = marks(text, &item.evidence);
            ExportChunk {
                chunk_id: chunk_id.clone(),
                rank,
                title: title.to_owned(),
                section: section.cloned(),
                text: marked(text, &marks, "[[", "]]", str::to_owned),
                html: marked(text, &marks, "<mark>", "</mark>", html::escape),
                machine_grade: grades.get(&(&item.query_id, chunk_id)).map(|(g, _)| *g).filter(|_| !hide),
                grade: None,
            }
        };
    ExportItem {
        query_id: item.query_id.clone(),
        text: item.text.clone(),
        query_type: item.query_type,
        status: item.status,
        reason: item.reason,
        refresh: item.refresh.clone(),
        absent_term: item.absent_term.clone(),
        evidence: item.evidence.clone(),
        sources: item
            .sources
            .iter()
            .map(|s| chunk(&s.chunk_id, None, (&s.title, s.section.as_ref()), &s.text, false))
            .collect(),
        pool: item
            .pool
            .iter()
            .map(|p| {
                let place = (p.title.as_str(), p.section.as_ref());
                chunk(&p.pooled.chunk_id, Some(p.pooled.rank), place, &p.text, hidden(&p.pooled))
            })
            .collect(),
        decision: None,
        reject_reason: None,
        edited_text: None,
        add: None,
        reviewer: None,
    }
}

/// The byte ranges of `text` that the quotes match, sorted, overlaps merged.
fn marks(text: &str, quotes: &[String]) -> Vec<Range<usize>> {
    let text = crate::text::Quotable::new(text);
    let mut found: Vec<Range<usize>> = quotes.iter().filter_map(|q| text.find(q)).collect();
    found.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::new();
    for range in found {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    merged
}

/// `text` with each mark wrapped in `open`…`close`, every piece passed through `escape`.
fn marked(text: &str, marks: &[Range<usize>], open: &str, close: &str, escape: fn(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut at = 0;
    for mark in marks {
        out.push_str(&escape(&text[at..mark.start]));
        out.push_str(open);
        out.push_str(&escape(&text[mark.clone()]));
        out.push_str(close);
        at = mark.end;
    }
    out.push_str(&escape(&text[at..]));
    out
}

/// How many source and pool slots every task (and CSV row) has, and whether it has the fields
/// of a refresh's change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// Source slots.
    pub sources: usize,
    /// Pool slots.
    pub pool: usize,
    /// Whether some item was queued by a refresh: then every task and row has the refresh's
    /// fields (empty for the others); without one, the export is as before refreshes existed.
    pub refresh: bool,
}

/// How many source and pool slots the items need, and whether they need the refresh's fields.
#[must_use]
pub fn slots(items: &[ExportItem]) -> Slots {
    Slots {
        sources: items.iter().map(|i| i.sources.len()).max().unwrap_or(0),
        pool: items.iter().map(|i| i.pool.len()).max().unwrap_or(0),
        refresh: items.iter().any(|i| i.refresh.is_some()),
    }
}

/// The CSV columns of a refresh's change: what it did, why, and the sources the query had.
pub const REFRESH_COLUMNS: [&str; 3] = ["refresh_change", "refresh_reason", "refresh_old_sources"];

impl ExportItem {
    /// The chunk shown in `slot`, if the item has one there.
    #[must_use]
    pub fn chunk(&self, slot: Slot) -> Option<&ExportChunk> {
        let list = match slot.role {
            Role::Source => &self.sources,
            Role::Pool => &self.pool,
        };
        list.get(slot.index - 1)
    }
}

/// Writes one JSON object per item.
///
/// # Errors
/// The writer's error.
pub fn write_jsonl(items: &[ExportItem], w: &mut dyn Write) -> std::io::Result<()> {
    for item in items {
        serde_json::to_writer(&mut *w, item)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// The CSV columns for `slots`: the item (with the refresh's change, when `slots` has it), then
/// per slot its chunk, then the decision fields.
#[must_use]
pub fn csv_header(slots: Slots) -> Vec<String> {
    let mut header: Vec<String> = ["query_id", "type", "status", "reason"].map(String::from).into();
    if slots.refresh {
        header.extend(REFRESH_COLUMNS.map(String::from));
    }
    header.extend(["absent_term", "evidence", "query"].map(String::from));
    for slot in Slot::all(slots.sources, slots.pool) {
        let rank: &[&str] = if slot.role == Role::Pool { &["rank"] } else { &[] };
        let suffixes =
            [slot_field::ID].iter().chain(rank).chain(&["title", "text", "machine_grade", slot_field::GRADE]);
        header.extend(suffixes.map(|suffix| slot.field(suffix)));
    }
    header.extend(
        [field::DECISION, field::REJECT_REASON, field::EDITED_TEXT, field::ADD, field::REVIEWER]
            .map(String::from),
    );
    header
}

/// Writes one row per item under [`csv_header`]; decision and grade cells are empty.
///
/// # Errors
/// The writer's error.
pub fn write_csv(items: &[ExportItem], w: &mut dyn Write) -> std::io::Result<()> {
    let slots = slots(items);
    let mut csv = csv::Writer::from_writer(w);
    csv.write_record(csv_header(slots))?;
    for item in items {
        csv.write_record(csv_record(item, slots))?;
    }
    csv.flush()
}

fn csv_record(item: &ExportItem, slots: Slots) -> Vec<String> {
    let mut record = vec![
        item.query_id.to_string(),
        item.query_type.label().to_owned(),
        item.status.label().to_owned(),
        item.reason.label().to_owned(),
    ];
    if slots.refresh {
        let note = item.refresh.as_ref();
        record.push(note.map(|n| n.change.label().to_owned()).unwrap_or_default());
        record.push(note.map(|n| n.reason.clone()).unwrap_or_default());
        let old = note.map(|n| n.old_sources.iter().map(ChunkId::as_str).collect::<Vec<_>>().join(" "));
        record.push(old.unwrap_or_default());
    }
    record.extend([
        item.absent_term.clone().unwrap_or_default(),
        item.evidence.join(" | "),
        item.text.clone(),
    ]);
    for slot in Slot::all(slots.sources, slots.pool) {
        let chunk = item.chunk(slot);
        record.push(chunk.map(|c| c.chunk_id.to_string()).unwrap_or_default());
        if slot.role == Role::Pool {
            record.push(chunk.and_then(|c| c.rank).map(|r| r.to_string()).unwrap_or_default());
        }
        record.push(chunk.map(|c| c.title.clone()).unwrap_or_default());
        record.push(chunk.map(|c| c.text.clone()).unwrap_or_default());
        record.push(chunk.and_then(|c| c.machine_grade).map(|g| g.to_string()).unwrap_or_default());
        record.push(String::new());
    }
    record.extend(std::iter::repeat_n(String::new(), 5));
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_marked_in_both_styles() {
        let text = "Tokens expire after **90 days** by default. Use <b>scopes</b>.";
        let marks =
            marks(text, &["tokens expire after 90 days".into(), "by default".into(), "absent".into()]);
        assert_eq!(
            marked(text, &marks, "[[", "]]", str::to_owned),
            "[[Tokens expire after **90 days]]** [[by default]]. Use <b>scopes</b>."
        );
        assert_eq!(
            marked(text, &marks, "<mark>", "</mark>", html::escape),
            "<mark>Tokens expire after **90 days</mark>** <mark>by default</mark>. Use &lt;b&gt;scopes&lt;/b&gt;."
        );
        let overlapping = marks_of(text, &["expire after", "after **90"]);
        assert_eq!(overlapping, "Tokens [[expire after **90]] days** by default. Use <b>scopes</b>.");
    }

    #[test]
    fn a_csv_with_a_refreshed_item_has_the_refreshs_columns_after_the_reason() {
        let header = csv_header(Slots { sources: 0, pool: 0, refresh: true });
        assert_eq!(
            header[..10],
            [
                "query_id",
                "type",
                "status",
                "reason",
                "refresh_change",
                "refresh_reason",
                "refresh_old_sources",
                "absent_term",
                "evidence",
                "query"
            ]
        );
        assert_eq!(header[..4], csv_header(Slots { sources: 0, pool: 0, refresh: false })[..4]);
        assert_eq!(csv_header(Slots { sources: 0, pool: 0, refresh: false })[4], "absent_term");
    }

    fn marks_of(text: &str, quotes: &[&str]) -> String {
        let quotes: Vec<String> = quotes.iter().map(|q| (*q).to_owned()).collect();
        marked(text, &marks(text, &quotes), "[[", "]]", str::to_owned)
    }

    #[test]
    fn csv_header_names_every_slot_field() {
        let header = csv_header(Slots { sources: 1, pool: 1, refresh: false });
        assert_eq!(
            header[7..],
            [
                "source_1_id",
                "source_1_title",
                "source_1_text",
                "source_1_machine_grade",
                "source_1_grade",
                "pool_1_id",
                "pool_1_rank",
                "pool_1_title",
                "pool_1_text",
                "pool_1_machine_grade",
                "pool_1_grade",
                "decision",
                "reject_reason",
                "edited_text",
                "add",
                "reviewer"
            ]
        );
    }
}
