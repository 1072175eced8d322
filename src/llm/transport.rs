//! The HTTP transport under async-openai: sends each request once and turns any non-success
//! answer into an [`HttpFailure`] that keeps the status, the server's message and its
//! `Retry-After`. async-openai's own retry layer is not used: retries happen in one place,
//! [`super::Llm`], where the rate limits also apply to them.

use super::limits::Limits;
use super::retry::parse_retry_after;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use std::time::{Duration, SystemTime};

/// Longest server message kept in an error.
const MESSAGE_LIMIT: usize = 500;

/// A non-success HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("HTTP {status}: {message}")]
pub struct HttpFailure {
    /// Status code.
    pub status: u16,
    /// The server's message.
    pub message: String,
    /// The server's `Retry-After`.
    pub retry_after: Option<Duration>,
}

/// A tower service that sends each request once over `client`. Without a key (`keyed` false)
/// the request carries no `Authorization` header at all (async-openai would send an empty
/// bearer token). Every answer's rate-limit headers go to `limits`. The body of an upload is
/// counted as it goes out (see [`super::upload`]).
pub fn service(
    client: reqwest::Client,
    keyed: bool,
    query: Option<String>,
    limits: std::sync::Arc<Limits>,
) -> impl tower::Service<
    HttpRequestFactory,
    Response = reqwest::Response,
    Error = OpenAIError,
    Future = impl Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    tower::service_fn(move |factory: HttpRequestFactory| {
        let client = client.clone();
        let limits = std::sync::Arc::clone(&limits);
        let query = query.clone();
        async move {
            let mut request = factory.build().await?;
            if !keyed {
                request.headers_mut().remove(reqwest::header::AUTHORIZATION);
            }
            if let Some(query) = &query {
                add_query(request.url_mut(), query);
            }
            super::upload::count_body(&mut request);
            // The error without the URL: it may carry credentials (the endpoint is named,
            // redacted, by whoever reports the error).
            let response =
                client.execute(request).await.map_err(|e| OpenAIError::Reqwest(e.without_url()))?;
            limits.observe(response.headers());
            if response.status().is_success() {
                return Ok(response);
            }
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            let body = response.text().await.unwrap_or_default();
            let failure = HttpFailure { status, message: server_message(&body), retry_after };
            Err(OpenAIError::Boxed(Box::new(failure)))
        }
    })
}

/// Adds `query` (the base URL's, as written) to `url`'s own query, if any.
fn add_query(url: &mut reqwest::Url, query: &str) {
    let joined = match url.query().filter(|q| !q.is_empty()) {
        Some(own) => format!("{own}&{query}"),
        None => query.to_owned(),
    };
    url.set_query(Some(&joined));
}

/// The `error.message` of an OpenAI-style error body, else the start of the body.
fn server_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| {
            v.pointer("/error/message").or_else(|| v.pointer("/message")).or_else(|| v.get("error"))
        })
        .and_then(serde_json::Value::as_str)
        .unwrap_or(body)
        .trim();
    let mut message: String = message.chars().take(MESSAGE_LIMIT).collect();
    if message.is_empty() {
        "(empty body)".clone_into(&mut message);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_server_messages() {
        assert_eq!(server_message(r#"{"error":{"message":"model not found"}}"#), "model not found");
        assert_eq!(server_message(r#"{"error":"bad schema"}"#), "bad schema");
        assert_eq!(server_message("Internal Server Error\n"), "Internal Server Error");
        assert_eq!(server_message(""), "(empty body)");
        assert_eq!(server_message(&"x".repeat(2000)).len(), MESSAGE_LIMIT);
    }

    #[test]
    fn the_base_urls_query_goes_on_every_request_unchanged() {
        let mut url = reqwest::Url::parse("https://h.example/v1/chat/completions").unwrap();
        add_query(&mut url, "api-key=a%2Fb=&x=1");
        assert_eq!(url.as_str(), "https://h.example/v1/chat/completions?api-key=a%2Fb=&x=1");
        let mut url = reqwest::Url::parse("https://h.example/v1/files?purpose=batch").unwrap();
        add_query(&mut url, "api-key=k");
        assert_eq!(url.as_str(), "https://h.example/v1/files?purpose=batch&api-key=k");
    }
}
