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
//! its input file. A create call is not retried after a timeout (the batch may be made all
//! the same): the run stops and the next one looks the batch up by its input file; a lookup
//! that cannot tell stops the run rather than submit the lines again. A line that failed is a failure of its call (in `rejects.jsonl`), a line a batch
//! never ran (expired, cancelled) is submitted again.

use super::{Cache, CachedReply, Llm, LlmError, classify};
use async_openai::types::InputSource;
use async_openai::types::files::{CreateFileRequest, FileInput, FilePurpose};
use rusqlite::params;
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
        "cannot tell whether a batch was made of input file {file}: {message}\nnothing was submitted again (it may have been paid for already); rerun when the provider's list of batches answers"
    )]
    Lookup {
        /// The input file's id (the record's).
        file: String,
        /// Why the list does not tell.
        message: String,
    },
    /// A create call got no answer in time: the batch may or may not have been made.
    #[error(
        "{stage}: the call creating a batch of input file {file} got no reply within {} s (--timeout); the provider may have made it\nnext: rerun the same command: it looks the batch up by its input file before it submits anything (raise --timeout if this repeats)",
        .after.as_secs()
    )]
    CreateTimedOut {
        /// The stage whose batch it is.
        stage: String,
        /// The input file's id (the record's).
        file: String,
        /// The timeout.
        after: Duration,
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

/// The batch tables, made by [`Cache::open`] once per connection: the batches submitted or
/// imported, the lines (cache keys) of each, and the replies that came through one (which
/// [`Cache::get`] reads with each reply, for the batch price).
pub(super) const TABLES: &str = "
    CREATE TABLE IF NOT EXISTS batches (
        id TEXT PRIMARY KEY, stage TEXT NOT NULL, status TEXT NOT NULL,
        total INTEGER NOT NULL DEFAULT 0, completed INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0, imported INTEGER NOT NULL DEFAULT 0,
        created INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE IF NOT EXISTS batch_lines (batch TEXT NOT NULL, key TEXT NOT NULL,
        PRIMARY KEY (batch, key));
    CREATE INDEX IF NOT EXISTS batch_lines_key ON batch_lines (key);
    CREATE TABLE IF NOT EXISTS batch_replies (key TEXT PRIMARY KEY, batch TEXT NOT NULL);";

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

/// A batch not imported yet, as the cache holds it.
#[derive(Debug)]
struct OpenBatch {
    /// The batch id, or the input file's id while the batch is being created.
    id: String,
    /// The create call may or may not have gone through: `id` is the input file's.
    creating: bool,
    /// Unix time of the record.
    created: u64,
}

impl BatchObject {
    fn terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "expired" | "cancelled" | "failed")
    }
}

impl Cache {
    /// Records a batch and its lines, in one transaction, with `status`: under its input
    /// file's id and [`CREATING`] before the create call, so no batch exists that the cache
    /// does not know of.
    fn record_batch(
        &self,
        id: &str,
        stage: &str,
        status: &str,
        keys: &[&String],
    ) -> Result<(), super::CacheError> {
        let created = unix_now();
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            tx.execute(
                "INSERT OR REPLACE INTO batches (id, stage, status, total, created) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    id,
                    stage,
                    status,
                    i64::try_from(keys.len()).unwrap_or(i64::MAX),
                    i64::try_from(created).unwrap_or(0)
                ],
            )?;
            for key in keys {
                tx.execute("INSERT OR IGNORE INTO batch_lines (batch, key) VALUES (?1, ?2)", params![id, key])?;
            }
            tx.commit()
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
    /// and lines move to that id, in one transaction.
    fn adopt_batch(&self, file: &str, id: &str) -> Result<(), super::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            tx.execute(
                "UPDATE OR REPLACE batches SET id = ?2, status = 'validating' WHERE id = ?1",
                params![file, id],
            )?;
            tx.execute("UPDATE OR REPLACE batch_lines SET batch = ?2 WHERE batch = ?1", params![file, id])?;
            tx.commit()
        })
    }

    /// Forgets a record of a batch that was never created (its lines are submitted again).
    fn forget_batch(&self, id: &str) -> Result<(), super::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            tx.execute("DELETE FROM batch_lines WHERE batch = ?1", params![id])?;
            tx.execute("DELETE FROM batches WHERE id = ?1", params![id])?;
            tx.commit()
        })
    }

    /// Batches not imported yet that hold any of `keys`, by id.
    fn open_batches(&self, keys: &[&String]) -> Result<Vec<OpenBatch>, super::CacheError> {
        let mut open = BTreeMap::new();
        self.with(|c| {
            let mut query = c.prepare(
                "SELECT b.id, b.status, b.created FROM batch_lines l JOIN batches b ON b.id = l.batch \
                 WHERE l.key = ?1 AND b.imported = 0",
            )?;
            for key in keys {
                let rows = query.query_map(params![key], |r| {
                    Ok(OpenBatch {
                        id: r.get(0)?,
                        creating: r.get::<_, String>(1)? == CREATING,
                        created: r.get::<_, i64>(2)?.unsigned_abs(),
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

    /// Stores a reply that came through a batch, marked so its price is the batch price.
    fn put_batched(&self, key: &str, reply: &CachedReply, batch: &str) -> Result<(), super::CacheError> {
        self.put(key, reply)?;
        self.with(|c| {
            c.execute(
                "INSERT OR REPLACE INTO batch_replies (key, batch) VALUES (?1, ?2)",
                params![key, batch],
            )
            .map(drop)
        })
    }

    /// Every batch recorded, oldest first.
    ///
    /// # Errors
    /// [`super::CacheError`] when SQLite fails.
    pub fn batches(&self) -> Result<Vec<BatchRecord>, super::CacheError> {
        self.with(|c| {
            let mut query = c.prepare(
                "SELECT id, stage, status, total, completed, failed, imported, created FROM batches ORDER BY created, id",
            )?;
            let rows = query.query_map([], |r| {
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
            })?;
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
        self.cache.record_batch(&id, "import", "validating", &keys.iter().collect::<Vec<_>>())?;
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
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Ok(line) = serde_json::from_str::<OutputLine>(line) else {
                imported.unreadable += 1;
                continue;
            };
            match outcome(&line) {
                Outcome::Reply(reply) => {
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
            for open in self.cache.open_batches(&keys)? {
                let Some(id) = self.resolve(open, stage, note).await? else { continue };
                note(format!("{stage}: resuming batch {id}"));
                self.wait_and_import(&id, note).await?;
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

    /// The id of a batch a killed run left open; for one it was creating, the batch made from
    /// its input file, if the create call went through (else its record is forgotten and its
    /// lines are submitted again: nothing was paid for them).
    async fn resolve(
        &self,
        open: OpenBatch,
        stage: &str,
        note: &(dyn Fn(String) + Sync),
    ) -> Result<Option<String>, BatchError> {
        if !open.creating {
            return Ok(Some(open.id));
        }
        note(format!("{stage}: the last run stopped while creating a batch of {}; looking it up", open.id));
        if let Some(batch) = self.find_batch(&open.id, open.created).await? {
            self.cache.adopt_batch(&open.id, &batch.id)?;
            return Ok(Some(batch.id));
        }
        note(format!("{stage}: no batch was made of {}; its requests are submitted again", open.id));
        self.cache.forget_batch(&open.id)?;
        Ok(None)
    }

    /// The batch whose input file is `file`, from the provider's list of batches (newest first,
    /// down to those made a day before `since`, a Unix time). A list that cannot say (a batch
    /// listed without its input file, a page that does not move on, too many pages, an
    /// endpoint error) is a [`BatchError::Lookup`], never a "not made".
    async fn find_batch(&self, file: &str, since: u64) -> Result<Option<BatchObject>, BatchError> {
        use async_openai::traits::RequestOptionsBuilder as _;
        let inconclusive = |message: String| BatchError::Lookup { file: file.to_owned(), message };
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut query = vec![("limit", PAGE_SIZE.to_string())];
            query.extend(after.clone().map(|id| ("after", id)));
            let page: BatchPage = self
                .retrying(|| async { self.client.batches().query(&query)?.list_byot().await })
                .await
                .map_err(|e| match e {
                    BatchError::Endpoint(e) => inconclusive(format!("listing batches: {}", e.chain())),
                    other => other,
                })?;
            self.update(|t| t.network.requests += 1);
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
        Err(inconclusive(format!("it is not in the newest {} batches listed", MAX_PAGES * PAGE_SIZE)))
    }

    /// Refuses a batch whose worst case would take the spend over the budget, at batch prices.
    fn reserve_batch(&self, tokens: u64) -> Result<(), BatchError> {
        let mut budget = self.config.budget;
        budget.price = budget.price.map(|p| p.discounted(self.config.batch_discount));
        self.update(|t| {
            let reserved = t.reserve(budget, u32::try_from(tokens).unwrap_or(u32::MAX));
            t.reserved = t.reserved.saturating_sub(tokens.min(u64::from(u32::MAX)));
            reserved
        })
        .map_err(|e| match e {
            LlmError::Budget(message) => BatchError::Budget(message),
            other => BatchError::Endpoint(other),
        })
    }

    /// Uploads `lines` as an input file and creates a batch of them. The batch is recorded
    /// under the file's id before the create call and under its own id after it, so a run
    /// killed in between finds it again (see [`Llm::resolve`]). A create call that timed out
    /// is not made again: the record stays and the run stops, so the next run looks it up.
    async fn create(&self, stage: &str, lines: &[(&String, &Pending)]) -> Result<String, BatchError> {
        let mut content = String::new();
        for (_, pending) in lines {
            content.push_str(&pending.line);
            content.push('\n');
        }
        let file: FileObject = self
            .retrying(|| {
                let request = CreateFileRequest {
                    file: FileInput {
                        source: InputSource::VecU8 {
                            filename: "qrelgen-requests.jsonl".to_owned(),
                            vec: content.clone().into_bytes(),
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
        self.cache.record_batch(&file.id, stage, CREATING, &keys)?;
        let made = self
            .retrying_if(
                |e| e.is_retryable() && !maybe_made(e),
                || async {
                    self.update(|t| t.network.requests += 1);
                    self.client.batches().create_byot(request.clone()).await
                },
            )
            .await;
        let batch: BatchObject = match made {
            Ok(batch) => batch,
            Err(BatchError::Endpoint(LlmError::Timeout(after))) => {
                return Err(BatchError::CreateTimedOut { stage: stage.to_owned(), file: file.id, after });
            }
            Err(BatchError::Endpoint(error)) if refused(&error) => {
                self.cache.forget_batch(&file.id)?;
                return Err(BatchError::Endpoint(error));
            }
            Err(error) => return Err(error),
        };
        self.cache.adopt_batch(&file.id, &batch.id)?;
        Ok(batch.id)
    }

    /// Polls a batch until it ends, then stores its results in the cache.
    async fn wait_and_import(&self, id: &str, note: &(dyn Fn(String) + Sync)) -> Result<(), BatchError> {
        let poll = self.batch.as_ref().map_or(Duration::from_secs(60), |b| b.config.poll);
        let batch = loop {
            let batch: BatchObject =
                self.retrying(|| async { self.client.batches().retrieve_byot(id).await }).await?;
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
            let bytes = self.retrying(|| async { self.client.files().content(file).await }).await?;
            self.update(|t| t.network.requests += 1);
            self.import_lines(&String::from_utf8_lossy(&bytes), id)?;
        }
        self.cache.update_batch(&batch, true)?;
        Ok(())
    }

    /// Runs a Files or Batches call, retrying transient failures as any call is retried.
    async fn retrying<T, F, Fut>(&self, call: F) -> Result<T, BatchError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, async_openai::error::OpenAIError>>,
    {
        self.retrying_if(LlmError::is_retryable, call).await
    }

    /// As [`Llm::retrying`], trying again only after the errors `retry` accepts.
    async fn retrying_if<T, F, Fut>(
        &self,
        retry: impl Fn(&LlmError) -> bool,
        call: F,
    ) -> Result<T, BatchError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, async_openai::error::OpenAIError>>,
    {
        let attempts = self.config.retry.max_attempts.max(1);
        let mut attempt = 0;
        loop {
            let error = match tokio::time::timeout(self.config.timeout, call()).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(error)) => classify(error, self.loopback),
                Err(_) => LlmError::Timeout(self.config.timeout),
            };
            let error = match error {
                LlmError::Http { status, message, retry_after } => {
                    LlmError::Http { status, message: self.config.endpoint.redact(&message), retry_after }
                }
                other => other,
            };
            attempt += 1;
            if attempt >= attempts || !retry(&error) {
                return Err(BatchError::Endpoint(error));
            }
            self.update(|t| t.network.retries += 1);
            let jitter = rand::Rng::random::<f64>(&mut rand::rng());
            tokio::time::sleep(self.config.retry.delay(attempt - 1, jitter, error.retry_after())).await;
        }
    }
}

/// Whether a failed create call may have made its batch all the same: no answer in time, or a
/// gateway's timeout.
fn maybe_made(error: &LlmError) -> bool {
    matches!(error, LlmError::Timeout(_) | LlmError::Http { status: 504, .. })
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
        let config = super::super::LlmConfig {
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
            }),
            batch_discount: DEFAULT_DISCOUNT,
        };
        Llm::new(config, Cache::open(&dir.join("cache.sqlite")).unwrap()).unwrap()
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

    #[test]
    fn a_reply_read_from_the_cache_says_whether_it_came_through_a_batch() {
        let dir = tempfile::tempdir().unwrap();
        let cache = super::super::Cache::open(&dir.path().join("cache.sqlite")).unwrap();
        let reply = CachedReply {
            content: "{}".into(),
            finish_reason: None,
            prompt_tokens: 1,
            completion_tokens: 2,
            abandoned: 0,
        };
        cache.put("online", &reply).unwrap();
        cache.put_batched("batched", &reply, "batch_1").unwrap();
        let via = |key: &str| cache.get(key).unwrap().map(|(_, via)| via);
        assert_eq!(via("online"), Some(super::super::Via::Online));
        assert_eq!(via("batched"), Some(super::super::Via::Batch));
        assert_eq!(via("missing"), None);
    }
}
