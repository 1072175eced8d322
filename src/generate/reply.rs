//! Reading a model's reply: find the JSON object (tolerating code fences, prose and reasoning
//! around it), then validate it strictly: types, non-empty strings, known query types.

use crate::record::QueryType;
use serde::Deserialize;

/// One query as the model wrote it, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyQuery {
    /// Its type.
    pub query_type: QueryType,
    /// Its style label.
    pub style: String,
    /// The query text.
    pub text: String,
    /// Verbatim quotes from the passages.
    pub evidence: Vec<String>,
    /// A short answer ("" for no_answer).
    pub answer: String,
}

#[derive(Debug, Deserialize)]
struct RawReply {
    queries: Vec<RawQuery>,
}

#[derive(Debug, Deserialize)]
struct RawQuery {
    #[serde(rename = "type")]
    query_type: String,
    style: String,
    query: String,
    evidence: Vec<String>,
    answer: String,
}

/// Parses and validates a reply; the error says what is wrong, for the repair re-ask.
///
/// # Errors
/// A sentence naming the problem (no JSON object, invalid JSON, a field of the wrong type, an
/// empty string, an unknown query type).
pub fn parse_reply(content: &str) -> Result<Vec<ReplyQuery>, String> {
    let object = extract_json(content, "queries")?;
    let raw: RawReply = serde_json::from_value(object).map_err(|e| format!("invalid JSON: {e}"))?;
    raw.queries.into_iter().enumerate().map(|(i, q)| validate(i, q)).collect()
}

fn validate(i: usize, raw: RawQuery) -> Result<ReplyQuery, String> {
    let query_type = QueryType::from_label(raw.query_type.trim()).ok_or_else(|| {
        format!(
            "queries[{i}].type {:?} is not one of direct, paraphrase, multi_hop, no_answer",
            raw.query_type
        )
    })?;
    let non_empty = |field: &str, value: String| -> Result<String, String> {
        let value = value.trim().to_owned();
        if value.is_empty() { Err(format!("queries[{i}].{field} is empty")) } else { Ok(value) }
    };
    let text = non_empty("query", raw.query)?;
    let style = non_empty("style", raw.style)?;
    if raw.evidence.is_empty() {
        return Err(format!("queries[{i}].evidence is empty"));
    }
    let evidence = raw.evidence.into_iter().map(|e| non_empty("evidence", e)).collect::<Result<_, _>>()?;
    let answer = raw.answer.trim().to_owned();
    if answer.is_empty() && query_type != QueryType::NoAnswer {
        return Err(format!("queries[{i}].answer is empty"));
    }
    Ok(ReplyQuery { query_type, style, text, evidence, answer })
}

/// Whether the reply holds a JSON object with the key `key` (code fences and prose around it
/// are fine).
#[must_use]
pub fn holds_object(content: &str, key: &str) -> bool {
    extract_json(content, key).is_ok()
}

/// The JSON object in a reply: after dropping `<think>…</think>` reasoning, the first `{` that
/// starts a complete JSON object with the key `key` (so prose with braces, code fences and
/// text after the object are all fine).
pub(crate) fn extract_json(content: &str, key: &str) -> Result<serde_json::Value, String> {
    let content = strip_thinking(content);
    let mut first_error = None;
    for (at, _) in content.match_indices('{') {
        let mut values = serde_json::Deserializer::from_str(&content[at..]).into_iter::<serde_json::Value>();
        match values.next() {
            Some(Ok(value)) if value.get(key).is_some() => return Ok(value),
            Some(Err(e)) => {
                first_error.get_or_insert_with(|| format!("invalid JSON: {e}"));
            }
            Some(Ok(_)) | None => {}
        }
    }
    Err(first_error.unwrap_or_else(|| format!("the reply contains no JSON object with {key:?}")))
}

/// The reply without `<think>…</think>` blocks (reasoning models put drafts there).
fn strip_thinking(content: &str) -> String {
    let mut out = String::with_capacity(content.len());
    let mut rest = content;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"{"queries":[{"type":"direct","style":"question","query":"How long do links last?","evidence":["Links expire after 30 days"],"answer":"30 days"}]}"#;

    #[track_caller]
    fn check_error(content: &str, expected: &str) {
        let err = parse_reply(content).err().unwrap_or_default();
        assert!(err.contains(expected), "{content}: {err}");
    }

    #[test]
    fn accepts_plain_fenced_and_prose_wrapped_json() {
        for content in [
            ONE.to_owned(),
            format!("```json\n{ONE}\n```"),
            format!("Sure! Here you go:\n{ONE}\nHope it helps."),
        ] {
            let parsed = parse_reply(&content).unwrap_or_else(|e| panic!("{e}: {content}"));
            assert_eq!(parsed.len(), 1);
            assert_eq!(parsed[0].query_type, QueryType::Direct);
            assert_eq!(parsed[0].evidence, ["Links expire after 30 days"]);
        }
    }

    #[test]
    fn finds_the_object_behind_braces_thinking_and_nested_fences() {
        let cases = [
            format!("Here are the queries for {{the passage}}:\n{ONE}"),
            format!("<think>maybe {{\"queries\": []}} no</think>\n{ONE}"),
            format!("```json\n{ONE}\n```\n\nThe passage had ```code``` in it."),
        ];
        for content in cases {
            let parsed = parse_reply(&content).unwrap_or_else(|e| panic!("{e}: {content}"));
            assert_eq!(parsed.len(), 1, "{content}");
        }
    }

    #[test]
    fn rejects_what_is_not_valid() {
        check_error("I cannot help with that.", "no JSON object");
        check_error(r#"{"queries":[{"type":"direct""#, "invalid JSON");
        check_error(r#"{"queries": [1, 2]}"#, "invalid JSON");
        check_error(
            r#"{"queries":[{"type":"direct","style":"q","query":"x","evidence":"a quote","answer":"y"}]}"#,
            "invalid JSON",
        );
        check_error(
            r#"{"queries":[{"type":"fact","style":"q","query":"x","evidence":["e"],"answer":"y"}]}"#,
            "is not one of",
        );
        check_error(
            r#"{"queries":[{"type":"direct","style":"q","query":"  ","evidence":["e"],"answer":"y"}]}"#,
            "query is empty",
        );
        check_error(
            r#"{"queries":[{"type":"direct","style":"q","query":"x","evidence":[],"answer":"y"}]}"#,
            "evidence is empty",
        );
        check_error(
            r#"{"queries":[{"type":"direct","style":"q","query":"x","evidence":["e"],"answer":""}]}"#,
            "answer is empty",
        );
    }

    #[test]
    fn no_answer_may_have_an_empty_answer() {
        let content = r#"{"queries":[{"type":"no_answer","style":"keyword","query":"printer setup","evidence":["devices"],"answer":""}]}"#;
        assert_eq!(parse_reply(content).map(|q| q.len()), Ok(1));
    }
}
