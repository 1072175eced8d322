//! Import of a runner's output file: its result lines into the cache (replies) or the
//! deferral (failures), each call's first reply standing.

use super::BatchError;
use super::wire::{BatchObject, CallResult, Counts, OutputLine, call_result, is_request_id};
use crate::llm::Llm;
use std::path::Path;

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

impl Llm {
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
    pub(super) fn import_lines(&self, text: &str, batch: &str) -> Result<Imported, BatchError> {
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
            match call_result(&line) {
                CallResult::Reply(reply) => {
                    answered.insert(line.custom_id.clone());
                    self.update(|t| {
                        t.network.paid.add(&reply);
                        t.network.batched += 1;
                    });
                    self.cache.put_batched(&line.custom_id, &reply, batch)?;
                    imported.replies += 1;
                }
                CallResult::Failed(error) => {
                    if let Some(deferral) = &self.batch {
                        deferral.fail(&line.custom_id, error);
                    }
                    imported.failed += 1;
                }
                CallResult::NotRun => imported.not_run += 1,
            }
        }
        Ok(imported)
    }
}
