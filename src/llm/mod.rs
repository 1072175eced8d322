//! Talking to an OpenAI-compatible chat endpoint: the only module that imports async-openai,
//! reqwest and rusqlite.
//!
//! [`Llm::complete`] is the one place where a call is cached, rate-limited, timed out and
//! retried. Input: chat messages and a response format. Output: a [`Completion`] or an
//! [`LlmError`]. Invariants: a successful reply is in the cache before it is returned; cache
//! hits skip the limiters; the API key is kept in memory only and never serialized or logged.

mod batch;
mod cache;
mod creator;
mod error;
mod limits;
mod retry;
mod session;
mod stall;
mod transport;
mod upload;

pub use batch::{
    BatchConfig, BatchError, BatchMode, BatchRecord, DEFAULT_DISCOUNT, Forgotten, Imported, MAX_BYTES,
    MAX_REQUESTS,
};
pub use cache::{Cache, CacheError, CachedReply, Via};
pub use error::{Cause, ConnectKind, LlmError};
pub use limits::{LimitConfig, Limits};
pub use retry::{Effect, RetryPolicy, parse_retry_after};
pub use session::{Asked, Session, Stop, Unusable};
pub use stall::StallClock;

use crate::id::ContentHasher;
use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::Duration;

/// Where to send calls. The key is never serialized, printed or stored.
#[derive(Clone, Serialize)]
pub struct Endpoint {
    /// Base URL, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1` (serialized
    /// without any `user:password@`).
    #[serde(serialize_with = "without_credentials")]
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// API key from `OPENAI_API_KEY` (optional for local servers).
    #[serde(skip)]
    pub api_key: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &redact_url(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A URL as files and messages show it: without the `user:password@` part, and with the
/// value of every query parameter that looks like a credential ([`is_credential`]) replaced by
/// `<redacted>`; the rest exactly as written. The calls use the URL unchanged.
#[must_use]
pub fn redact_url(url: &str) -> String {
    let (head, fragment) = url.split_once('#').map_or((url, None), |(h, f)| (h, Some(f)));
    let (base, query) = head.split_once('?').map_or((head, None), |(b, q)| (b, Some(q)));
    let mut shown = match base.find("://") {
        Some(scheme) => {
            let authority_end = base[scheme + 3..].find('/').map_or(base.len(), |end| scheme + 3 + end);
            match base[scheme + 3..authority_end].rfind('@') {
                Some(at) => format!("{}{}", &base[..scheme + 3], &base[scheme + 3 + at + 1..]),
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if is_credential(name) => format!("{name}=<redacted>"),
                _ => pair.to_owned(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&pairs.join("&"));
    }
    if let Some(fragment) = fragment {
        shown.push('#');
        shown.push_str(fragment);
    }
    shown
}

/// Whether a query parameter's name looks like it carries a credential: `key`, `api-key`,
/// `api_key`, `apikey`, `token`, `access_token`, `sig`, `signature`, `secret`, `password`,
/// `auth`, `code` (case and `-`/`_` ignored), or any name ending in `key`, `token`, `secret`,
/// `password` or `signature`.
#[must_use]
pub fn is_credential(name: &str) -> bool {
    const NAMES: [&str; 8] = ["sig", "secret", "password", "passwd", "pwd", "auth", "code", "credential"];
    const ENDS: [&str; 6] = ["key", "token", "secret", "password", "signature", "credentials"];
    let name = name.to_ascii_lowercase().replace(['-', '.'], "_");
    NAMES.contains(&name.as_str()) || ENDS.iter().any(|end| name.ends_with(end))
}

/// `url` split for the client: the base without its query (async-openai appends the path to
/// it) and the query, which the transport adds to every request unchanged.
fn split_query(url: &str) -> (&str, Option<&str>) {
    let url = url.split_once('#').map_or(url, |(head, _)| head);
    match url.split_once('?') {
        Some((base, query)) => (base, Some(query).filter(|q| !q.is_empty())),
        None => (url, None),
    }
}

fn without_credentials<S: serde::Serializer>(url: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&redact_url(url))
}

impl Endpoint {
    /// `text` with the API key and any bearer token replaced by `<redacted>`: for messages from
    /// the server, which may echo the request.
    #[must_use]
    pub fn redact(&self, text: &str) -> String {
        let mut text = match self.api_key.as_deref().filter(|k| !k.is_empty()) {
            Some(key) => text.replace(key, "<redacted>"),
            None => text.to_owned(),
        };
        let mut from = 0;
        while let Some(found) = text[from..].find("Bearer ") {
            let start = from + found + "Bearer ".len();
            let end = text[start..]
                .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                .map_or(text.len(), |e| start + e);
            text.replace_range(start..end, "<redacted>");
            from = start + "<redacted>".len();
        }
        text
    }
}

/// Prices in money units per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Price {
    /// Per million prompt tokens.
    pub prompt: f64,
    /// Per million completion tokens.
    pub completion: f64,
}

impl Price {
    /// Money for `prompt` and `completion` tokens.
    #[must_use]
    pub fn of(self, prompt: u64, completion: u64) -> f64 {
        (prompt as f64 * self.prompt + completion as f64 * self.completion) / 1e6
    }

    /// These prices times `discount`: what a call through a batch costs.
    #[must_use]
    pub fn discounted(self, discount: f64) -> Self {
        Self { prompt: self.prompt * discount, completion: self.completion * discount }
    }
}

/// Spending limits; reaching one stops sending new calls.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Budget {
    /// Prompt + completion tokens at most.
    pub max_tokens_total: Option<u64>,
    /// Money at most (needs `price`).
    pub max_cost: Option<f64>,
    /// Prices, to turn tokens into money.
    pub price: Option<Price>,
}

/// How to call the endpoint.
#[derive(Debug, Clone, Serialize)]
pub struct LlmConfig {
    /// Where.
    pub endpoint: Endpoint,
    /// Per-attempt timeout.
    #[serde(rename = "timeout_secs", serialize_with = "as_secs")]
    pub timeout: Duration,
    /// Concurrency and rates.
    pub limits: LimitConfig,
    /// Retries.
    #[serde(skip)]
    pub retry: RetryPolicy,
    /// Sampling temperature.
    pub temperature: f32,
    /// `max_tokens` of each call.
    pub max_tokens: u32,
    /// Seed sent to servers that support it.
    pub seed: u64,
    /// Spending limits.
    pub budget: Budget,
    /// Batch inference instead of online calls (`--batch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchConfig>,
    /// Price of a reply that came through a batch, as a share of the online price.
    #[serde(skip_serializing_if = "is_default_discount")]
    pub batch_discount: f64,
}

#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
fn is_default_discount(discount: &f64) -> bool {
    (*discount - DEFAULT_DISCOUNT).abs() < f64::EPSILON
}

/// Who speaks in a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The instructions.
    System,
    /// The request.
    User,
    /// The model's earlier reply (before a re-ask).
    Assistant,
}

/// A chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with this role.
    #[must_use]
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self { role, content: content.into() }
    }
}

/// The request body we send (async-openai's "bring your own types" path).
#[derive(Debug, Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [Message],
    temperature: f32,
    /// `max_tokens`, not `max_completion_tokens`: local servers ignore the latter.
    max_tokens: u32,
    seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a serde_json::Value>,
    stream: bool,
}

/// The parts of a chat completion we read; everything else may be missing.
#[derive(Debug, Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    message: ChoiceMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// Which failures a call retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RetryOn {
    /// 429, 5xx, connection errors and timeouts.
    Transient,
    /// The same, but an error answer that names the response format is final.
    Probe,
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The message content.
    pub content: String,
    /// Cut off by `max_tokens` (`finish_reason: length`).
    pub truncated: bool,
}

/// Tokens of the replies a run used, whether fresh or from the cache: the same for every run
/// of the same build, so it belongs in the report. Attempts abandoned on a timeout are counted
/// apart, as an estimate: the server may still have answered and billed them, but never said
/// for how much.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenUsage {
    /// Replies used.
    pub replies: u64,
    /// Their prompt tokens, from the server's `usage`.
    pub prompt_tokens: u64,
    /// Their completion tokens, from the server's `usage`.
    pub completion_tokens: u64,
    /// Attempts abandoned on a timeout.
    pub abandoned: u64,
    /// Their prompt tokens, estimated (cl100k).
    pub abandoned_prompt_tokens: u64,
    /// Their completion tokens at worst (`max_tokens` each).
    pub abandoned_completion_tokens: u64,
    /// Of the replies, those that came through a batch (at the batch price).
    #[serde(skip_serializing_if = "is_zero")]
    pub batch_replies: u64,
    /// Their prompt tokens.
    #[serde(skip_serializing_if = "is_zero")]
    pub batch_prompt_tokens: u64,
    /// Their completion tokens.
    #[serde(skip_serializing_if = "is_zero")]
    pub batch_completion_tokens: u64,
}

#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TokenUsage {
    /// Money for the replies at `price`.
    #[must_use]
    pub fn cost(&self, price: Price) -> f64 {
        price.of(self.prompt_tokens, self.completion_tokens)
    }

    /// Money for the replies at `price`, those that came through a batch at `discount` times
    /// it.
    #[must_use]
    pub fn cost_at(&self, price: Price, discount: f64) -> f64 {
        let online = price.of(
            self.prompt_tokens.saturating_sub(self.batch_prompt_tokens),
            self.completion_tokens.saturating_sub(self.batch_completion_tokens),
        );
        online + price.discounted(discount).of(self.batch_prompt_tokens, self.batch_completion_tokens)
    }

    /// Money the abandoned attempts may have cost at `price`, at worst (an estimate).
    #[must_use]
    pub fn abandoned_cost(&self, price: Price) -> f64 {
        price.of(self.abandoned_prompt_tokens, self.abandoned_completion_tokens)
    }

    /// Tokens of the replies, plus the worst case of the abandoned attempts: what a budget
    /// counts.
    #[must_use]
    pub fn worst_tokens(&self) -> u64 {
        self.prompt_tokens
            + self.completion_tokens
            + self.abandoned_prompt_tokens
            + self.abandoned_completion_tokens
    }

    fn add(&mut self, reply: &CachedReply) {
        self.replies += 1;
        self.prompt_tokens += reply.prompt_tokens;
        self.completion_tokens += reply.completion_tokens;
    }

    fn add_batched(&mut self, reply: &CachedReply) {
        self.batch_replies += 1;
        self.batch_prompt_tokens += reply.prompt_tokens;
        self.batch_completion_tokens += reply.completion_tokens;
    }

    /// Counts `attempts` abandoned attempts of a request of about `prompt` prompt tokens and
    /// `max_tokens`.
    fn abandon(&mut self, attempts: u64, prompt: u32, max_tokens: u32) {
        self.abandoned += attempts;
        self.abandoned_prompt_tokens += attempts * u64::from(prompt);
        self.abandoned_completion_tokens += attempts * u64::from(max_tokens);
    }

    fn merge(&mut self, other: &Self) {
        self.replies += other.replies;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.abandoned += other.abandoned;
        self.abandoned_prompt_tokens += other.abandoned_prompt_tokens;
        self.abandoned_completion_tokens += other.abandoned_completion_tokens;
        self.batch_replies += other.batch_replies;
        self.batch_prompt_tokens += other.batch_prompt_tokens;
        self.batch_completion_tokens += other.batch_completion_tokens;
    }
}

/// What this run sent over the network: differs between a first run and a warm rerun.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NetworkStats {
    /// Requests sent (retries included).
    pub requests: u64,
    /// Calls answered from the cache.
    pub cache_hits: u64,
    /// Attempts retried.
    pub retries: u64,
    /// 429 answers received.
    pub rate_limited: u64,
    /// Calls that failed for good.
    pub failures: u64,
    /// Tokens of the replies paid for in this run, and of the attempts it abandoned.
    pub paid: TokenUsage,
    /// Of the replies paid for, those that came through a batch.
    #[serde(skip_serializing_if = "is_zero")]
    pub batched: u64,
}

#[derive(Debug, Default)]
struct Totals {
    used: TokenUsage,
    /// Spent before the set's calls (the preflight): counts against the budget, not in the set.
    before: TokenUsage,
    /// Worst case of the requests in flight: prompt estimate + `max_tokens` each.
    reserved: u64,
    network: NetworkStats,
}

impl Totals {
    /// Reserves the worst case of a request (`tokens` = prompt estimate + `max_tokens`), or
    /// refuses it if that could take the spend over `budget`: the limits are hard caps, even
    /// with requests in flight, and count abandoned attempts at their worst. Money is counted
    /// at the price each token is paid at: replies that came through a batch, and a request
    /// `via` a batch, at `discount` times the price; online replies, online requests in flight
    /// and abandoned attempts (always online) at the full price.
    fn reserve(&mut self, budget: Budget, discount: f64, tokens: u64, via: Via) -> Result<(), LlmError> {
        let used = self.used.worst_tokens() + self.before.worst_tokens();
        let worst = used.saturating_add(self.reserved).saturating_add(tokens);
        if let Some(limit) = budget.max_tokens_total.filter(|limit| worst > *limit) {
            return Err(LlmError::Budget(format!(
                "{used} tokens used (abandoned attempts at their worst included); the next call could \
                 take up to {} more, over --max-tokens-total {limit}",
                worst - used
            )));
        }
        if let (Some(limit), Some(price)) = (budget.max_cost, budget.price) {
            let dearest = price.prompt.max(price.completion);
            let share = match via {
                Via::Online => 1.0,
                Via::Batch => discount,
            };
            let spent = |u: &TokenUsage| u.cost_at(price, discount) + u.abandoned_cost(price);
            let next = (self.reserved as f64 + tokens as f64 * share) * dearest / 1e6;
            let cost = spent(&self.used) + spent(&self.before) + next;
            if cost > limit {
                return Err(LlmError::Budget(format!(
                    "the next call could bring the cost to {cost:.4}, over --max-cost {limit}"
                )));
            }
        }
        self.reserved = self.reserved.saturating_add(tokens);
        Ok(())
    }
}

/// A client for one endpoint, with its cache and limits.
pub struct Llm {
    client: Client<OpenAIConfig>,
    config: LlmConfig,
    limits: std::sync::Arc<Limits>,
    cache: Cache,
    totals: Mutex<Totals>,
    stall: StallClock,
    /// The base URL names this machine: a refused connection means nothing listens.
    loopback: bool,
    /// In batch mode, the calls waiting for a batch.
    batch: Option<batch::Deferral>,
}

/// Checks that `base_url` is an http(s) URL with a host; `Ok(true)` if the host is this
/// machine (a loopback address or `localhost`).
fn check_base_url(base_url: &str) -> Result<bool, LlmError> {
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
        let service = transport::service(http, keyed, query, std::sync::Arc::clone(&limits));
        let client = Client::with_config(openai).with_http_service(service);
        let batch = config.batch.clone().map(batch::Deferral::new);
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

    fn note_key(&self, name: &str) -> String {
        let mut hasher = ContentHasher::default();
        let url = redact_url(&self.config.endpoint.base_url);
        hasher.update(&["note", name, &url, &self.config.endpoint.model]);
        hasher.finish()
    }

    /// The cache key of a call: base URL (as shown: a new credential in it keeps the cache),
    /// model, and the whole request body.
    fn key(&self, body: &str) -> String {
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
    fn cached(
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

    fn request<'r>(
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
    /// [`retry::Retry::run`]). An attempt abandoned on a timeout is counted at its worst (the
    /// server may still bill it), and the reply remembers how many there were.
    async fn send(&self, request: &ChatRequest<'_>, retry_on: RetryOn) -> Result<CachedReply, LlmError> {
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
        let retry =
            retry::Retry { policy: &self.config.retry, effect: Effect::Repeatable, stall: &self.stall };
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
    async fn attempt(
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
    async fn exchange(&self, request: &ChatRequest<'_>) -> Result<CachedReply, LlmError> {
        self.update(|t| t.network.requests += 1);
        let chat = self.client.chat();
        reply_from(self.timed(chat.create_byot::<_, ChatResponse>(request)).await?)
    }

    /// Runs one request to the server (a chat completion, a Files or Batches call) within the
    /// timeout, its time counted on the stall clock; a failure is classified, with the server's
    /// message redacted, and a 429 is counted.
    async fn timed<T>(&self, call: impl Future<Output = Result<T, OpenAIError>>) -> Result<T, LlmError> {
        let waiting = self.stall.wait();
        let outcome = tokio::time::timeout(self.config.timeout, call).await;
        drop(waiting);
        self.settle(outcome.map_err(|_| LlmError::Timeout(self.config.timeout)))
    }

    /// As [`Llm::timed`], for an upload: the timeout runs from the last bytes of its body that
    /// went out, not from its start, and bytes going out restart the stall clock (see
    /// [`upload`]).
    async fn timed_upload<T>(
        &self,
        call: impl Future<Output = Result<T, OpenAIError>>,
    ) -> Result<T, LlmError> {
        let waiting = self.stall.wait();
        let outcome = upload::watched(&self.stall, self.config.timeout, call).await;
        drop(waiting);
        self.settle(outcome)
    }

    /// What came of one request: its value, or its failure classified.
    fn settle<T>(&self, outcome: Result<Result<T, OpenAIError>, LlmError>) -> Result<T, LlmError> {
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

    fn update<T>(&self, change: impl FnOnce(&mut Totals) -> T) -> T {
        change(&mut self.totals.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

fn as_secs<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(duration.as_secs())
}

/// The reply of a chat completion.
fn reply_from(response: ChatResponse) -> Result<CachedReply, LlmError> {
    let usage = response.usage.unwrap_or_default();
    let choice = response.choices.into_iter().next().ok_or_else(|| LlmError::Body("no choices".into()))?;
    Ok(CachedReply {
        content: choice.message.content.unwrap_or_default(),
        finish_reason: choice.finish_reason,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        abandoned: 0,
    })
}

/// The reply of a chat completion given as JSON (a batch result's body).
fn reply_of(body: serde_json::Value) -> Result<CachedReply, LlmError> {
    let response: ChatResponse = serde_json::from_value(body).map_err(|e| LlmError::Body(e.to_string()))?;
    reply_from(response)
}

fn completion(reply: &CachedReply) -> Completion {
    Completion { content: reply.content.clone(), truncated: reply.finish_reason.as_deref() == Some("length") }
}

/// Maps async-openai's error onto ours (`loopback`: the endpoint is on this machine).
fn classify(error: OpenAIError, loopback: bool) -> LlmError {
    match error {
        OpenAIError::Boxed(boxed) => match boxed.downcast::<transport::HttpFailure>() {
            Ok(failure) => LlmError::Http {
                status: failure.status,
                message: failure.message,
                retry_after: failure.retry_after,
            },
            Err(other) => {
                let kind = ConnectKind::of(other.as_ref(), loopback);
                LlmError::Connect { kind, source: std::sync::Arc::from(other) }
            }
        },
        OpenAIError::Reqwest(e) => LlmError::connect(e, loopback),
        OpenAIError::ApiError(e) => {
            LlmError::Http { status: e.status_code.as_u16(), message: e.api_error.message, retry_after: None }
        }
        OpenAIError::JSONDeserialize(e, _) => LlmError::Body(e.to_string()),
        other => LlmError::Body(other.to_string()),
    }
}

/// Loads the tables [`estimate_tokens`] counts with, once per process (some 50 ms of work that
/// the first call to it would otherwise wait for).
pub fn load_token_counter() {
    tiktoken_rs::cl100k_base_singleton();
}

/// Prompt tokens of a request, as cl100k counts them: the messages, a few per message, and the
/// `response_format` (servers count a JSON schema as prompt).
#[must_use]
pub fn estimate_tokens(messages: &[Message], response_format: Option<&serde_json::Value>) -> u32 {
    let bpe = tiktoken_rs::cl100k_base_singleton();
    let text: usize = messages.iter().map(|m| bpe.encode_ordinary(&m.content).len() + 4).sum();
    let format = response_format.map_or(0, |f| bpe.encode_ordinary(&f.to_string()).len());
    u32::try_from(text + format).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_format_counts_as_prompt() {
        let messages = [Message::new(Role::User, "Reply with JSON.")];
        let schema = serde_json::json!({"type": "json_schema", "json_schema": {"name": "queries", "schema": {
            "type": "object", "properties": {"queries": {"type": "array", "items": {"type": "string"}}}}}});
        let bare = estimate_tokens(&messages, None);
        assert_eq!(bare, 4 + 4, "four tokens of text, four per message");
        assert!(estimate_tokens(&messages, Some(&schema)) > bare + 20);
    }

    #[test]
    fn roles_are_written_as_the_chat_api_names_them() {
        let messages = [Message::new(Role::System, "s"), Message::new(Role::Assistant, "a")];
        assert_eq!(
            serde_json::to_string(&messages).unwrap(),
            r#"[{"role":"system","content":"s"},{"role":"assistant","content":"a"}]"#
        );
    }

    #[test]
    fn budgets_count_abandoned_attempts_at_their_worst() {
        let online = |t: &mut Totals, budget, tokens| t.reserve(budget, 0.5, tokens, Via::Online);
        let mut totals = Totals::default();
        totals.used.prompt_tokens = 1_000;
        let budget = Budget { max_tokens_total: Some(2_000), ..Budget::default() };
        assert!(online(&mut totals, budget, 200).is_ok(), "1,000 used + 200 fits in 2,000");
        totals.reserved = 0;
        totals.used.abandon(1, 500, 400);
        let refused = online(&mut totals, budget, 200);
        assert!(
            matches!(&refused, Err(LlmError::Budget(m)) if m.starts_with("1900 tokens used")),
            "{refused:?}"
        );

        let price = Price { prompt: 1.0, completion: 2.0 };
        let budget = Budget { max_cost: Some(0.0025), price: Some(price), ..Budget::default() };
        let mut totals = Totals::default();
        totals.used.prompt_tokens = 1_000;
        totals.used.abandon(1, 500, 400);
        // 1,000 × 1 + (500 × 1 + 400 × 2) = 2,300 per million, and the next call's 100 at 2.
        assert!(online(&mut totals, budget, 100).is_ok());
        totals.reserved = 0;
        assert!(online(&mut totals, budget, 200).is_err(), "2,300 + 400 over 2,500");
    }

    #[test]
    fn a_budget_prices_each_token_at_what_it_is_paid() {
        let price = Price { prompt: 1.0, completion: 2.0 };
        let budget = |max_cost| Budget { max_cost: Some(max_cost), price: Some(price), ..Budget::default() };
        // 1,000 prompt tokens used online: 1,000 × 1 = 1,000 per million, at the full price.
        let mut online = Totals::default();
        online.used.prompt_tokens = 1_000;
        // A batch of 1,000 tokens at the dearest price, halved: 1,000 × 2 × 0.5 = 1,000.
        // 2,000 in all, over 1,800 (discounting the online 1,000 too would make it 1,500).
        assert!(online.reserve(budget(1.8e-3), 0.5, 1_000, Via::Batch).is_err());
        assert!(online.reserve(budget(2.1e-3), 0.5, 1_000, Via::Batch).is_ok(), "2,000 fits in 2,100");
        assert_eq!(online.reserved, 1_000);

        // 1,000 prompt tokens used through a batch: 1,000 × 1 × 0.5 = 500 per million. The next
        // online call of 500 tokens: 500 × 2 = 1,000. 1,500 in all, within 1,600 (at the full
        // price the batch replies would make it 2,000).
        let mut batched = Totals::default();
        batched.used.prompt_tokens = 1_000;
        batched.used.batch_prompt_tokens = 1_000;
        assert!(batched.reserve(budget(1.6e-3), 0.5, 500, Via::Online).is_ok());
        batched.reserved = 0;
        assert!(batched.reserve(budget(1.4e-3), 0.5, 500, Via::Online).is_err(), "1,500 over 1,400");

        // The preflight's online replies are counted at the full price too: 200 × 2 = 400, and
        // 1,000 batch tokens at 1 (at the batch price, the preflight would count 200: 1,200).
        let mut before = Totals::default();
        before.before.completion_tokens = 200;
        assert!(before.reserve(budget(1.3e-3), 0.5, 1_000, Via::Batch).is_err(), "1,400 over 1,300");
    }

    #[test]
    fn a_budget_takes_the_worst_case_of_a_big_run_whole() {
        // Seven billion tokens do not fit in u32: the reservation must not be cut to 4.29e9.
        let budget = Budget { max_tokens_total: Some(6_000_000_000), ..Budget::default() };
        let mut totals = Totals::default();
        assert!(totals.reserve(budget, 0.5, 7_000_000_000, Via::Batch).is_err());
        assert!(totals.reserve(budget, 0.5, 5_000_000_000, Via::Batch).is_ok());
        assert_eq!(totals.reserved, 5_000_000_000);
    }

    #[test]
    fn batch_replies_cost_the_discounted_price() {
        let usage = TokenUsage {
            prompt_tokens: 1_000,
            completion_tokens: 500,
            batch_prompt_tokens: 400,
            batch_completion_tokens: 100,
            ..TokenUsage::default()
        };
        let price = Price { prompt: 1.0, completion: 2.0 };
        // Online: 600 × 1 + 400 × 2 = 1,400; batch: 400 × 0.5 + 100 × 1 = 300 (per million).
        assert!((usage.cost_at(price, 0.5) - 1_700e-6).abs() < 1e-15, "{}", usage.cost_at(price, 0.5));
        assert_eq!(price.discounted(0.5), Price { prompt: 0.5, completion: 1.0 });
    }

    #[test]
    fn without_a_discount_batch_replies_cost_what_online_ones_do_and_each_token_is_priced_once() {
        // Uneven prices and counts: summing the online and batch parts rounds differently from
        // the whole, so costs are compared within a rounding error, never bit for bit.
        let usage = TokenUsage {
            prompt_tokens: 1_234_567,
            completion_tokens: 89_013,
            batch_prompt_tokens: 234_567,
            batch_completion_tokens: 9_013,
            ..TokenUsage::default()
        };
        let price = Price { prompt: 0.15, completion: 0.6 };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(
            close(usage.cost_at(price, 1.0), usage.cost(price)),
            "{} vs {}",
            usage.cost_at(price, 1.0),
            usage.cost(price)
        );
        // At a discount of 0.25: online 1,000,000 × 0.15 + 80,000 × 0.6 = 198,000; batch
        // (234,567 × 0.15 + 9,013 × 0.6) × 0.25 = 10,148.2125 (per million). Pricing the batch
        // tokens online as well (not subtracted) would give 248,741.06; discounting every
        // token, 59,648.21.
        let expected = (198_000.0 + 10_148.212_5) / 1e6;
        assert!(close(usage.cost_at(price, 0.25), expected), "{} vs {expected}", usage.cost_at(price, 0.25));
    }

    #[test]
    fn redacts_keys_bearer_tokens_and_url_credentials() {
        let endpoint = Endpoint {
            base_url: "https://user:pa55@llm.example/v1".into(),
            model: "m".into(),
            api_key: Some("sk-abc123".into()),
        };
        let echoed = r#"bad header: "Authorization: Bearer sk-abc123", also Bearer other-token"#;
        assert_eq!(
            endpoint.redact(echoed),
            r#"bad header: "Authorization: Bearer <redacted>", also Bearer <redacted>"#
        );
        assert_eq!(redact_url(&endpoint.base_url), "https://llm.example/v1");
        assert_eq!(redact_url("http://127.0.0.1:8080/v1"), "http://127.0.0.1:8080/v1");
        let cases = [
            ("https://u:p@h.example/v1?api-key=s3cr3t&x=1", "https://h.example/v1?api-key=<redacted>&x=1"),
            (
                "https://h/v1?api_key=a&key=b&token=c&access_token=d&sig=e",
                "https://h/v1?api_key=<redacted>&key=<redacted>&token=<redacted>&access_token=<redacted>&sig=<redacted>",
            ),
            (
                "https://h/v1?Subscription-Key=a&model=m#frag",
                "https://h/v1?Subscription-Key=<redacted>&model=m#frag",
            ),
            ("https://h/p@th/v1", "https://h/p@th/v1"),
            ("http://h", "http://h"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
        assert_eq!(
            split_query("https://h/v1?api-key=a%2Fb&x=1"),
            ("https://h/v1", Some("api-key=a%2Fb&x=1"))
        );
        assert_eq!(split_query("https://h/v1/"), ("https://h/v1/", None));
        let json = serde_json::to_string(&endpoint).unwrap_or_default();
        assert!(!json.contains("pa55") && !json.contains("sk-abc123"), "{json}");
        assert!(!format!("{endpoint:?}").contains("sk-abc123"));
    }
}
