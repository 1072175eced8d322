//! The client for one endpoint: [`Llm::complete`] is the one place where a call is cached,
//! rate-limited, timed out and retried.

use super::batch::Deferral;
use super::chat::{ChatRequest, ChatResponse, RetryOn, classify, completion, reply_from};
use super::config::split_query;
use super::usage::Totals;
use super::{
    Cache, CachedReply, Completion, Effect, Limits, LlmConfig, LlmError, Message, NetworkStats, StallClock,
    TokenUsage, Via, estimate_tokens, redact_url,
};
use crate::id::ContentHasher;
use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use std::sync::Mutex;
use std::time::Duration;

/// A client for one endpoint, with its cache and limits.
pub struct Llm {
    pub(super) client: Client<OpenAIConfig>,
    pub(super) config: LlmConfig,
    pub(super) limits: std::sync::Arc<Limits>,
    pub(super) cache: Cache,
    pub(super) totals: Mutex<Totals>,
    pub(super) stall: StallClock,
    /// The base URL names this machine: a refused connection means nothing listens.
    pub(super) loopback: bool,
    /// In batch mode, the calls waiting for a batch.
    pub(super) batch: Option<Deferral>,
}

/// Checks that `base_url` is an http(s) URL with a host; `Ok(true)` if the host is this
/// machine (a loopback address or `localhost`).
pub(super) fn check_base_url(base_url: &str) -> Result<bool, LlmError> {
    let url = reqwest::Url::parse(base_url).map_err(|e| LlmError::BaseUrl(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LlmError::BaseUrl(format!("the scheme is {:?}, not http or https", url.scheme())));
    }
    let host = url.host_str().ok_or_else(|| LlmError::BaseUrl("it names no host".to_owned()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()))
}

impl Llm {
    /// A client for `config`, caching replies in `cache`.
    ///
    /// # Errors
    /// [`LlmError::BaseUrl`] if the base URL is not an http(s) URL; [`LlmError::Connect`] if
    /// the HTTP client cannot be built.
    pub fn new(config: LlmConfig, cache: Cache) -> Result<Self, LlmError> {
        let loopback = check_base_url(&config.endpoint.base_url)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| LlmError::connect(e, loopback))?;
        // Every field set explicitly: OpenAIConfig::default() would read OPENAI_* variables.
        let (base, query) = split_query(&config.endpoint.base_url);
        let openai = OpenAIConfig::new()
            .with_api_base(base.trim_end_matches('/'))
            .with_api_key(config.endpoint.api_key.clone().unwrap_or_default())
            .with_org_id("")
            .with_project_id("");
        let keyed = config.endpoint.api_key.as_deref().is_some_and(|k| !k.is_empty());
        let limits = std::sync::Arc::new(Limits::new(config.limits));
        let query = query.map(str::to_owned);
        let service = super::transport::service(http, keyed, query, std::sync::Arc::clone(&limits));
        let client = Client::with_config(openai).with_http_service(service);
        let batch = config.batch.clone().map(Deferral::new);
        Ok(Self {
            client,
            config,
            limits,
            cache,
            totals: Mutex::new(Totals::default()),
            stall: StallClock::default(),
            loopback,
            batch,
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// Tokens of the replies used so far.
    #[must_use]
    pub fn usage(&self) -> TokenUsage {
        self.totals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).used
    }

    /// Stops counting what was used so far (the preflight is not part of the set; what it
    /// cost stays in [`Llm::network`]).
    pub fn forget_usage(&self) {
        let mut totals = self.totals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let used = std::mem::take(&mut totals.used);
        totals.before.merge(&used);
    }

    /// What this run sent so far.
    #[must_use]
    pub fn network(&self) -> NetworkStats {
        self.totals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).network
    }

    /// Time spent waiting on the server since it last finished a call (for the watchdog; see
    /// [`StallClock`]).
    #[must_use]
    pub fn silent_for(&self) -> Duration {
        self.stall.silent_for()
    }

    /// A batch of calls starts: the stall clock restarts, whatever happened on our side since
    /// the last call.
    pub fn begin_batch(&self) {
        self.stall.progress();
    }

    /// A note remembered in the cache under `name` for this endpoint and model.
    ///
    /// # Errors
    /// [`LlmError::Cache`] when the cache cannot be read.
    pub fn note(&self, name: &str) -> Result<Option<String>, LlmError> {
        let key = self.note_key(name);
        Ok(self.cache.get(&key)?.map(|(reply, _)| reply.content))
    }

    /// Remembers `value` under `name` for this endpoint and model.
    ///
    /// # Errors
    /// [`LlmError::Cache`] when the cache cannot be written.
    pub fn remember(&self, name: &str, value: &str) -> Result<(), LlmError> {
        let reply = CachedReply {
            content: value.to_owned(),
            finish_reason: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            abandoned: 0,
        };
        Ok(self.cache.put(&self.note_key(name), &reply)?)
    }

    pub(super) fn note_key(&self, name: &str) -> String {
        let mut hasher = ContentHasher::default();
        let url = redact_url(&self.config.endpoint.base_url);
        hasher.update(&["note", name, &url, &self.config.endpoint.model]);
        hasher.finish()
    }

    /// The cache key of a call: base URL (as shown: a new credential in it keeps the cache),
    /// model, and the whole request body.
    pub(super) fn key(&self, body: &str) -> String {
        let mut hasher = ContentHasher::default();
        let url = redact_url(&self.config.endpoint.base_url);
        hasher.update(&[&url, &self.config.endpoint.model, body]);
        hasher.finish()
    }

    /// Sends `messages` (or answers from the cache), retrying transient failures.
    ///
    /// # Errors
    /// [`LlmError`] when the call fails for good, or the budget is spent.
    pub async fn complete(
        &self,
        messages: &[Message],
        response_format: Option<&serde_json::Value>,
    ) -> Result<Completion, LlmError> {
        self.complete_at(messages, response_format, self.config.temperature).await
    }

    /// As [`Llm::complete`], at a temperature of its own (the judge grades at 0).
    ///
    /// # Errors
    /// As for [`Llm::complete`].
    pub async fn complete_at(
        &self,
        messages: &[Message],
        response_format: Option<&serde_json::Value>,
        temperature: f32,
    ) -> Result<Completion, LlmError> {
        let request = self.request(messages, response_format, temperature);
        let body = serde_json::to_string(&request)
            .map_err(|e| LlmError::Body(format!("the request cannot be written as JSON: {e}")))?;
        let key = self.key(&body);
        if let Some(reply) = self.cached(&key, messages, response_format)? {
            return Ok(completion(&reply));
        }
        if let Some(batch) = &self.batch {
            let tokens = estimate_tokens(messages, response_format).saturating_add(self.config.max_tokens);
            return Err(batch.defer(&key, &body, tokens));
        }
        let reply = self.send(&request, RetryOn::Transient).await?;
        self.cache.put(&key, &reply)?;
        Ok(completion(&reply))
    }

    /// The reply the cache holds under `key`, if any, counted in the usage (in batch mode, once
    /// per stage: a stage reruns its unfinished items after each batch). A cache hit skips the
    /// limiters and restarts the stall clock.
    pub(super) fn cached(
        &self,
        key: &str,
        messages: &[Message],
        response_format: Option<&serde_json::Value>,
    ) -> Result<Option<CachedReply>, LlmError> {
        let Some((reply, via)) = self.cache.get(key)? else {
            return Ok(None);
        };
        if self.batch.as_ref().is_some_and(|b| !b.first_use(key)) {
            return Ok(Some(reply));
        }
        let prompt = estimate_tokens(messages, response_format);
        self.update(|t| {
            t.network.cache_hits += 1;
            t.used.add(&reply);
            if via == Via::Batch {
                t.used.add_batched(&reply);
            }
            t.used.abandon(reply.abandoned, prompt, self.config.max_tokens);
        });
        self.stall.progress();
        Ok(Some(reply))
    }

    /// Asks the server itself, never the cache (a probe checks what the server does now):
    /// retried like any call, except that an error answer naming the response format is final
    /// (the server does not support it).
    ///
    /// # Errors
    /// As for [`Llm::complete`].
    pub async fn probe(
        &self,
        messages: &[Message],
        response_format: Option<&serde_json::Value>,
    ) -> Result<Completion, LlmError> {
        let request = self.request(messages, response_format, self.config.temperature);
        Ok(completion(&self.send(&request, RetryOn::Probe).await?))
    }

    pub(super) fn request<'r>(
        &'r self,
        messages: &'r [Message],
        response_format: Option<&'r serde_json::Value>,
        temperature: f32,
    ) -> ChatRequest<'r> {
        ChatRequest {
            model: &self.config.endpoint.model,
            messages,
            temperature,
            max_tokens: self.config.max_tokens,
            seed: self.config.seed,
            response_format,
            stream: false,
        }
    }

    /// Sends `request` until it succeeds, fails for good or the attempts run out (see
    /// [`super::retry::Retry::run`]). An attempt abandoned on a timeout is counted at its worst (the
    /// server may still bill it), and the reply remembers how many there were.
    pub(super) async fn send(
        &self,
        request: &ChatRequest<'_>,
        retry_on: RetryOn,
    ) -> Result<CachedReply, LlmError> {
        let prompt = estimate_tokens(request.messages, request.response_format);
        let max_tokens = self.config.max_tokens;
        let tokens = u64::from(prompt + max_tokens);
        let abandoned = std::sync::atomic::AtomicU64::new(0);
        let attempt = || async {
            let (budget, discount) = (self.config.budget, self.config.batch_discount);
            self.update(|t| t.reserve(budget, discount, tokens, Via::Online))?;
            let outcome = self.attempt(request, prompt, max_tokens).await;
            self.update(|t| t.reserved = t.reserved.saturating_sub(tokens));
            if matches!(outcome, Err(LlmError::Timeout(_))) {
                abandoned.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.update(|t| {
                    t.used.abandon(1, prompt, max_tokens);
                    t.network.paid.abandon(1, prompt, max_tokens);
                });
            }
            outcome
        };
        let unsupported = |error: &LlmError| retry_on == RetryOn::Probe && error.names_response_format();
        let retry = super::retry::Retry {
            policy: &self.config.retry,
            effect: Effect::Repeatable,
            stall: &self.stall,
        };
        match retry.run(attempt, unsupported, || self.update(|t| t.network.retries += 1)).await {
            Ok(mut reply) => {
                reply.abandoned = abandoned.into_inner();
                self.update(|t| {
                    t.used.add(&reply);
                    t.network.paid.add(&reply);
                });
                Ok(reply)
            }
            Err(error) => {
                if !matches!(error, LlmError::Budget(_)) {
                    self.update(|t| t.network.failures += 1);
                }
                Err(error)
            }
        }
    }

    /// One network attempt, within the limits and the timeout; tells the limits how it went.
    pub(super) async fn attempt(
        &self,
        request: &ChatRequest<'_>,
        prompt: u32,
        max_tokens: u32,
    ) -> Result<CachedReply, LlmError> {
        let ticket = self.limits.acquire(prompt, max_tokens).await;
        let Some(ticket) = ticket else { return Err(LlmError::Body("the rate limiter was closed".into())) };
        let outcome = self.exchange(request).await;
        match &outcome {
            Ok(reply) => self.limits.succeeded(&ticket, Some((reply.prompt_tokens, reply.completion_tokens))),
            Err(LlmError::Http { status: 429, .. }) => self.limits.rate_limited(&ticket),
            Err(LlmError::Http { .. }) => self.limits.refused(&ticket),
            Err(_) => {}
        }
        outcome
    }

    /// Sends the request once and reads the reply, within the timeout.
    pub(super) async fn exchange(&self, request: &ChatRequest<'_>) -> Result<CachedReply, LlmError> {
        self.update(|t| t.network.requests += 1);
        let chat = self.client.chat();
        reply_from(self.timed(chat.create_byot::<_, ChatResponse>(request)).await?)
    }

    /// Runs one request to the server (a chat completion, a Files or Batches call) within the
    /// timeout, its time counted on the stall clock; a failure is classified, with the server's
    /// message redacted, and a 429 is counted.
    pub(super) async fn timed<T>(
        &self,
        call: impl Future<Output = Result<T, OpenAIError>>,
    ) -> Result<T, LlmError> {
        let waiting = self.stall.wait();
        let outcome = tokio::time::timeout(self.config.timeout, call).await;
        drop(waiting);
        self.settle(outcome.map_err(|_| LlmError::Timeout(self.config.timeout)))
    }

    /// As [`Llm::timed`], for an upload: the timeout runs from the last bytes of its body that
    /// went out, not from its start, and bytes going out restart the stall clock (see
    /// [`upload`]).
    pub(super) async fn timed_upload<T>(
        &self,
        call: impl Future<Output = Result<T, OpenAIError>>,
    ) -> Result<T, LlmError> {
        let waiting = self.stall.wait();
        let outcome = super::upload::watched(&self.stall, self.config.timeout, call).await;
        drop(waiting);
        self.settle(outcome)
    }

    /// What came of one request: its value, or its failure classified.
    pub(super) fn settle<T>(&self, outcome: Result<Result<T, OpenAIError>, LlmError>) -> Result<T, LlmError> {
        let error = match outcome {
            Ok(Ok(value)) => return Ok(value),
            Err(error) => return Err(error),
            Ok(Err(OpenAIError::Reqwest(e))) if e.is_timeout() => {
                return Err(LlmError::Timeout(self.config.timeout));
            }
            Ok(Err(error)) => error,
        };
        let error = match classify(error, self.loopback) {
            LlmError::Http { status, message, retry_after } => {
                LlmError::Http { status, message: self.config.endpoint.redact(&message), retry_after }
            }
            other => other,
        };
        if matches!(error, LlmError::Http { status: 429, .. }) {
            self.update(|t| t.network.rate_limited += 1);
        }
        Err(error)
    }

    pub(super) fn update<T>(&self, change: impl FnOnce(&mut Totals) -> T) -> T {
        change(&mut self.totals.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}
