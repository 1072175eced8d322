//! The file names the evaluation reads in a set folder and writes to its output folder (all
//! defined in [`crate::output::layout`]).

pub use crate::output::layout::{
    CORPUS, EVAL_DIR, EVAL_HTML, EVAL_JSON, INDEX_DIR, MANIFEST, NO_ANSWER, PER_QUERY_TSV, PROVENANCE_TSV,
    QRELS_TREC, QRELS_TSV, QUERIES,
};
