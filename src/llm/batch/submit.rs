//! Submission through the Files and Batches endpoints: the collected calls written to the
//! request file (`export`) or uploaded in batches within the provider's limits, their budget
//! reserved, open records resolved (a killed run's batch found again by its input file), and
//! each batch polled until its results are imported.

use super::defer::{Pending, lock};
use super::records::{CREATING, OpenBatch, unix_now};
use super::wire::{BatchObject, BatchPage, FileObject, write_lines};
use super::{BatchError, BatchMode, CHAT_URL};
use crate::llm::creator::{Liveness, Process};
use crate::llm::{Effect, Llm, LlmError};
use async_openai::types::InputSource;
use async_openai::types::files::{CreateFileRequest, FileInput, FilePurpose};
use std::collections::BTreeMap;
use std::time::Duration;

/// provider): a lookup stops at batches older than that.
pub(super) const LOOKUP_SLACK_SECS: u64 = 86_400;

/// Batches asked for per page of the list, in a lookup.
pub(super) const PAGE_SIZE: usize = 100;

/// Pages of the list read at most in a lookup before it gives up (inconclusive).
pub(super) const MAX_PAGES: usize = 50;

/// What [`Llm::resolve`] made of an open batch record.
#[derive(Debug)]
pub(super) enum Resolved {
    /// Poll and import this batch.
    Batch(String),
    /// No batch was made: the record is gone, its lines go in a new batch.
    Forgotten,
    /// Another run may still be creating it: look again after a poll interval.
    Waiting,
}

/// Splits `lines` into batches of at most `max_requests` lines and `max_bytes` bytes (a line
/// larger than `max_bytes` goes alone: the provider names it when it refuses the batch).
pub(super) fn split<'l>(
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

/// Leaves out of `pending` the calls `settled` says are answered or failed; stops at the first
/// error (a cache that cannot be read must not pass for one that lacks the reply: that call
/// would be submitted and paid for again).
pub(super) fn settle(
    pending: &mut BTreeMap<String, Pending>,
    settled: impl Fn(&str) -> Result<bool, crate::llm::CacheError>,
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

impl Llm {
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
    pub(super) async fn submit_all(
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
    /// [`RetryPolicy::longest_call`]: crate::llm::RetryPolicy::longest_call
    pub(super) async fn resolve(
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
    pub(super) async fn find_batch(&self, file: &str, since: u64) -> Result<Option<BatchObject>, BatchError> {
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
    pub(super) fn reserve_batch(&self, tokens: u64) -> Result<(), BatchError> {
        let (budget, discount) = (self.config.budget, self.config.batch_discount);
        self.update(|t| {
            t.reserve(budget, discount, tokens, crate::llm::Via::Batch)?;
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
    pub(super) async fn create(
        &self,
        stage: &str,
        lines: &[(&String, &Pending)],
    ) -> Result<String, BatchError> {
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
    pub(super) async fn wait_and_import(
        &self,
        id: &str,
        note: &(dyn Fn(String) + Sync),
    ) -> Result<(), BatchError> {
        self.poll_and_import(id, note).await.map_err(|e| match e {
            BatchError::Endpoint(error) => BatchError::Poll { id: id.to_owned(), error },
            other => other,
        })
    }

    pub(super) async fn poll_and_import(
        &self,
        id: &str,
        note: &(dyn Fn(String) + Sync),
    ) -> Result<(), BatchError> {
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
    /// failures as every call is (see [`crate::llm::retry::Retry::run`]).
    pub(super) async fn retrying<T, F, Fut>(&self, effect: Effect, call: F) -> Result<T, BatchError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, async_openai::error::OpenAIError>>,
    {
        self.retried(effect, || self.timed(call())).await
    }

    /// As [`Llm::retrying`], for an upload (which may be sent again): an attempt fails once its
    /// body sent nothing for the timeout, or no reply came a timeout after its last bytes,
    /// however long it takes while bytes go out (see [`crate::llm::upload`]).
    pub(super) async fn uploading<T, F, Fut>(&self, call: F) -> Result<T, BatchError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, async_openai::error::OpenAIError>>,
    {
        self.retried(Effect::Repeatable, || self.timed_upload(call())).await
    }

    pub(super) async fn retried<T, Fut>(
        &self,
        effect: Effect,
        attempt: impl FnMut() -> Fut,
    ) -> Result<T, BatchError>
    where
        Fut: Future<Output = Result<T, LlmError>>,
    {
        let retry = crate::llm::retry::Retry { policy: &self.config.retry, effect, stall: &self.stall };
        retry
            .run(attempt, |_| false, || self.update(|t| t.network.retries += 1))
            .await
            .map_err(BatchError::Endpoint)
    }
}

/// Whether a failed create call definitely made no batch: a 4xx other than a timeout, a
/// conflict or a rate limit.
pub(super) fn refused(error: &LlmError) -> bool {
    matches!(error, LlmError::Http { status, .. } if (400..500).contains(status) && ![408, 409, 429].contains(status))
}

/// The provider's errors of a failed batch, one per line (`line 3: …`).
pub(super) fn describe_errors(errors: &serde_json::Value) -> String {
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
