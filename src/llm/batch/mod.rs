//! Batch inference: the calls a stage cannot answer from the cache are collected instead of
//! sent (`defer`), then handed to a batch engine in one file (`wire`: OpenAI's batch format):
//! the OpenAI Batch API (`submit`, through the Files and Batches endpoints), or any runner of
//! the same file format, such as vLLM's `run-batch` (`export`, then `import` of its output).
//! What was submitted is recorded in the cache's batch tables (`records`).
//!
//! Input: the request bodies the online path would send. Output: replies in the same SQLite
//! cache, under the same keys. Invariants: a line's `custom_id` is the call's cache key and its
//! `body` is byte for byte the body the online path sends, so online and batch calls mix
//! freely; a batch's lines are in the cache before it is created (under its input file's id,
//! then under the batch's own), so a killed run finds the same batch again, by its id or by
//! its input file. A create call is not retried after a failure that may have reached the
//! provider (a timeout, a cut connection: the batch may be made all the same): the run stops
//! and the next one looks the batch up by its input file; a lookup
//! that cannot tell stops the run rather than submit the lines again. A line that failed is a failure of its call (in `rejects.jsonl`), a line a batch
//! never ran (expired, cancelled) is submitted again.

mod defer;
mod import;
mod records;
mod submit;
#[cfg(test)]
mod tests;
mod wire;

pub(super) use defer::Deferral;
pub use import::Imported;
pub use records::{BatchRecord, Forgotten};

use super::LlmError;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// The endpoint every line calls.
pub const CHAT_URL: &str = "/v1/chat/completions";
/// The OpenAI Batch API's limit on requests per batch.
pub const MAX_REQUESTS: usize = 50_000;
/// The OpenAI Batch API's limit on the size of an input file (200 MB).
pub const MAX_BYTES: u64 = 200 * 1024 * 1024;
/// The Batch API's price relative to online calls.
pub const DEFAULT_DISCOUNT: f64 = 0.5;

/// What to do with the calls the cache cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum BatchMode {
    /// Upload them, create batches, poll them and import their results, then go on.
    Submit,
    /// Write them to a request file and stop (for `vllm run-batch` or any batch runner).
    Export {
        /// The request file.
        to: PathBuf,
    },
    /// Read a runner's output file into the cache first; what is still missing then is
    /// exported to `to` (if given) and the run stops.
    Import {
        /// The runner's output file.
        from: PathBuf,
        /// Where to write the calls still missing.
        to: Option<PathBuf>,
    },
}

/// How batches are made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchConfig {
    /// Submit, export or import.
    pub mode: BatchMode,
    /// Wait between polls of a submitted batch.
    #[serde(skip)]
    pub poll: Duration,
    /// Requests per batch at most (the provider's limit).
    pub max_requests: usize,
    /// Bytes per input file at most (the provider's limit).
    pub max_bytes: u64,
    /// `--stall-timeout`: a run's watchdog stops it once no call finished for this long, so
    /// a create call of a run this one cannot see lasts at most this (or as long as its
    /// attempts take, whichever is longer).
    #[serde(skip)]
    pub stall_after: Duration,
}

/// Why a stage cannot go on in batch mode (not a failure of any one call).
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The missing calls were written to a request file; the run stops until they are run.
    #[error(
        "{stage}: wrote {lines} request(s) to {}\nnext: run them (e.g. `vllm run-batch -i {} -o results.jsonl --model MODEL`), then continue with `--batch import results.jsonl` (add `--to FILE` to export what the next stage needs)",
        .path.display(), .path.display()
    )]
    Exported {
        /// The stage that needs them.
        stage: String,
        /// Lines written.
        lines: usize,
        /// The request file.
        path: PathBuf,
    },
    /// An import left calls missing and no `--to` says where to export them.
    #[error(
        "{stage}: {lines} call(s) are not answered by the imported file\nnext: export them with `--batch import FILE --to requests.jsonl` (or `--batch export --to requests.jsonl`) and run them"
    )]
    Missing {
        /// The stage that needs them.
        stage: String,
        /// Calls missing.
        lines: usize,
    },
    /// The provider refused a batch as a whole (its input file failed validation).
    #[error(
        "batch {id} failed: {message}\nhint: check --max-tokens and the model name; replies so far are cached"
    )]
    Refused {
        /// The batch id.
        id: String,
        /// The provider's errors.
        message: String,
    },
    /// A call to the Files or Batches endpoint failed for good.
    #[error("the batch endpoint failed: {}", .0.chain())]
    Endpoint(LlmError),
    /// The token or cost budget does not cover the batch.
    #[error("budget reached: {0}")]
    Budget(String),
    /// A request or result file cannot be read or written.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The cache cannot record the batch.
    #[error(transparent)]
    Cache(#[from] crate::llm::CacheError),
    /// The provider's list of batches cannot tell whether a batch was made of an input file.
    #[error(
        "cannot tell whether a batch was made of input file {file}: {message}\nnothing was submitted again (it may have been paid for already)\nnext: rerun when the provider's list of batches answers; if it never will (no list endpoint, the batch was deleted, another project's key), drop the record with `qrelgen batch forget {file} --set DIR` (and the build's --cache, if it used one): its requests are then submitted again"
    )]
    Lookup {
        /// The input file's id (the record's).
        file: String,
        /// Why the list does not tell.
        message: String,
    },
    /// A batch the cache records cannot be polled, or its results cannot be fetched.
    #[error(
        "batch {id}: {}\nits record is kept, so a rerun polls it again (nothing is submitted twice)\nnext: rerun when the provider answers; if it never will for this batch (deleted, or made with another project's key), drop the record with `qrelgen batch forget {id} --set DIR` (and the build's --cache, if it used one): its requests are then submitted again",
        .error.chain()
    )]
    Poll {
        /// The batch id.
        id: String,
        /// How the call failed.
        error: LlmError,
    },
    /// A create call failed in a way that may have reached the provider (no answer in time, a
    /// cut connection): the batch may or may not have been made.
    #[error(
        "{stage}: the call creating a batch of input file {file} got no definite answer ({}); the provider may have made it\nnext: rerun the same command: it looks the batch up by its input file before it submits anything (raise --timeout if the call timed out)",
        .error.chain()
    )]
    CreateUnanswered {
        /// The stage whose batch it is.
        stage: String,
        /// The input file's id (the record's).
        file: String,
        /// How the call failed.
        error: LlmError,
    },
}
