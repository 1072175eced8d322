//! The file names the evaluation reads in a set folder and writes to its output folder, in one
//! place.

pub use crate::output::{PROVENANCE_TSV, QRELS_TREC, QRELS_TSV};
pub use crate::review::set::{CORPUS, QUERIES};
pub use crate::review::version::{MANIFEST, NO_ANSWER};

/// The set's tantivy index folder.
pub const INDEX_DIR: &str = "index";
/// Where `eval` writes by default, inside the set folder.
pub const EVAL_DIR: &str = "eval";
/// Everything `eval` found, machine-readable.
pub const EVAL_JSON: &str = "eval.json";
/// Every metric of every run on every query.
pub const PER_QUERY_TSV: &str = "per_query.tsv";
/// The page a person reads.
pub const EVAL_HTML: &str = "eval.html";
