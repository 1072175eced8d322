//! Tests of the throughput control under tokio's paused clock: the pace (adaptive after a 429,
//! held by the server's rate headers), the cap on requests in flight and the token bucket.

use super::*;
use futures::StreamExt as _;
use rand::{Rng as _, SeedableRng as _};
use tokio::time::advance;

const fn config(concurrency: usize, rpm: Option<u32>, tpm: Option<u32>) -> LimitConfig {
    LimitConfig { concurrency, rpm, tpm }
}

#[tokio::test(start_paused = true)]
async fn paces_requests_evenly() {
    let limits = Limits::new(config(4, Some(600), None));
    let start = Instant::now();
    for _ in 0..6 {
        drop(limits.acquire(10, 0).await);
    }
    // 600 rpm paced at 98 %: one every 102.04 ms, the first at once.
    let elapsed = start.elapsed().as_secs_f64();
    assert!((elapsed - 5.0 * 60.0 / (600.0 * PACE)).abs() < 1e-3, "{elapsed}");
}

#[tokio::test(start_paused = true)]
async fn a_cap_below_the_adaptive_floor_is_paced_at_the_cap() {
    // --rpm 1 paced at 98 %: one request every 61.22 s, not every 60 s (the adaptive floor).
    let limits = Limits::new(config(1, Some(1), None));
    let start = Instant::now();
    for _ in 0..3 {
        drop(limits.acquire(10, 0).await);
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert!((elapsed - 2.0 * 60.0 / PACE).abs() < 1e-3, "{elapsed} s for 3 requests at 1 rpm");
    // After a 429 the pace stays at or below the cap too.
    let Some(ticket) = limits.acquire(10, 0).await else { panic!("closed") };
    limits.rate_limited(&ticket);
    drop(ticket);
    let before = Instant::now();
    drop(limits.acquire(10, 0).await);
    let gap = before.elapsed().as_secs_f64();
    assert!(gap >= 60.0 / PACE - 1e-3, "{gap} s apart after a 429, faster than the cap");
    assert!(limits.rate().is_some_and(|r| r <= 1.0 / 60.0 * PACE), "{:?}", limits.rate());
}

#[test]
fn a_waiter_that_wakes_late_takes_its_slot_on_time() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut pace = Pace::new(Some(10.0));
    assert_eq!(pace.take(start, None), None, "the first request leaves at once");
    assert_eq!(pace.take(at(50), None), Some(at(100)), "the next slot, 100 ms on");
    assert_eq!(pace.take(at(103), Some(at(100))), None, "woken 3 ms late, it takes the 100 ms slot");
    assert_eq!(pace.take(at(150), None), Some(at(200)), "so the cadence stays exact");
    assert_eq!(pace.take(at(260), Some(at(200))), None, "60 ms late: the slot went unused");
    assert_eq!(pace.take(at(300), None), Some(at(360)), "the next is counted from now");
}

#[test]
fn a_new_rate_takes_over_from_the_slot_just_taken() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut pace = Pace::new(Some(10.0));
    assert_eq!(pace.take(start, None), None);
    pace.header_cap = Some(4.0);
    assert_eq!(pace.take(at(100), Some(at(100))), None, "the slot booked at 10/s");
    assert_eq!(pace.take(at(110), None), Some(at(350)), "then 250 ms apart at 4/s");
    // A 429 with none answered since the start: the floor is 4 × 8/9 × 0.95 a second.
    pace.rate_limited(at(100), at(120));
    let floor = 4.0 * 8.0 / 9.0 * GENTLE_CUT;
    let next = pace.take(at(130), None).unwrap_or(start);
    let expected = at(120) + Duration::from_secs_f64(1.0 / floor);
    assert!(next.max(expected) - next.min(expected) < Duration::from_micros(1), "{next:?} vs {expected:?}");
}

#[tokio::test(start_paused = true)]
async fn after_a_429_the_pace_follows_the_growing_rate_on_few_limiters_and_never_faster() {
    let limits = Limits::new(config(1, Some(600), None));
    let Some(ticket) = limits.acquire(1, 0).await else { panic!("closed") };
    // The adaptive rate takes over below the 9.8/s of --rpm and grows back on its curve.
    limits.rate_limited(&ticket);
    drop(ticket);
    let (mut sent, mut rates, mut limiters, mut last) = (Vec::new(), Vec::new(), 0, None);
    for _ in 0..300 {
        let Some(ticket) = limits.acquire(1, 0).await else { panic!("closed") };
        sent.push(Instant::now());
        rates.push(limits.rate().unwrap_or(f64::NAN));
        limits.succeeded(&ticket, None);
        let slots = lock(&limits.pace).slots.as_ref().map(|s| (s.origin, s.rate.to_bits()));
        if slots != last {
            (limiters, last) = (limiters + 1, slots);
        }
    }
    let (low, high) = (rates[0], rates[rates.len() - 1]);
    assert!(high > low * 1.1, "the rate grew: {low} → {high}");
    let steps = (high / low).ln() / REBUILD_STEP.ln_1p();
    assert!(
        f64::from(limiters) <= steps.ceil() + 2.0,
        "{limiters} limiters for {steps:.1} steps of the rate in 300 slots"
    );
    // Wake-ups fall on whole milliseconds; the slots themselves are exact.
    let ms = 1e-3;
    for i in 1..sent.len() {
        let gap = (sent[i] - sent[i - 1]).as_secs_f64();
        assert!(gap >= 1.0 / rates[i] - ms, "slot {i}: {gap} s apart, faster than {} a second", rates[i]);
        let slowest = (1.0 + REBUILD_STEP) / rates[i - 1];
        assert!(gap <= slowest + ms, "slot {i}: {gap} s apart, over {slowest} at {} a second", rates[i - 1]);
    }
}

#[tokio::test(start_paused = true)]
async fn caps_requests_in_flight() {
    let limits = Limits::new(config(2, None, None));
    let a = limits.acquire(1, 0).await;
    let b = limits.acquire(1, 0).await;
    assert!(a.is_some() && b.is_some());
    let third = tokio::time::timeout(Duration::from_millis(50), limits.acquire(1, 0)).await;
    assert!(third.is_err(), "a third request got through a cap of 2");
    drop(a);
    let third = tokio::time::timeout(Duration::from_millis(50), limits.acquire(1, 0)).await;
    assert!(third.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_request_is_charged_the_mean_completion_and_settled_by_its_usage() {
    // 6,000 tokens a minute (98/s, a bucket of 600); prompts of 100, max_tokens 1,500,
    // completions of 50.
    let limits = Limits::new(config(1, None, Some(6_000)));
    let start = Instant::now();
    let mut charged = Vec::new();
    for _ in 0..20 {
        let Some(ticket) = limits.acquire(100, 1_500).await else { panic!("closed") };
        charged.push(ticket.charged);
        limits.succeeded(&ticket, Some((100, 50)));
    }
    assert_eq!(&charged[..4], [1_600, 1_600, 1_600, 150], "max_tokens until three replies came");
    assert!(charged[4..].iter().all(|&c| c == 150));
    // 20 × 150 tokens really used, 600 of them from the full bucket: (3,000 − 600) / 98 s;
    // charging max_tokens to every request would have taken (32,000 − 600) / 98 = 320 s.
    let elapsed = start.elapsed().as_secs_f64();
    assert!((20.0..=26.0).contains(&elapsed), "{elapsed} s");
}

#[tokio::test(start_paused = true)]
async fn a_refused_request_gives_its_tokens_back() {
    let limits = Limits::new(config(1, None, Some(6_000)));
    let Some(ticket) = limits.acquire(100, 500).await else { panic!("closed") };
    limits.refused(&ticket);
    drop(ticket);
    let start = Instant::now();
    drop(limits.acquire(100, 500).await);
    assert_eq!(start.elapsed(), Duration::ZERO, "the refunded 600 tokens are there again");
}

#[test]
fn reads_rate_limit_headers() {
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("x-ratelimit-limit-requests", "500"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "6m0.5s"),
        ("x-ratelimit-limit-tokens", "30000"),
        ("x-ratelimit-remaining-tokens", "29000"),
    ] {
        headers.insert(name, reqwest::header::HeaderValue::from_static(value));
    }
    let seen = RateHeaders::parse(&headers);
    assert_eq!(seen.limit_requests, Some(500));
    assert_eq!(seen.remaining_requests, Some(0));
    assert_eq!(seen.reset_requests, Some(Duration::from_millis(360_500)));
    assert_eq!((seen.limit_tokens, seen.remaining_tokens), (Some(30_000), Some(29_000)));
    assert_eq!(parse_reset("20ms"), Some(Duration::from_millis(20)));
    assert_eq!(parse_reset("1h2m3s"), Some(Duration::from_secs(3_723)));
    assert_eq!(parse_reset("1.5"), Some(Duration::from_millis(1_500)));
    assert_eq!(parse_reset("soon"), None);
    assert_eq!(RateHeaders::parse(&HeaderMap::new()), RateHeaders::default());
}

#[tokio::test(start_paused = true)]
async fn the_servers_headers_set_the_pace_and_hold_it_until_the_reset() {
    let limits = Limits::new(config(4, None, None));
    let mut headers = HeaderMap::new();
    headers.insert("x-ratelimit-limit-requests", reqwest::header::HeaderValue::from_static("120"));
    limits.observe(&headers);
    assert_eq!(limits.rate(), Some(2.0 * PACE));
    headers.insert("x-ratelimit-remaining-requests", reqwest::header::HeaderValue::from_static("0"));
    headers.insert("x-ratelimit-reset-requests", reqwest::header::HeaderValue::from_static("3s"));
    limits.observe(&headers);
    let start = Instant::now();
    drop(limits.acquire(1, 0).await);
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    headers.insert("x-ratelimit-limit-tokens", reqwest::header::HeaderValue::from_static("6000"));
    limits.observe(&headers);
    assert!(lock(&limits.tokens).bucket.is_some_and(|b| b.tpm == 6_000));
}

/// A server that accepts `limit` requests per rolling second, as examples/mock_openai does.
struct RollingWindow {
    limit: usize,
    accepted: VecDeque<Instant>,
    all: Vec<Instant>,
    refused: usize,
}

impl RollingWindow {
    fn admit(&mut self, at: Instant) -> bool {
        forget_before(&mut self.accepted, at, Duration::from_secs(1));
        if self.accepted.len() >= self.limit {
            self.refused += 1;
            return false;
        }
        self.accepted.push_back(at);
        self.all.push(at);
        true
    }
}

/// Runs `calls` calls at `concurrency` against a 2 req/s rolling limit with 300 ms
/// latency (plus up to `jitter_ms` each way, seeded), retrying 429s after one second, on
/// tokio's paused clock. Returns the achieved share of the limit and the 429s.
async fn simulate(calls: usize, concurrency: usize, jitter_ms: u64) -> (f64, usize) {
    let limits = Limits::new(config(concurrency, None, None));
    let server =
        Mutex::new(RollingWindow { limit: 2, accepted: VecDeque::new(), all: Vec::new(), refused: 0 });
    let rng = Mutex::new(rand_chacha::ChaCha8Rng::seed_from_u64(7));
    let jitter = || Duration::from_millis(lock(&rng).random_range(0..=jitter_ms));
    futures::stream::iter(0..calls)
        .for_each_concurrent(concurrency, |_| async {
            loop {
                let Some(ticket) = limits.acquire(10, 10).await else { return };
                tokio::time::sleep(jitter()).await;
                let admitted = lock(&server).admit(Instant::now());
                tokio::time::sleep(Duration::from_millis(300) + jitter()).await;
                if admitted {
                    limits.succeeded(&ticket, None);
                    return;
                }
                limits.rate_limited(&ticket);
                drop(ticket);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
        .await;
    let server = lock(&server);
    let span = server.all.last().zip(server.all.first()).map_or(0.0, |(l, f)| (*l - *f).as_secs_f64());
    ((server.all.len() - 1) as f64 / span / 2.0, server.refused)
}

#[tokio::test(start_paused = true)]
async fn without_a_known_limit_the_pace_finds_most_of_it_with_few_429s() {
    for (concurrency, jitter_ms) in [(1, 0), (2, 5), (4, 0), (4, 20), (16, 10), (16, 0), (8, 30)] {
        let (share, refused) = simulate(300, concurrency, jitter_ms).await;
        assert!(share >= 0.9, "concurrency {concurrency}, jitter {jitter_ms} ms: {share:.3} of the limit");
        assert!(refused <= 12 + concurrency, "concurrency {concurrency}: {refused} 429s for 300 calls");
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_cuts_once_for_the_requests_sent_at_the_same_rate() {
    let mut pace = Pace::new(None);
    let sent = Instant::now();
    for _ in 0..3 {
        pace.succeeded(sent, sent);
    }
    advance(Duration::from_millis(300)).await;
    pace.rate_limited(sent, Instant::now());
    let first = pace.rate(Instant::now());
    assert_eq!(first, Some(3.0 * PLATEAU), "three answered in the last second");
    pace.rate_limited(sent, Instant::now());
    assert_eq!(pace.rate(Instant::now()), first, "a second 429 of the same wave cuts nothing");
    advance(Duration::from_secs(1)).await;
    let before = pace.rate(Instant::now()).unwrap_or_default();
    assert!(before > first.unwrap_or_default(), "the rate grows while the limit is unknown");
    // One 429, nothing else answered since the cut: the limit is estimated at 8/9 of the
    // rate (the prior), and the pace drops a little below that.
    let sent = Instant::now();
    pace.rate_limited(sent, sent);
    let cut = pace.rate(Instant::now()).unwrap_or_default();
    let expected = before * 8.0 / 9.0 * GENTLE_CUT;
    assert!((cut - expected).abs() < 1e-9, "{before} → {cut}, not {expected}");
    // Half the answers since that cut were 429s: far above the limit.
    advance(Duration::from_secs(1)).await;
    let sent = Instant::now();
    for _ in 0..8 {
        pace.succeeded(sent, sent);
    }
    let before = pace.rate(sent).unwrap_or_default();
    for _ in 0..7 {
        pace.limited += 1;
    }
    pace.rate_limited(sent, sent);
    let cut = pace.rate(sent).unwrap_or_default();
    let expected = before * 16.0 / 24.0 * GENTLE_CUT;
    assert!((cut - expected).abs() < 1e-9, "{before} → {cut}, not {expected}");
}
