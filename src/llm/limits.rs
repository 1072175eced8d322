//! Throughput control: a cap on requests in flight, a request pace and a token bucket, all on
//! tokio's clock (so the tests run them under paused time).
//!
//! - **Pace**: requests leave one by one, at most at the lowest of `--rpm`, the server's
//!   `x-ratelimit-limit-requests` (both at 98 %) and an adaptive rate. The adaptive rate starts
//!   at the first 429 and follows CUBIC (Ha, Rhee & Xu 2008), as the AWS SDKs' adaptive retry
//!   mode does: cut on a 429, then grow back on a cubic curve that flattens just below the rate
//!   the 429 came at and probes above it only slowly, longer each time the limit is confirmed.
//!   So a user who does not know the limit gets close to it with few 429s. The slots at the
//!   rate in force are kept by a governor GCRA limiter (burst 1); governor's quota is fixed, so
//!   when the rate changes a new limiter takes over from the slot just taken: at once when the
//!   rate drops below the limiter's (the pace is never faster than the rate in force), and when
//!   it grows, only once it is [`REBUILD_STEP`] above (the CUBIC rate changes on every slot; the
//!   pace lags it by at most that share).
//! - **Tokens** (`--tpm`, or the server's `x-ratelimit-limit-tokens`): a request is charged its
//!   prompt estimate plus the running mean of the completions so far (`max_tokens` for the
//!   first few), and the difference is settled when the reply's `usage` arrives; a request the
//!   server refused is refunded. The bucket holds a tenth of a minute's worth and may go into
//!   debt, so a large request waits for a full bucket instead of never passing. Hand-written:
//!   a GCRA cell cannot be refunded, nor charged after the fact.

use governor::clock::{Clock as _, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use reqwest::header::HeaderMap;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

/// Share of a known rate limit actually used, to absorb clock and network jitter.
const PACE: f64 = 0.98;
/// After a 429, the adaptive rate flattens at this share of the rate the 429 came at.
const PLATEAU: f64 = 0.98;
/// After a 429 the pace drops to this share of the new estimate of the limit.
const GENTLE_CUT: f64 = 0.95;
/// The share of requests the server accepted since the last cut is estimated as if this many
/// more had been accepted: one 429 right after a cut is not evidence of a large overload.
const ACCEPTED_PRIOR: u32 = 8;
/// A 429 never cuts the estimate of the limit below this share of the current rate.
const HARD_CUT: f64 = 0.5;
/// CUBIC's scale, relative to the rate: the plateau is reached in `((PLATEAU - cut) / C)^(1/3)`
/// seconds (10 s after a gentle cut).
const CUBIC_SCALE: f64 = 3e-5;
/// Each 429 within 5 % of the last one's rate confirms the limit: the next probe above it is
/// slower (down to an eighth of the scale).
const CONFIRMED: f64 = 0.05;
const SLOWEST_SCALE: f64 = CUBIC_SCALE / 8.0;
/// After the first 429, with no limit known, the rate the server answered in the last second
/// is a guess: it doubles every this long until the next 429 (TCP's slow start).
const DOUBLING: Duration = Duration::from_secs(4);
/// The lowest adaptive rate: one request a minute (a told cap may be lower).
const MIN_RATE: f64 = 1.0 / 60.0;
/// How late a waiter may wake and its slot still count as used on time (tokio's timers fire on
/// whole milliseconds).
const TIMER_SLACK: Duration = Duration::from_millis(5);
/// A growing rate gets a new limiter once it is this share above the limiter's rate.
const REBUILD_STEP: f64 = 0.01;
/// Replies seen before a request is charged the mean completion instead of `max_tokens`.
const MEAN_AFTER: u64 = 3;

/// Limits on what is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct LimitConfig {
    /// Requests in flight at most (retries included).
    pub concurrency: usize,
    /// Requests per minute at most.
    pub rpm: Option<u32>,
    /// Tokens per minute at most (prompt + completion).
    pub tpm: Option<u32>,
}

/// The limiters of one endpoint.
pub struct Limits {
    in_flight: Semaphore,
    pace: Mutex<Pace>,
    tokens: Mutex<Tokens>,
    /// `--tpm` was given: the server's token header does not replace it.
    tpm_flag: bool,
}

/// A request let through: holds its place in flight until dropped, and tells the limits how it
/// went.
pub struct Ticket<'a> {
    _permit: SemaphorePermit<'a>,
    sent_at: Instant,
    charged: u32,
}

impl Limits {
    /// Limiters for `config` (a concurrency of 0 counts as 1).
    #[must_use]
    pub fn new(config: LimitConfig) -> Self {
        let cap = config.rpm.filter(|&rpm| rpm > 0).map(|rpm| f64::from(rpm) / 60.0 * PACE);
        let bucket = config.tpm.filter(|&tpm| tpm > 0).map(Bucket::per_minute);
        Self {
            in_flight: Semaphore::new(config.concurrency.max(1)),
            pace: Mutex::new(Pace::new(cap)),
            tokens: Mutex::new(Tokens { bucket, replies: 0, completion_sum: 0 }),
            tpm_flag: config.tpm.is_some_and(|t| t > 0),
        }
    }

    /// Waits for a place in flight, the pace and the tokens of a request with about `prompt`
    /// prompt tokens and up to `max_tokens` completion tokens.
    pub async fn acquire(&self, prompt: u32, max_tokens: u32) -> Option<Ticket<'_>> {
        let permit = self.in_flight.acquire().await.ok()?;
        let mut slot = None;
        loop {
            let wait = lock(&self.pace).take(Instant::now(), slot);
            match wait {
                None => break,
                Some(until) => {
                    tokio::time::sleep_until(until).await;
                    slot = Some(until);
                }
            }
        }
        let charged = lock(&self.tokens).charge(prompt, max_tokens);
        loop {
            let wait = lock(&self.tokens).take(charged, Instant::now());
            match wait {
                None => break,
                Some(until) => tokio::time::sleep_until(until).await,
            }
        }
        Some(Ticket { _permit: permit, sent_at: Instant::now(), charged })
    }

    /// The request was answered: `usage` (prompt + completion tokens, if the server said)
    /// settles its token charge, and the adaptive rate may grow.
    pub fn succeeded(&self, ticket: &Ticket<'_>, usage: Option<(u64, u64)>) {
        lock(&self.pace).succeeded(ticket.sent_at, Instant::now());
        lock(&self.tokens).settle(ticket.charged, usage, Instant::now());
    }

    /// The server answered 429: the adaptive rate is cut (once for the requests sent at the
    /// same rate), and the tokens are refunded.
    pub fn rate_limited(&self, ticket: &Ticket<'_>) {
        lock(&self.pace).rate_limited(ticket.sent_at, Instant::now());
        lock(&self.tokens).refund(ticket.charged, Instant::now());
    }

    /// The server refused the request (another error status): its tokens are refunded.
    pub fn refused(&self, ticket: &Ticket<'_>) {
        lock(&self.tokens).refund(ticket.charged, Instant::now());
    }

    /// Reads the server's `x-ratelimit-*` headers, when it sends them.
    pub fn observe(&self, headers: &HeaderMap) {
        let seen = RateHeaders::parse(headers);
        let now = Instant::now();
        lock(&self.pace).observe(&seen, now);
        let mut tokens = lock(&self.tokens);
        if !self.tpm_flag
            && let Some(tpm) = seen.limit_tokens.filter(|&t| t > 0)
        {
            tokens.follow(tpm, now);
        }
        if let (Some(bucket), Some(remaining)) = (tokens.bucket.as_mut(), seen.remaining_tokens) {
            bucket.at_most(remaining as f64, now);
        }
    }

    /// The pace in requests per second right now, if there is one (for tests and reports).
    #[must_use]
    pub fn rate(&self) -> Option<f64> {
        lock(&self.pace).rate(Instant::now())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The request pace.
#[derive(Debug)]
struct Pace {
    /// `--rpm`, in requests per second (at 98 %).
    flag_cap: Option<f64>,
    /// The server's `x-ratelimit-limit-requests`, per second (at 98 %).
    header_cap: Option<f64>,
    /// Nothing leaves before this (`x-ratelimit-remaining-requests: 0` until the reset, or
    /// the slot booked before a 429 cut the rate).
    hold_until: Option<Instant>,
    /// The slots at the rate in force, once there is one.
    slots: Option<Slots>,
    /// The adaptive rate, from the first 429 on.
    cubic: Option<Cubic>,
    /// Requests sent in the last two seconds.
    sent: VecDeque<Instant>,
    /// Successes answered in the last second.
    answered: VecDeque<Instant>,
    /// Answers to requests sent since the last cut: fine and 429.
    fine: u32,
    limited: u32,
}

/// A CUBIC curve: `rate(t) = max × (PLATEAU + scale × (t − cut − k)³)`, at least `floor`; or,
/// while the limit is still unknown (`slow_start`), `floor` doubling every
/// [`DOUBLING`] until the next 429.
#[derive(Debug, Clone, Copy)]
struct Cubic {
    max: f64,
    floor: f64,
    cut: Instant,
    k: f64,
    scale: f64,
    slow_start: bool,
}

impl Cubic {
    fn at(&self, now: Instant) -> f64 {
        let since = now.saturating_duration_since(self.cut).as_secs_f64();
        if self.slow_start {
            return self.floor * (since / DOUBLING.as_secs_f64()).exp2();
        }
        let t = since - self.k;
        (self.max * (PLATEAU + self.scale * t.powi(3))).max(self.floor)
    }
}

/// Request slots `1 / rate` apart: a governor GCRA limiter with a burst of 1. It decides on a
/// clock the program sets (governor's `FakeRelativeClock`), counted from `origin` on tokio's
/// clock and moved to the instant each decision is for, so a waiter that wakes a little late
/// still takes its slot on time and the cadence stays exact.
#[derive(Debug)]
struct Slots {
    rate: f64,
    origin: Instant,
    clock: FakeRelativeClock,
    limiter: RateLimiter<NotKeyed, InMemoryState, FakeRelativeClock, NoOpMiddleware<Nanos>>,
}

impl Slots {
    /// Slots at `rate` per second, the first `1 / rate` after `origin` (a request left then).
    /// The rate is kept as given, however low: a told cap (`--rpm 1`) is never paced faster.
    fn after(rate: f64, origin: Instant) -> Self {
        let day = Duration::from_secs(86_400);
        let period =
            Duration::try_from_secs_f64(1.0 / rate).map_or(day, |p| p.min(day)).max(Duration::from_nanos(1));
        let quota =
            Quota::with_period(period).unwrap_or_else(|| Quota::per_second(std::num::NonZeroU32::MAX));
        let clock = FakeRelativeClock::default();
        let limiter = RateLimiter::direct_with_clock(quota, clock.clone());
        // The request that left at `origin` takes the first slot.
        let _ = limiter.check();
        Self { rate, origin, clock, limiter }
    }

    /// Whether slots at `rate` need a new limiter: the rate dropped below this one's, or grew
    /// more than [`REBUILD_STEP`] above it.
    fn outdated_by(&self, rate: f64) -> bool {
        rate < self.rate * (1.0 - f64::EPSILON) || rate > self.rate * (1.0 + REBUILD_STEP)
    }

    /// Takes the slot at `at` if one is free then; else when the next one is.
    fn take(&self, at: Instant) -> Option<Instant> {
        let since = at.saturating_duration_since(self.origin);
        // Forward only: a decision for an instant already passed is made at the clock's time.
        self.clock.advance(since.saturating_sub(Duration::from(self.clock.now())));
        let refused = self.limiter.check().err()?;
        Some(self.origin + Duration::from(refused.earliest_possible()))
    }
}

impl Pace {
    fn new(flag_cap: Option<f64>) -> Self {
        Self {
            flag_cap,
            header_cap: None,
            hold_until: None,
            slots: None,
            cubic: None,
            sent: VecDeque::new(),
            answered: VecDeque::new(),
            fine: 0,
            limited: 0,
        }
    }

    /// Requests per second allowed now, if anything limits them.
    fn rate(&self, now: Instant) -> Option<f64> {
        let adaptive = self.cubic.map(|c| {
            // Grow no faster than twice what is actually sent (an idle spell earns nothing).
            let sent = self.sent.len() as f64 / 2.0;
            c.at(now).min(c.max.max(2.0 * sent)).max(MIN_RATE)
        });
        [self.flag_cap, self.header_cap, adaptive].into_iter().flatten().reduce(f64::min)
    }

    /// Takes the slot if one is free at `now`; else when to look again. `waited_for` is the
    /// instant the caller slept until, if it did: a slot taken up to [`TIMER_SLACK`] late is
    /// taken at that instant.
    fn take(&mut self, now: Instant, waited_for: Option<Instant>) -> Option<Instant> {
        if let Some(hold) = self.hold_until.filter(|&hold| now < hold) {
            return Some(hold);
        }
        let at = waited_for.filter(|&w| w <= now && now - w <= TIMER_SLACK).unwrap_or(now);
        if let Some(next) = self.slots.as_ref().and_then(|slots| slots.take(at)) {
            return Some(next);
        }
        self.hold_until = None;
        forget_before(&mut self.sent, now, Duration::from_secs(2));
        self.sent.push_back(now);
        if let Some(rate) = self.rate(now)
            && self.slots.as_ref().is_none_or(|slots| slots.outdated_by(rate))
        {
            self.slots = Some(Slots::after(rate, at));
        }
        None
    }

    fn succeeded(&mut self, sent_at: Instant, now: Instant) {
        forget_before(&mut self.answered, now, Duration::from_secs(1));
        self.answered.push_back(now);
        if self.cubic.is_none_or(|c| sent_at >= c.cut) {
            self.fine += 1;
        }
    }

    /// A 429 for a request sent at `sent_at`. The server accepted about the share of the
    /// requests sent since the last cut that were answered fine: that share of the current
    /// rate is the new estimate of the limit, and the pace drops a little below it.
    fn rate_limited(&mut self, sent_at: Instant, now: Instant) {
        if self.cubic.is_some_and(|c| sent_at < c.cut) {
            // Sent before the last cut: that cut already answered it.
            return;
        }
        self.limited += 1;
        let (max, slow_start, scale) = if let Some(rate) = self.rate(now) {
            let accepted =
                f64::from(self.fine + ACCEPTED_PRIOR) / f64::from(self.fine + self.limited + ACCEPTED_PRIOR);
            let max = rate * accepted.max(HARD_CUT);
            let scale = match self.cubic {
                Some(last) if (max / last.max - 1.0).abs() < CONFIRMED => {
                    (last.scale / 2.0).max(SLOWEST_SCALE)
                }
                Some(last) if accepted >= GENTLE_CUT => last.scale,
                _ => CUBIC_SCALE,
            };
            (max, false, scale)
        } else {
            // The first 429 without any limit known: the server accepted about what it
            // answered in the last second; start from there.
            forget_before(&mut self.answered, now, Duration::from_secs(1));
            ((self.answered.len() as f64).max(1.0), true, CUBIC_SCALE)
        };
        let max = max.max(MIN_RATE);
        let floor = max * if slow_start { PLATEAU } else { GENTLE_CUT };
        let k = ((PLATEAU * max - floor).max(0.0) / (scale * max)).cbrt();
        self.cubic = Some(Cubic { max, floor, cut: now, k, scale, slow_start });
        (self.fine, self.limited) = (0, 0);
        // The next request waits a slot at the floor, or for the one booked already if later.
        let booked = self.slots.as_ref().and_then(|slots| slots.take(now));
        let slots = Slots::after(floor, now);
        if let Some(booked) = booked.filter(|&b| b > now + Duration::from_secs_f64(1.0 / floor)) {
            self.hold_until = Some(self.hold_until.map_or(booked, |hold| hold.max(booked)));
        }
        self.slots = Some(slots);
    }

    fn observe(&mut self, seen: &RateHeaders, now: Instant) {
        if let Some(rpm) = seen.limit_requests.filter(|&r| r > 0) {
            self.header_cap = Some(rpm as f64 / 60.0 * PACE);
        }
        if seen.remaining_requests == Some(0)
            && let Some(reset) = seen.reset_requests
        {
            let hold = now + reset;
            self.hold_until = Some(self.hold_until.map_or(hold, |h| h.max(hold)));
        }
    }
}

fn forget_before(times: &mut VecDeque<Instant>, now: Instant, window: Duration) {
    while times.front().is_some_and(|&t| now.saturating_duration_since(t) >= window) {
        times.pop_front();
    }
}

/// Token accounting.
#[derive(Debug)]
struct Tokens {
    bucket: Option<Bucket>,
    /// Fresh replies seen, and their completion tokens.
    replies: u64,
    completion_sum: u64,
}

impl Tokens {
    /// What a request is charged: its prompt plus the mean completion so far (`max_tokens`
    /// until a few replies came back), never more than `max_tokens`.
    fn charge(&self, prompt: u32, max_tokens: u32) -> u32 {
        let completion = if self.replies < MEAN_AFTER {
            max_tokens
        } else {
            u32::try_from(self.completion_sum.div_ceil(self.replies)).unwrap_or(max_tokens).min(max_tokens)
        };
        prompt.saturating_add(completion)
    }

    fn take(&mut self, tokens: u32, now: Instant) -> Option<Instant> {
        self.bucket.as_mut().and_then(|b| b.take(f64::from(tokens), now))
    }

    fn settle(&mut self, charged: u32, usage: Option<(u64, u64)>, now: Instant) {
        let Some((prompt, completion)) = usage.filter(|&(p, c)| p + c > 0) else { return };
        self.replies += 1;
        self.completion_sum += completion;
        if let Some(bucket) = &mut self.bucket {
            bucket.give(f64::from(charged) - (prompt + completion) as f64, now);
        }
    }

    fn refund(&mut self, charged: u32, now: Instant) {
        if let Some(bucket) = &mut self.bucket {
            bucket.give(f64::from(charged), now);
        }
    }

    /// Follows the server's tokens-per-minute limit.
    fn follow(&mut self, tpm: u64, now: Instant) {
        let tpm = u32::try_from(tpm).unwrap_or(u32::MAX);
        match &mut self.bucket {
            Some(bucket) if bucket.tpm == tpm => {}
            Some(bucket) => {
                bucket.refill(now);
                let level = bucket.level;
                *bucket = Bucket {
                    level: level.min(Bucket::per_minute(tpm).capacity),
                    at: now,
                    ..Bucket::per_minute(tpm)
                };
            }
            None => self.bucket = Some(Bucket { at: now, ..Bucket::per_minute(tpm) }),
        }
    }
}

/// A token bucket that may go into debt.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tpm: u32,
    capacity: f64,
    per_second: f64,
    level: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket for `tpm` tokens a minute (at 98 %), holding a tenth of a minute's worth.
    fn per_minute(tpm: u32) -> Self {
        let capacity = (f64::from(tpm) / 10.0).max(1.0);
        Self { tpm, capacity, per_second: f64::from(tpm) * PACE / 60.0, level: capacity, at: Instant::now() }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second).min(self.capacity);
        self.at = now;
    }

    /// Takes `tokens` if the bucket holds them (or is full: a request larger than the bucket
    /// takes it all and leaves a debt); else when to look again.
    fn take(&mut self, tokens: f64, now: Instant) -> Option<Instant> {
        self.refill(now);
        let needed = tokens.min(self.capacity);
        if self.level >= needed {
            self.level -= tokens;
            return None;
        }
        Some(now + Duration::from_secs_f64((needed - self.level) / self.per_second))
    }

    /// Gives back `tokens` (a negative amount takes more).
    fn give(&mut self, tokens: f64, now: Instant) {
        self.refill(now);
        self.level = (self.level + tokens).min(self.capacity);
    }

    /// The server says at most `remaining` tokens are left.
    fn at_most(&mut self, remaining: f64, now: Instant) {
        self.refill(now);
        self.level = self.level.min(remaining);
    }
}

/// The `x-ratelimit-*` headers OpenAI (and many compatible servers) send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RateHeaders {
    /// Requests a minute.
    limit_requests: Option<u64>,
    remaining_requests: Option<u64>,
    reset_requests: Option<Duration>,
    /// Tokens a minute.
    limit_tokens: Option<u64>,
    remaining_tokens: Option<u64>,
}

impl RateHeaders {
    fn parse(headers: &HeaderMap) -> Self {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
        let number = |name: &str| text(name).and_then(|v| v.parse::<u64>().ok());
        Self {
            limit_requests: number("x-ratelimit-limit-requests"),
            remaining_requests: number("x-ratelimit-remaining-requests"),
            reset_requests: text("x-ratelimit-reset-requests").and_then(parse_reset),
            limit_tokens: number("x-ratelimit-limit-tokens"),
            remaining_tokens: number("x-ratelimit-remaining-tokens"),
        }
    }
}

/// A reset time as OpenAI writes it (`1s`, `6m0s`, `20ms`, `1h2m3.5s`) or plain seconds.
fn parse_reset(value: &str) -> Option<Duration> {
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let mut total = 0.0;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let amount: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        total += amount
            * match &rest[..unit] {
                "h" => 3600.0,
                "m" => 60.0,
                "s" => 1.0,
                "ms" => 0.001,
                _ => return None,
            };
        rest = &rest[unit..];
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
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
        assert!(
            next.max(expected) - next.min(expected) < Duration::from_micros(1),
            "{next:?} vs {expected:?}"
        );
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
            assert!(
                gap <= slowest + ms,
                "slot {i}: {gap} s apart, over {slowest} at {} a second",
                rates[i - 1]
            );
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
            assert!(
                share >= 0.9,
                "concurrency {concurrency}, jitter {jitter_ms} ms: {share:.3} of the limit"
            );
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
}
