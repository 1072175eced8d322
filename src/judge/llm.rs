//! The LLM judge: grades (query, chunk) pairs 0–3 at temperature 0, through the run's LLM
//! session (the generator's endpoint, limits, cache and budget), in the response format the
//! generator's preflight chose.
//!
//! Invariants: grades come back in the asks' order; an unusable reply is re-asked at most
//! `repairs` times; a failure that is not fatal is an [`Unusable`] with its kind and words.

use super::{Ask, CallsAtMost, Grade, Judge, JudgeConfig, calls_at_most};
use crate::error::Result;
use crate::generate::{Prompts, Request, ResponseMode, extract_json};
use crate::index::ChunkIndex;
use crate::llm::{LlmError, Message, Role, Session, Unusable, estimate_tokens};
use crate::progress::StageProgress;
use serde::Deserialize;
use std::sync::Arc;

/// Tokens allowed for the query in the estimate of a judge prompt (a query is one sentence;
/// the queries do not exist yet when the estimate is made).
const QUERY_TOKENS: u64 = 64;

/// Grades asks with a chat model.
pub struct LlmJudge<'a> {
    index: &'a ChunkIndex,
    session: Arc<Session>,
    prompts: Prompts,
    mode: ResponseMode,
    /// The response format of every ask, from `mode` and the judge's schema.
    format: Option<serde_json::Value>,
    repairs: u32,
}

impl<'a> LlmJudge<'a> {
    /// A judge of the chunks of `index` that calls through `session` in `mode`, re-asking an
    /// unusable reply at most `repairs` times.
    #[must_use]
    pub fn new(
        index: &'a ChunkIndex,
        session: Arc<Session>,
        prompts: Prompts,
        mode: ResponseMode,
        repairs: u32,
    ) -> Self {
        let format = mode.mode.response_format("grade", &prompts.judge_schema);
        Self { index, session, prompts, mode, format, repairs }
    }

    /// The tokens the judge's session has used so far (every stage sharing it included).
    #[must_use]
    pub fn usage(&self) -> crate::llm::TokenUsage {
        self.session.llm().usage()
    }

    /// The judge calls `requests` may cost once generated, and their prompt tokens: a call per
    /// hop of a multi_hop query (per source of any query with `--gate judge`), per pooled chunk of a no_answer one, and `--judge-pool` per
    /// answerable one (see [`calls_at_most`]). A source's prompt is counted with its own chunk; a
    /// pooled chunk, not known yet, as large as the request's first source.
    ///
    /// # Errors
    /// When the index cannot serve a chunk or the template cannot be rendered.
    pub fn estimate(
        &self,
        requests: &[Request],
        config: JudgeConfig,
        pool_depth: usize,
    ) -> Result<(u64, u64)> {
        let (mut calls, mut tokens) = (0, 0);
        for request in requests {
            let CallsAtMost { sources, pool } = calls_at_most(request.query_type, config, pool_depth);
            if sources {
                for &chunk in &request.sources {
                    calls += 1;
                    tokens += self.prompt_tokens(chunk)?;
                }
            }
            if let Some(&chunk) = request.sources.first().filter(|_| pool > 0) {
                calls += pool as u64;
                tokens += pool as u64 * self.prompt_tokens(chunk)?;
            }
        }
        Ok((calls, tokens))
    }

    /// Prompt tokens of an ask about `chunk`, the query's allowance included.
    fn prompt_tokens(&self, chunk: usize) -> Result<u64> {
        let messages = self.messages("", chunk)?;
        Ok(u64::from(estimate_tokens(&messages, self.format.as_ref())) + QUERY_TOKENS)
    }

    fn messages(&self, query: &str, chunk: usize) -> Result<Vec<Message>> {
        let stored = self.index.stored(chunk)?;
        let user = self.prompts.judge.render(&[
            ("query", query),
            ("title", &stored.title),
            ("text", &stored.text),
        ])?;
        Ok(vec![Message::new(Role::User, user)])
    }

    /// Asks about one (query, chunk) pair, at temperature 0.
    async fn grade_one(&self, ask: &Ask, progress: &StageProgress) -> std::result::Result<Grade, LlmError> {
        let messages = self.messages(&ask.query, ask.chunk).map_err(|e| LlmError::Body(e.to_string()))?;
        let repair = |error: &str| {
            self.prompts.judge_repair.render(&[("error", error)]).map_err(|e| LlmError::Body(e.to_string()))
        };
        let answer = self
            .session
            .ask_until(messages, self.format.as_ref(), 0.0, self.repairs, repair, parse_grade)
            .await;
        if !matches!(answer, Err(LlmError::Deferred)) {
            progress.inc(1);
        }
        Ok(Unusable::settle(answer)?.map(|grade| {
            self.mode.worked(&self.session);
            grade.grade
        }))
    }
}

impl Judge for LlmJudge<'_> {
    fn grade(&mut self, asks: &[Ask], progress: &StageProgress) -> Result<Vec<Grade>> {
        let say = |line: String| progress.say(&line);
        let graded = self.session.run_ordered(asks, "judge", &say, |ask| self.grade_one(ask, progress));
        Ok(self.session.block_on(graded)?)
    }
}

/// The judge's grade of one chunk for one query.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct ReplyGrade {
    /// 0–3.
    grade: u8,
    /// Why, in a sentence.
    #[serde(default)]
    reason: String,
}

/// Parses and validates a judge's reply.
///
/// # Errors
/// A sentence naming the problem, for the repair re-ask.
fn parse_grade(content: &str) -> std::result::Result<ReplyGrade, String> {
    let object = extract_json(content, "grade")?;
    let grade: ReplyGrade = serde_json::from_value(object).map_err(|e| format!("invalid JSON: {e}"))?;
    if grade.grade > 3 {
        return Err(format!("grade {} is not one of 0, 1, 2, 3", grade.grade));
    }
    Ok(grade)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grades_parse_and_out_of_range_ones_are_errors() {
        let parsed =
            parse_grade("<think>hmm</think>```json\n{\"grade\": 2, \"reason\": \"most of it\"}\n```");
        assert_eq!(parsed, Ok(ReplyGrade { grade: 2, reason: "most of it".into() }));
        assert!(parse_grade(r#"{"grade": 5, "reason": ""}"#).is_err_and(|e| e.contains("grade 5")));
        // UMBRELA order: the reasoning (which may quote braces) before the grade.
        let reasoned = r#"{"reason": "intent: dosage {adult}; the passage gives it", "grade": 3}"#;
        assert_eq!(parse_grade(reasoned).map(|g| g.grade), Ok(3));
        assert!(parse_grade(r#"{"grade": "high"}"#).is_err_and(|e| e.contains("invalid JSON")));
        assert!(parse_grade("three").is_err_and(|e| e.contains("no JSON object with \"grade\"")));
    }
}
