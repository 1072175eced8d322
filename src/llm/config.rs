//! The settings of a client: the endpoint (its key never serialized, printed or stored, its
//! URL's credentials redacted wherever it is shown), prices, the budget and the call settings.

use super::{BatchConfig, DEFAULT_DISCOUNT, LimitConfig, RetryPolicy};
use serde::{Deserialize, Serialize};
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
pub(super) fn split_query(url: &str) -> (&str, Option<&str>) {
    let url = url.split_once('#').map_or(url, |(head, _)| head);
    match url.split_once('?') {
        Some((base, query)) => (base, Some(query).filter(|q| !q.is_empty())),
        None => (url, None),
    }
}

pub(super) fn without_credentials<S: serde::Serializer>(url: &str, serializer: S) -> Result<S::Ok, S::Error> {
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
pub(super) fn is_default_discount(discount: &f64) -> bool {
    (*discount - DEFAULT_DISCOUNT).abs() < f64::EPSILON
}

pub(super) fn as_secs<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(duration.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

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
