//! The stall clock behind `--stall-timeout`: how long the server has kept us waiting without
//! finishing a call.
//!
//! Only time spent waiting on the server counts: a request in flight, or the backoff after the
//! server failed one (a 429's `Retry-After`, a 5xx, a timeout). Time spent on our side — cache
//! hits, the round trip between batches, our own rate limits — never does. The clock restarts
//! whenever the server finishes a call (a reply, or a definite refusal), on a cache hit, when
//! a batch of calls starts, and while an upload's body goes out, as its bytes do (see
//! [`super::upload`]); an attempt that times out does not restart it.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The clock; shared by every call of a client.
#[derive(Debug, Default)]
pub struct StallClock {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Calls waiting on the server right now.
    waiting: usize,
    /// Since when at least one call has been waiting (and no call finished).
    since: Option<Instant>,
    /// Waiting time before `since`, since the last progress.
    banked: Duration,
}

/// A call waiting on the server; dropping it ends the wait.
#[must_use = "the wait ends when this is dropped"]
pub struct Waiting<'a>(&'a StallClock);

impl StallClock {
    /// The server (or the cache) finished a call, a new batch starts, or an upload's bytes went
    /// out: the clock restarts.
    pub fn progress(&self) {
        let mut state = self.lock();
        state.banked = Duration::ZERO;
        state.since = (state.waiting > 0).then(Instant::now);
    }

    /// A call starts waiting on the server, until the returned guard is dropped.
    pub fn wait(&self) -> Waiting<'_> {
        let mut state = self.lock();
        if state.waiting == 0 {
            state.since = Some(Instant::now());
        }
        state.waiting += 1;
        Waiting(self)
    }

    /// Time spent waiting on the server since it last finished a call.
    #[must_use]
    pub fn silent_for(&self) -> Duration {
        let state = self.lock();
        state.banked + state.since.map_or(Duration::ZERO, |since| since.elapsed())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.waiting = state.waiting.saturating_sub(1);
        if state.waiting == 0
            && let Some(since) = state.since.take()
        {
            state.banked += since.elapsed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn time_on_our_side_does_not_count() {
        let clock = StallClock::default();
        advance(10 * SECOND).await;
        assert_eq!(clock.silent_for(), Duration::ZERO, "nothing was waiting on the server");
        let waiting = clock.wait();
        advance(2 * SECOND).await;
        drop(waiting);
        advance(10 * SECOND).await;
        assert_eq!(clock.silent_for(), 2 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_that_get_no_answer_add_up_and_overlapping_ones_count_once() {
        let clock = StallClock::default();
        for _ in 0..3 {
            let waiting = clock.wait();
            advance(SECOND).await;
            drop(waiting);
            advance(SECOND / 2).await;
        }
        assert_eq!(clock.silent_for(), 3 * SECOND);
        let (a, b) = (clock.wait(), clock.wait());
        advance(SECOND).await;
        drop(a);
        advance(SECOND).await;
        drop(b);
        assert_eq!(clock.silent_for(), 5 * SECOND, "two calls in flight for 2 s are 2 s of silence");
    }

    #[tokio::test(start_paused = true)]
    async fn progress_restarts_the_clock_even_with_calls_still_waiting() {
        let clock = StallClock::default();
        let waiting = clock.wait();
        advance(3 * SECOND).await;
        clock.progress();
        assert_eq!(clock.silent_for(), Duration::ZERO);
        advance(SECOND).await;
        assert_eq!(clock.silent_for(), SECOND, "the call still in flight keeps counting");
        drop(waiting);
        clock.progress();
        advance(SECOND).await;
        assert_eq!(clock.silent_for(), Duration::ZERO);
    }
}
