//! The batch wire format, OpenAI's (which vLLM reads and writes too): request file lines,
//! result lines and what they say about their calls, and the Files and Batches endpoints'
//! objects as far as they are read.

use super::{BatchError, CHAT_URL};
use crate::llm::{CachedReply, LlmError};
use serde::Deserialize;
use std::path::Path;

/// One line of a request file: OpenAI's batch input format.
pub(super) fn request_line(key: &str, body: &str) -> String {
    let id = serde_json::Value::String(key.to_owned());
    format!(r#"{{"custom_id":{id},"method":"POST","url":"{CHAT_URL}","body":{body}}}"#)
}

#[derive(Debug, Deserialize)]
pub(super) struct OutputLine {
    pub(super) custom_id: String,
    #[serde(default)]
    pub(super) response: Option<OutputResponse>,
    #[serde(default)]
    pub(super) error: Option<OutputError>,
}

#[derive(Debug, Deserialize)]
pub(super) struct OutputResponse {
    #[serde(default)]
    pub(super) status_code: u16,
    #[serde(default)]
    pub(super) body: serde_json::Value,
}

#[derive(Debug, Deserialize)]
pub(super) struct OutputError {
    #[serde(default)]
    pub(super) code: Option<String>,
    #[serde(default)]
    pub(super) message: Option<String>,
}

/// What a result line says about its call.
#[derive(Debug, Clone)]
pub(super) enum CallResult {
    /// A reply, to cache.
    Reply(CachedReply),
    /// The call failed for good.
    Failed(LlmError),
    /// The batch never ran it (expired, cancelled): submit it again.
    NotRun,
}

/// Reads one result line.
pub(super) fn call_result(line: &OutputLine) -> CallResult {
    if let Some(error) = &line.error {
        let code = error.code.as_deref().unwrap_or("");
        if matches!(code, "batch_expired" | "batch_cancelled") {
            return CallResult::NotRun;
        }
        let message = error.message.clone().unwrap_or_else(|| code.to_owned());
        return CallResult::Failed(LlmError::Body(format!("batch line failed: {message}")));
    }
    let Some(response) = &line.response else { return CallResult::NotRun };
    if response.status_code != 200 {
        let message = response
            .body
            .pointer("/error/message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("(no message)")
            .to_owned();
        return CallResult::Failed(LlmError::Http {
            status: response.status_code,
            message,
            retry_after: None,
        });
    }
    match crate::llm::chat::reply_of(response.body.clone()) {
        Ok(reply) => CallResult::Reply(reply),
        Err(error) => CallResult::Failed(error),
    }
}

/// Whether `id` can be a request's `custom_id`: a cache key, 64 lowercase hex digits.
pub(super) fn is_request_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The lenient parts of a batch object we read.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct BatchObject {
    pub(super) id: String,
    #[serde(default)]
    pub(super) status: String,
    #[serde(default)]
    pub(super) input_file_id: Option<String>,
    /// Unix time, when the server says (null, missing or a float are read too).
    #[serde(default, deserialize_with = "lenient_time")]
    pub(super) created_at: Option<u64>,
    #[serde(default)]
    pub(super) output_file_id: Option<String>,
    #[serde(default)]
    pub(super) error_file_id: Option<String>,
    #[serde(default)]
    pub(super) request_counts: Option<Counts>,
    #[serde(default)]
    pub(super) errors: Option<serde_json::Value>,
}

/// A Unix time as providers write it: an integer, a float, or null.
pub(super) fn lenient_time<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.and_then(|v| {
        v.as_u64().or_else(|| {
            v.as_f64().filter(|t| t.is_finite() && *t >= 0.0).map(|t| {
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "finite and not negative"
                )]
                let seconds = t as u64;
                seconds
            })
        })
    }))
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(super) struct Counts {
    #[serde(default)]
    pub(super) total: u64,
    #[serde(default)]
    pub(super) completed: u64,
    #[serde(default)]
    pub(super) failed: u64,
}

#[derive(Debug, Deserialize)]
pub(super) struct FileObject {
    pub(super) id: String,
}

/// A page of the list of batches (newest first).
#[derive(Debug, Deserialize)]
pub(super) struct BatchPage {
    pub(super) data: Vec<BatchObject>,
    #[serde(default)]
    pub(super) has_more: bool,
    #[serde(default)]
    pub(super) last_id: Option<String>,
}

impl BatchObject {
    pub(super) fn terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "expired" | "cancelled" | "failed")
    }
}

/// Writes `lines` as a JSONL file, atomically (a temporary file renamed into place).
pub(super) fn write_lines<'l>(
    path: &Path,
    lines: impl Iterator<Item = &'l str>,
) -> Result<usize, BatchError> {
    let file_error = |e: std::io::Error| BatchError::File { path: path.to_owned(), message: e.to_string() };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(file_error)?;
    let mut count = 0;
    {
        use std::io::Write as _;
        let mut w = std::io::BufWriter::new(temp.as_file_mut());
        for line in lines {
            writeln!(w, "{line}").map_err(file_error)?;
            count += 1;
        }
        w.flush().map_err(file_error)?;
    }
    temp.as_file().sync_all().map_err(file_error)?;
    temp.persist(path).map_err(|e| file_error(e.error))?;
    Ok(count)
}
