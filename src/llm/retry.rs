//! Retries: the backoff arithmetic (pure, tested directly), and the one retry loop every call
//! goes through (chat completions, Files and Batches), which knows per request whether sending
//! it again could do something twice ([`Effect`]) and keeps the stall clock.

use super::{LlmError, StallClock};
use std::time::{Duration, SystemTime};

/// What a request does on the server: decides whether it is sent again after a failure that
/// leaves unknown whether it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Sending it twice does no harm (a read, an upload that only stores a file, or a chat
    /// completion: an attempt abandoned on a timeout may be billed, and is counted so).
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

/// A call answered 429 several times in a row backs off as after this many failures at most
/// (the pace, not the backoff, is what finds the server's rate).
const RATE_LIMITED_BACKOFF: u32 = 3;

/// How one call is retried: `policy`'s attempts and backoff, what sending it again could do
/// (`effect`), and the stall clock its waits on the server count on.
pub(super) struct Retry<'a> {
    /// Attempts and backoff.
    pub policy: &'a RetryPolicy,
    /// What sending the request again could do.
    pub effect: Effect,
    /// The client's stall clock.
    pub stall: &'a StallClock,
}

impl Retry<'_> {
    /// Runs `attempt` until it succeeds, fails for good, or the attempts run out, backing off
    /// between attempts (never shorter than the server's `Retry-After`); `on_retry` hears of
    /// each retry. A 429 means "later", never "failed": it uses no attempt (the watchdog and
    /// the budget still bound the run). 5xx, timeouts and connection errors use one each; an
    /// error `is_final` says is final, and any other, is not retried. A request of
    /// [`Effect::Once`] is not sent again after a failure that may have reached the server.
    /// The backoff after a failure is time spent waiting on the server (the stall clock counts
    /// it); a reply, or a definite refusal, restarts the clock. (The attempt itself counts its
    /// time on the server: our own rate limits do not.)
    ///
    /// # Errors
    /// The last attempt's error.
    pub(super) async fn run<T, Fut>(
        &self,
        mut attempt: impl FnMut() -> Fut,
        is_final: impl Fn(&LlmError) -> bool,
        mut on_retry: impl FnMut(),
    ) -> Result<T, LlmError>
    where
        Fut: Future<Output = Result<T, LlmError>>,
    {
        let attempts = self.policy.max_attempts.max(1);
        // Attempts that failed (429s aside), and 429s.
        let (mut failed, mut limited) = (0, 0);
        loop {
            let error = match attempt().await {
                Ok(value) => {
                    self.stall.progress();
                    return Ok(value);
                }
                Err(error) => error,
            };
            let rate_limited = matches!(error, LlmError::Http { status: 429, .. });
            let backoff = if !self.effect.retries_after(&error) {
                None
            } else if rate_limited {
                limited += 1;
                Some(limited.min(RATE_LIMITED_BACKOFF) - 1)
            } else if is_final(&error) {
                None
            } else {
                failed += 1;
                (failed < attempts).then(|| failed - 1)
            };
            let Some(retry) = backoff else {
                if matches!(error, LlmError::Http { .. }) && (!error.is_retryable() || is_final(&error)) {
                    // A definite refusal finishes the call: the server is alive.
                    self.stall.progress();
                }
                return Err(error);
            };
            on_retry();
            let jitter = rand::Rng::random::<f64>(&mut rand::rng());
            let waiting = self.stall.wait();
            tokio::time::sleep(self.policy.delay(retry, jitter, error.retry_after())).await;
            drop(waiting);
        }
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

    /// The longest the backoffs between the attempts of one call can take, each at its longest
    /// (a `Retry-After` aside: a 429 uses no attempt, so no count of attempts bounds it).
    #[must_use]
    pub fn longest_backoff(&self) -> Duration {
        let retries = self.max_attempts.max(1) - 1;
        let mut total = Duration::ZERO;
        for retry in 0..retries {
            let delay = self.delay(retry, 1.0, None);
            if delay >= self.max {
                // Every later backoff is capped as well.
                return total.saturating_add(self.max.saturating_mul(retries - retry));
            }
            total = total.saturating_add(delay);
        }
        total
    }

    /// The longest one call can take when every attempt runs into `timeout`: the attempts and
    /// the backoffs between them.
    #[must_use]
    pub fn longest_call(&self, timeout: Duration) -> Duration {
        timeout.saturating_mul(self.max_attempts.max(1)).saturating_add(self.longest_backoff())
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
        let stall = StallClock::default();
        let outcome: Result<(), LlmError> = Retry { policy: &policy, effect, stall: &stall }
            .run(
                || {
                    tried.fetch_add(1, Ordering::SeqCst);
                    std::future::ready(Err(error.clone()))
                },
                |_| false,
                || {},
            )
            .await;
        assert!(outcome.is_err());
        tried.load(Ordering::SeqCst)
    }

    /// Runs a request of `effect` answered by `errors` in turn, then a reply; what it ended
    /// as, the attempts it took, and the stall clock's silence at its end.
    async fn run_through(effect: Effect, errors: &[LlmError]) -> (Result<(), LlmError>, usize, Duration) {
        let tried = std::sync::atomic::AtomicUsize::new(0);
        let policy =
            RetryPolicy { max_attempts: 2, base: Duration::from_secs(1), max: Duration::from_secs(4) };
        let stall = StallClock::default();
        let outcome = Retry { policy: &policy, effect, stall: &stall }
            .run(
                || {
                    let n = tried.fetch_add(1, Ordering::SeqCst);
                    std::future::ready(errors.get(n).cloned().map_or(Ok(()), Err))
                },
                |_| false,
                || {},
            )
            .await;
        (outcome, tried.load(Ordering::SeqCst), stall.silent_for())
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_uses_no_attempt_on_any_call_and_a_5xx_does() {
        let limited =
            LlmError::Http { status: 429, message: String::new(), retry_after: Some(Duration::ZERO) };
        let server = LlmError::Http { status: 500, message: String::new(), retry_after: None };
        for effect in [Effect::Repeatable, Effect::Once] {
            let (outcome, tried, _) =
                run_through(effect, &[limited.clone(), limited.clone(), limited.clone()]).await;
            assert!(outcome.is_ok(), "three 429s with 2 attempts: {outcome:?}");
            assert_eq!(tried, 4);
            let (outcome, tried, _) =
                run_through(effect, &[limited.clone(), server.clone(), server.clone()]).await;
            assert!(outcome.is_err(), "two 500s use both attempts");
            assert_eq!(tried, 3);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn backing_off_after_a_failure_is_time_waiting_on_the_server_until_a_reply() {
        let later =
            LlmError::Http { status: 429, message: String::new(), retry_after: Some(Duration::from_secs(7)) };
        let stall = StallClock::default();
        let policy = RetryPolicy { max_attempts: 1, ..RetryPolicy::default() };
        let retry = Retry { policy: &policy, effect: Effect::Once, stall: &stall };
        let tried = AtomicU32::new(0);
        let asked = retry.run(
            || {
                let n = tried.fetch_add(1, Ordering::SeqCst);
                std::future::ready(if n == 0 { Err(later.clone()) } else { Ok(()) })
            },
            |_| false,
            || {},
        );
        let watch = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            stall.silent_for()
        };
        let (outcome, silent) = tokio::join!(asked, watch);
        assert!(outcome.is_ok());
        assert_eq!(silent, Duration::from_secs(5), "the Retry-After wait counts");
        assert_eq!(stall.silent_for(), Duration::ZERO, "the reply restarts the clock");
        let refused = LlmError::Http { status: 400, message: String::new(), retry_after: None };
        let (_, tried, silent) = run_through(Effect::Repeatable, &[refused]).await;
        assert_eq!((tried, silent), (1, Duration::ZERO), "a refusal is an answer");
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
    fn the_longest_call_counts_every_attempt_and_the_longest_backoff_between_them() {
        // Backoffs at their longest: 1 + 2 + 4 + 8 s between 5 attempts; the cap of 10 s from
        // the fifth retry on.
        assert_eq!(POLICY.longest_backoff(), Duration::from_secs(15));
        assert_eq!(POLICY.longest_call(Duration::from_secs(3)), Duration::from_secs(5 * 3 + 15));
        let many = RetryPolicy { max_attempts: 8, ..POLICY };
        assert_eq!(many.longest_backoff(), Duration::from_secs(15 + 10 + 10 + 10));
        let endless = RetryPolicy { max_attempts: u32::MAX, ..POLICY };
        assert_eq!(endless.longest_backoff(), Duration::from_secs(15 + 10 * u64::from(u32::MAX - 5)));
        let once = RetryPolicy { max_attempts: 1, ..POLICY };
        assert_eq!(once.longest_call(Duration::from_secs(3)), Duration::from_secs(3));
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
