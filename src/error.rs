//! The library's error type: fatal problems that stop a run.
//!
//! Per-item problems (a bad file, a query that misses) are data, not errors: see
//! [`crate::corpus::Skipped`] and [`crate::record::Verdict`].

use crate::record::Location;
use std::fmt;
use std::path::PathBuf;

/// A fatal problem; the message names the file, line or flag involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The corpus path does not exist or cannot be listed.
    #[error("cannot read the corpus at {path}")]
    CorpusUnreadable {
        /// The corpus path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The corpus has no usable document.
    #[error(
        "no usable documents in {path} ({skipped} file(s) or line(s) skipped, {ignored} file(s) with \
         other extensions ignored){details}\nhint: point --corpus at a folder of .txt/.md/.html files or a JSONL \
         file with \"id\"/\"_id\" and \"text\" fields"
    )]
    EmptyCorpus {
        /// The corpus path.
        path: PathBuf,
        /// Files or lines skipped with a warning.
        skipped: usize,
        /// Files ignored for their extension.
        ignored: usize,
        /// Each skipped input's reason (the first few) and the extensions ignored, a line each.
        details: String,
    },
    /// `--out` is the corpus folder.
    #[error(
        "--out is the corpus folder ({0}): the set would be written among the documents\nhint: choose an --out \
         outside the corpus folder (a folder inside it is fine: it is not read as part of the corpus)"
    )]
    OutIsCorpus(PathBuf),
    /// `--prechunked` needs a JSONL file.
    #[error("--prechunked needs a JSONL file, but {0} is a folder")]
    PrechunkedFolder(PathBuf),
    /// Two chunks of pre-chunked input share an id.
    #[error("{path}:{line}: chunk id {id:?} was already used on an earlier line")]
    DuplicateChunkId {
        /// The JSONL file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The repeated id.
        id: String,
    },
    /// A setting is out of range or inconsistent.
    #[error("invalid {flag}: {message}")]
    InvalidSetting {
        /// The flag that fixes it, e.g. `--mix`.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The search index failed.
    #[error(transparent)]
    Index(#[from] crate::index::IndexError),
    /// A prompt template is missing or malformed.
    #[error("prompt template {path}: {message}")]
    Prompt {
        /// The template file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The LLM endpoint cannot be used.
    #[error("the endpoint {url} {message}\nhint: {hint}")]
    Endpoint {
        /// The base URL.
        url: String,
        /// What went wrong.
        message: String,
        /// What to do.
        hint: &'static str,
    },
    /// The token or cost budget is spent; replies so far are cached.
    #[error(
        "budget reached: {0}\nhint: every reply so far is cached: rerun with a higher limit to resume without paying twice"
    )]
    Budget(String),
    /// No LLM call finished for too long.
    #[error(
        "no LLM call finished in {seconds} s; the server at {url} may be hung\nhint: check the server, \
         or raise --timeout; replies so far are cached and a rerun resumes"
    )]
    Stalled {
        /// How long nothing finished.
        seconds: u64,
        /// The base URL.
        url: String,
    },
    /// The reply cache cannot be used.
    #[error(transparent)]
    Cache(#[from] crate::llm::CacheError),
    /// Batch mode stopped the run: calls were exported, are missing, or a batch failed.
    #[error(transparent)]
    Batch(#[from] crate::llm::BatchError),
    /// A file of a test set cannot be read.
    #[error("cannot read {path}")]
    Input {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line of a test set file cannot be used.
    #[error("{path}:{line}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0: the file as a whole).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A decisions file has problems; nothing was applied.
    #[error(
        "{path}: {} problem(s), nothing applied:\n{}\nhint: fix the rows named and run the command again",
        .problems.len(),
        Problem::list(.problems)
    )]
    Decisions {
        /// The decisions file.
        path: PathBuf,
        /// Every problem, with its line, row or task.
        problems: Vec<Problem>,
    },
    /// `--out` holds a set under review, or files qrelgen did not write; nothing was written.
    #[error("{path} {message}\nhint: {hint}")]
    OutOccupied {
        /// The output folder.
        path: PathBuf,
        /// What it holds.
        message: String,
        /// The ways out.
        hint: String,
    },
    /// Moving the staged files into place failed part way; the files already moved were put
    /// back, so the folder holds what it held before.
    #[error("publishing into {out} failed part way; every file was put back as it was")]
    Publish {
        /// The output folder.
        out: PathBuf,
        /// Why a move failed.
        #[source]
        source: Box<Error>,
    },
    /// Publishing failed part way, and putting the previous files back failed too.
    #[error(
        "publishing into {out} failed part way, and putting the previous files back failed too ({restoring})\n\
         hint: the previous files are in {kept}; the next qrelgen command on this folder puts them back"
    )]
    PublishRestore {
        /// The output folder.
        out: PathBuf,
        /// Where the replaced files are.
        kept: PathBuf,
        /// Why putting them back failed.
        restoring: String,
        /// Why a move failed.
        #[source]
        source: Box<Error>,
    },
    /// Publishing a new version of a reviewed set failed; the set is left as it was.
    #[error("version {next} was not published: the set is left as version {current} (also kept in {kept})")]
    Unpublished {
        /// The version that was being written.
        next: u32,
        /// The version in the folder.
        current: u32,
        /// Its copy under `versions/`.
        kept: PathBuf,
        /// Why publishing failed.
        #[source]
        source: Box<Error>,
    },
    /// A decisions file has no judgment: every row is pending.
    #[error("{path}: 0 judgments read: every row is pending (no decision and no grade)\nhint: {hint}")]
    NoJudgments {
        /// The decisions file.
        path: PathBuf,
        /// What to do.
        hint: &'static str,
    },
    /// The review history in a set folder cannot be used.
    #[error("{path}: {message}\nhint: {hint}")]
    ReviewHistory {
        /// The set folder.
        path: PathBuf,
        /// What is wrong.
        message: String,
        /// What to do.
        hint: &'static str,
    },
    /// `review export --only changed` on a set that no refresh has made since it was built.
    #[error(
        "{path}: no refresh has run on this set since it was built, so no query is marked changed\nhint: drop --only changed to export the whole review queue"
    )]
    NotRefreshed {
        /// The set folder.
        path: PathBuf,
    },
    /// A refresh's corpus is refused: it shares too little with the set's, or more of it could
    /// not be read than of the set's.
    #[error(
        "{path} is refused as the set's changed corpus: {reason}; a refresh from it would retire the set's \
         queries and human judgments on what is missing\nhint: check --corpus (the changed version of the \
         corpus the set was built from, complete and readable); if it is right, pass --accept-new-corpus"
    )]
    CorpusRefused {
        /// The corpus given.
        path: PathBuf,
        /// What is wrong with it, with the figures.
        reason: String,
    },
    /// Agreement needs judgments by exactly two reviewers.
    #[error(
        "agreement needs two reviewers, found {}: {}\nhint: name them with --reviewer, once per file (a row's own reviewer field wins over it), or Label Studio user ids with --reviewer-map",
        .found.len(),
        .found.join(", ")
    )]
    Reviewers {
        /// The reviewers found.
        found: Vec<String>,
    },
    /// The set was written in another format than this qrelgen reads and writes.
    #[error("{path}: {message}\nhint: {hint}")]
    SetFormat {
        /// The set's manifest.
        path: PathBuf,
        /// The format found and the one read.
        message: String,
        /// What to do.
        hint: String,
    },
    /// Another qrelgen command is changing the set (it holds the set's lock); nothing was done.
    #[error("{path} is being changed by {holder}\nhint: {hint}")]
    SetBusy {
        /// The set folder.
        path: PathBuf,
        /// Who holds the lock: command, pid and start time, as its lock file says.
        holder: String,
        /// What to do.
        hint: &'static str,
    },
    /// An output path lies inside a set folder, or would replace a file qrelgen did not write.
    #[error("{path}: {message}\nhint: {hint}")]
    OutputRefused {
        /// The path refused.
        path: PathBuf,
        /// Why.
        message: String,
        /// What to do.
        hint: String,
    },
    /// The set's review ledger does not match what the manifest recorded for it.
    #[error("{path}: {message}\nhint: {hint}")]
    LedgerDamaged {
        /// The ledger file.
        path: PathBuf,
        /// What differs (decision counts, digests).
        message: String,
        /// How to restore it.
        hint: String,
    },
    /// Writing an output file failed.
    #[error("cannot write {path}")]
    Output {
        /// The file being written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Shorthand for results with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A problem with one row of an input file (a decisions file): where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The line, row or task.
    pub at: Location,
    /// What is wrong.
    pub message: String,
}

impl Problem {
    /// A problem at `at`.
    #[must_use]
    pub fn new(at: Location, message: impl Into<String>) -> Self {
        Self { at, message: message.into() }
    }

    /// One indented line per problem, for error messages.
    #[must_use]
    pub fn list(problems: &[Self]) -> String {
        problems.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n")
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

impl From<crate::llm::Stop> for Error {
    fn from(stop: crate::llm::Stop) -> Self {
        use crate::llm::Stop;
        match stop {
            Stop::Budget(message) => Self::Budget(message),
            Stop::Stalled { seconds, url } => Self::Stalled { seconds, url },
            Stop::Endpoint { url, message, hint } => Self::Endpoint { url, message, hint },
            Stop::Batch(error) => Self::Batch(error),
        }
    }
}
