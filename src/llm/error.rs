//! What can go wrong talking to an endpoint, classified once: retryable or not.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

/// The underlying cause of a failed connection, kept whole (shared, so the error stays cheap to
/// clone).
pub type Cause = Arc<dyn StdError + Send + Sync>;

/// What kind of connection failure it was: decides whether trying again may help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectKind {
    /// The request could not even be built (the URL cannot be requested): never retried.
    InvalidUrl,
    /// A loopback address refused the connection: nothing listens there, so it is not retried.
    RefusedLocally,
    /// Another host refused the connection (a proxy or balancer may let the next one through).
    Refused,
    /// The connection was reset or cut off after it was made (the request may have arrived).
    Reset,
    /// The connection could not be made (DNS, TCP, TLS): no request was sent.
    Unmade,
    /// Anything else (a proxy, a failure after the connection was made).
    Other,
}

impl ConnectKind {
    /// Classifies `error` by walking its source chain once: a `reqwest` builder error, or an
    /// `io::Error` with a telling kind, decides; a `reqwest` error of the connecting phase met
    /// on the way (it wraps the `io::Error`) makes a cut connection or an unknown failure one
    /// that was never made (`loopback`: the base URL names this machine).
    #[must_use]
    pub fn of(error: &(dyn StdError + 'static), loopback: bool) -> Self {
        let mut connecting = false;
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(reqwest) = error.downcast_ref::<reqwest::Error>() {
                if reqwest.is_builder() {
                    return Self::InvalidUrl;
                }
                connecting |= reqwest.is_connect();
            }
            if let Some(io) = error.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind;
                match io.kind() {
                    ErrorKind::ConnectionRefused if loopback => return Self::RefusedLocally,
                    ErrorKind::ConnectionRefused => return Self::Refused,
                    ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof => return if connecting { Self::Unmade } else { Self::Reset },
                    _ => {}
                }
            }
            next = error.source();
        }
        if connecting { Self::Unmade } else { Self::Other }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::InvalidUrl => "the request cannot be built for this URL",
            Self::RefusedLocally => "connection refused: nothing listens at that address",
            Self::Refused => "connection refused",
            Self::Reset => "the connection was reset",
            Self::Unmade => "the connection could not be made",
            Self::Other => "the connection failed",
        }
    }
}

/// A failed call to the chat endpoint.
#[derive(Debug, Clone, thiserror::Error)]
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
    /// The base URL is not an http(s) URL.
    #[error("is not an http(s) URL: {0}")]
    BaseUrl(String),
    /// The connection failed (refused, reset, DNS, TLS).
    #[error("cannot reach the server: {}", .kind.describe())]
    Connect {
        /// What kind of failure.
        kind: ConnectKind,
        /// The error underneath.
        #[source]
        source: Cause,
    },
    /// No answer within `--timeout`.
    #[error("no reply within {} s (--timeout)", .0.as_secs())]
    Timeout(Duration),
    /// An upload's body stopped going out: no bytes were sent for `--timeout`.
    #[error(
        "the upload stalled: no bytes went out for {} s (--timeout) after {sent} of {total} bytes",
        .after.as_secs()
    )]
    UploadStalled {
        /// Bytes of the request sent.
        sent: u64,
        /// Bytes of the request in all.
        total: u64,
        /// How long nothing went out.
        after: Duration,
    },
    /// A 2xx answer whose body is not a chat completion.
    #[error("the reply is not a chat completion: {0}")]
    Body(String),
    /// The token or cost budget is spent; nothing more is sent.
    #[error("budget reached: {0}")]
    Budget(String),
    /// Batch mode: the call is not in the cache and waits for the next batch.
    #[error("waiting for a batch")]
    Deferred,
    /// The reply cache cannot be read or written: a reply that cannot be kept would be paid
    /// for again by the next run, so this stops the run.
    #[error(transparent)]
    Cache(Arc<super::CacheError>),
}

impl From<super::CacheError> for LlmError {
    fn from(error: super::CacheError) -> Self {
        Self::Cache(Arc::new(error))
    }
}

impl LlmError {
    /// A connection failure caused by `source`, classified by its source chain.
    #[must_use]
    pub fn connect(source: impl StdError + Send + Sync + 'static, loopback: bool) -> Self {
        let kind = ConnectKind::of(&source, loopback);
        Self::Connect { kind, source: Arc::new(source) }
    }

    /// Whether trying again may succeed: 429, 5xx, timeouts and connection errors other than
    /// an unusable URL or a refusal on this machine.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Http { status, .. } => *status == 429 || *status >= 500,
            Self::Connect { kind, .. } => {
                matches!(
                    kind,
                    ConnectKind::Refused | ConnectKind::Reset | ConnectKind::Unmade | ConnectKind::Other
                )
            }
            Self::Timeout(_) | Self::UploadStalled { .. } => true,
            Self::BaseUrl(_) | Self::Body(_) | Self::Budget(_) | Self::Deferred | Self::Cache(_) => false,
        }
    }

    /// Whether the request may have reached the server and done its work although no answer
    /// says so: no answer in time, a gateway's timeout, or a connection cut after it was made
    /// (a refused connection, or one that failed while being made, sent nothing).
    #[must_use]
    pub fn may_have_taken_effect(&self) -> bool {
        matches!(
            self,
            Self::Timeout(_)
                | Self::Http { status: 504, .. }
                | Self::Connect { kind: ConnectKind::Reset | ConnectKind::Other, .. }
        )
    }

    /// Whether the server answered with a 5xx (which may mean "I don't support that").
    #[must_use]
    pub fn is_server_error(&self) -> bool {
        matches!(self, Self::Http { status, .. } if *status >= 500)
    }

    /// Whether the server's error message names the response format (`response_format`,
    /// `json_schema`, `json_object`): its way of saying it does not support the one asked for.
    #[must_use]
    pub fn names_response_format(&self) -> bool {
        let Self::Http { message, .. } = self else { return false };
        let message = message.to_ascii_lowercase();
        ["response_format", "response format", "json_schema", "json_object"]
            .iter()
            .any(|n| message.contains(n))
    }

    /// The wait the server asked for.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The message with every cause underneath it, for people: `cannot reach the server:
    /// connection refused: … : Connection refused (os error 111)` (a cause already contained in
    /// the text before it is left out).
    #[must_use]
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut next = self.source();
        while let Some(cause) = next {
            let line = cause.to_string();
            if !text.contains(&line) {
                text.push_str(": ");
                text.push_str(&line);
            }
            next = cause.source();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> LlmError {
        LlmError::Http { status, message: String::new(), retry_after: None }
    }

    fn io(kind: std::io::ErrorKind, loopback: bool) -> LlmError {
        LlmError::connect(std::io::Error::new(kind, "from the OS"), loopback)
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
        assert!(io(std::io::ErrorKind::ConnectionRefused, false).is_retryable());
        assert!(io(std::io::ErrorKind::ConnectionReset, true).is_retryable());
        assert!(!io(std::io::ErrorKind::ConnectionRefused, true).is_retryable());
        assert!(!LlmError::Body("x".into()).is_retryable());
        assert!(!LlmError::BaseUrl("x".into()).is_retryable());
    }

    #[test]
    fn knows_a_refusal_of_the_response_format() {
        let says =
            |status, message: &str| LlmError::Http { status, message: message.into(), retry_after: None };
        assert!(says(500, "json_schema is not supported").names_response_format());
        assert!(says(400, "Unknown parameter: 'response_format.json_schema'").names_response_format());
        assert!(says(422, "Response format json_object not allowed").names_response_format());
        assert!(!says(500, "Internal Server Error").names_response_format());
        assert!(!LlmError::Timeout(Duration::from_secs(1)).names_response_format());
    }

    /// A real refused connection: nothing listens on a port that was just released.
    #[tokio::test]
    async fn a_refused_connection_on_loopback_is_classified_through_the_source_chain() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_or_else(|e| panic!("{e}"), |a| a.port());
        let client = reqwest::Client::new();
        let Err(error) = client.get(format!("http://127.0.0.1:{port}/v1")).send().await else {
            panic!("something answered on port {port}");
        };
        let error = LlmError::connect(error, true);
        assert!(matches!(error, LlmError::Connect { kind: ConnectKind::RefusedLocally, .. }), "{error:?}");
        assert!(!error.is_retryable());
        let chain = error.chain();
        assert!(chain.starts_with("cannot reach the server: connection refused"), "{chain}");
        assert!(chain.contains("(os error"), "the OS error is kept: {chain}");
    }

    /// A TLS handshake with a listener that closes every connection at once: the connection
    /// is cut while being made, so no request was sent.
    #[tokio::test]
    async fn a_connection_cut_while_being_made_sent_nothing() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map_or_else(|e| panic!("{e}"), |a| a.port());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        });
        let Err(error) = reqwest::Client::new().get(format!("https://127.0.0.1:{port}/v1")).send().await
        else {
            panic!("the handshake went through");
        };
        let error = LlmError::connect(error, true);
        assert!(matches!(error, LlmError::Connect { kind: ConnectKind::Unmade, .. }), "{error:?}");
        assert!(error.is_retryable());
        assert!(!error.may_have_taken_effect(), "{}", error.chain());
    }

    #[test]
    fn a_request_that_cannot_be_built_is_an_invalid_url() {
        let Err(error) = reqwest::Client::new().get("http://[not-a-host/v1").build() else {
            panic!("the request was built");
        };
        let error = LlmError::connect(error, false);
        assert!(matches!(error, LlmError::Connect { kind: ConnectKind::InvalidUrl, .. }), "{error:?}");
        assert!(!error.is_retryable());
    }
}
