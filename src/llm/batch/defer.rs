//! The deferral of a client in batch mode: the calls collected for the next batch (as request
//! file lines), the lines that failed, and what this run counted, submitted and waits for.

use super::BatchConfig;
use super::wire::request_line;
use crate::llm::creator::Process;
use crate::llm::{Llm, LlmError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

/// A call waiting for a batch.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    /// The request file line.
    pub(super) line: String,
    /// Worst case of its tokens: prompt estimate + `max_tokens`.
    pub(super) tokens: u32,
}

/// The batch state of a client: what waits, what failed, what was counted.
#[derive(Debug)]
pub(in crate::llm) struct Deferral {
    pub(in crate::llm) config: BatchConfig,
    pub(super) pending: Mutex<BTreeMap<String, Pending>>,
    /// Calls whose line failed in a batch this run: they fail again, unsent.
    pub(super) failed: Mutex<HashMap<String, LlmError>>,
    /// Keys already counted in the usage of this stage (a stage reruns its unfinished items).
    pub(super) counted: Mutex<HashSet<String>>,
    /// Times each key was submitted this run.
    pub(super) submitted: Mutex<HashMap<String, u32>>,
    /// Input files this run recorded a batch under before its create call.
    pub(super) own_files: Mutex<HashSet<String>>,
    /// Records of other runs this run waits for (told once each).
    pub(super) waiting_for: Mutex<HashSet<String>>,
    /// Records whose creator this run saw gone, and when it first did.
    pub(super) gone_since: Mutex<HashMap<String, std::time::Instant>>,
    /// This process, as the records it makes name it (where `/proc` tells).
    pub(super) me: Option<Process>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Deferral {
    pub(in crate::llm) fn new(config: BatchConfig) -> Self {
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
    pub(in crate::llm) fn defer(&self, key: &str, body: &str, tokens: u32) -> LlmError {
        if let Some(error) = lock(&self.failed).get(key) {
            return error.clone();
        }
        lock(&self.pending)
            .entry(key.to_owned())
            .or_insert_with(|| Pending { line: request_line(key, body), tokens });
        LlmError::Deferred
    }

    /// Whether this stage has not counted the reply under `key` yet (and now has).
    pub(in crate::llm) fn first_use(&self, key: &str) -> bool {
        lock(&self.counted).insert(key.to_owned())
    }

    pub(in crate::llm) fn begin_stage(&self) {
        lock(&self.counted).clear();
    }

    pub(super) fn fail(&self, key: &str, error: LlmError) {
        lock(&self.failed).insert(key.to_owned(), error);
    }

    pub(super) fn take_pending(&self) -> BTreeMap<String, Pending> {
        std::mem::take(&mut *lock(&self.pending))
    }
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
    pub(super) fn me(&self) -> Option<&Process> {
        self.batch.as_ref().and_then(|b| b.me.as_ref())
    }

    /// Calls collected for the next batch.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.batch.as_ref().map_or(0, |b| lock(&b.pending).len())
    }
}
