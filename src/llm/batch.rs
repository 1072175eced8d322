//! Batch inference: the calls a stage cannot answer from the cache are collected instead of
//! sent, then handed to a batch engine in one file: the OpenAI Batch API (`submit`, through
//! the Files and Batches endpoints), or any runner of the same file format, such as vLLM's
//! `run-batch` (`export`, then `import` of its output).
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

use super::creator::{Liveness, Process};
use super::{Cache, CachedReply, Effect, Llm, LlmError};
use async_openai::types::InputSource;
use async_openai::types::files::{CreateFileRequest, FileInput, FilePurpose};
use rusqlite::{OptionalExtension as _, params};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
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
    Cache(#[from] super::CacheError),
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

/// One line of a request file: OpenAI's batch input format.
fn request_line(key: &str, body: &str) -> String {
    let id = serde_json::Value::String(key.to_owned());
    format!(r#"{{"custom_id":{id},"method":"POST","url":"{CHAT_URL}","body":{body}}}"#)
}

/// A call waiting for a batch.
#[derive(Debug, Clone)]
struct Pending {
    /// The request file line.
    line: String,
    /// Worst case of its tokens: prompt estimate + `max_tokens`.
    tokens: u32,
}

/// The batch state of a client: what waits, what failed, what was counted.
#[derive(Debug)]
pub(super) struct Deferral {
    pub(super) config: BatchConfig,
    pending: Mutex<BTreeMap<String, Pending>>,
    /// Calls whose line failed in a batch this run: they fail again, unsent.
    failed: Mutex<HashMap<String, LlmError>>,
    /// Keys already counted in the usage of this stage (a stage reruns its unfinished items).
    counted: Mutex<HashSet<String>>,
    /// Times each key was submitted this run.
    submitted: Mutex<HashMap<String, u32>>,
    /// Input files this run recorded a batch under before its create call.
    own_files: Mutex<HashSet<String>>,
    /// Records of other runs this run waits for (told once each).
    waiting_for: Mutex<HashSet<String>>,
    /// Records whose creator this run saw gone, and when it first did.
    gone_since: Mutex<HashMap<String, std::time::Instant>>,
    /// This process, as the records it makes name it (where `/proc` tells).
    me: Option<Process>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Deferral {
    pub(super) fn new(config: BatchConfig) -> Self {
        Self {
            config,
            pending: Mutex::default(),
            failed: Mutex::default(),
            counted: Mutex::default(),
            submitted: Mutex::default(),
            own_files: Mutex::default(),
            waiting_for: Mutex::default(),
            gone_since: Mutex::default(),
            me: Process::current(),
        }
    }

    /// Collects a call for the next batch, or fails it again if its line already failed.
    pub(super) fn defer(&self, key: &str, body: &str, tokens: u32) -> LlmError {
        if let Some(error) = lock(&self.failed).get(key) {
            return error.clone();
        }
        lock(&self.pending)
            .entry(key.to_owned())
            .or_insert_with(|| Pending { line: request_line(key, body), tokens });
        LlmError::Deferred
    }

    /// Whether this stage has not counted the reply under `key` yet (and now has).
    pub(super) fn first_use(&self, key: &str) -> bool {
        lock(&self.counted).insert(key.to_owned())
    }

    pub(super) fn begin_stage(&self) {
        lock(&self.counted).clear();
    }

    fn fail(&self, key: &str, error: LlmError) {
        lock(&self.failed).insert(key.to_owned(), error);
    }

    fn take_pending(&self) -> BTreeMap<String, Pending> {
        std::mem::take(&mut *lock(&self.pending))
    }
}

/// A result line of a batch output or error file (OpenAI's format, which vLLM writes too).
#[derive(Debug, Deserialize)]
struct OutputLine {
    custom_id: String,
    #[serde(default)]
    response: Option<OutputResponse>,
    #[serde(default)]
    error: Option<OutputError>,
}

#[derive(Debug, Deserialize)]
struct OutputResponse {
    #[serde(default)]
    status_code: u16,
    #[serde(default)]
    body: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct OutputError {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// What a result line says about its call.
#[derive(Debug, Clone)]
enum Outcome {
    /// A reply, to cache.
    Reply(CachedReply),
    /// The call failed for good.
    Failed(LlmError),
    /// The batch never ran it (expired, cancelled): submit it again.
    NotRun,
}

/// Reads one result line.
fn outcome(line: &OutputLine) -> Outcome {
    if let Some(error) = &line.error {
        let code = error.code.as_deref().unwrap_or("");
        if matches!(code, "batch_expired" | "batch_cancelled") {
            return Outcome::NotRun;
        }
        let message = error.message.clone().unwrap_or_else(|| code.to_owned());
        return Outcome::Failed(LlmError::Body(format!("batch line failed: {message}")));
    }
    let Some(response) = &line.response else { return Outcome::NotRun };
    if response.status_code != 200 {
        let message = response
            .body
            .pointer("/error/message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("(no message)")
            .to_owned();
        return Outcome::Failed(LlmError::Http { status: response.status_code, message, retry_after: None });
    }
    match super::reply_of(response.body.clone()) {
        Ok(reply) => Outcome::Reply(reply),
        Err(error) => Outcome::Failed(error),
    }
}

/// What an imported file held.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// Replies stored in the cache.
    pub replies: usize,
    /// Lines that failed (their calls fail).
    pub failed: usize,
    /// Lines never run (their calls are submitted again).
    pub not_run: usize,
    /// Lines that are not results (skipped).
    pub unreadable: usize,
    /// Lines whose `custom_id` is not a request's (not one the cache exported or submitted,
    /// or, in a cache that recorded no export, not a cache key's shape): rejected.
    pub unknown: usize,
    /// Lines for a call that already has a reply (an earlier line, or the cache): the first
    /// reply stands, these are dropped.
    pub duplicates: usize,
}

/// Whether `id` can be a request's `custom_id`: a cache key, 64 lowercase hex digits.
fn is_request_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A submitted batch as the cache records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchRecord {
    /// The provider's batch id (or `file:` and the name of an imported file).
    pub id: String,
    /// The stage whose calls it holds.
    pub stage: String,
    /// Its status at the last poll.
    pub status: String,
    /// Lines.
    pub total: u64,
    /// Lines done, at the last poll.
    pub completed: u64,
    /// Lines failed, at the last poll.
    pub failed: u64,
    /// Its results are in the cache.
    pub imported: bool,
    /// Unix time of submission.
    pub created: u64,
}

/// A batch record forgotten by [`Cache::forget_record`], and what became of its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forgotten {
    /// The record as it was.
    pub record: BatchRecord,
    /// Its lines whose replies are in the cache: they stay, and a rerun uses them unpaid.
    pub cached: u64,
    /// Its lines without a reply: the next run submits them again.
    pub missing: u64,
}

/// The lenient parts of a batch object we read.
#[derive(Debug, Clone, Deserialize)]
struct BatchObject {
    id: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    input_file_id: Option<String>,
    /// Unix time, when the server says (null, missing or a float are read too).
    #[serde(default, deserialize_with = "lenient_time")]
    created_at: Option<u64>,
    #[serde(default)]
    output_file_id: Option<String>,
    #[serde(default)]
    error_file_id: Option<String>,
    #[serde(default)]
    request_counts: Option<Counts>,
    #[serde(default)]
    errors: Option<serde_json::Value>,
}

/// A Unix time as providers write it: an integer, a float, or null.
fn lenient_time<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.and_then(|v| {
        v.as_u64().or_else(|| {
            v.as_f64().filter(|t| t.is_finite() && *t >= 0.0).map(|t| {
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "finite and not negative"
                )]
                let seconds = t as u64;
                seconds
            })
        })
    }))
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct Counts {
    #[serde(default)]
    total: u64,
    #[serde(default)]
    completed: u64,
    #[serde(default)]
    failed: u64,
}

#[derive(Debug, Deserialize)]
struct FileObject {
    id: String,
}

/// A page of the list of batches (newest first).
#[derive(Debug, Deserialize)]
struct BatchPage {
    data: Vec<BatchObject>,
    #[serde(default)]
    has_more: bool,
    #[serde(default)]
    last_id: Option<String>,
}

/// The status of a batch recorded under its input file's id before the create call: if the
/// run stops before the answer is recorded, the next run looks the batch up by its file.
const CREATING: &str = "creating";

/// How far before its record a batch's creation may be dated (clock skew between us and the
/// provider): a lookup stops at batches older than that.
const LOOKUP_SLACK_SECS: u64 = 86_400;

/// Batches asked for per page of the list, in a lookup.
const PAGE_SIZE: usize = 100;

/// Pages of the list read at most in a lookup before it gives up (inconclusive).
const MAX_PAGES: usize = 50;

/// What [`Llm::resolve`] made of an open batch record.
#[derive(Debug)]
enum Resolved {
    /// Poll and import this batch.
    Batch(String),
    /// No batch was made: the record is gone, its lines go in a new batch.
    Forgotten,
    /// Another run may still be creating it: look again after a poll interval.
    Waiting,
}

/// A batch not imported yet, as the cache holds it.
#[derive(Debug)]
struct OpenBatch {
    /// The batch id, or the input file's id while the batch is being created.
    id: String,
    /// The create call may or may not have gone through: `id` is the input file's.
    creating: bool,
    /// Unix time of the record.
    created: u64,
    /// The process that made the record, if it says.
    creator: Option<Process>,
}

impl BatchObject {
    fn terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "expired" | "cancelled" | "failed")
    }
}

impl Cache {
    /// Records a batch and its lines, in one transaction, with `status` and the process that
    /// made the record (`creator`): under its input file's id and [`CREATING`] before the
    /// create call, so no batch exists that the cache does not know of.
    fn record_batch(
        &self,
        id: &str,
        stage: &str,
        status: &str,
        keys: &[&String],
        creator: Option<&Process>,
    ) -> Result<(), super::CacheError> {
        let created = unix_now();
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            tx.execute(
                "INSERT OR REPLACE INTO batches (id, stage, status, total, created, creator) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    id,
                    stage,
                    status,
                    i64::try_from(keys.len()).unwrap_or(i64::MAX),
                    i64::try_from(created).unwrap_or(0),
                    creator.map(Process::to_text)
                ],
            )?;
            for key in keys {
                tx.execute(
                    "INSERT OR IGNORE INTO batch_lines (batch, key) VALUES (?1, ?2)",
                    params![id, key],
                )?;
            }
            tx.commit()
        })
    }

    /// Records the calls whose request lines were written to the request file `file`: an
    /// import takes replies for these (and for submitted batches' lines) only.
    fn record_exported(&self, keys: &[&String], file: &Path) -> Result<(), super::CacheError> {
        let file = file.display().to_string();
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            for key in keys {
                tx.execute(
                    "INSERT OR REPLACE INTO exported (key, file) VALUES (?1, ?2)",
                    params![key, file],
                )?;
            }
            tx.commit()
        })
    }

    /// Whether the cache records any call as exported (a cache an earlier qrelgen made records
    /// none: its imports are checked by the ids' shape only).
    fn any_exported(&self) -> Result<bool, super::CacheError> {
        self.with(|c| c.query_row("SELECT EXISTS (SELECT 1 FROM exported)", [], |row| row.get(0)))
    }

    /// Whether `key` is a call this cache asked for: exported to a request file or sent in a batch.
    fn asked_for(&self, key: &str) -> Result<bool, super::CacheError> {
        self.with(|c| {
            c.query_row(
                "SELECT EXISTS (SELECT 1 FROM exported WHERE key = ?1) \
                 OR EXISTS (SELECT 1 FROM batch_lines WHERE key = ?1)",
                params![key],
                |row| row.get(0),
            )
        })
    }

    fn update_batch(&self, batch: &BatchObject, imported: bool) -> Result<(), super::CacheError> {
        let counts = batch.request_counts.unwrap_or_default();
        self.with(|c| {
            c.execute(
                "UPDATE batches SET status = ?2, completed = ?3, failed = ?4, imported = ?5 WHERE id = ?1",
                params![
                    batch.id,
                    batch.status,
                    i64::try_from(counts.completed).unwrap_or(i64::MAX),
                    i64::try_from(counts.failed).unwrap_or(i64::MAX),
                    i64::from(imported)
                ],
            )
            .map(drop)
        })
    }

    /// The batch recorded under its input file `file` (being created) is `id`: its record
    /// and lines move to that id, in one transaction. Whether there was a record to move
    /// (another run sharing the cache may have moved it first).
    fn adopt_batch(&self, file: &str, id: &str) -> Result<bool, super::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            let moved = tx.execute(
                "UPDATE OR REPLACE batches SET id = ?2, status = 'validating' WHERE id = ?1",
                params![file, id],
            )?;
            tx.execute("UPDATE OR REPLACE batch_lines SET batch = ?2 WHERE batch = ?1", params![file, id])?;
            tx.commit()?;
            Ok(moved > 0)
        })
    }

    /// Forgets the record of a batch being created under input file `file`, if it is still
    /// [`CREATING`] (its lines are submitted again), in one transaction.
    fn forget_batch(&self, file: &str) -> Result<(), super::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            let gone =
                tx.execute("DELETE FROM batches WHERE id = ?1 AND status = ?2", params![file, CREATING])?;
            if gone > 0 {
                tx.execute("DELETE FROM batch_lines WHERE batch = ?1", params![file])?;
            }
            tx.commit()
        })
    }

    /// Batches not imported yet that hold any of `keys`, by id.
    fn open_batches(&self, keys: &[&String]) -> Result<Vec<OpenBatch>, super::CacheError> {
        let mut open = BTreeMap::new();
        self.with(|c| {
            let mut query = c.prepare(
                "SELECT b.id, b.status, b.created, b.creator FROM batch_lines l JOIN batches b ON b.id = l.batch \
                 WHERE l.key = ?1 AND b.imported = 0",
            )?;
            for key in keys {
                let rows = query.query_map(params![key], |r| {
                    Ok(OpenBatch {
                        id: r.get(0)?,
                        creating: r.get::<_, String>(1)? == CREATING,
                        created: r.get::<_, i64>(2)?.unsigned_abs(),
                        creator: Process::from_text(r.get::<_, Option<String>>(3)?.as_deref()),
                    })
                })?;
                for row in rows {
                    let row = row?;
                    open.entry(row.id.clone()).or_insert(row);
                }
            }
            Ok(())
        })?;
        Ok(open.into_values().collect())
    }

    /// Stores a reply that came through a batch, marked so its price is the batch price: both
    /// rows in one transaction (a crash between them must not leave a batch reply priced as
    /// an online one).
    fn put_batched(&self, key: &str, reply: &CachedReply, batch: &str) -> Result<(), super::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            super::cache::insert_reply(&tx, key, reply)?;
            tx.execute(
                "INSERT OR REPLACE INTO batch_replies (key, batch) VALUES (?1, ?2)",
                params![key, batch],
            )?;
            tx.commit()
        })
    }

    /// Forgets the record of batch `id` (a batch id, or the input file id of one being
    /// created) and its lines, in one transaction, so the next run submits its lines that have
    /// no reply again. The replies in the cache stay, whichever way they came. `None` if no
    /// batch `id` is recorded.
    ///
    /// # Errors
    /// [`super::CacheError`] when SQLite fails.
    pub fn forget_record(&self, id: &str) -> Result<Option<Forgotten>, super::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            let record = tx
                .query_row(
                    &format!("SELECT {RECORD_COLUMNS} FROM batches WHERE id = ?1"),
                    params![id],
                    record_of,
                )
                .optional()?;
            let Some(record) = record else { return Ok(None) };
            let (lines, cached) = tx.query_row(
                "SELECT COUNT(*), COUNT(r.key) FROM batch_lines l LEFT JOIN replies r ON r.key = l.key \
                 WHERE l.batch = ?1",
                params![id],
                |r| Ok((r.get::<_, i64>(0)?.unsigned_abs(), r.get::<_, i64>(1)?.unsigned_abs())),
            )?;
            tx.execute("DELETE FROM batch_lines WHERE batch = ?1", params![id])?;
            tx.execute("DELETE FROM batches WHERE id = ?1", params![id])?;
            tx.commit()?;
            Ok(Some(Forgotten { record, cached, missing: lines.saturating_sub(cached) }))
        })
    }

    /// Every batch recorded, oldest first.
    ///
    /// # Errors
    /// [`super::CacheError`] when SQLite fails.
    pub fn batches(&self) -> Result<Vec<BatchRecord>, super::CacheError> {
        self.with(|c| {
            let mut query =
                c.prepare(&format!("SELECT {RECORD_COLUMNS} FROM batches ORDER BY created, id"))?;
            let rows = query.query_map([], record_of)?;
            rows.collect()
        })
    }

    /// Replies in the cache that came through a batch.
    ///
    /// # Errors
    /// [`super::CacheError`] when SQLite fails.
    pub fn batched_replies(&self) -> Result<u64, super::CacheError> {
        self.with(|c| c.query_row("SELECT COUNT(*) FROM batch_replies", [], |r| r.get::<_, i64>(0)))
            .map(i64::unsigned_abs)
    }
}

/// The columns of `batches` that [`record_of`] reads, in its order.
const RECORD_COLUMNS: &str = "id, stage, status, total, completed, failed, imported, created";

fn record_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<BatchRecord> {
    Ok(BatchRecord {
        id: r.get(0)?,
        stage: r.get(1)?,
        status: r.get(2)?,
        total: r.get::<_, i64>(3)?.unsigned_abs(),
        completed: r.get::<_, i64>(4)?.unsigned_abs(),
        failed: r.get::<_, i64>(5)?.unsigned_abs(),
        imported: r.get::<_, i64>(6)? != 0,
        created: r.get::<_, i64>(7)?.unsigned_abs(),
    })
}

/// Splits `lines` into batches of at most `max_requests` lines and `max_bytes` bytes (a line
/// larger than `max_bytes` goes alone: the provider names it when it refuses the batch).
fn split<'l>(
    lines: &'l [(&'l String, &'l Pending)],
    max_requests: usize,
    max_bytes: u64,
) -> Vec<&'l [(&'l String, &'l Pending)]> {
    let mut parts = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, (_, pending)) in lines.iter().enumerate() {
        let size = pending.line.len() as u64 + 1;
        if i > start && (i - start >= max_requests.max(1) || bytes + size > max_bytes) {
            parts.push(&lines[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < lines.len() {
        parts.push(&lines[start..]);
    }
    parts
}

/// Seconds since the Unix epoch (0 if the clock is before it).
fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Leaves out of `pending` the calls `settled` says are answered or failed; stops at the first
/// error (a cache that cannot be read must not pass for one that lacks the reply: that call
/// would be submitted and paid for again).
fn settle(
    pending: &mut BTreeMap<String, Pending>,
    settled: impl Fn(&str) -> Result<bool, super::CacheError>,
) -> Result<(), BatchError> {
    let mut done = Vec::new();
    for key in pending.keys() {
        if settled(key)? {
            done.push(key.clone());
        }
    }
    for key in done {
        pending.remove(&key);
    }
    Ok(())
}

/// Writes `lines` as a JSONL file, atomically (a temporary file renamed into place).
fn write_lines<'l>(path: &Path, lines: impl Iterator<Item = &'l str>) -> Result<usize, BatchError> {
    let file_error = |e: std::io::Error| BatchError::File { path: path.to_owned(), message: e.to_string() };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(file_error)?;
    let mut count = 0;
    {
        use std::io::Write as _;
        let mut w = std::io::BufWriter::new(temp.as_file_mut());
        for line in lines {
            writeln!(w, "{line}").map_err(file_error)?;
            count += 1;
        }
        w.flush().map_err(file_error)?;
    }
    temp.as_file().sync_all().map_err(file_error)?;
    temp.persist(path).map_err(|e| file_error(e.error))?;
    Ok(count)
}

impl Llm {
    /// Starts a stage: its items may be run several times (once per batch), and each reply is
    /// counted in the usage once.
    pub fn begin_stage(&self) {
        if let Some(batch) = &self.batch {
            batch.begin_stage();
        }
    }

    /// This process, as the batch records it makes name it.
    fn me(&self) -> Option<&Process> {
        self.batch.as_ref().and_then(|b| b.me.as_ref())
    }

    /// Calls collected for the next batch.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.batch.as_ref().map_or(0, |b| lock(&b.pending).len())
    }

    /// Reads a runner's output file (OpenAI's batch output format, as vLLM's `run-batch`
    /// writes it) into the cache; failed lines fail their calls for this run.
    ///
    /// # Errors
    /// [`BatchError::File`] when the file cannot be read; [`BatchError::Cache`] when the cache
    /// cannot store it.
    pub fn import(&self, path: &Path) -> Result<Imported, BatchError> {
        let text = fs_err::read_to_string(path)
            .map_err(|e| BatchError::File { path: path.to_owned(), message: e.to_string() })?;
        let id = format!(
            "file:{}",
            path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        );
        let imported = self.import_lines(&text, &id)?;
        let keys: Vec<String> = Vec::new();
        self.cache.record_batch(&id, "import", "validating", &keys.iter().collect::<Vec<_>>(), self.me())?;
        let done = BatchObject {
            id,
            status: "imported".to_owned(),
            output_file_id: None,
            error_file_id: None,
            request_counts: Some(Counts {
                total: (imported.replies + imported.failed + imported.not_run) as u64,
                completed: imported.replies as u64,
                failed: imported.failed as u64,
            }),
            errors: None,
            input_file_id: None,
            created_at: None,
        };
        self.cache.update_batch(&done, true)?;
        Ok(imported)
    }

    /// Stores the replies of result lines under their `custom_id` and remembers the failures.
    fn import_lines(&self, text: &str, batch: &str) -> Result<Imported, BatchError> {
        let mut imported = Imported::default();
        let mut answered = std::collections::HashSet::new();
        let checked = self.cache.any_exported()?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Ok(line) = serde_json::from_str::<OutputLine>(line) else {
                imported.unreadable += 1;
                continue;
            };
            if !is_request_id(&line.custom_id) || (checked && !self.cache.asked_for(&line.custom_id)?) {
                imported.unknown += 1;
                continue;
            }
            // The first reply to a call stands: a later line never replaces a paid reply.
            if answered.contains(&line.custom_id) || self.cache.get(&line.custom_id)?.is_some() {
                imported.duplicates += 1;
                continue;
            }
            match outcome(&line) {
                Outcome::Reply(reply) => {
                    answered.insert(line.custom_id.clone());
                    self.update(|t| {
                        t.network.paid.add(&reply);
                        t.network.batched += 1;
                    });
                    self.cache.put_batched(&line.custom_id, &reply, batch)?;
                    imported.replies += 1;
                }
                Outcome::Failed(error) => {
                    if let Some(deferral) = &self.batch {
                        deferral.fail(&line.custom_id, error);
                    }
                    imported.failed += 1;
                }
                Outcome::NotRun => imported.not_run += 1,
            }
        }
        Ok(imported)
    }

    /// Hands the calls collected so far to the batch engine and returns once each is in the
    /// cache or failed (`submit`), or writes them to the request file and stops (`export`).
    /// `note` hears of progress.
    ///
    /// # Errors
    /// [`BatchError::Exported`] and [`BatchError::Missing`] stop the run on purpose; the others
    /// when a batch cannot be made or read.
    pub async fn flush(&self, stage: &str, note: &(dyn Fn(String) + Sync)) -> Result<(), BatchError> {
        let Some(deferral) = &self.batch else { return Ok(()) };
        let pending = deferral.take_pending();
        if pending.is_empty() {
            return Ok(());
        }
        match &deferral.config.mode {
            BatchMode::Export { to } | BatchMode::Import { to: Some(to), .. } => {
                self.cache.record_exported(&pending.keys().collect::<Vec<_>>(), to)?;
                let lines = write_lines(to, pending.values().map(|p| p.line.as_str()))?;
                Err(BatchError::Exported { stage: stage.to_owned(), lines, path: to.clone() })
            }
            BatchMode::Import { to: None, .. } => {
                Err(BatchError::Missing { stage: stage.to_owned(), lines: pending.len() })
            }
            BatchMode::Submit => self.submit_all(stage, pending, note).await,
        }
    }

    /// Polls the batches a killed run left holding these calls, then submits what is still
    /// missing, in batches within the provider's limits, until every call is answered or failed.
    async fn submit_all(
        &self,
        stage: &str,
        mut pending: BTreeMap<String, Pending>,
        note: &(dyn Fn(String) + Sync),
    ) -> Result<(), BatchError> {
        let Some(deferral) = &self.batch else { return Ok(()) };
        let attempts = self.config.retry.max_attempts.max(1);
        loop {
            let keys: Vec<&String> = pending.keys().collect();
            let mut waiting = false;
            for open in self.cache.open_batches(&keys)? {
                match self.resolve(open, stage, note).await? {
                    Resolved::Batch(id) => {
                        note(format!("{stage}: resuming batch {id}"));
                        self.wait_and_import(&id, note).await?;
                    }
                    Resolved::Forgotten => {}
                    Resolved::Waiting => waiting = true,
                }
            }
            if waiting {
                tokio::time::sleep(deferral.config.poll).await;
                continue;
            }
            settle(&mut pending, |key| {
                Ok(self.cache.contains(key)? || lock(&deferral.failed).contains_key(key))
            })?;
            if pending.is_empty() {
                return Ok(());
            }
            for key in pending.keys() {
                let mut submitted = lock(&deferral.submitted);
                let times = submitted.entry(key.clone()).or_insert(0);
                if *times >= attempts {
                    deferral.fail(
                        key,
                        LlmError::Body(format!("not run by {attempts} batch(es) (expired or cancelled)")),
                    );
                }
                *times += 1;
            }
            pending.retain(|key, _| !lock(&deferral.failed).contains_key(key));
            if pending.is_empty() {
                return Ok(());
            }
            self.reserve_batch(pending.values().map(|p| u64::from(p.tokens)).sum())?;
            let lines: Vec<(&String, &Pending)> = pending.iter().collect();
            let parts = split(&lines, deferral.config.max_requests, deferral.config.max_bytes);
            let mut ids = Vec::new();
            for (n, part) in parts.iter().enumerate() {
                let id = self.create(stage, part).await?;
                note(format!(
                    "{stage}: submitted batch {id} ({} of {}, {} requests)",
                    n + 1,
                    parts.len(),
                    part.len()
                ));
                ids.push(id);
            }
            for id in ids {
                self.wait_and_import(&id, note).await?;
            }
        }
    }

    /// What to do with a batch an earlier run (or another run sharing the cache) left open:
    /// poll it by its id; for one being created, the batch made from its input file, if the
    /// create call went through. If none is listed, its record is forgotten and its lines are
    /// submitted again (nothing was paid for them) once no create call of it can still reach
    /// the provider:
    /// - a record this run made: at once (its create call is over);
    /// - its creator runs (on this machine): never, whatever the record's age (a create call
    ///   kept waiting by 429s uses no attempt, so only the creator's watchdog ends it);
    /// - its creator is gone (on this machine): one `--timeout` after this run first saw it
    ///   gone (never earlier than that after the record was made, since it was seen gone after
    ///   that): a run killed during its create call may have sent the request, which the
    ///   provider may not list yet;
    /// - its creator is unknown (another machine, no `/proc`): once the record is older than
    ///   the longest its create call can take ([`RetryPolicy::longest_call`]) or the stall
    ///   limit (`--stall-timeout`), whichever is longer.
    ///
    /// [`RetryPolicy::longest_call`]: super::RetryPolicy::longest_call
    async fn resolve(
        &self,
        open: OpenBatch,
        stage: &str,
        note: &(dyn Fn(String) + Sync),
    ) -> Result<Resolved, BatchError> {
        if !open.creating {
            return Ok(Resolved::Batch(open.id));
        }
        let Some(deferral) = &self.batch else { return Ok(Resolved::Forgotten) };
        let first_look = !lock(&deferral.waiting_for).contains(&open.id);
        if first_look {
            note(format!(
                "{stage}: the last run stopped while creating a batch of {} (or another run sharing this cache \
                 is creating it); looking it up",
                open.id
            ));
        }
        if let Some(batch) = self.find_batch(&open.id, open.created).await? {
            self.cache.adopt_batch(&open.id, &batch.id)?;
            lock(&deferral.gone_since).remove(&open.id);
            return Ok(Resolved::Batch(batch.id));
        }
        let age = unix_now().saturating_sub(open.created);
        let own = lock(&deferral.own_files).contains(&open.id);
        let liveness = open.creator.as_ref().map_or(Liveness::Unknown, Process::liveness);
        let pid = open.creator.as_ref().map_or(0, Process::pid);
        let file = &open.id;
        let wait = match liveness {
            _ if own => None,
            Liveness::Alive => Some(format!(
                "{stage}: no batch of {file} is listed yet, and the run that recorded it {age} s ago (pid {pid} \
                 on this machine) still runs: waiting for its create call"
            )),
            Liveness::Gone => {
                let since =
                    *lock(&deferral.gone_since).entry(file.clone()).or_insert_with(std::time::Instant::now);
                let left = self.config.timeout.saturating_sub(since.elapsed());
                (!left.is_zero()).then(|| {
                    format!(
                        "{stage}: the run that recorded {file} {age} s ago (pid {pid} on this machine) is gone, \
                         but its create call may have reached the provider: looking for its batch for {} s more \
                         before its requests are submitted again",
                        left.as_secs_f64().ceil()
                    )
                })
            }
            Liveness::Unknown => {
                let longest = self.config.retry.longest_call(self.config.timeout);
                let window = longest.max(deferral.config.stall_after).as_secs();
                (age < window).then(|| {
                    format!(
                        "{stage}: no batch of {file} is listed yet, and the run that recorded it {age} s ago may \
                         still be creating it (another run sharing this cache): waiting up to {} s for it before \
                         its requests are submitted again (if no other run uses this cache, stop and drop the \
                         record with `qrelgen batch forget {file} --set DIR`)",
                        window - age
                    )
                })
            }
        };
        if let Some(message) = wait {
            if lock(&deferral.waiting_for).insert(file.clone()) {
                note(message);
            }
            return Ok(Resolved::Waiting);
        }
        lock(&deferral.gone_since).remove(file);
        note(format!("{stage}: no batch was made of {file}; its requests are submitted again"));
        self.cache.forget_batch(file)?;
        Ok(Resolved::Forgotten)
    }

    /// The batch whose input file is `file`, from the provider's list of batches (newest first,
    /// down to those made a day before `since`, a Unix time). A list that cannot say (a batch
    /// listed without its input file, a page that does not move on, too many pages, an
    /// endpoint error) is a [`BatchError::Lookup`], never a "not made".
    async fn find_batch(&self, file: &str, since: u64) -> Result<Option<BatchObject>, BatchError> {
        use async_openai::traits::RequestOptionsBuilder as _;
        let inconclusive = |message: String| BatchError::Lookup { file: file.to_owned(), message };
        let (mut after, mut listed): (Option<String>, usize) = (None, 0);
        for _ in 0..MAX_PAGES {
            let mut query = vec![("limit", PAGE_SIZE.to_string())];
            query.extend(after.clone().map(|id| ("after", id)));
            let page: BatchPage = self
                .retrying(Effect::Repeatable, || async {
                    self.client.batches().query(&query)?.list_byot().await
                })
                .await
                .map_err(|e| match e {
                    BatchError::Endpoint(e) => inconclusive(format!("listing batches: {}", e.chain())),
                    other => other,
                })?;
            self.update(|t| t.network.requests += 1);
            listed += page.data.len();
            for batch in &page.data {
                match batch.input_file_id.as_deref() {
                    Some(input) if input == file => return Ok(Some(batch.clone())),
                    Some(_) => {}
                    None => {
                        return Err(inconclusive(format!(
                            "batch {} is listed without its input_file_id",
                            batch.id
                        )));
                    }
                }
            }
            let older = page
                .data
                .last()
                .and_then(|b| b.created_at)
                .is_some_and(|t| t > 0 && t + LOOKUP_SLACK_SECS < since);
            if !page.has_more || older {
                return Ok(None);
            }
            let next = page.last_id.or_else(|| page.data.last().map(|b| b.id.clone()));
            match next {
                None => {
                    return Err(inconclusive("a page says more follow but not after which batch".to_owned()));
                }
                Some(id) if after.as_ref() == Some(&id) => {
                    return Err(inconclusive(format!("the list does not move on past batch {id}")));
                }
                Some(id) => after = Some(id),
            }
        }
        Err(inconclusive(format!("it is not in the newest {listed} batches listed ({MAX_PAGES} pages)")))
    }

    /// Refuses a batch whose worst case would take the spend over the budget: its tokens at
    /// the batch price, what was spent before at the price it was paid (online at the full
    /// price, batch replies at the batch price).
    fn reserve_batch(&self, tokens: u64) -> Result<(), BatchError> {
        let (budget, discount) = (self.config.budget, self.config.batch_discount);
        self.update(|t| {
            t.reserve(budget, discount, tokens, super::Via::Batch)?;
            t.reserved = t.reserved.saturating_sub(tokens);
            Ok(())
        })
        .map_err(|e| match e {
            LlmError::Budget(message) => BatchError::Budget(message),
            other => BatchError::Endpoint(other),
        })
    }

    /// Uploads `lines` as an input file and creates a batch of them. The batch is recorded
    /// under the file's id before the create call and under its own id after it, so a run
    /// killed in between finds it again (see [`Llm::resolve`]). A create call that may have
    /// reached the provider without an answer (a timeout, a cut connection) is not made again
    /// ([`Effect::Once`]): the record stays and the run stops, so the next run looks it up.
    async fn create(&self, stage: &str, lines: &[(&String, &Pending)]) -> Result<String, BatchError> {
        let mut content = String::new();
        for (_, pending) in lines {
            content.push_str(&pending.line);
            content.push('\n');
        }
        // Shared by the attempts, not copied for each.
        let content = bytes::Bytes::from(content);
        let file: FileObject = self
            .uploading(|| {
                let request = CreateFileRequest {
                    file: FileInput {
                        source: InputSource::Bytes {
                            filename: "qrelgen-requests.jsonl".to_owned(),
                            bytes: content.clone(),
                        },
                    },
                    purpose: FilePurpose::Batch,
                    expires_after: None,
                };
                async move { self.client.files().create_byot(request).await }
            })
            .await?;
        let request = serde_json::json!({
            "input_file_id": file.id,
            "endpoint": CHAT_URL,
            "completion_window": "24h",
            "metadata": {"qrelgen_stage": stage},
        });
        self.update(|t| t.network.requests += 1);
        let keys: Vec<&String> = lines.iter().map(|(k, _)| *k).collect();
        self.cache.record_batch(&file.id, stage, CREATING, &keys, self.me())?;
        if let Some(deferral) = &self.batch {
            lock(&deferral.own_files).insert(file.id.clone());
        }
        let made = self
            .retrying(Effect::Once, || async {
                self.update(|t| t.network.requests += 1);
                self.client.batches().create_byot(request.clone()).await
            })
            .await;
        let batch: BatchObject = match made {
            Ok(batch) => batch,
            Err(BatchError::Endpoint(error)) if error.may_have_taken_effect() => {
                return Err(BatchError::CreateUnanswered { stage: stage.to_owned(), file: file.id, error });
            }
            Err(BatchError::Endpoint(error)) if refused(&error) => {
                self.cache.forget_batch(&file.id)?;
                return Err(BatchError::Endpoint(error));
            }
            Err(error) => return Err(error),
        };
        if !self.cache.adopt_batch(&file.id, &batch.id)? {
            // Another run sharing the cache moved (or dropped) the record: the batch must stay
            // known, so it is polled and imported.
            self.cache.record_batch(&batch.id, stage, "validating", &keys, self.me())?;
        }
        Ok(batch.id)
    }

    /// Polls a batch until it ends, then stores its results in the cache. A Files or Batches
    /// call that fails for good is a [`BatchError::Poll`] naming the batch.
    async fn wait_and_import(&self, id: &str, note: &(dyn Fn(String) + Sync)) -> Result<(), BatchError> {
        self.poll_and_import(id, note).await.map_err(|e| match e {
            BatchError::Endpoint(error) => BatchError::Poll { id: id.to_owned(), error },
            other => other,
        })
    }

    async fn poll_and_import(&self, id: &str, note: &(dyn Fn(String) + Sync)) -> Result<(), BatchError> {
        let poll = self.batch.as_ref().map_or(Duration::from_secs(60), |b| b.config.poll);
        let batch = loop {
            let batch: BatchObject = self
                .retrying(Effect::Repeatable, || async { self.client.batches().retrieve_byot(id).await })
                .await?;
            self.update(|t| t.network.requests += 1);
            let counts = batch.request_counts.unwrap_or_default();
            note(format!(
                "batch {id}: {} ({} of {} done, {} failed)",
                batch.status, counts.completed, counts.total, counts.failed
            ));
            self.cache.update_batch(&batch, false)?;
            if batch.terminal() {
                break batch;
            }
            tokio::time::sleep(poll).await;
        };
        let counts = batch.request_counts.unwrap_or_default();
        let not_run = counts.total.saturating_sub(counts.completed + counts.failed);
        if matches!(batch.status.as_str(), "expired" | "cancelled") && not_run > 0 {
            note(format!(
                "batch {id} was {} before it ran {not_run} of its {} requests: they are submitted again \
                 (its replies are kept; to stop, interrupt the run, a rerun resumes)",
                batch.status, counts.total
            ));
        }
        if batch.status == "failed" {
            self.cache.update_batch(&batch, true)?;
            let message = batch.errors.as_ref().map_or_else(|| "no reason given".to_owned(), describe_errors);
            return Err(BatchError::Refused { id: id.to_owned(), message });
        }
        for file in [&batch.output_file_id, &batch.error_file_id].into_iter().flatten() {
            let bytes = self
                .retrying(Effect::Repeatable, || async { self.client.files().content(file).await })
                .await?;
            self.update(|t| t.network.requests += 1);
            self.import_lines(&String::from_utf8_lossy(&bytes), id)?;
        }
        self.cache.update_batch(&batch, true)?;
        Ok(())
    }

    /// Runs a Files or Batches call of `effect`, within the timeout, retrying transient
    /// failures as every call is (see [`super::retry::Retry::run`]).
    async fn retrying<T, F, Fut>(&self, effect: Effect, call: F) -> Result<T, BatchError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, async_openai::error::OpenAIError>>,
    {
        self.retried(effect, || self.timed(call())).await
    }

    /// As [`Llm::retrying`], for an upload (which may be sent again): an attempt fails once its
    /// body sent nothing for the timeout, or no reply came a timeout after its last bytes,
    /// however long it takes while bytes go out (see [`super::upload`]).
    async fn uploading<T, F, Fut>(&self, call: F) -> Result<T, BatchError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, async_openai::error::OpenAIError>>,
    {
        self.retried(Effect::Repeatable, || self.timed_upload(call())).await
    }

    async fn retried<T, Fut>(&self, effect: Effect, attempt: impl FnMut() -> Fut) -> Result<T, BatchError>
    where
        Fut: Future<Output = Result<T, LlmError>>,
    {
        let retry = super::retry::Retry { policy: &self.config.retry, effect, stall: &self.stall };
        retry
            .run(attempt, |_| false, || self.update(|t| t.network.retries += 1))
            .await
            .map_err(BatchError::Endpoint)
    }
}

/// Whether a failed create call definitely made no batch: a 4xx other than a timeout, a
/// conflict or a rate limit.
fn refused(error: &LlmError) -> bool {
    matches!(error, LlmError::Http { status, .. } if (400..500).contains(status) && ![408, 409, 429].contains(status))
}

/// The provider's errors of a failed batch, one per line (`line 3: …`).
fn describe_errors(errors: &serde_json::Value) -> String {
    let data = errors.get("data").and_then(serde_json::Value::as_array).cloned().unwrap_or_default();
    let lines: Vec<String> = data
        .iter()
        .map(|e| {
            let message = e.get("message").and_then(serde_json::Value::as_str).unwrap_or("?");
            match e.get("line").and_then(serde_json::Value::as_u64) {
                Some(line) => format!("line {line}: {message}"),
                None => message.to_owned(),
            }
        })
        .collect();
    if lines.is_empty() { errors.to_string() } else { lines.join("; ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(line: &str) -> Pending {
        Pending { line: line.to_owned(), tokens: 1 }
    }

    #[test]
    fn a_batch_object_is_read_whatever_its_created_at() {
        let cases = [
            (r#","created_at":null"#, None),
            ("", None),
            (r#","created_at":1714000000.7"#, Some(1_714_000_000)),
            (r#","created_at":1714000000"#, Some(1_714_000_000)),
            (r#","created_at":"soon""#, None),
        ];
        for (field, expected) in cases {
            let text = format!(r#"{{"id":"batch_1","status":"completed","input_file_id":"file-1"{field}}}"#);
            let batch = serde_json::from_str::<BatchObject>(&text).map_err(|e| e.to_string());
            assert_eq!(batch.map(|b| (b.id, b.created_at)), Ok(("batch_1".to_owned(), expected)), "{text}");
        }
    }

    #[test]
    fn only_a_definite_refusal_of_a_create_call_forgets_its_record() {
        let http = |status| LlmError::Http { status, message: String::new(), retry_after: None };
        assert!(refused(&http(400)) && refused(&http(404)));
        assert!(!refused(&http(429)) && !refused(&http(408)) && !refused(&http(500)));
        assert!(!refused(&LlmError::Timeout(Duration::from_secs(1))));
    }

    #[test]
    fn a_request_line_is_openai_batch_input_with_the_body_verbatim() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi \"you\""}],"seed":42}"#;
        let line = request_line("abc123", body);
        let value: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(value["custom_id"], "abc123");
        assert_eq!(value["method"], "POST");
        assert_eq!(value["url"], "/v1/chat/completions");
        assert_eq!(value["body"]["messages"][0]["content"], "hi \"you\"");
        assert!(line.ends_with(&format!(",\"body\":{body}}}")), "{line}");
    }

    #[test]
    fn batches_split_at_the_request_and_byte_limits() {
        let keys: Vec<String> = (0..5).map(|i| i.to_string()).collect();
        let values: Vec<Pending> = (0..5).map(|_| pending("0123456789")).collect();
        let lines: Vec<(&String, &Pending)> = keys.iter().zip(&values).collect();
        let sizes = |parts: Vec<&[(&String, &Pending)]>| parts.iter().map(|p| p.len()).collect::<Vec<_>>();
        assert_eq!(sizes(split(&lines, 2, 1_000)), [2, 2, 1]);
        // 11 bytes a line with its newline: three fit in 33.
        assert_eq!(sizes(split(&lines, 100, 33)), [3, 2]);
        assert_eq!(sizes(split(&lines, 100, 5)), [1, 1, 1, 1, 1], "a line too large goes alone");
        assert_eq!(sizes(split(&lines, 0, 1_000)), [1, 1, 1, 1, 1]);
    }

    fn parse(line: &str) -> Outcome {
        outcome(&serde_json::from_str::<OutputLine>(line).unwrap())
    }

    #[test]
    fn result_lines_become_replies_failures_or_calls_to_send_again() {
        let ok = r#"{"id":"b1","custom_id":"k","response":{"status_code":200,"request_id":"r","body":
            {"choices":[{"message":{"content":"{\"grade\":2}"},"finish_reason":"stop"}],
             "usage":{"prompt_tokens":7,"completion_tokens":3}}},"error":null}"#
            .replace('\n', "");
        let Outcome::Reply(reply) = parse(&ok) else { panic!("{ok}") };
        assert_eq!(
            (reply.content.as_str(), reply.prompt_tokens, reply.completion_tokens),
            ("{\"grade\":2}", 7, 3)
        );
        let refused = r#"{"custom_id":"k","response":{"status_code":400,"body":{"error":{"message":"bad max_tokens"}}}}"#;
        assert!(
            matches!(parse(refused), Outcome::Failed(LlmError::Http { status: 400, message, .. }) if message == "bad max_tokens")
        );
        let expired = r#"{"custom_id":"k","response":null,"error":{"code":"batch_expired","message":"not run in time"}}"#;
        assert!(matches!(parse(expired), Outcome::NotRun));
        let cancelled = r#"{"custom_id":"k","error":{"code":"batch_cancelled","message":"x"}}"#;
        assert!(matches!(parse(cancelled), Outcome::NotRun));
        let broken = r#"{"custom_id":"k","error":{"code":"server_error","message":"boom"}}"#;
        assert!(matches!(parse(broken), Outcome::Failed(LlmError::Body(m)) if m.contains("boom")));
        let empty = r#"{"custom_id":"k","response":{"status_code":200,"body":{"choices":[]}}}"#;
        assert!(matches!(parse(empty), Outcome::Failed(LlmError::Body(_))));
    }

    /// A client in `--batch submit` mode against `server`, its cache in `dir`.
    fn submitting(server: &str, dir: &Path) -> Llm {
        submitting_with(server, dir, super::super::Budget::default())
    }

    /// As [`submitting`], with `budget`.
    fn submitting_with(server: &str, dir: &Path, budget: super::super::Budget) -> Llm {
        submitting_tuned(server, dir, |config| config.budget = budget)
    }

    /// As [`submitting`], its configuration changed by `tune`.
    fn submitting_tuned(server: &str, dir: &Path, tune: impl FnOnce(&mut super::super::LlmConfig)) -> Llm {
        let mut config = super::super::LlmConfig {
            endpoint: super::super::Endpoint {
                base_url: format!("{server}/v1"),
                model: "m".into(),
                api_key: None,
            },
            timeout: Duration::from_secs(5),
            limits: super::super::LimitConfig { concurrency: 1, rpm: None, tpm: None },
            retry: super::super::RetryPolicy::default(),
            temperature: 0.0,
            max_tokens: 16,
            seed: 1,
            budget: super::super::Budget::default(),
            batch: Some(BatchConfig {
                mode: BatchMode::Submit,
                poll: Duration::from_millis(10),
                max_requests: MAX_REQUESTS,
                max_bytes: MAX_BYTES,
                stall_after: Duration::ZERO,
            }),
            batch_discount: DEFAULT_DISCOUNT,
        };
        tune(&mut config);
        Llm::new(config, Cache::open(&dir.join("cache.sqlite")).unwrap()).unwrap()
    }

    /// Asks `server` for batch `batch_1` with 2 attempts of 300 ms each, after `first` answered
    /// the first `times` requests; what came back, the requests the server got, and the
    /// retries counted.
    async fn retrieve_after(
        first: wiremock::ResponseTemplate,
        times: u64,
    ) -> (Result<String, String>, usize, u64) {
        let server = wiremock::MockServer::start().await;
        let path = || wiremock::matchers::path("/v1/batches/batch_1");
        wiremock::Mock::given(path()).respond_with(first).up_to_n_times(times).mount(&server).await;
        let batch = serde_json::json!({"id": "batch_1", "status": "completed"});
        wiremock::Mock::given(path())
            .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(batch))
            .mount(&server)
            .await;
        let dir = tempfile::tempdir().unwrap();
        let llm = submitting_tuned(&server.uri(), dir.path(), |config| {
            config.timeout = Duration::from_millis(300);
            config.retry = super::super::RetryPolicy {
                max_attempts: 2,
                base: Duration::from_millis(10),
                max: Duration::from_millis(10),
            };
        });
        let got: Result<BatchObject, BatchError> = llm
            .retrying(Effect::Repeatable, || async { llm.client.batches().retrieve_byot("batch_1").await })
            .await;
        let sent = server.received_requests().await.unwrap_or_default().len();
        (got.map(|b| b.id).map_err(|e| e.to_string()), sent, llm.network().retries)
    }

    #[tokio::test]
    async fn a_files_or_batches_call_that_times_out_is_sent_again() {
        let late = wiremock::ResponseTemplate::new(200)
            .set_body_json(serde_json::json!({"id": "batch_1", "status": "completed"}))
            .set_delay(Duration::from_secs(3));
        assert_eq!(retrieve_after(late, 1).await, (Ok("batch_1".to_owned()), 2, 1));
    }

    #[tokio::test]
    async fn a_files_or_batches_call_answered_429_uses_no_attempt_as_a_chat_call() {
        let limited = wiremock::ResponseTemplate::new(429).insert_header("retry-after", "0");
        assert_eq!(retrieve_after(limited, 3).await, (Ok("batch_1".to_owned()), 4, 3));
        let broken = wiremock::ResponseTemplate::new(500);
        let (got, sent, _) = retrieve_after(broken, 3).await;
        assert!(got.is_err_and(|e| e.contains("HTTP 500")));
        assert_eq!(sent, 2, "a 500 uses an attempt");
    }

    #[test]
    fn a_batch_is_reserved_at_the_batch_price_beside_online_spend_at_the_full_price() {
        let dir = tempfile::tempdir().unwrap();
        let price = super::super::Price { prompt: 1.0, completion: 2.0 };
        let budget = |max_cost| super::super::Budget {
            max_cost: Some(max_cost),
            price: Some(price),
            max_tokens_total: Some(6_000_000_000),
        };
        // 1,000 prompt tokens spent online (1,000 per million) and a batch of 1,000 tokens at
        // the dearest price halved (1,000): 2,000 in all.
        let llm = submitting_with("http://127.0.0.1:9", dir.path(), budget(1.8e-3));
        llm.update(|t| t.used.prompt_tokens = 1_000);
        assert!(matches!(llm.reserve_batch(1_000), Err(BatchError::Budget(m)) if m.contains("0.0020")));
        let llm = submitting_with("http://127.0.0.1:9", dir.path(), budget(2.1e-3));
        llm.update(|t| t.used.prompt_tokens = 1_000);
        assert!(llm.reserve_batch(1_000).is_ok());
        assert_eq!(llm.update(|t| t.reserved), 0, "a check, not a reservation: nothing is in flight");
        let refused = llm.reserve_batch(7_000_000_000);
        assert!(
            matches!(&refused, Err(BatchError::Budget(m)) if m.contains("--max-tokens-total")),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn a_cache_that_cannot_be_read_stops_the_run_before_anything_is_submitted() {
        let server = wiremock::MockServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let llm = submitting(&server.uri(), dir.path());
        let asked = llm.complete(&[super::super::Message::new(super::super::Role::User, "hi")], None).await;
        assert!(matches!(asked, Err(LlmError::Deferred)), "{asked:?}");
        llm.cache.with(|c| c.execute_batch("DROP TABLE replies")).unwrap();
        let flushed = llm.flush("generate", &|_| {}).await;
        assert!(
            matches!(&flushed, Err(BatchError::Cache(e)) if e.to_string().contains("no such table: replies")),
            "{flushed:?}"
        );
        let sent = server.received_requests().await.unwrap_or_default();
        assert!(sent.is_empty(), "nothing uploaded or submitted: {sent:?}");
    }

    fn reply() -> CachedReply {
        CachedReply {
            content: "{}".into(),
            finish_reason: None,
            prompt_tokens: 1,
            completion_tokens: 2,
            abandoned: 0,
        }
    }

    #[test]
    fn forgetting_a_record_keeps_the_replies_its_batch_brought() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(&dir.path().join("cache.sqlite")).unwrap();
        let keys: Vec<String> = ["a", "b", "c"].map(String::from).into();
        let lines: Vec<&String> = keys.iter().collect();
        cache.record_batch("batch_1", "generate", "in_progress", &lines, None).unwrap();
        cache.put_batched("a", &reply(), "batch_1").unwrap();
        let forgotten = cache.forget_record("batch_1").unwrap();
        assert_eq!(
            forgotten.map(|f| (f.record.id, f.record.status, f.record.total, f.cached, f.missing)),
            Some(("batch_1".to_owned(), "in_progress".to_owned(), 3, 1, 2))
        );
        assert_eq!(
            cache.get("a").unwrap().map(|(_, via)| via),
            Some(super::super::Via::Batch),
            "the reply stays"
        );
        assert!(cache.batches().unwrap().is_empty());
        assert!(cache.open_batches(&lines).unwrap().is_empty(), "its lines no longer wait for it");
        assert_eq!(cache.forget_record("batch_1").unwrap(), None);
    }

    /// A list of `count` batches (`batch_{i}` of `file-{i}`, newest first) as OpenAI pages it
    /// (`after`, `has_more`, `last_id`), `per_page` at a time whatever the limit asked.
    struct Pages {
        count: usize,
        per_page: usize,
        /// `last_id` is written.
        last_id: bool,
        /// `after` is ignored: every page is the first.
        stuck: bool,
        asked: std::sync::atomic::AtomicUsize,
    }

    impl wiremock::Respond for Pages {
        fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let param =
                |name: &str| request.url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
            assert_eq!(param("limit").as_deref(), Some("100"));
            let after = param("after").filter(|_| !self.stuck);
            let start = after.map_or(0, |id| {
                id.trim_start_matches("batch_").parse::<usize>().map_or(self.count, |i| i + 1)
            });
            let ids: Vec<usize> = (start..self.count).take(self.per_page).collect();
            let data: Vec<serde_json::Value> = ids
                .iter()
                .map(|i| {
                    serde_json::json!({"id": format!("batch_{i}"), "status": "completed",
                    "input_file_id": format!("file-{i}"), "created_at": 0})
                })
                .collect();
            let mut page = serde_json::json!({"object": "list", "data": data, "has_more": start + ids.len() < self.count});
            if self.last_id {
                page["last_id"] = serde_json::json!(ids.last().map(|i| format!("batch_{i}")));
            }
            wiremock::ResponseTemplate::new(200).set_body_json(page)
        }
    }

    /// Looks up `file` in a list of `pages`; the answer and the pages asked for.
    async fn look_up(pages: Pages, file: &str) -> (Result<Option<String>, String>, usize) {
        let server = wiremock::MockServer::start().await;
        let pages = std::sync::Arc::new(pages);
        wiremock::Mock::given(wiremock::matchers::path("/v1/batches"))
            .respond_with(ArcResponder(std::sync::Arc::clone(&pages)))
            .mount(&server)
            .await;
        let dir = tempfile::tempdir().unwrap();
        let llm = submitting(&server.uri(), dir.path());
        let found = llm.find_batch(file, 0).await.map(|b| b.map(|b| b.id)).map_err(|e| e.to_string());
        (found, pages.asked.load(std::sync::atomic::Ordering::SeqCst))
    }

    struct ArcResponder(std::sync::Arc<Pages>);

    impl wiremock::Respond for ArcResponder {
        fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
            self.0.respond(request)
        }
    }

    fn pages(count: usize, last_id: bool, stuck: bool) -> Pages {
        Pages { count, per_page: 3, last_id, stuck, asked: std::sync::atomic::AtomicUsize::new(0) }
    }

    #[tokio::test]
    async fn a_lookup_pages_through_the_list_until_it_finds_the_batch_or_the_list_ends() {
        // Pages of 3: batch_7 is on the third.
        assert_eq!(look_up(pages(10, true, false), "file-7").await, (Ok(Some("batch_7".to_owned())), 3));
        // Without last_id, the page's last batch says where the next starts.
        assert_eq!(look_up(pages(10, false, false), "file-9").await, (Ok(Some("batch_9".to_owned())), 4));
        // Not in any of the 4 pages, the last without has_more: no batch was made.
        assert_eq!(look_up(pages(10, true, false), "file-x").await, (Ok(None), 4));
    }

    #[tokio::test]
    async fn a_lookup_that_cannot_finish_is_inconclusive_never_not_made() {
        let (found, asked) = look_up(pages(10, true, true), "file-7").await;
        let message = found.unwrap_err();
        assert!(message.contains("does not move on past batch batch_2"), "{message}");
        assert_eq!(asked, 2);
        let (found, asked) = look_up(pages(MAX_PAGES * 3 + 1, true, false), "file-x").await;
        let message = found.unwrap_err();
        assert!(
            message.contains(&format!("not in the newest {} batches listed", MAX_PAGES * 3)),
            "{message}"
        );
        assert!(message.contains("batch forget file-x"), "the way out is named: {message}");
        assert_eq!(asked, MAX_PAGES, "the page cap");
    }

    /// A server that answers a file upload and cuts the connection (RST) of every create call;
    /// its base URL and the create calls it got.
    async fn cutting_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let creates = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = std::sync::Arc::clone(&creates);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let seen = std::sync::Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut data = Vec::new();
                    let mut buf = vec![0; 65_536];
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        data.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&data).into_owned();
                        let Some(end) = text.find("\r\n\r\n") else { continue };
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().to_owned())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if data.len() < end + 4 + length {
                            continue;
                        }
                        if text.starts_with("POST /v1/batches") {
                            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            stream.set_zero_linger().unwrap();
                            return;
                        }
                        let body = r#"{"id":"file-1","object":"file","bytes":1,"created_at":0,"filename":"x","purpose":"batch"}"#;
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                        data.clear();
                    }
                });
            }
        });
        (url, creates)
    }

    #[tokio::test]
    async fn a_create_call_cut_off_is_not_made_again_and_its_record_is_kept() {
        let (url, creates) = cutting_server().await;
        let dir = tempfile::tempdir().unwrap();
        let llm = submitting(&url, dir.path());
        let key = "k".to_owned();
        let line = pending("{}");
        let made = llm.create("generate", &[(&key, &line)]).await;
        assert!(
            matches!(&made, Err(BatchError::CreateUnanswered { file, error: LlmError::Connect { .. }, .. }) if file == "file-1"),
            "{made:?}"
        );
        assert_eq!(creates.load(std::sync::atomic::Ordering::SeqCst), 1, "the create call was sent again");
        let records = llm.cache.batches().unwrap();
        let kept: Vec<(&str, &str)> = records.iter().map(|r| (r.id.as_str(), r.status.as_str())).collect();
        assert_eq!(kept, [("file-1", "creating")], "the next run looks the batch up by its file");
        let message = made.map_err(|e| e.to_string()).unwrap_err();
        assert!(message.contains("rerun the same command"), "{message}");
    }

    /// A server that reads each request's body `piece` bytes at a time, `every` apart, and
    /// none past its first `stop_after` bytes; it answers an upload with file `file-1` and a
    /// create call with batch `batch_1`. Its receive buffer is small, so the client sends only
    /// as fast as it reads. Its base URL.
    fn slow_reader(piece: usize, every: Duration, stop_after: usize) -> String {
        use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(64 * 1024).unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(16).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut reader = tokio::io::BufReader::new(stream);
                    let mut buf = vec![0; piece];
                    loop {
                        let (mut head, mut line) = (String::new(), String::new());
                        while line != "\r\n" {
                            line.clear();
                            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            head.push_str(&line.to_ascii_lowercase());
                        }
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        let mut read = 0;
                        while read < length {
                            if read >= stop_after {
                                std::future::pending::<()>().await;
                            }
                            let want = piece.min(length - read);
                            let Ok(n @ 1..) = reader.read(&mut buf[..want]).await else { return };
                            read += n;
                            tokio::time::sleep(every).await;
                        }
                        let body = if head.starts_with("post /v1/files") {
                            r#"{"id":"file-1","object":"file","bytes":1,"created_at":0,"filename":"x","purpose":"batch"}"#
                        } else {
                            r#"{"id":"batch_1","status":"validating"}"#
                        };
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if reader.get_mut().write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        url
    }

    /// Creates a batch of 16 MiB of lines against `server`, each attempt of the upload given
    /// `timeout`; what came of it, and how long it took.
    async fn create_large(server: &str, timeout: Duration) -> (Result<String, String>, Duration) {
        let dir = tempfile::tempdir().unwrap();
        let llm = submitting_tuned(server, dir.path(), |config| {
            config.timeout = timeout;
            config.retry =
                super::super::RetryPolicy { max_attempts: 1, ..super::super::RetryPolicy::default() };
        });
        let keys: Vec<String> = (0..256).map(|i| format!("k{i}")).collect();
        let line = pending(&"x".repeat(64 * 1024 - 1));
        let lines: Vec<(&String, &Pending)> = keys.iter().map(|k| (k, &line)).collect();
        let start = std::time::Instant::now();
        let made = llm.create("generate", &lines).await;
        (made.map_err(|e| e.to_string()), start.elapsed())
    }

    #[tokio::test]
    async fn an_upload_slower_than_the_timeout_that_keeps_sending_succeeds() {
        // 64 KiB every 10 ms: 16 MiB take some 2.6 s, more than twice the timeout.
        let server = slow_reader(64 * 1024, Duration::from_millis(10), usize::MAX);
        let (made, took) = create_large(&server, Duration::from_secs(1)).await;
        assert_eq!(made, Ok("batch_1".to_owned()));
        assert!(took > Duration::from_secs(2), "{took:?}");
    }

    #[tokio::test]
    async fn an_upload_that_stops_going_out_fails_saying_it_stalled() {
        let server = slow_reader(64 * 1024, Duration::ZERO, 2 * 1024 * 1024);
        let (made, took) = create_large(&server, Duration::from_secs(1)).await;
        let message = made.unwrap_err();
        assert!(message.contains("the upload stalled: no bytes went out for 1 s (--timeout)"), "{message}");
        let counts = message.split(" after ").nth(1).and_then(|rest| rest.strip_suffix(" bytes"));
        let counts: Vec<u64> =
            counts.unwrap_or_default().split(" of ").filter_map(|n| n.parse().ok()).collect();
        assert!(
            matches!(counts[..], [sent, total] if sent >= 2 << 20 && sent < total && total > 16 << 20),
            "{message}"
        );
        assert!(took < Duration::from_secs(4), "{took:?}");
    }

    /// A fresh client (its `--stall-timeout` `stall_after`) and a `creating` record made `age`
    /// seconds ago by `creator`, the provider listing no batch of its file.
    async fn a_record(
        creator: Option<Process>,
        age: u64,
        stall_after: Duration,
    ) -> (wiremock::MockServer, tempfile::TempDir, Llm) {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::path("/v1/batches"))
            .respond_with(
                wiremock::ResponseTemplate::new(200)
                    .set_body_json(serde_json::json!({"object": "list", "data": [], "has_more": false})),
            )
            .mount(&server)
            .await;
        let dir = tempfile::tempdir().unwrap();
        let llm = submitting_tuned(&server.uri(), dir.path(), |config| {
            if let Some(batch) = &mut config.batch {
                batch.stall_after = stall_after;
            }
        });
        let key = "k".to_owned();
        llm.cache.record_batch("file-1", "generate", CREATING, &[&key], creator.as_ref()).unwrap();
        let created = i64::try_from(unix_now() - age).unwrap();
        llm.cache.with(|c| c.execute("UPDATE batches SET created = ?1", params![created])).unwrap();
        (server, dir, llm)
    }

    /// What `llm` makes of its record now; and whether the record is kept.
    async fn resolve_again(llm: &Llm) -> (Resolved, bool) {
        let key = "k".to_owned();
        let mut open = llm.cache.open_batches(&[&key]).unwrap();
        assert_eq!(open.len(), 1);
        let resolved = llm.resolve(open.remove(0), "generate", &|_| {}).await.unwrap();
        (resolved, !llm.cache.batches().unwrap().is_empty())
    }

    /// What a run (with a fresh client) makes of a `creating` record made `age` seconds ago by
    /// `creator`, when the provider lists no batch of its file; and whether the record is kept.
    async fn resolve_record(creator: Option<Process>, age: u64) -> (Resolved, bool) {
        let (_server, _dir, llm) = a_record(creator, age, Duration::ZERO).await;
        resolve_again(&llm).await
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_record_of_a_process_that_is_gone_is_submitted_again_one_timeout_after_it_was_seen_gone() {
        let me = Process::current().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = me.with_pid(child.id());
        child.wait().unwrap();
        let (_server, _dir, llm) = a_record(Some(gone), 0, Duration::ZERO).await;
        let (resolved, kept) = resolve_again(&llm).await;
        assert!(
            matches!(resolved, Resolved::Waiting) && kept,
            "its request may not be listed yet: {resolved:?}"
        );
        let deferral = llm.batch.as_ref().unwrap();
        // Seen gone a little less than one --timeout (5 s) ago: still looked for.
        let back = |by: Duration| {
            let then = std::time::Instant::now().checked_sub(by).unwrap();
            lock(&deferral.gone_since).insert("file-1".to_owned(), then);
        };
        back(Duration::from_secs(4));
        let (resolved, kept) = resolve_again(&llm).await;
        assert!(matches!(resolved, Resolved::Waiting) && kept, "{resolved:?}");
        back(Duration::from_secs(5));
        let (resolved, kept) = resolve_again(&llm).await;
        assert!(matches!(resolved, Resolved::Forgotten) && !kept, "{resolved:?}");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_record_of_a_process_that_runs_is_waited_for_whatever_its_age() {
        let me = Process::current().unwrap();
        let (resolved, kept) = resolve_record(Some(me.clone()), 0).await;
        assert!(matches!(resolved, Resolved::Waiting) && kept, "a live run's record is waited for");
        let (resolved, kept) = resolve_record(Some(me), 86_400).await;
        assert!(
            matches!(resolved, Resolved::Waiting) && kept,
            "its create call kept getting 429s: {resolved:?}"
        );
    }

    #[tokio::test]
    async fn a_record_is_waited_for_as_long_as_its_create_call_can_take_backoffs_included() {
        // --timeout 5 s × 6 attempts = 30 s, and backoffs of 0.5 + 1 + 2 + 4 + 8 s at their longest.
        let (resolved, kept) = resolve_record(None, 44).await;
        assert!(matches!(resolved, Resolved::Waiting) && kept, "{resolved:?}");
        let (resolved, kept) = resolve_record(None, 46).await;
        assert!(matches!(resolved, Resolved::Forgotten) && !kept, "{resolved:?}");
    }

    #[tokio::test]
    async fn an_unknown_creators_record_is_waited_for_up_to_the_stall_limit_if_that_is_longer() {
        let stall = Duration::from_secs(100);
        let (_server, _dir, llm) = a_record(None, 99, stall).await;
        let (resolved, kept) = resolve_again(&llm).await;
        assert!(
            matches!(resolved, Resolved::Waiting) && kept,
            "its creator's watchdog may not have fired: {resolved:?}"
        );
        let (_server, _dir, llm) = a_record(None, 101, stall).await;
        let (resolved, kept) = resolve_again(&llm).await;
        assert!(matches!(resolved, Resolved::Forgotten) && !kept, "{resolved:?}");
    }

    #[test]
    fn a_batch_reply_is_stored_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(&dir.path().join("cache.sqlite")).unwrap();
        let reply = reply();
        // The second write fails: the first must not stay (a reply priced as an online one).
        cache.with(|c| c.execute_batch("DROP TABLE batch_replies")).unwrap();
        let stored = cache.put_batched("k", &reply, "batch_1");
        assert!(stored.is_err_and(|e| e.to_string().contains("no such table: batch_replies")));
        assert!(!cache.contains("k").unwrap(), "half a record was left");
    }

    #[test]
    fn a_reply_read_from_the_cache_says_whether_it_came_through_a_batch() {
        let dir = tempfile::tempdir().unwrap();
        let cache = super::super::Cache::open(&dir.path().join("cache.sqlite")).unwrap();
        let reply = reply();
        cache.put("online", &reply).unwrap();
        cache.put_batched("batched", &reply, "batch_1").unwrap();
        let via = |key: &str| cache.get(key).unwrap().map(|(_, via)| via);
        assert_eq!(via("online"), Some(super::super::Via::Online));
        assert_eq!(via("batched"), Some(super::super::Via::Batch));
        assert_eq!(via("missing"), None);
    }
}
