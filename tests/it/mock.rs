//! A mock OpenAI-compatible chat endpoint over real HTTP (wiremock) that answers like a
//! well-behaved model: it reads the passages and the requested queries from the prompt and
//! replies with queries that quote the passages verbatim. Deterministic: the same request
//! always gets the same reply.

use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// How the mock misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Behaviour {
    /// Valid replies.
    #[default]
    Good,
    /// Valid JSON inside a ```json fence with prose around it.
    Fenced,
    /// Evidence quotes that are not in the passage.
    BadEvidence,
    /// `finish_reason: length` and a cut-off body.
    Truncated,
    /// `evidence` as a string instead of a list.
    WrongTypes,
    /// Invalid JSON on the first ask, valid after the repair re-ask.
    InvalidThenRepaired,
    /// Paraphrases that copy the passage's words.
    CopiedParaphrases,
    /// `no_answer` queries that the passage answers (no unanswerable term).
    AnswerableNoAnswer,
    /// `multi_hop` queries about the first passage only (quoting both).
    OneChunkMultiHop,
    /// Good queries, but the judge answers in prose, never with a grade.
    JudgeBabbles,
    /// `{"queries": []}` to every generation call: nothing fits the passages.
    NothingFits,
}

/// The mock's state, shared with the test.
#[derive(Debug, Default)]
pub struct Counters {
    /// Chat requests received.
    pub requests: AtomicUsize,
    /// When each request arrived.
    pub arrivals: Mutex<Vec<Instant>>,
    /// When each request within the rate limit arrived.
    pub accepted: Mutex<Vec<Instant>>,
    /// Requests answered 429 for exceeding the rate limit.
    pub rate_limited: AtomicUsize,
    /// Requests that asked the judge for a grade.
    pub judge: AtomicUsize,
    /// The prompt of the first generation call.
    pub first_call: Mutex<Option<String>>,
    /// Attempts of the first generation call answered late.
    pub slow_served: AtomicUsize,
    /// Preflight probes answered so far.
    pub preflights: AtomicUsize,
}

impl Counters {
    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Judge requests received so far.
    pub fn judge_requests(&self) -> usize {
        self.judge.load(Ordering::SeqCst)
    }

    /// Most requests in flight at once, given that each is answered `delay` after it arrives.
    pub fn peak_in_flight(&self, delay: Duration) -> usize {
        let arrivals = self.arrivals.lock().map(|a| a.clone()).unwrap_or_default();
        arrivals
            .iter()
            .map(|t| arrivals.iter().filter(|u| *u <= t && t.duration_since(**u) < delay).count())
            .max()
            .unwrap_or(0)
    }
}

/// The responder.
pub struct Model {
    pub behaviour: Behaviour,
    /// Every answer comes this long after the request.
    pub delay: Duration,
    /// Answer HTTP 500 to `response_format: json_schema`, as llama.cpp's server does.
    pub reject_json_schema: bool,
    /// The first this many requests get `fail_status`.
    pub fail_first: usize,
    pub fail_status: u16,
    /// `Retry-After` sent with the failures.
    pub retry_after: Option<String>,
    /// At most this many requests per rolling window; more get 429.
    pub rate_limit: Option<(usize, Duration)>,
    /// Generation calls (not the preflight, not the judge) get this status, with a message that
    /// differs per request and holds a `|` and a line break.
    pub fail_generation: Option<u16>,
    /// The first generation call is answered this late, on its first this many attempts (one
    /// slow prompt among quick ones).
    pub slow_first_call: Option<(Duration, usize)>,
    /// Answer the preflight in prose when it asks for `json_schema` (a server that ignores the
    /// schema).
    pub ignore_schema: bool,
    /// The first this many preflight probes are answered in prose, whatever they ask for (a
    /// sampled reply gone wrong once, not a server lacking the format).
    pub garbage_preflights: usize,
    /// Send `x-ratelimit-limit-requests: N` (per minute, as OpenAI does) with every answer.
    pub rate_headers: Option<u32>,
    pub counters: Arc<Counters>,
}

impl Respond for Model {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut answer = self.answer(request);
        if let Some(rpm) = self.rate_headers {
            answer = answer.insert_header("x-ratelimit-limit-requests", rpm.to_string().as_str());
        }
        let delay = match self.slow_first_call {
            Some((slow, times))
                if self.is_first_call(request)
                    && self.counters.slow_served.fetch_add(1, Ordering::SeqCst) < times =>
            {
                slow
            }
            _ => self.delay,
        };
        answer.set_delay(delay)
    }
}

impl Model {
    /// Whether `request` is the first generation call the mock saw (or a retry of it).
    fn is_first_call(&self, request: &Request) -> bool {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let user = body.pointer("/messages/1/content").and_then(Value::as_str).unwrap_or("");
        if user.is_empty() || user.contains("{\"queries\": []}") {
            return false;
        }
        let Ok(mut first) = self.counters.first_call.lock() else { return false };
        first.get_or_insert_with(|| user.to_owned()) == user
    }

    /// Whether this preflight probe (asking for `format`) gets a reply in prose.
    fn garbles_preflight(&self, format: &str) -> bool {
        let n = self.counters.preflights.fetch_add(1, Ordering::SeqCst);
        n < self.garbage_preflights || (self.ignore_schema && format == "json_schema")
    }

    fn answer(&self, request: &Request) -> ResponseTemplate {
        let c = &self.counters;
        let n = c.requests.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut arrivals) = c.arrivals.lock() {
            arrivals.push(Instant::now());
        }
        if let Some((limit, window)) = self.rate_limit {
            let now = Instant::now();
            let Ok(mut accepted) = c.accepted.lock() else { return ResponseTemplate::new(500) };
            if accepted.iter().filter(|t| now.duration_since(**t) < window).count() >= limit {
                c.rate_limited.fetch_add(1, Ordering::SeqCst);
                return ResponseTemplate::new(429).insert_header("Retry-After", "1");
            }
            accepted.push(now);
        }
        if n < self.fail_first {
            let failure = ResponseTemplate::new(self.fail_status)
                .set_body_json(json!({"error": {"message": "slow down"}}));
            return match &self.retry_after {
                Some(value) => failure.insert_header("Retry-After", value.as_str()),
                None => failure,
            };
        }
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let (status, reply) = self.reply(&body, n);
        match reply {
            Value::String(text) => ResponseTemplate::new(status).set_body_string(text),
            json => ResponseTemplate::new(status).set_body_json(json),
        }
    }

    /// The status and body (JSON, or a string for a plain-text body) the model answers a chat
    /// request body with, `n` being the request's number (the batch mock answers lines with it).
    pub fn reply(&self, body: &Value, n: usize) -> (u16, Value) {
        let c = &self.counters;
        let format = body.pointer("/response_format/type").and_then(Value::as_str).unwrap_or("");
        if self.reject_json_schema && format == "json_schema" {
            return (500, Value::String("json_schema is not supported".to_owned()));
        }
        let messages = body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
        let prompt_chars: usize = messages.iter().filter_map(|m| m["content"].as_str()).map(str::len).sum();
        if let Some(grade) = messages.first().and_then(|m| m["content"].as_str()).and_then(judge) {
            c.judge.fetch_add(1, Ordering::SeqCst);
            if self.behaviour == Behaviour::JudgeBabbles {
                return completion("I think this passage is quite relevant.", "stop", prompt_chars);
            }
            return completion(&grade, "stop", prompt_chars);
        }
        let user = messages.get(1).and_then(|m| m["content"].as_str()).unwrap_or("");
        if let Some(status) = self.fail_generation.filter(|_| !user.contains("{\"queries\": []}")) {
            let message = format!("request {n} refused | try again\nor not");
            return (status, json!({"error": {"message": message}}));
        }
        let repaired = messages.len() > 2;
        let content = match self.behaviour {
            _ if user.contains("{\"queries\": []}") && self.garbles_preflight(format) => {
                "Sure! Here is what you asked for.".to_owned()
            }
            _ if user.contains("{\"queries\": []}") => json!({"queries": []}).to_string(),
            Behaviour::NothingFits => json!({"queries": []}).to_string(),
            Behaviour::InvalidThenRepaired if !repaired => "{\"queries\": [ oops".to_owned(),
            Behaviour::Truncated => {
                return completion("{\"queries\": [{\"type\": \"dir", "length", prompt_chars);
            }
            Behaviour::WrongTypes => wrong_types(user),
            Behaviour::Fenced => {
                format!(
                    "Here are the queries:\n```json\n{}\n```\nDone.",
                    queries(user, false, self.behaviour)
                )
            }
            Behaviour::BadEvidence => queries(user, true, self.behaviour),
            _ => queries(user, false, self.behaviour),
        };
        completion(&content, "stop", prompt_chars)
    }
}

/// A chat completion; token counts at about four characters a token.
fn completion(content: &str, finish_reason: &str, prompt_chars: usize) -> (u16, Value) {
    (
        200,
        json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "model": "mock-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt_chars / 4, "completion_tokens": content.len() / 4}
        }),
    )
}

/// The passages of a prompt: the text between `"""` fences.
fn passages(user: &str) -> Vec<&str> {
    user.split("\"\"\"").skip(1).step_by(2).map(str::trim).collect()
}

/// `(type, style, count)` of every task line.
fn tasks(user: &str) -> Vec<(String, String, usize)> {
    user.lines()
        .filter_map(|line| {
            let count = line.trim_start_matches("- ").split(' ').next()?.parse().ok()?;
            let after = |en: &str, zh: &str| line.split(en).nth(1).or_else(|| line.split(zh).nth(1));
            let query_type = after("of type \"", "类型为 \"")?.split('"').next()?.to_owned();
            let style = after("style \"", "风格为 \"")?.split('"').next()?.to_owned();
            Some((query_type, style, count))
        })
        .collect()
}

/// A verbatim quote from a passage: its longest line, cut to 80 characters at a word.
fn quote(passage: &str) -> String {
    let line = passage.lines().max_by_key(|l| l.len()).unwrap_or(passage).trim();
    let mut quote: String = line.chars().take(80).collect();
    if let Some(cut) = quote.rfind(' ').filter(|_| line.chars().count() > 80) {
        quote.truncate(cut);
    }
    quote
}

/// A query from a passage's words: the quote's words (so BM25 finds the passage); for Chinese,
/// a run of the quote's characters.
fn query_from(passage: &str, salt: usize) -> String {
    let quoted = quote(passage);
    if quoted.chars().filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c)).count() > 8 {
        return quoted.chars().skip(salt % 3).take(12).collect();
    }
    let words: Vec<&str> = quoted.split_whitespace().filter(|w| w.len() > 3).collect();
    let take = 4 + salt % 3;
    words.iter().take(take).copied().collect::<Vec<_>>().join(" ")
}

/// Words the mock adds to queries and the judge leaves out when it compares a query with a
/// passage.
const FILLER: [&str; 8] =
    ["and", "walrus", "question", "keyword", "colloquial", "reworded", "phrasing", "explained"];

/// The judge's reply, when `user` is a judge prompt: the share of the query's words (longer
/// than three letters, mock filler left out; for Chinese, its characters) found in the
/// passage decides — all → 3, half or more → 2, some → 1, none → 0; a query about a walrus
/// (the mock's unanswerable subject) gets at most 1, unless the passage is about walruses too.
fn judge(user: &str) -> Option<String> {
    let query = user.lines().find_map(|l| l.strip_prefix("Query: ").or_else(|| l.strip_prefix("查询：")))?;
    let passage = passages(user).first().copied().unwrap_or("").to_lowercase();
    let words: Vec<String> = if query.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)) {
        query.chars().filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c)).map(String::from).collect()
    } else {
        query
            .split(|c: char| !c.is_alphanumeric())
            .map(str::to_lowercase)
            .filter(|w| w.len() > 3 && !FILLER.contains(&w.as_str()))
            .collect()
    };
    let found = words.iter().filter(|w| passage.contains(w.as_str())).count();
    let mut grade = match (found, words.len()) {
        (_, 0) | (0, _) => 0,
        (f, n) if f == n => 3,
        (f, n) if 2 * f >= n => 2,
        _ => 1,
    };
    let about = |subject: &str| query.contains(subject) && !passage.contains(subject);
    if about("walrus") || about("海象") {
        grade = grade.min(1);
    }
    Some(json!({"grade": grade, "reason": format!("{found} of {} words", words.len())}).to_string())
}

/// A reworded query: two of the quote's words and filler the passage does not use; for
/// Chinese, four of its characters and a question.
fn paraphrase_from(passage: &str, salt: usize, style: &str) -> String {
    let quoted = quote(passage);
    if quoted.chars().filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c)).count() > 8 {
        let part: String = quoted.chars().skip(salt % 3).take(4).collect();
        return format!("{part}换个说法怎么理解");
    }
    let words: Vec<&str> = quoted.split_whitespace().filter(|w| w.len() > 3).skip(salt % 2).take(2).collect();
    format!("{} reworded phrasing explained {style} {salt}", words.join(" "))
}

fn queries(user: &str, bad_evidence: bool, behaviour: Behaviour) -> String {
    let passages = passages(user);
    let mut out = Vec::new();
    for (query_type, style, count) in tasks(user) {
        for i in 0..count {
            let evidence: Vec<String> = if bad_evidence {
                vec!["this sentence appears in no passage at all".to_owned()]
            } else if query_type == "multi_hop" {
                passages.iter().map(|p| quote(p)).collect()
            } else {
                vec![quote(passages.first().copied().unwrap_or(""))]
            };
            let first = passages.first().copied().unwrap_or("");
            let text = match (query_type.as_str(), behaviour) {
                ("multi_hop", Behaviour::OneChunkMultiHop) | ("no_answer", Behaviour::AnswerableNoAnswer) => {
                    query_from(first, i)
                }
                ("multi_hop", _) => {
                    passages.iter().map(|p| query_from(p, i)).collect::<Vec<_>>().join(" and ")
                }
                ("no_answer", _) => format!("{} for a walrus {i}", query_from(first, i)),
                ("paraphrase", b) if b != Behaviour::CopiedParaphrases => paraphrase_from(first, i, &style),
                _ => format!("{} {style} {i}", query_from(first, i)),
            };
            let answer = if query_type == "no_answer" { "" } else { "an answer" };
            out.push(json!({"type": query_type, "style": style, "query": text, "evidence": evidence, "answer": answer}));
        }
    }
    json!({"queries": out}).to_string()
}

fn wrong_types(user: &str) -> String {
    let passage = passages(user).first().copied().unwrap_or("").to_owned();
    json!({"queries": [{"type": "direct", "style": "question", "query": "x", "evidence": quote(&passage), "answer": 3}]})
        .to_string()
}

/// Whether a request body is the preflight's probe.
pub fn is_preflight(body: &[u8]) -> bool {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    body.pointer("/messages/1/content")
        .and_then(Value::as_str)
        .is_some_and(|u| u.contains("{\"queries\": []}"))
}

/// Starts a mock serving `model` at `/v1/chat/completions`.
pub async fn start(model: Model) -> MockServer {
    let server = MockServer::builder().start().await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(model).mount(&server).await;
    server
}

/// A model with `behaviour`, and the counters to watch it.
pub fn model(behaviour: Behaviour) -> (Model, Arc<Counters>) {
    let counters = Arc::new(Counters::default());
    let model = Model {
        behaviour,
        delay: Duration::ZERO,
        reject_json_schema: false,
        fail_first: 0,
        fail_status: 200,
        retry_after: None,
        rate_limit: None,
        fail_generation: None,
        slow_first_call: None,
        ignore_schema: false,
        garbage_preflights: 0,
        rate_headers: None,
        counters: Arc::clone(&counters),
    };
    (model, counters)
}
