//! Stage 4, generate: plans which chunks get which query types, then has a [`Generator`] write
//! the queries.
//!
//! Input: chunks and their index. Output: [`Request`]s (the plan), then [`Draft`]s and
//! [`Failure`]s. Invariants: plans are seeded and reproducible; a generator answers every request
//! with drafts or a failure, never silently.

mod offline;
pub(crate) mod plan;
mod terms;

pub use offline::OfflineGenerator;
pub use plan::{Mix, Planner, Quotas};

use crate::error::Result;
use crate::progress::Stage;
use crate::record::QueryType;

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
}

/// A request the generator could not serve, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Index of the request.
    pub request: usize,
    /// Why.
    pub reason: String,
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

    /// Serves `requests`, reporting one step per request to `progress`.
    ///
    /// # Errors
    /// Only fatal problems (the index fails, the endpoint is unusable); a request that cannot be
    /// served is a [`Failure`] in the result.
    fn generate(&mut self, requests: &[Request], progress: &Stage) -> Result<Generated>;
}
