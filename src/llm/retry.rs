//! Retries: the backoff arithmetic (pure, tested directly), and the retry loop of the Files
//! and Batches calls, which knows per request whether sending it again could do something
//! twice ([`Effect`]).

use super::LlmError;
use std::time::{Duration, SystemTime};

/// What a request does on the server: decides whether it is sent again after a failure that
/// leaves unknown whether it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Sending it twice does no harm (a read, or an upload that only stores a file).
    Repeatable,
    /// It makes something each time it arrives (a batch, which is billed): after a failure
    /// that may have reached the server (see [`LlmError::may_have_taken_effect`]) it is not
    /// sent again, and the caller hears that it may have taken effect.
    Once,
}

impl Effect {
    /// Whether a request of this effect is tried again after `error`.
    #[must_use]
    pub fn retries_after(self, error: &LlmError) -> bool {
        error.is_retryable() && !(self == Self::Once && error.may_have_taken_effect())
    }
}

/// Runs `attempt` until it succeeds, fails for good, or `policy`'s attempts run out, backing
/// off between attempts (never shorter than the server's `Retry-After`); `on_retry` hears of
/// each retry. A request of [`Effect::Once`] is not sent again after a failure that may have
/// reached the server.
///
/// # Errors
/// The last attempt's error.
pub(super) async fn run<T, Fut>(
    policy: &RetryPolicy,
    effect: Effect,
    mut attempt: impl FnMut() -> Fut,
    mut on_retry: impl FnMut(),
) -> Result<T, LlmError>
where
    Fut: Future<Output = Result<T, LlmError>>,
{
    let attempts = policy.max_attempts.max(1);
    let mut tried = 0;
    loop {
        let error = match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        tried += 1;
        if tried >= attempts || !effect.retries_after(&error) {
            return Err(error);
        }
        on_retry();
        let jitter = rand::Rng::random::<f64>(&mut rand::rng());
        tokio::time::sleep(policy.delay(tried - 1, jitter, error.retry_after())).await;
    }
}

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub max_attempts: u32,
    /// Backoff of the first retry.
    pub base: Duration,
    /// Longest backoff.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_attempts: 6, base: Duration::from_millis(500), max: Duration::from_secs(60) }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based): exponential with "equal jitter" (half
    /// fixed, half random by `jitter` in [0, 1)), capped at `max`, and never shorter than the
    /// server's `Retry-After`.
    #[must_use]
    pub fn delay(&self, retry: u32, jitter: f64, retry_after: Option<Duration>) -> Duration {
        let exponential = self.base.saturating_mul(2u32.saturating_pow(retry)).min(self.max);
        let backoff = exponential / 2 + exponential.mul_f64(jitter.clamp(0.0, 1.0) / 2.0);
        backoff.max(retry_after.unwrap_or_default())
    }
}

/// Longest `Retry-After` honoured; a server asking for more gets this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Parses a `Retry-After` value: seconds, or an HTTP date (a date in the past means now); capped
/// at `MAX_RETRY_AFTER`.
#[must_use]
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(seconds) = value.parse::<f64>() {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return None;
        }
        Duration::try_from_secs_f64(seconds).unwrap_or(MAX_RETRY_AFTER)
    } else {
        httpdate::parse_http_date(value).ok()?.duration_since(now).unwrap_or_default()
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Runs a request of `effect` that fails with `error` every time; the attempts it took.
    async fn attempts_after(effect: Effect, error: &LlmError) -> u32 {
        let tried = AtomicU32::new(0);
        let policy = RetryPolicy { max_attempts: 4, ..RetryPolicy::default() };
        let outcome: Result<(), LlmError> = run(
            &policy,
            effect,
            || {
                tried.fetch_add(1, Ordering::SeqCst);
                std::future::ready(Err(error.clone()))
            },
            || {},
        )
        .await;
        assert!(outcome.is_err());
        tried.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_may_have_taken_effect_is_not_sent_again_if_it_makes_something() {
        let timeout = LlmError::Timeout(Duration::from_secs(1));
        let reset = LlmError::connect(std::io::Error::from(std::io::ErrorKind::ConnectionReset), false);
        let gateway = LlmError::Http { status: 504, message: String::new(), retry_after: None };
        for unsure in [&timeout, &reset, &gateway] {
            assert_eq!(attempts_after(Effect::Once, unsure).await, 1, "{unsure:?}");
            assert_eq!(attempts_after(Effect::Repeatable, unsure).await, 4, "{unsure:?}");
        }
        // A definite failure is retried either way (it did nothing), a refusal never.
        let server = LlmError::Http { status: 500, message: String::new(), retry_after: None };
        let refused = LlmError::connect(std::io::Error::from(std::io::ErrorKind::ConnectionRefused), false);
        for definite in [&server, &refused] {
            assert_eq!(attempts_after(Effect::Once, definite).await, 4, "{definite:?}");
        }
        let bad = LlmError::Http { status: 400, message: String::new(), retry_after: None };
        assert_eq!(attempts_after(Effect::Once, &bad).await, 1);
    }

    const POLICY: RetryPolicy =
        RetryPolicy { max_attempts: 5, base: Duration::from_secs(1), max: Duration::from_secs(10) };

    #[track_caller]
    fn check(retry: u32, jitter: f64, retry_after: Option<u64>, expected_ms: u64) {
        let got = POLICY.delay(retry, jitter, retry_after.map(Duration::from_secs));
        assert_eq!(got.as_millis(), u128::from(expected_ms));
    }

    #[test]
    fn delays_grow_exponentially_with_jitter_and_cap() {
        check(0, 0.0, None, 500);
        check(0, 0.999_999, None, 999);
        check(1, 0.5, None, 1_500);
        check(3, 0.0, None, 4_000);
        check(10, 1.0, None, 10_000);
        check(u32::MAX, 0.0, None, 5_000);
    }

    #[test]
    fn retry_after_is_a_floor() {
        check(0, 0.0, Some(3), 3_000);
        check(5, 1.0, Some(3), 10_000);
    }

    #[test]
    fn parses_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 1.5 ", now), Some(Duration::from_millis(1_500)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(30)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("1e300", now), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("NaN", now), None);
    }
}
