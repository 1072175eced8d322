//! The LLM generator: asks a chat model for several queries per call, one call per chunk (or
//! multi_hop pair), and turns the validated replies into drafts.
//!
//! Invariants: a call is sent only after a preflight chose a response format the server
//! accepts; every request ends as a draft or a failure with a reason (and the reply, for
//! `rejects.jsonl`); an unusable reply is re-asked at most `repairs` times; calls run with
//! `buffered`, so results keep the plan's order whatever order the server answers in.

use super::prompt::{Prompts, Template};
use super::reply::{ReplyQuery, holds_object, parse_grade, parse_reply};
use super::{Draft, Failure, Generated, Generator, Request};
use crate::error::{Error, Result};
use crate::index::ChunkIndex;
use crate::judge::{Ask, Grade, Judge, Ungraded};
use crate::llm::{ConnectKind, Llm, LlmError, Message, NetworkStats, TokenUsage, estimate_tokens};
use crate::progress::Stage;
use crate::record::{FailureKind, QueryType};
use crate::rng::stream;
use futures::StreamExt as _;
use rand::distr::{Distribution, weighted::WeightedIndex};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Cache note holding the response format a preflight chose.
const PREFLIGHT_NOTE: &str = "preflight-json-mode";
/// Cache note holding the response format that gave a usable reply: only a mode that did is
/// trusted by a later run without probing again.
const USABLE_NOTE: &str = "preflight-json-mode-usable";

/// Characters of a bad reply kept in `rejects.jsonl`.
const REPLY_EXCERPT: usize = 600;

/// How the reply's structure is requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonMode {
    /// `response_format: json_schema` with the schema of `prompts/schema.json`.
    Schema,
    /// `response_format: json_object`.
    Object,
    /// No `response_format`: the prompt alone asks for JSON.
    Plain,
}

impl JsonMode {
    /// Modes from most to least structured: the preflight's order of trial.
    pub const FALLBACK_ORDER: [Self; 3] = [Self::Schema, Self::Object, Self::Plain];

    /// The label used in flags and reports.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Schema => "json_schema",
            Self::Object => "json_object",
            Self::Plain => "plain",
        }
    }
}

/// Settings of the LLM generator besides the endpoint.
#[derive(Debug, Clone, Serialize)]
pub struct LlmGeneration {
    /// A fixed response format, or `None` to let the preflight choose.
    pub json_mode: Option<JsonMode>,
    /// Re-asks after an unusable reply.
    pub repairs: u32,
    /// Query styles and their shares.
    pub styles: Vec<(String, f64)>,
    /// Queries asked for in one call.
    pub queries_per_call: usize,
    /// Stop when no call finished for this long.
    #[serde(skip)]
    pub stall_after: Duration,
}

/// The LLM part of a build's manifest and report: the same for every run of the same build.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlmSummary {
    /// Base URL.
    pub base_url: String,
    /// Model.
    pub model: String,
    /// Response format chosen by the preflight (or `--json-mode`).
    pub json_mode: JsonMode,
    /// Tokens of the replies behind this set, cached or fresh.
    pub usage: TokenUsage,
    /// Their cost, if prices are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// What the abandoned attempts may have cost at worst (an estimate), if prices are known
    /// and there were any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abandoned_cost: Option<f64>,
    /// The price of a batch reply as a share of the online price, if any reply came through a
    /// batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_discount: Option<f64>,
}

/// The LLM generator's summary plus what this run sent over the network.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmReport {
    /// The deterministic part.
    pub summary: LlmSummary,
    /// Why the response format was chosen (for the `connect:` line).
    pub mode_reason: String,
    /// This run's network statistics.
    pub network: NetworkStats,
}

/// One call: a chunk (or pair) and the queries it is asked for.
#[derive(Debug, Clone)]
struct Call {
    sources: Vec<usize>,
    tasks: Vec<Task>,
}

#[derive(Debug, Clone)]
struct Task {
    request: usize,
    query_type: QueryType,
    style: String,
}

/// Why no usable reply came back: the kind, the words, and the last reply (if any).
struct Unusable {
    kind: FailureKind,
    reason: String,
    reply: Option<String>,
}

impl Unusable {
    /// The failure of a call that got no reply at all.
    fn of(error: &LlmError) -> Self {
        let kind = match error {
            LlmError::Timeout(_) => FailureKind::Timeout,
            LlmError::Http { .. } => FailureKind::HttpError,
            LlmError::Connect { .. } | LlmError::BaseUrl(_) => FailureKind::Connection,
            LlmError::Body(_) | LlmError::Budget(_) | LlmError::Deferred => FailureKind::BadResponse,
        };
        Self { kind, reason: error.chain(), reply: None }
    }
}

/// Queries written by a chat model.
pub struct LlmGenerator<'a> {
    index: &'a ChunkIndex,
    llm: Llm,
    prompts: Prompts,
    settings: LlmGeneration,
    mode: JsonMode,
    /// Why `mode` was chosen.
    mode_reason: String,
    /// A reply in `mode` was usable (and the cache knows it).
    mode_usable: std::sync::atomic::AtomicBool,
    runtime: tokio::runtime::Runtime,
    name: String,
    seed: u64,
}

impl<'a> LlmGenerator<'a> {
    /// A generator over the chunks of `index`. With `preflight`, one small call first checks the
    /// endpoint and picks the response format (unless `settings.json_mode` fixes it).
    ///
    /// # Errors
    /// [`Error::Endpoint`] when the endpoint cannot be reached or refuses the model;
    /// [`Error::Prompt`] when a style is not defined in the prompts.
    pub fn new(
        index: &'a ChunkIndex,
        llm: Llm,
        prompts: Prompts,
        settings: LlmGeneration,
        seed: u64,
        preflight: bool,
    ) -> Result<Self> {
        for (style, _) in &settings.styles {
            if !prompts.styles.contains_key(style) {
                let known: Vec<&str> = prompts.styles.keys().map(String::as_str).collect();
                return Err(Error::Prompt {
                    path: format!("{}/{}/styles.md", prompts.source, prompts.language.code()).into(),
                    message: format!(
                        "--styles names {style:?}, which is not defined (known: {})",
                        known.join(", ")
                    ),
                });
            }
        }
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(
                |e| endpoint_error(&llm, format!("cannot start the async runtime: {e}"), "report this"),
            )?;
        let name = format!("llm:{}", llm.config().endpoint.model);
        let mut generator = Self {
            index,
            llm,
            prompts,
            mode: settings.json_mode.unwrap_or(JsonMode::Schema),
            mode_reason: if settings.json_mode.is_some() { "--json-mode" } else { "not probed" }.to_owned(),
            mode_usable: std::sync::atomic::AtomicBool::new(false),
            settings,
            runtime,
            name,
            seed,
        };
        if preflight {
            generator.llm.begin_batch();
            let checked = async {
                tokio::select! {
                    mode = generator.preflight() => mode,
                    () = generator.watchdog() => Err(generator.stalled()),
                }
            };
            (generator.mode, generator.mode_reason) = generator.runtime.block_on(checked)?;
            generator.llm.forget_usage();
        }
        Ok(generator)
    }

    /// The mode chosen by an earlier preflight against this endpoint and model, if a reply in
    /// it was usable: a rerun does not probe again (but a mode that gave nothing usable is
    /// probed again).
    fn remembered_mode(&self) -> Option<JsonMode> {
        let label = self.llm.note(PREFLIGHT_NOTE).ok().flatten()?;
        let usable = self.llm.note(USABLE_NOTE).ok().flatten()?;
        JsonMode::FALLBACK_ORDER.into_iter().find(|m| m.label() == label && usable == label)
    }

    /// Notes that a reply in the mode in use was usable, once per run.
    fn mode_worked(&self) {
        if self.settings.json_mode.is_none()
            && !self.mode_usable.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            // Only saves a later run a probe: if the note cannot be written, that run probes.
            let _ = self.llm.remember(USABLE_NOTE, self.mode.label());
        }
    }

    /// The response format in use.
    #[must_use]
    pub fn mode(&self) -> JsonMode {
        self.mode
    }

    /// The client, for its usage totals.
    #[must_use]
    pub fn llm(&self) -> &Llm {
        &self.llm
    }

    /// Picks the response format: the one a usable earlier run chose, or the first the server
    /// follows when probed (unless `--json-mode` fixes it). Returns the mode and why.
    /// Connection failures and refusals of the key or the model are fatal.
    async fn preflight(&self) -> Result<(JsonMode, String)> {
        if self.settings.json_mode.is_none()
            && let Some(mode) = self.remembered_mode()
        {
            return Ok((mode, "chosen by an earlier run against this endpoint and model".to_owned()));
        }
        let chosen = self.probe().await?;
        if self.settings.json_mode.is_none() {
            self.llm
                .remember(PREFLIGHT_NOTE, chosen.0.label())
                .map_err(|e| endpoint_error(&self.llm, e.to_string(), "check --cache"))?;
        }
        Ok(chosen)
    }

    /// Tries the response formats in turn with one small call each (retried like any call).
    /// Only a definite "unsupported" passes on to the next: an error answer naming the
    /// response format, or a reply that ignores it. Returns the mode and why it was chosen.
    async fn probe(&self) -> Result<(JsonMode, String)> {
        let messages = vec![
            Message::new("system", self.system_message()?),
            Message::new("user", self.prompts.preflight.render(&[])?),
        ];
        let modes: Vec<JsonMode> = match self.settings.json_mode {
            Some(mode) => vec![mode],
            None => JsonMode::FALLBACK_ORDER.to_vec(),
        };
        let mut passed_over = Vec::new();
        for (i, &mode) in modes.iter().enumerate() {
            let last = i + 1 == modes.len();
            let error = match self.llm.probe(&messages, self.response_format(mode).as_ref()).await {
                Ok(reply) => match ignored(mode, &reply.content) {
                    Some(problem) if !last => {
                        passed_over.push(format!("{} ignored: {problem}", mode.label()));
                        continue;
                    }
                    _ => return Ok((mode, self.why(mode, &passed_over))),
                },
                Err(error) => error,
            };
            match error {
                LlmError::Http { .. } if error.names_response_format() && !last => {
                    passed_over.push(format!("{} refused: {error}", mode.label()));
                }
                error => return Err(self.probe_failed(mode, &error)),
            }
        }
        Err(endpoint_error(&self.llm, "offers no response format".to_owned(), "report this"))
    }

    /// Why the preflight chose `mode`, after passing over the modes in `passed_over`.
    fn why(&self, mode: JsonMode, passed_over: &[String]) -> String {
        if self.settings.json_mode.is_some() {
            "--json-mode".to_owned()
        } else if passed_over.is_empty() {
            match mode {
                JsonMode::Schema => "the server follows the schema",
                JsonMode::Object => "the server answers in JSON",
                JsonMode::Plain => "the prompt asks for JSON",
            }
            .to_owned()
        } else {
            passed_over.join("; ")
        }
    }

    /// The error that stops the run when probing `mode` failed with `error`.
    fn probe_failed(&self, mode: JsonMode, error: &LlmError) -> Error {
        match error {
            LlmError::Budget(message) => Error::Budget(message.clone()),
            LlmError::Http { status: 401 | 403, message, .. } => {
                endpoint_error(&self.llm, format!("refused the API key: {message}"), "set OPENAI_API_KEY")
            }
            LlmError::Http { status: 404, message, .. } => endpoint_error(
                &self.llm,
                format!("does not serve model {:?}: {message}", self.llm.config().endpoint.model),
                "check --model and --base-url (it usually ends in /v1)",
            ),
            LlmError::Connect { kind: ConnectKind::RefusedLocally, .. } => endpoint_error(
                &self.llm,
                format!("does not answer: {}", error.chain()),
                "start the server, or check --base-url (a refusal on this machine is not retried)",
            ),
            LlmError::Connect { .. } | LlmError::Timeout(_) => endpoint_error(
                &self.llm,
                format!("does not answer: {}", error.chain()),
                "is the server running? check --base-url",
            ),
            LlmError::Body(_) | LlmError::BaseUrl(_) | LlmError::Deferred => endpoint_error(
                &self.llm,
                format!("does not answer as a chat endpoint: {}", error.chain()),
                "check --base-url (it usually ends in /v1)",
            ),
            LlmError::Http { .. } => endpoint_error(
                &self.llm,
                format!("rejected {}: {}", mode.label(), error.chain()),
                "try another --json-mode (json_object, plain), or check the server's log",
            ),
        }
    }

    fn system_message(&self) -> Result<String> {
        self.prompts.system.render(&[("language", self.prompts.language.name())])
    }

    fn response_format(&self, mode: JsonMode) -> Option<serde_json::Value> {
        match mode {
            JsonMode::Schema => Some(serde_json::json!({
                "type": "json_schema",
                "json_schema": {"name": "queries", "strict": true, "schema": self.prompts.schema},
            })),
            JsonMode::Object => Some(serde_json::json!({"type": "json_object"})),
            JsonMode::Plain => None,
        }
    }

    /// Groups requests with the same sources into calls, in plan order, and draws a style for
    /// each request.
    fn calls(&self, requests: &[Request]) -> Vec<Call> {
        let weights: Vec<f64> = self.settings.styles.iter().map(|(_, w)| *w).collect();
        let styles = WeightedIndex::new(&weights).ok();
        let mut calls: Vec<Call> = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            let ids: Vec<&str> = request.sources.iter().map(|&c| self.index.meta(c).id.as_str()).collect();
            let mut rng = stream(self.seed, &format!("style/{}/{}/{i}", request.query_type, ids.join("+")));
            let style = match &styles {
                Some(dist) => self.settings.styles[dist.sample(&mut rng)].0.clone(),
                None => "question".to_owned(),
            };
            let task = Task { request: i, query_type: request.query_type, style };
            let per_call = self.settings.queries_per_call.max(1);
            match calls.iter_mut().find(|c| c.sources == request.sources && c.tasks.len() < per_call) {
                Some(call) => call.tasks.push(task),
                None => calls.push(Call { sources: request.sources.clone(), tasks: vec![task] }),
            }
        }
        calls
    }

    /// The messages of a call.
    fn messages(&self, call: &Call) -> Result<Vec<Message>> {
        let mut passages = Vec::new();
        for (n, &chunk) in call.sources.iter().enumerate() {
            let stored = self.index.stored(chunk)?;
            let number = (n + 1).to_string();
            passages.push(self.prompts.passage.render(&[
                ("number", &number),
                ("title", &stored.title),
                ("text", &stored.text),
            ])?);
        }
        let mut groups: BTreeMap<(QueryType, &str), usize> = BTreeMap::new();
        for task in &call.tasks {
            *groups.entry((task.query_type, task.style.as_str())).or_default() += 1;
        }
        let mut tasks = Vec::new();
        for ((query_type, style), count) in groups {
            let description = self.prompts.styles.get(style).map_or("", String::as_str);
            tasks.push(self.prompts.tasks[&query_type].render(&[
                ("count", &count.to_string()),
                ("style", style),
                ("style_description", description),
            ])?);
        }
        let user = self
            .prompts
            .request
            .render(&[("passages", &passages.join("\n")), ("tasks", tasks.join("").trim_end())])?;
        Ok(vec![Message::new("system", self.system_message()?), Message::new("user", user)])
    }

    /// Runs one call, with repair re-asks; a budget error is passed up, other failures become
    /// failures of the call's requests.
    async fn run_call(&self, call: &Call, progress: &Stage) -> std::result::Result<Generated, LlmError> {
        let answer = self.ask(call).await;
        let (used, network) = (self.llm.usage(), self.llm.network());
        progress.note(format!(
            "{} tokens, {} requests, {} retries, {} failed",
            used.prompt_tokens + used.completion_tokens,
            network.requests,
            network.retries,
            network.failures
        ));
        if !matches!(answer, Err(LlmError::Deferred)) {
            progress.inc(call.tasks.len() as u64);
        }
        match answer {
            Ok(Ok(queries)) => Ok(assign(call, queries)),
            Ok(Err(unusable)) => Ok(fail_all(call, &unusable)),
            Err(error) if is_fatal(&error) => Err(error),
            Err(error) => Ok(fail_all(call, &Unusable::of(&error))),
        }
    }

    /// Asks for a call's queries until a reply parses (or the repairs run out).
    async fn ask(
        &self,
        call: &Call,
    ) -> std::result::Result<std::result::Result<Vec<ReplyQuery>, Unusable>, LlmError> {
        let messages = self.messages(call).map_err(|e| LlmError::Body(e.to_string()))?;
        let format = self.response_format(self.mode);
        let parse = |content: &str| match parse_reply(content) {
            Ok(queries) if queries.is_empty() => Err("the reply has no queries".to_owned()),
            Ok(queries) => self.wrong_language(&queries).map_or(Ok(queries), Err),
            Err(error) => Err(error),
        };
        let temperature = self.llm.config().temperature;
        self.ask_until(messages, format.as_ref(), temperature, &self.prompts.repair, parse).await
    }

    /// Sends `messages` and re-asks with `repair` until `parse` accepts the reply, at most
    /// `repairs` times. `Err(Unusable)` when no reply was usable.
    async fn ask_until<T>(
        &self,
        mut messages: Vec<Message>,
        format: Option<&serde_json::Value>,
        temperature: f32,
        repair: &Template,
        parse: impl Fn(&str) -> std::result::Result<T, String>,
    ) -> std::result::Result<std::result::Result<T, Unusable>, LlmError> {
        let mut attempt = 0;
        loop {
            let completion = self.llm.complete_at(&messages, format, temperature).await?;
            if completion.truncated {
                let reason = "truncated: the reply hit max_tokens (raise --max-tokens)".to_owned();
                let reply = Some(excerpt(&completion.content));
                return Ok(Err(Unusable { kind: FailureKind::Truncated, reason, reply }));
            }
            let error = match parse(&completion.content) {
                Ok(value) => {
                    self.mode_worked();
                    return Ok(Ok(value));
                }
                Err(error) => error,
            };
            if attempt == self.settings.repairs {
                let reason = format!("unusable reply after {attempt} repair(s): {error}");
                let reply = Some(excerpt(&completion.content));
                return Ok(Err(Unusable { kind: FailureKind::UnusableReply, reason, reply }));
            }
            attempt += 1;
            let again = repair.render(&[("error", &error)]).map_err(|e| LlmError::Body(e.to_string()))?;
            messages.push(Message::new("assistant", completion.content));
            messages.push(Message::new("user", again));
        }
    }

    /// Asks the judge about one (query, chunk) pair, at temperature 0.
    async fn grade_one(&self, ask: &Ask, progress: &Stage) -> std::result::Result<Grade, LlmError> {
        let stored = self.index.stored(ask.chunk).map_err(|e| LlmError::Body(e.to_string()))?;
        let user = self
            .prompts
            .judge
            .render(&[("query", &ask.query), ("title", &stored.title), ("text", &stored.text)])
            .map_err(|e| LlmError::Body(e.to_string()))?;
        let format = self.judge_format(self.mode);
        let messages = vec![Message::new("user", user)];
        let repair = &self.prompts.judge_repair;
        let answer = self.ask_until(messages, format.as_ref(), 0.0, repair, parse_grade).await;
        if !matches!(answer, Err(LlmError::Deferred)) {
            progress.inc(1);
        }
        let ungraded = |u: Unusable| Ungraded { kind: u.kind, reason: u.reason, reply: u.reply };
        match answer {
            Ok(Ok(grade)) => Ok(Ok(grade.grade)),
            Ok(Err(unusable)) => Ok(Err(ungraded(unusable))),
            Err(error) if is_fatal(&error) => Err(error),
            Err(error) => Ok(Err(ungraded(Unusable::of(&error)))),
        }
    }

    fn judge_format(&self, mode: JsonMode) -> Option<serde_json::Value> {
        match mode {
            JsonMode::Schema => Some(serde_json::json!({
                "type": "json_schema",
                "json_schema": {"name": "grade", "strict": true, "schema": self.prompts.judge_schema},
            })),
            JsonMode::Object | JsonMode::Plain => self.response_format(mode),
        }
    }

    /// Why the reply must be re-asked for its language, if it must.
    fn wrong_language(&self, queries: &[ReplyQuery]) -> Option<String> {
        let language = self.prompts.language;
        let wrong: Vec<usize> =
            queries.iter().enumerate().filter(|(_, q)| !language.matches(&q.text)).map(|(i, _)| i).collect();
        (!wrong.is_empty()).then(|| format!("queries {wrong:?} are not written in {}", language.name()))
    }

    async fn run_all(&self, calls: &[Call], round: u32, progress: &Stage) -> Result<Generated> {
        let stage = format!("generate, round {round}");
        let parts = self.run_ordered(calls, &stage, progress, |call| self.run_call(call, progress)).await?;
        let mut generated = Generated::default();
        for part in parts {
            generated.drafts.extend(part.drafts);
            generated.failures.extend(part.failures);
        }
        Ok(generated)
    }

    /// Runs `work` on every item, `concurrency` at a time, in any order (a slow call does not
    /// hold the others back), and returns the results in the items' order. A spent budget lets
    /// the calls in flight finish; an unusable endpoint stops at once, and so does a stall. In
    /// batch mode, the calls the cache cannot answer go to a batch (named after `stage`) and
    /// the items that waited for them run again, until none waits.
    async fn run_ordered<'s, I, T, F, Fut>(
        &'s self,
        items: &'s [I],
        stage: &str,
        progress: &Stage,
        work: F,
    ) -> Result<Vec<T>>
    where
        F: Fn(&'s I) -> Fut,
        Fut: Future<Output = std::result::Result<T, LlmError>>,
    {
        self.llm.begin_stage();
        let mut done: Vec<Option<T>> = std::iter::repeat_with(|| None).take(items.len()).collect();
        loop {
            let todo: Vec<usize> = (0..items.len()).filter(|&i| done[i].is_none()).collect();
            for (i, part) in self.run_some(items, &todo, &work).await? {
                done[i] = Some(part);
            }
            if self.llm.pending() == 0 {
                return Ok(done.into_iter().flatten().collect());
            }
            let say = |line: String| progress.say(&line);
            self.llm.flush(stage, &say).await?;
        }
    }

    /// Runs `work` on the items at `todo`; returns their results (by position), leaving out
    /// those that wait for a batch.
    async fn run_some<'s, I, T, F, Fut>(
        &'s self,
        items: &'s [I],
        todo: &[usize],
        work: &F,
    ) -> Result<Vec<(usize, T)>>
    where
        F: Fn(&'s I) -> Fut,
        Fut: Future<Output = std::result::Result<T, LlmError>>,
    {
        let concurrency = self.llm.config().limits.concurrency.max(1);
        self.llm.begin_batch();
        let all = async {
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
            match budget {
                Some(message) => Err(Error::Budget(message)),
                None => Ok(parts),
            }
        };
        let mut parts = tokio::select! {
            parts = all => parts?,
            () = self.watchdog() => return Err(self.stalled()),
        };
        parts.sort_by_key(|(i, _)| *i);
        Ok(parts)
    }

    fn stalled(&self) -> Error {
        Error::Stalled {
            seconds: self.settings.stall_after.as_secs(),
            url: self.llm.config().endpoint.base_url.clone(),
        }
    }

    /// The error that stops the run for an endpoint that cannot serve it.
    fn fatal(&self, error: &LlmError) -> Error {
        let hint = match error {
            LlmError::Http { status: 401 | 403, .. } => "check OPENAI_API_KEY",
            LlmError::Http { status: 404, .. } => "check --model and --base-url (it usually ends in /v1)",
            _ => "is the server running? replies so far are cached and a rerun resumes",
        };
        endpoint_error(&self.llm, format!("failed: {}", error.chain()), hint)
    }

    /// Resolves once the server kept us waiting for `stall_after` without finishing a call.
    async fn watchdog(&self) {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if self.llm.silent_for() >= self.settings.stall_after {
                return;
            }
        }
    }
}

/// Failures that no other call will escape either: the server is unreachable, or refuses the
/// key or the model, or the budget is spent. A call that times out on every attempt is not one
/// of them (one slow prompt fails alone); a server that answers nothing at all is stopped by the
/// watchdog.
fn is_fatal(error: &LlmError) -> bool {
    matches!(
        error,
        LlmError::Connect { .. }
            | LlmError::BaseUrl(_)
            | LlmError::Budget(_)
            | LlmError::Deferred
            | LlmError::Http { status: 401 | 403 | 404, .. }
    )
}

/// Why a probe's reply shows the server ignored `mode`, if it does: in `json_schema` and
/// `json_object` the reply must be the JSON object the preflight asks for.
fn ignored(mode: JsonMode, reply: &str) -> Option<&'static str> {
    let structured = matches!(mode, JsonMode::Schema | JsonMode::Object);
    (structured && !holds_object(reply, "queries"))
        .then_some("the reply holds no JSON object with \"queries\"")
}

fn excerpt(reply: &str) -> String {
    reply.chars().take(REPLY_EXCERPT).collect()
}

fn endpoint_error(llm: &Llm, message: String, hint: &'static str) -> Error {
    Error::Endpoint { url: llm.config().endpoint.base_url.clone(), message, hint }
}

fn fail_all(call: &Call, unusable: &Unusable) -> Generated {
    let failures = call
        .tasks
        .iter()
        .map(|t| Failure {
            request: t.request,
            kind: unusable.kind,
            reason: unusable.reason.clone(),
            reply: unusable.reply.clone(),
        })
        .collect();
    Generated { drafts: Vec::new(), failures }
}

/// Matches the reply's queries to the call's tasks: by type, preferring the same style; tasks
/// left without a query fail, surplus queries are ignored.
fn assign(call: &Call, mut queries: Vec<ReplyQuery>) -> Generated {
    let mut generated = Generated::default();
    for task in &call.tasks {
        let same_style =
            queries.iter().position(|q| q.query_type == task.query_type && q.style == task.style);
        let same_type = || queries.iter().position(|q| q.query_type == task.query_type);
        match same_style.or_else(same_type) {
            Some(at) => {
                let q = queries.remove(at);
                generated.drafts.push(Draft {
                    request: task.request,
                    text: q.text,
                    absent_term: None,
                    style: Some(task.style.clone()),
                    evidence: q.evidence,
                    answer: Some(q.answer),
                    topic: None,
                });
            }
            None => generated.failures.push(Failure {
                request: task.request,
                kind: FailureKind::MissingQuery,
                reason: format!("the reply has no {} query for this request", task.query_type),
                reply: None,
            }),
        }
    }
    generated
}

impl Judge for LlmGenerator<'_> {
    fn grade(&mut self, asks: &[Ask], progress: &Stage) -> Result<Vec<Grade>> {
        self.runtime.block_on(self.run_ordered(asks, "judge", progress, |ask| self.grade_one(ask, progress)))
    }
}

impl Generator for LlmGenerator<'_> {
    fn judge(&mut self) -> Option<&mut dyn Judge> {
        Some(self)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn queries_per_call(&self) -> usize {
        self.settings.queries_per_call
    }

    fn generate(&mut self, requests: &[Request], progress: &Stage) -> Result<Generated> {
        let calls = self.calls(requests);
        let round = requests.first().map_or(0, |r| r.round);
        self.runtime.block_on(self.run_all(&calls, round, progress))
    }

    fn llm_report(&self) -> Option<LlmReport> {
        let config = self.llm.config();
        let usage = self.llm.usage();
        Some(LlmReport {
            summary: LlmSummary {
                base_url: config.endpoint.base_url.clone(),
                model: config.endpoint.model.clone(),
                json_mode: self.mode,
                usage,
                cost: config.budget.price.map(|p| usage.cost_at(p, config.batch_discount)),
                abandoned_cost: config
                    .budget
                    .price
                    .filter(|_| usage.abandoned > 0)
                    .map(|p| usage.abandoned_cost(p)),
                batch_discount: (usage.batch_replies > 0).then_some(config.batch_discount),
            },
            mode_reason: self.mode_reason.clone(),
            network: self.llm.network(),
        })
    }

    fn estimate(&self, requests: &[Request]) -> Result<super::Estimate> {
        let format = self.response_format(self.mode);
        let mut estimate =
            super::Estimate { with_schema: self.mode == JsonMode::Schema, ..Default::default() };
        for call in self.calls(requests) {
            estimate.calls += 1;
            estimate.prompt_tokens += u64::from(estimate_tokens(&self.messages(&call)?, format.as_ref()));
            estimate.max_completion_tokens += u64::from(self.llm.config().max_tokens);
        }
        Ok(estimate)
    }
}
