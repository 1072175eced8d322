//! Backoff arithmetic, kept pure so it can be tested directly.

use std::time::{Duration, SystemTime};

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
/// at [`MAX_RETRY_AFTER`].
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
