//! One LLM session per run: the client (its cache, limits, budget and accounting), the async
//! runtime the calls run on, and the watchdog. The generator and the judge hold the same
//! session (shared), so a run has one runtime, one limiter, one cache and one budget.
//!
//! Input: items to make calls for, and a check of each reply. Output: the items' results in
//! their order, or the [`Stop`] that ends the run. Invariants: results keep the items' order
//! whatever order the server answers in; an unusable reply is re-asked at most `repairs` times;
//! the run stops once no call finished for `stall_after`; every failure that is not fatal ends
//! as an [`Unusable`] with its kind and words.

use super::{BatchError, Llm, LlmError, Message, Role};
use crate::record::FailureKind;
use futures::StreamExt as _;
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

/// Characters of a bad reply kept in `rejects.jsonl`.
const REPLY_EXCERPT: usize = 600;

/// Why a session stops the run.
#[derive(Debug, thiserror::Error)]
pub enum Stop {
    /// The token or cost budget is spent.
    #[error("budget reached: {0}")]
    Budget(String),
    /// No call finished for `seconds`.
    #[error("no LLM call finished in {seconds} s at {url}")]
    Stalled {
        /// How long nothing finished.
        seconds: u64,
        /// The base URL.
        url: String,
    },
    /// The endpoint cannot serve the run.
    #[error("the endpoint {url} {message}")]
    Endpoint {
        /// The base URL.
        url: String,
        /// What went wrong.
        message: String,
        /// What to do.
        hint: &'static str,
    },
    /// Batch mode stopped the run: calls were exported, are missing, or a batch failed.
    #[error(transparent)]
    Batch(#[from] BatchError),
}

/// Why no usable reply came back: the kind (what the report counts), the words, and the last
/// reply, if any (for `rejects.jsonl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// What kind of failure.
    pub kind: FailureKind,
    /// Why, in words (a server's message, a parse error).
    pub reason: String,
    /// The last reply, if there was one (cut to its first characters).
    pub reply: Option<String>,
}

impl Unusable {
    /// The failure of a call that got no reply at all.
    #[must_use]
    pub fn of(error: &LlmError) -> Self {
        let kind = match error {
            LlmError::Timeout(_) | LlmError::UploadStalled { .. } => FailureKind::Timeout,
            LlmError::Http { .. } => FailureKind::HttpError,
            LlmError::Connect { .. } | LlmError::BaseUrl(_) => FailureKind::Connection,
            LlmError::Body(_) | LlmError::Budget(_) | LlmError::Deferred | LlmError::Cache(_) => {
                FailureKind::BadResponse
            }
        };
        Self { kind, reason: error.chain(), reply: None }
    }

    /// What a call ended as: a failure that no other call will escape passes up (it stops
    /// the run, or waits for a batch); any other becomes the call's [`Unusable`].
    ///
    /// # Errors
    /// The fatal [`LlmError`]s: the server is unreachable or refuses the key or the model, the
    /// budget is spent, or (in batch mode) the call waits for its batch.
    pub fn settle<T>(answer: Result<Asked<T>, LlmError>) -> Result<Asked<T>, LlmError> {
        match answer {
            Err(error) if is_fatal(&error) => Err(error),
            Err(error) => Ok(Err(Self::of(&error))),
            Ok(asked) => Ok(asked),
        }
    }
}

/// A reply that passed its check, or why none did.
pub type Asked<T> = Result<T, Unusable>;

/// Failures that no other call will escape either: the server is unreachable, or refuses the
/// key or the model, or the budget is spent (and, in batch mode, a call waits for its batch).
/// A call that times out on every attempt is not one of them (one slow prompt fails alone); a
/// server that answers nothing at all is stopped by the watchdog.
#[must_use]
fn is_fatal(error: &LlmError) -> bool {
    matches!(
        error,
        LlmError::Connect { .. }
            | LlmError::BaseUrl(_)
            | LlmError::Budget(_)
            | LlmError::Deferred
            | LlmError::Cache(_)
            | LlmError::Http { status: 401 | 403 | 404, .. }
    )
}

/// The client of a run, the runtime its calls run on, and the watchdog.
pub struct Session {
    llm: Llm,
    runtime: tokio::runtime::Runtime,
    /// Stop when no call finished for this long.
    stall_after: Duration,
    /// Cache notes written this run by [`Session::remember_once`].
    noted: Mutex<HashSet<&'static str>>,
}

impl Session {
    /// A session over `llm` that stops once no call finished for `stall_after`.
    ///
    /// # Errors
    /// [`Stop::Endpoint`] when the async runtime cannot start.
    pub fn new(llm: Llm, stall_after: Duration) -> Result<Self, Stop> {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
        let runtime = match runtime {
            Ok(runtime) => runtime,
            Err(e) => {
                return Err(endpoint_stop(
                    &llm,
                    format!("cannot start the async runtime: {e}"),
                    "report this",
                ));
            }
        };
        Ok(Self { llm, runtime, stall_after, noted: Mutex::default() })
    }

    /// The client, for its configuration, notes and usage totals.
    #[must_use]
    pub fn llm(&self) -> &Llm {
        &self.llm
    }

    /// Runs `work` to its end on the session's runtime.
    pub fn block_on<F: Future>(&self, work: F) -> F::Output {
        self.runtime.block_on(work)
    }

    /// Runs `work` under the watchdog: it stops with [`Stop::Stalled`] once the server kept
    /// it waiting for `stall_after` without finishing a call.
    ///
    /// # Errors
    /// `work`'s own, and the stall.
    pub async fn watched<T, E: From<Stop>>(&self, work: impl Future<Output = Result<T, E>>) -> Result<T, E> {
        self.llm.begin_batch();
        tokio::select! {
            outcome = work => outcome,
            () = self.watchdog() => Err(self.stalled().into()),
        }
    }

    /// Runs `work` on every item, `concurrency` at a time, in any order (a slow call does not
    /// hold the others back), and returns the results in the items' order. A spent budget lets
    /// the calls in flight finish; an unusable endpoint stops at once, and so does a stall. In
    /// batch mode, the calls the cache cannot answer go to a batch (named after `stage`, with
    /// its progress told to `note`) and the items that waited for them run again, until none
    /// waits.
    ///
    /// # Errors
    /// [`Stop`] when the run cannot go on.
    pub async fn run_ordered<'s, I, T, F, Fut>(
        &'s self,
        items: &'s [I],
        stage: &str,
        note: &(dyn Fn(String) + Sync),
        work: F,
    ) -> Result<Vec<T>, Stop>
    where
        F: Fn(&'s I) -> Fut,
        Fut: Future<Output = Result<T, LlmError>>,
    {
        self.llm.begin_stage();
        let mut done: Vec<Option<T>> = std::iter::repeat_with(|| None).take(items.len()).collect();
        loop {
            let todo: Vec<usize> = (0..items.len()).filter(|&i| done[i].is_none()).collect();
            for (i, part) in self.watched(self.run_some(items, &todo, &work)).await? {
                done[i] = Some(part);
            }
            if self.llm.pending() == 0 {
                return Ok(done.into_iter().flatten().collect());
            }
            // Under the watchdog too: a Files or Batches call retries 429s without limit.
            self.watched(async { self.llm.flush(stage, note).await.map_err(Stop::from) }).await?;
        }
    }

    /// Runs `work` on the items at `todo`; returns their results (by position, in order),
    /// leaving out those that wait for a batch.
    async fn run_some<'s, I, T, F, Fut>(
        &'s self,
        items: &'s [I],
        todo: &[usize],
        work: &F,
    ) -> Result<Vec<(usize, T)>, Stop>
    where
        F: Fn(&'s I) -> Fut,
        Fut: Future<Output = Result<T, LlmError>>,
    {
        let concurrency = self.llm.config().limits.concurrency.max(1);
        let mut stream = futures::stream::iter(todo.iter().map(|&i| (i, &items[i])))
            .map(|(i, item)| {
                let running = work(item);
                async move { (i, running.await) }
            })
            .buffer_unordered(concurrency);
        let mut parts = Vec::with_capacity(todo.len());
        let mut budget = None;
        while let Some((i, outcome)) = stream.next().await {
            match outcome {
                Ok(part) => parts.push((i, part)),
                Err(LlmError::Deferred) => {}
                Err(LlmError::Budget(message)) => budget = Some(message),
                Err(error) => return Err(self.fatal(&error)),
            }
        }
        if let Some(message) = budget {
            return Err(Stop::Budget(message));
        }
        parts.sort_by_key(|(i, _)| *i);
        Ok(parts)
    }

    /// Sends `messages` and re-asks with `repair` (which words a re-ask from `check`'s
    /// complaint) until `check` accepts the reply, at most `repairs` times.
    ///
    /// # Errors
    /// The call's [`LlmError`] when no reply came at all.
    pub async fn ask_until<T>(
        &self,
        mut messages: Vec<Message>,
        format: Option<&serde_json::Value>,
        temperature: f32,
        repairs: u32,
        repair: impl Fn(&str) -> Result<String, LlmError>,
        check: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Asked<T>, LlmError> {
        let mut attempt = 0;
        loop {
            let completion = self.llm.complete_at(&messages, format, temperature).await?;
            if completion.truncated {
                let reason = "truncated: the reply hit max_tokens (raise --max-tokens)".to_owned();
                let reply = Some(excerpt(&completion.content));
                return Ok(Err(Unusable { kind: FailureKind::Truncated, reason, reply }));
            }
            let error = match check(&completion.content) {
                Ok(value) => return Ok(Ok(value)),
                Err(error) => error,
            };
            if attempt == repairs {
                let reason = format!("unusable reply after {attempt} repair(s): {error}");
                let reply = Some(excerpt(&completion.content));
                return Ok(Err(Unusable { kind: FailureKind::UnusableReply, reason, reply }));
            }
            attempt += 1;
            let again = repair(&error)?;
            messages.push(Message::new(Role::Assistant, completion.content));
            messages.push(Message::new(Role::User, again));
        }
    }

    /// Remembers `value` under `name` for this endpoint and model, once per run (later calls
    /// with the same name do nothing). Only saves a later run some work: a note that cannot
    /// be written is left out.
    pub fn remember_once(&self, name: &'static str, value: &str) {
        let first = self.noted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name);
        if first {
            let _ = self.llm.remember(name, value);
        }
    }

    /// The stop of a run whose endpoint cannot serve it: `message` says why, `hint` what to do.
    #[must_use]
    pub fn endpoint_stop(&self, message: String, hint: &'static str) -> Stop {
        endpoint_stop(&self.llm, message, hint)
    }

    fn stalled(&self) -> Stop {
        Stop::Stalled {
            seconds: self.stall_after.as_secs(),
            url: super::redact_url(&self.llm.config().endpoint.base_url),
        }
    }

    /// The stop of a run whose endpoint cannot serve it.
    fn fatal(&self, error: &LlmError) -> Stop {
        let hint = match error {
            LlmError::Http { status: 401 | 403, .. } => "check OPENAI_API_KEY",
            LlmError::Http { status: 404, .. } => "check --model and --base-url (it usually ends in /v1)",
            LlmError::Cache(_) => {
                return self.endpoint_stop(
                    format!("answered, but its reply cannot be kept: {}", error.chain()),
                    "the reply cache must be readable and writable (disk full? read-only?); nothing more is sent",
                );
            }
            _ => "is the server running? replies so far are cached and a rerun resumes",
        };
        self.endpoint_stop(format!("failed: {}", error.chain()), hint)
    }

    /// Resolves once the server kept us waiting for `stall_after` without finishing a call.
    async fn watchdog(&self) {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if self.llm.silent_for() >= self.stall_after {
                return;
            }
        }
    }
}

fn endpoint_stop(llm: &Llm, message: String, hint: &'static str) -> Stop {
    Stop::Endpoint { url: super::redact_url(&llm.config().endpoint.base_url), message, hint }
}

fn excerpt(reply: &str) -> String {
    reply.chars().take(REPLY_EXCERPT).collect()
}
