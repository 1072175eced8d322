//! Stage 7, output: writes the test set into the output folder, which is itself a BEIR dataset.
//!
//! Input: chunks (streamed), judged candidates, the review queue and the run's summary. Output:
//! files, written through [`crate::set`]'s staging and published together at the end, so a
//! failed run leaves the previous test set whole. Outputs are byte-identical for the same inputs
//! (what differs between runs lives only in `manifest.json`'s `run`).

mod beir;
mod folder;
mod manifest;
mod measures;
pub(crate) mod report;
mod report_html;
mod write;

pub use beir::{corpus_line, qrels, query_line, relevance, trec_rows, write_pool, write_qrels};
pub use folder::{Occupant, inspect, list};
pub use manifest::{CorpusSummary, Invocation, Manifest, Shortfall, TypeCounts, tool};
pub use measures::Measures;
pub use report::{Summary, render_report};
pub use report_html::render_report_html;
pub use write::{SetFiles, write_set};

pub use crate::set::layout;
pub use crate::set::publish::{
    AtomicFile, Keep, Staging, copy_atomic, recover, write_atomic, write_json, write_jsonl, write_text,
};
