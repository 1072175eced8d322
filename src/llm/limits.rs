//! Throughput control: a cap on requests in flight and paced request and token rates.
//!
//! Rates are paced, not bounced: the limiters release requests evenly at 98 % of the limit
//! (burst 1), so a server counting over a rolling window never sees more than it allows.

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};

/// Share of a rate limit actually used, to absorb clock and network jitter.
const PACE: f64 = 0.98;

/// Limits on what is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct LimitConfig {
    /// Requests in flight at most (retries included).
    pub concurrency: usize,
    /// Requests per minute at most.
    pub rpm: Option<u32>,
    /// Tokens (prompt + max completion) per minute at most.
    pub tpm: Option<u32>,
}

/// The limiters of one endpoint.
pub struct Limits {
    in_flight: Semaphore,
    requests: Option<DefaultDirectRateLimiter>,
    tokens: Option<(DefaultDirectRateLimiter, NonZeroU32)>,
}

impl Limits {
    /// Limiters for `config` (a concurrency of 0 counts as 1).
    #[must_use]
    pub fn new(config: LimitConfig) -> Self {
        let requests = config.rpm.and_then(|rpm| paced(f64::from(rpm)));
        let tokens = config.tpm.filter(|tpm| *tpm > 0).and_then(|tpm| {
            // A request takes its tokens in pieces of at most a tenth of a minute's worth, so the
            // full estimate is charged while a window never sees much over the limit.
            let burst = NonZeroU32::new((tpm / 10).max(1))?;
            let period = Duration::from_secs_f64(60.0 / (f64::from(tpm) * PACE));
            let quota = Quota::with_period(period)?.allow_burst(burst);
            Some((RateLimiter::direct(quota), burst))
        });
        Self { in_flight: Semaphore::new(config.concurrency.max(1)), requests, tokens }
    }

    /// Waits for a slot and for the rates to allow a request of about `tokens` tokens.
    pub async fn acquire(&self, tokens: u32) -> Option<SemaphorePermit<'_>> {
        let permit = self.in_flight.acquire().await.ok()?;
        if let Some(limiter) = &self.requests {
            limiter.until_ready().await;
        }
        if let Some((limiter, burst)) = &self.tokens {
            let mut left = tokens.max(1);
            while let Some(piece) = NonZeroU32::new(left.min(burst.get())) {
                // A piece never exceeds the burst, so this cannot fail.
                let _ = limiter.until_n_ready(piece).await;
                left -= piece.get();
            }
        }
        Some(permit)
    }
}

/// A limiter releasing one request every `60 / (per_minute × PACE)` seconds.
fn paced(per_minute: f64) -> Option<DefaultDirectRateLimiter> {
    if per_minute <= 0.0 {
        return None;
    }
    let quota =
        Quota::with_period(Duration::from_secs_f64(60.0 / (per_minute * PACE)))?.allow_burst(NonZeroU32::MIN);
    Some(RateLimiter::direct(quota))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn paces_requests_evenly() {
        let limits = Limits::new(LimitConfig { concurrency: 4, rpm: Some(600), tpm: None });
        let start = Instant::now();
        for _ in 0..6 {
            drop(limits.acquire(10).await);
        }
        // 600 rpm paced at 98 %: one every ~102 ms, the first at once: ~510 ms for six.
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(900), "{elapsed:?}");
    }

    #[tokio::test]
    async fn charges_the_whole_token_estimate() {
        // 6,000 tokens a minute paced at 98 %: 100 tokens every ~1.02 s, bursts of 600.
        let limits = Limits::new(LimitConfig { concurrency: 4, rpm: None, tpm: Some(6_000) });
        let start = Instant::now();
        drop(limits.acquire(600).await);
        drop(limits.acquire(200).await);
        // The first 600 pass at once; 200 more need about two seconds of refill.
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(1_900), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    }

    #[tokio::test]
    async fn caps_requests_in_flight() {
        let limits = Limits::new(LimitConfig { concurrency: 2, rpm: None, tpm: None });
        let a = limits.acquire(1).await;
        let b = limits.acquire(1).await;
        assert!(a.is_some() && b.is_some());
        let third = tokio::time::timeout(Duration::from_millis(50), limits.acquire(1)).await;
        assert!(third.is_err(), "a third request got through a cap of 2");
        drop(a);
        let third = tokio::time::timeout(Duration::from_millis(50), limits.acquire(1)).await;
        assert!(third.is_ok());
    }
}
