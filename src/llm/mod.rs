//! Talking to an OpenAI-compatible chat endpoint: the only module that imports async-openai,
//! reqwest and rusqlite.
//!
//! [`Llm::complete`] is the one place where a call is cached, rate-limited, timed out and
//! retried. Input: chat messages and a response format. Output: a [`Completion`] or an
//! [`LlmError`]. Invariants: a successful reply is in the cache before it is returned; cache
//! hits skip the limiters; the API key is kept in memory only and never serialized or logged.
//!
//! The client is in `client.rs`, its settings in `config.rs`, the chat format in `chat.rs`,
//! what it used and spent in `usage.rs`, batch inference in `batch/`.

mod batch;
mod cache;
mod chat;
mod client;
mod config;
mod creator;
mod error;
mod limits;
mod retry;
mod session;
mod stall;
mod transport;
mod upload;
mod usage;

pub use batch::{
    BatchConfig, BatchError, BatchMode, BatchRecord, DEFAULT_DISCOUNT, Forgotten, Imported, MAX_BYTES,
    MAX_REQUESTS,
};
pub use cache::{Cache, CacheError, CachedReply, Via};
pub use chat::{Completion, Message, Role, estimate_tokens, load_token_counter};
pub use client::Llm;
pub use config::{Budget, Endpoint, LlmConfig, Price, is_credential, redact_url};
pub use error::{Cause, ConnectKind, LlmError};
pub use limits::{LimitConfig, Limits};
pub use retry::{Effect, RetryPolicy, parse_retry_after};
pub use session::{Asked, Session, Stop, Unusable};
pub use stall::StallClock;
pub use usage::{NetworkStats, TokenUsage};
