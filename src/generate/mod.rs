//! Stage 4, generate: plans which chunks get which query types, then has a [`Generator`] write
//! the queries.
//!
//! Input: chunks and their index. Output: [`Request`]s (the plan), then [`Draft`]s and
//! [`Failure`]s. Invariants: plans are seeded and reproducible; a generator answers every request
//! with drafts or a failure, never silently.

mod llm;
mod offline;
mod plan;
mod prompt;
mod reply;
mod terms;

pub use llm::{
    JsonMode, LlmGeneration, LlmGenerator, LlmReport, LlmSummary, ModeChoice, Preflight, ResponseMode,
};
pub use offline::{OfflineGenerator, TopicConfig};
pub(crate) use plan::auto_cap;
pub use plan::{Margin, Mix, Planner, Quotas, parse_shares, stalled, top_up};
pub use prompt::Prompts;
pub(crate) use reply::extract_json;
pub(crate) use terms::is_query_word;

use crate::error::Result;
use crate::progress::StageProgress;
use crate::record::{FailureKind, QueryType};

/// One planned query: its type and the chunks to write it from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The type wanted.
    pub query_type: QueryType,
    /// Positions of the source chunks in the chunk list (two for `multi_hop`).
    pub sources: Vec<usize>,
    /// Generation round (1 = first).
    pub round: u32,
}

/// A query a generator wrote for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    /// Index of the request in the slice given to [`Generator::generate`].
    pub request: usize,
    /// The query text.
    pub text: String,
    /// For `no_answer`: the term that makes the query unanswerable.
    pub absent_term: Option<String>,
    /// The style it was written in (LLM generator).
    pub style: Option<String>,
    /// Verbatim quotes from the sources that support it (LLM generator).
    pub evidence: Vec<String>,
    /// A short answer (LLM generator).
    pub answer: Option<String>,
    /// For a topical query (offline generator): positions of the chunks on its topic, which
    /// are co-relevant with its sources.
    pub topic: Option<Vec<usize>>,
}

/// A request the generator could not serve, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Index of the request.
    pub request: usize,
    /// What kind of failure (what the report counts).
    pub kind: FailureKind,
    /// Why, in words (for `rejects.jsonl`).
    pub reason: String,
    /// The unusable reply, if there was one.
    pub reply: Option<String>,
}

/// What a batch of requests would cost (for `--dry-run`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Estimate {
    /// Calls that would be sent.
    pub calls: u64,
    /// Prompt tokens, counted with cl100k.
    pub prompt_tokens: u64,
    /// Completion tokens at most (`max_tokens` per call).
    pub max_completion_tokens: u64,
    /// Judge calls at most, if every query passed the round trip (each is a short call with
    /// one chunk).
    pub judge_calls: u64,
    /// Their prompt tokens, counted with cl100k.
    pub judge_prompt_tokens: u64,
    /// The prompt tokens include a `response_format` JSON schema.
    pub with_schema: bool,
}

impl Estimate {
    /// Adds what `other` would cost.
    pub fn add(&mut self, other: &Self) {
        self.calls += other.calls;
        self.prompt_tokens += other.prompt_tokens;
        self.max_completion_tokens += other.max_completion_tokens;
        self.judge_calls += other.judge_calls;
        self.judge_prompt_tokens += other.judge_prompt_tokens;
        self.with_schema |= other.with_schema;
    }
}

/// What a generator made of a batch of requests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Generated {
    /// Queries written.
    pub drafts: Vec<Draft>,
    /// Requests not served.
    pub failures: Vec<Failure>,
}

/// Writes queries for planned requests. Implemented by the offline generator and the LLM one.
pub trait Generator {
    /// Name recorded on every query it writes.
    fn name(&self) -> &str;

    /// How many queries one call may serve: the planner groups requests by chunk up to this.
    fn queries_per_call(&self) -> usize {
        1
    }

    /// What serving `requests` would cost, without serving them.
    ///
    /// # Errors
    /// As for [`Generator::generate`].
    fn estimate(&self, requests: &[Request]) -> Result<Estimate> {
        let _ = requests;
        Ok(Estimate::default())
    }

    /// Endpoint, token use and network statistics, for generators that call an LLM.
    fn llm_report(&self) -> Option<LlmReport> {
        None
    }

    /// Serves `requests`, reporting one step per request to `progress`.
    ///
    /// # Errors
    /// Only fatal problems (the index fails, the endpoint is unusable); a request that cannot be
    /// served is a [`Failure`] in the result.
    fn generate(&mut self, requests: &[Request], progress: &StageProgress) -> Result<Generated>;
}
