//! The LLM generator: asks a chat model for several queries per call, one call per chunk (or
//! multi_hop pair), and turns the validated replies into drafts.
//!
//! Invariants: a call is sent only after a preflight chose a response format the server
//! accepts; every request ends as a draft or a failure with a reason (and the reply, for
//! `rejects.jsonl`); an unusable reply is re-asked at most `repairs` times; calls run through
//! the run's [`Session`], so results keep the plan's order whatever order the server answers in.

use super::prompt::Prompts;
use super::reply::{ReplyQuery, holds_object, parse_reply};
use super::{Draft, Failure, Generated, Generator, Request};
use crate::error::{Error, Result};
use crate::index::ChunkIndex;
use crate::llm::{
    Asked, ConnectKind, LlmError, Message, NetworkStats, Role, Session, TokenUsage, Unusable, estimate_tokens,
};
use crate::progress::StageProgress;
use crate::record::{FailureKind, QueryType};
use crate::rng::stream;
use rand::distr::{Distribution, weighted::WeightedIndex};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Cache note holding the response format a preflight chose.
const PREFLIGHT_NOTE: &str = "preflight-json-mode";
/// Cache note holding the response format that gave a usable reply: only a mode that did is
/// trusted by a later run without probing again.
const USABLE_NOTE: &str = "preflight-json-mode-usable";
/// Replies the preflight asks for in one response format before it concludes the server
/// ignores that format.
const PROBE_REPLIES: usize = 3;

/// How the reply's structure is requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
pub enum JsonMode {
    /// `response_format: json_schema` with the schema of `prompts/schema.json`.
    #[strum(serialize = "json_schema")]
    Schema,
    /// `response_format: json_object`.
    #[strum(serialize = "json_object")]
    Object,
    /// No `response_format`: the prompt alone asks for JSON.
    #[strum(serialize = "plain")]
    Plain,
}

impl JsonMode {
    /// Modes from most to least structured: the preflight's order of trial.
    pub const FALLBACK_ORDER: [Self; 3] = [Self::Schema, Self::Object, Self::Plain];

    /// The label used in flags and reports (`json_schema`, `json_object`, `plain`).
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// The `response_format` of a request in this mode whose reply follows `schema` (named
    /// `name`); `None` in plain mode.
    #[must_use]
    pub fn response_format(self, name: &str, schema: &serde_json::Value) -> Option<serde_json::Value> {
        match self {
            Self::Schema => Some(serde_json::json!({
                "type": "json_schema",
                "json_schema": {"name": name, "strict": true, "schema": schema},
            })),
            Self::Object => Some(serde_json::json!({"type": "json_object"})),
            Self::Plain => None,
        }
    }
}

/// Who chose the response format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeChoice {
    /// `--json-mode`.
    Fixed,
    /// The preflight, an earlier run against the same endpoint and model, or the default.
    Automatic,
}

/// The response format of a run's calls, which the judge shares with the generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseMode {
    /// The format.
    pub mode: JsonMode,
    /// Who chose it.
    pub choice: ModeChoice,
}

impl ResponseMode {
    /// A reply in this format was usable: unless `--json-mode` fixed it, the cache notes it
    /// (once per run), so a later run trusts it without probing again.
    pub fn worked(self, session: &Session) {
        if self.choice == ModeChoice::Automatic {
            session.remember_once(USABLE_NOTE, self.mode.label());
        }
    }
}

/// Whether the generator checks the endpoint before its first call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preflight {
    /// One small call checks the endpoint and picks the response format (unless
    /// `--json-mode` fixes it).
    Run,
    /// No call: a dry run, or a batch runner of the user's own with no endpoint to probe.
    Skip,
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

/// Queries written by a chat model.
pub struct LlmGenerator<'a> {
    index: &'a ChunkIndex,
    session: Arc<Session>,
    prompts: Prompts,
    settings: LlmGeneration,
    mode: ResponseMode,
    /// Why `mode` was chosen.
    mode_reason: String,
    name: String,
    seed: u64,
}

impl<'a> LlmGenerator<'a> {
    /// A generator over the chunks of `index` that calls through `session`.
    ///
    /// # Errors
    /// [`Error::Endpoint`] when the preflight finds the endpoint unreachable or refusing the
    /// model; [`Error::Prompt`] when a style is not defined in the prompts.
    pub fn new(
        index: &'a ChunkIndex,
        session: Arc<Session>,
        prompts: Prompts,
        settings: LlmGeneration,
        seed: u64,
        preflight: Preflight,
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
        let name = format!("llm:{}", session.llm().config().endpoint.model);
        let choice = if settings.json_mode.is_some() { ModeChoice::Fixed } else { ModeChoice::Automatic };
        let mut generator = Self {
            index,
            session,
            prompts,
            mode: ResponseMode { mode: settings.json_mode.unwrap_or(JsonMode::Schema), choice },
            mode_reason: if settings.json_mode.is_some() { "--json-mode" } else { "not probed" }.to_owned(),
            settings,
            name,
            seed,
        };
        if preflight == Preflight::Run {
            let session = Arc::clone(&generator.session);
            (generator.mode.mode, generator.mode_reason) =
                session.block_on(session.watched(generator.preflight()))?;
            session.llm().forget_usage();
        }
        Ok(generator)
    }

    /// The mode chosen by an earlier preflight against this endpoint and model, if a reply in
    /// it was usable: a rerun does not probe again (but a mode that gave nothing usable is
    /// probed again).
    fn remembered_mode(&self) -> Option<JsonMode> {
        let llm = self.session.llm();
        let label = llm.note(PREFLIGHT_NOTE).ok().flatten()?;
        let usable = llm.note(USABLE_NOTE).ok().flatten()?;
        JsonMode::FALLBACK_ORDER.into_iter().find(|m| m.label() == label && usable == label)
    }

    /// The response format in use (the judge asks in it too).
    #[must_use]
    pub fn response_mode(&self) -> ResponseMode {
        self.mode
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
            self.session
                .llm()
                .remember(PREFLIGHT_NOTE, chosen.0.label())
                .map_err(|e| self.endpoint_error(e.to_string(), "check --cache"))?;
        }
        Ok(chosen)
    }

    /// Tries the response formats in turn with one small call each (retried like any call).
    /// Only a definite "unsupported" passes on to the next: an error answer naming the
    /// response format, or a reply that ignores it. Returns the mode and why it was chosen.
    async fn probe(&self) -> Result<(JsonMode, String)> {
        let messages = vec![
            Message::new(Role::System, self.system_message()?),
            Message::new(Role::User, self.prompts.preflight.render(&[])?),
        ];
        let modes: Vec<JsonMode> = match self.settings.json_mode {
            Some(mode) => vec![mode],
            None => JsonMode::FALLBACK_ORDER.to_vec(),
        };
        let mut passed_over = Vec::new();
        for (i, &mode) in modes.iter().enumerate() {
            let last = i + 1 == modes.len();
            match self.probe_mode(&messages, mode).await {
                Ok(Some(problem)) if !last => {
                    passed_over.push(format!("{} ignored {PROBE_REPLIES} times: {problem}", mode.label()));
                }
                Ok(_) => return Ok((mode, self.why(mode, &passed_over))),
                Err(error) if error.names_response_format() && !last => {
                    passed_over.push(format!("{} refused: {error}", mode.label()));
                }
                Err(error) => return Err(self.probe_failed(mode, &error)),
            }
        }
        Err(self.endpoint_error("offers no response format".to_owned(), "report this"))
    }

    /// Probes `mode` until a reply follows it, at most [`PROBE_REPLIES`] replies: one garbage
    /// reply is noise (a sampled reply can go wrong in any mode), only a server that ignores
    /// the format every time demonstrably lacks it. Returns the last problem if none followed.
    async fn probe_mode(
        &self,
        messages: &[Message],
        mode: JsonMode,
    ) -> Result<Option<&'static str>, LlmError> {
        let format = self.response_format(mode);
        let mut problem = None;
        for _ in 0..PROBE_REPLIES {
            let reply = self.session.llm().probe(messages, format.as_ref()).await?;
            problem = ignored(mode, &reply.content);
            if problem.is_none() {
                break;
            }
        }
        Ok(problem)
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
                self.endpoint_error(format!("refused the API key: {message}"), "set OPENAI_API_KEY")
            }
            LlmError::Http { status: 404, message, .. } => self.endpoint_error(
                format!("does not serve model {:?}: {message}", self.session.llm().config().endpoint.model),
                "check --model and --base-url (it usually ends in /v1)",
            ),
            LlmError::Connect { kind: ConnectKind::RefusedLocally, .. } => self.endpoint_error(
                format!("does not answer: {}", error.chain()),
                "start the server, or check --base-url (a refusal on this machine is not retried)",
            ),
            LlmError::Connect { .. } | LlmError::Timeout(_) | LlmError::UploadStalled { .. } => self
                .endpoint_error(
                    format!("does not answer: {}", error.chain()),
                    "is the server running? check --base-url",
                ),
            LlmError::Cache(_) => self.endpoint_error(
                format!("answered, but its reply cannot be kept: {}", error.chain()),
                "the reply cache must be readable and writable (disk full? read-only?)",
            ),
            LlmError::Body(_) | LlmError::BaseUrl(_) | LlmError::Deferred => self.endpoint_error(
                format!("does not answer as a chat endpoint: {}", error.chain()),
                "check --base-url (it usually ends in /v1)",
            ),
            LlmError::Http { .. } => self.endpoint_error(
                format!("rejected {}: {}", mode.label(), error.chain()),
                "try another --json-mode (json_object, plain), or check the server's log",
            ),
        }
    }

    fn endpoint_error(&self, message: String, hint: &'static str) -> Error {
        self.session.endpoint_stop(message, hint).into()
    }

    fn system_message(&self) -> Result<String> {
        self.prompts.system.render(&[("language", self.prompts.language.name())])
    }

    fn response_format(&self, mode: JsonMode) -> Option<serde_json::Value> {
        mode.response_format("queries", &self.prompts.schema)
    }

    /// Groups requests with the same sources into calls, in plan order, and draws a style for
    /// each request.
    fn calls(&self, requests: &[Request]) -> Vec<Call> {
        let weights: Vec<f64> = self.settings.styles.iter().map(|(_, w)| *w).collect();
        let styles = WeightedIndex::new(&weights).ok();
        let mut calls: Vec<Call> = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            let ids: Vec<String> =
                request.sources.iter().map(|&c| self.index.chunk_id_str(c).to_owned()).collect();
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
        Ok(vec![Message::new(Role::System, self.system_message()?), Message::new(Role::User, user)])
    }

    /// Runs one call, with repair re-asks; a budget error is passed up, other failures become
    /// failures of the call's requests.
    async fn run_call(
        &self,
        call: &Call,
        progress: &StageProgress,
    ) -> std::result::Result<Generated, LlmError> {
        let answer = self.ask(call).await;
        let llm = self.session.llm();
        let (used, network) = (llm.usage(), llm.network());
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
        Ok(match Unusable::settle(answer)? {
            Ok(queries) => assign(call, queries),
            Err(unusable) => fail_all(call, &unusable),
        })
    }

    /// Asks for a call's queries until a reply parses (or the repairs run out).
    async fn ask(&self, call: &Call) -> std::result::Result<Asked<Vec<ReplyQuery>>, LlmError> {
        let messages = self.messages(call).map_err(|e| LlmError::Body(e.to_string()))?;
        let format = self.response_format(self.mode.mode);
        // An empty list is an answer ("nothing fits these passages"), not a reply to repair:
        // asking again would pay for the same answer.
        let parse = |content: &str| match parse_reply(content) {
            Ok(queries) => self.wrong_language(&queries).map_or(Ok(queries), Err),
            Err(error) => Err(error),
        };
        let repair = |error: &str| {
            self.prompts.repair.render(&[("error", error)]).map_err(|e| LlmError::Body(e.to_string()))
        };
        let temperature = self.session.llm().config().temperature;
        let repairs = self.settings.repairs;
        let asked =
            self.session.ask_until(messages, format.as_ref(), temperature, repairs, repair, parse).await?;
        if asked.is_ok() {
            self.mode.worked(&self.session);
        }
        Ok(asked)
    }

    /// Why the reply must be re-asked for its language, if it must.
    fn wrong_language(&self, queries: &[ReplyQuery]) -> Option<String> {
        let language = self.prompts.language;
        let wrong: Vec<usize> =
            queries.iter().enumerate().filter(|(_, q)| !language.matches(&q.text)).map(|(i, _)| i).collect();
        (!wrong.is_empty()).then(|| format!("queries {wrong:?} are not written in {}", language.name()))
    }

    async fn run_all(&self, calls: &[Call], round: u32, progress: &StageProgress) -> Result<Generated> {
        let stage = format!("generate, round {round}");
        let say = |line: String| progress.say(&line);
        let parts =
            self.session.run_ordered(calls, &stage, &say, |call| self.run_call(call, progress)).await?;
        let mut generated = Generated::default();
        for part in parts {
            generated.drafts.extend(part.drafts);
            generated.failures.extend(part.failures);
        }
        Ok(generated)
    }
}

/// Why a probe's reply shows the server ignored `mode`, if it does: in `json_schema` and
/// `json_object` the reply must be the JSON object the preflight asks for.
fn ignored(mode: JsonMode, reply: &str) -> Option<&'static str> {
    let structured = matches!(mode, JsonMode::Schema | JsonMode::Object);
    (structured && !holds_object(reply, "queries"))
        .then_some("the reply holds no JSON object with \"queries\"")
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
    let nothing_fits = queries.is_empty();
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
                reason: if nothing_fits {
                    "the model found no query that fits these passages (an empty list)".to_owned()
                } else {
                    format!("the reply has no {} query for this request", task.query_type)
                },
                reply: None,
            }),
        }
    }
    generated
}

impl Generator for LlmGenerator<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn queries_per_call(&self) -> usize {
        self.settings.queries_per_call
    }

    fn generate(&mut self, requests: &[Request], progress: &StageProgress) -> Result<Generated> {
        let calls = self.calls(requests);
        let round = requests.first().map_or(0, |r| r.round);
        self.session.block_on(self.run_all(&calls, round, progress))
    }

    fn llm_report(&self) -> Option<LlmReport> {
        let llm = self.session.llm();
        let (config, usage) = (llm.config(), llm.usage());
        Some(LlmReport {
            summary: LlmSummary {
                base_url: crate::llm::redact_url(&config.endpoint.base_url),
                model: config.endpoint.model.clone(),
                json_mode: self.mode.mode,
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
            network: llm.network(),
        })
    }

    fn estimate(&self, requests: &[Request]) -> Result<super::Estimate> {
        let format = self.response_format(self.mode.mode);
        let mut estimate =
            super::Estimate { with_schema: self.mode.mode == JsonMode::Schema, ..Default::default() };
        for call in self.calls(requests) {
            estimate.calls += 1;
            estimate.prompt_tokens += u64::from(estimate_tokens(&self.messages(&call)?, format.as_ref()));
            estimate.max_completion_tokens += u64::from(self.session.llm().config().max_tokens);
        }
        Ok(estimate)
    }
}
