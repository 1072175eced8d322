//! What can go wrong talking to an endpoint, classified once: retryable or not.

use std::time::Duration;

/// A failed call to the chat endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// The server answered with a non-success status.
    #[error("HTTP {status}: {message}")]
    Http {
        /// The status code.
        status: u16,
        /// The server's message (its JSON `error.message`, else the start of the body).
        message: String,
        /// The server's `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
    /// The connection failed (refused, reset, DNS).
    #[error("cannot reach the server: {0}")]
    Connect(String),
    /// No answer within `--timeout`.
    #[error("no reply within {} s (--timeout)", .0.as_secs())]
    Timeout(Duration),
    /// A 2xx answer whose body is not a chat completion.
    #[error("the reply is not a chat completion: {0}")]
    Body(String),
    /// The token or cost budget is spent; nothing more is sent.
    #[error("budget reached: {0}")]
    Budget(String),
}

impl LlmError {
    /// Whether trying again may succeed: 429, 5xx, connection errors and timeouts.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Http { status, .. } => *status == 429 || *status >= 500,
            Self::Connect(_) | Self::Timeout(_) => true,
            Self::Body(_) | Self::Budget(_) => false,
        }
    }

    /// Whether the server answered with a 5xx (which may mean "I don't support that").
    #[must_use]
    pub fn is_server_error(&self) -> bool {
        matches!(self, Self::Http { status, .. } if *status >= 500)
    }

    /// The wait the server asked for.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> LlmError {
        LlmError::Http { status, message: String::new(), retry_after: None }
    }

    #[test]
    fn classifies_retryable_failures() {
        for status in [429, 500, 502, 503] {
            assert!(http(status).is_retryable(), "{status}");
        }
        for status in [400, 401, 403, 404, 422] {
            assert!(!http(status).is_retryable(), "{status}");
        }
        assert!(LlmError::Timeout(Duration::from_secs(1)).is_retryable());
        assert!(LlmError::Connect("refused".into()).is_retryable());
        assert!(!LlmError::Body("x".into()).is_retryable());
    }
}
