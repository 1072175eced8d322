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
mod tests;
