//! A decisions row as written: the fields every format (JSONL, CSV, Label Studio) is first read
//! into, before one function checks them for form ([`super::decisions`]).

use super::{Location, field};

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
    /// The query text the row shows, if the format has one.
    pub shown_text: Option<String>,
    /// The Label Studio user id of an annotator known only by number.
    pub user: Option<u64>,
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
            shown_text: None,
            user: None,
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

/// `bytes` without a leading UTF-8 byte order mark (spreadsheets and some editors write one).
pub(crate) fn without_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes)
}
