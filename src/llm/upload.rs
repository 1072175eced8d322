//! An upload watched as its body goes out. A Files upload (a batch's input file, up to 200 MB)
//! can take far longer than any reply on a slow link, so one `--timeout` from the start of
//! the request would cut a slow upload that is still sending (and its attempts, adding up,
//! would set off the stall watchdog). Instead the body is handed to the connection in pieces
//! of [`PIECE`] bytes, each counted as the connection takes it (it takes the next once it has
//! room: once earlier bytes were sent); the attempt fails only once no bytes went out for
//! `--timeout`, or no reply came after the last ones within `--timeout` and the time the
//! system may take to send what it still holds of them ([`drain`]), and bytes going out
//! restart the stall clock.
//!
//! The count reaches the transport (which wraps the body, see [`count_body`]) through a task
//! local set around the one call ([`watched`]), so no other request is counted.

use super::{LlmError, StallClock};
use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// Most bytes of a body handed to the connection at once.
const PIECE: usize = 64 * 1024;
/// Most bytes of a body the system may hold, taken but not yet sent, once the connection took
/// the last of it (Linux's largest send buffer is 4 MiB by default).
const HELD: u64 = 8 * 1024 * 1024;

/// What an upload's body sent so far.
#[derive(Debug, Default)]
struct Sent {
    /// Bytes the connection took.
    bytes: AtomicU64,
    /// The body's length (its `Content-Length`, else as far as known).
    total: AtomicU64,
    /// Whether the connection took the whole body.
    done: AtomicBool,
}

tokio::task_local! {
    /// The count of the upload this task's call makes.
    static UPLOAD: Arc<Sent>;
}

/// Wraps the body of `request` so that the connection's taking it is counted, when it is sent
/// for [`watched`]; any other request is left as it is.
pub(super) fn count_body(request: &mut reqwest::Request) {
    let Ok(sent) = UPLOAD.try_with(Arc::clone) else { return };
    let length = request.headers().get(reqwest::header::CONTENT_LENGTH);
    let length = length.and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let Some(inner) = request.body_mut().take() else { return };
    sent.total.store(length.unwrap_or_else(|| inner.size_hint().lower()), Ordering::Relaxed);
    *request.body_mut() = Some(reqwest::Body::wrap(Counted { inner, rest: Bytes::new(), sent }));
}

/// A body handed out in pieces, each counted.
struct Counted {
    inner: reqwest::Body,
    /// What is left of the inner body's last frame.
    rest: Bytes,
    sent: Arc<Sent>,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = reqwest::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, reqwest::Error>>> {
        let this = self.get_mut();
        if this.rest.is_empty() {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.rest = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.sent.done.store(true, Ordering::Relaxed);
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
        let piece = this.rest.split_to(this.rest.len().min(PIECE));
        this.sent.bytes.fetch_add(piece.len() as u64, Ordering::Relaxed);
        if this.rest.is_empty() && this.inner.is_end_stream() {
            this.sent.done.store(true, Ordering::Relaxed);
        }
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

/// Runs the upload `call`, its waits counted on `stall`: it fails with
/// [`LlmError::UploadStalled`] once its body sent nothing for `timeout`, and with
/// [`LlmError::Timeout`] once no reply came `timeout` (and the [`drain`]) after the body's
/// last bytes; bytes going out restart `stall` (the server is taking them).
///
/// # Errors
/// As above; `call`'s own outcome is passed on as it is.
pub(super) async fn watched<T>(
    stall: &StallClock,
    timeout: Duration,
    call: impl Future<Output = T>,
) -> Result<T, LlmError> {
    let sent = Arc::new(Sent::default());
    let mut call = std::pin::pin!(UPLOAD.scope(Arc::clone(&sent), call));
    let tick = (timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let start = Instant::now();
    let (mut seen, mut since) = (0, start);
    loop {
        tokio::select! {
            outcome = &mut call => return Ok(outcome),
            () = tokio::time::sleep(tick) => {}
        }
        let now = sent.bytes.load(Ordering::Relaxed);
        if now > seen {
            (seen, since) = (now, Instant::now());
            stall.progress();
            continue;
        }
        let total = sent.total.load(Ordering::Relaxed);
        let done = sent.done.load(Ordering::Relaxed) || (total > 0 && seen >= total);
        let patience = if done { timeout + drain(since - start, seen) } else { timeout };
        if since.elapsed() < patience {
            continue;
        }
        return Err(if done {
            LlmError::Timeout(timeout)
        } else {
            LlmError::UploadStalled { sent: seen, total, after: timeout }
        });
    }
}

/// How long the system may take to send what it still holds of a body of `bytes` once the
/// connection took the last of them, `took` after the start: up to [`HELD`] bytes, at the pace
/// the body went out (as long as the whole body took, for one no larger than that).
fn drain(took: Duration, bytes: u64) -> Duration {
    took.mul_f64((HELD as f64 / bytes.max(1) as f64).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// An upload of 1,000 bytes, `steps` pieces of 10 of them sent one every `every`, and then
    /// its end, or (`halts`) nothing more; what came of it, and the longest the stall clock
    /// went without progress meanwhile.
    async fn upload(steps: u64, every: Duration, halts: bool) -> (Result<(), String>, Duration) {
        let stall = StallClock::default();
        let quietest = std::sync::Mutex::new(Duration::ZERO);
        let call = async {
            UPLOAD.with(|sent| sent.total.store(1000, Ordering::Relaxed));
            for _ in 0..steps {
                tokio::time::sleep(every).await;
                UPLOAD.with(|sent| sent.bytes.fetch_add(10, Ordering::Relaxed));
                let mut quietest = quietest.lock().unwrap();
                *quietest = (*quietest).max(stall.silent_for());
            }
            if halts {
                std::future::pending::<()>().await;
            }
            UPLOAD.with(|sent| sent.done.store(true, Ordering::Relaxed));
        };
        let waiting = stall.wait();
        let outcome = watched(&stall, SECOND, call).await.map_err(|e| e.to_string());
        drop(waiting);
        (outcome, quietest.into_inner().unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn an_upload_that_keeps_sending_may_take_far_longer_than_the_timeout() {
        let start = Instant::now();
        let (outcome, quietest) = upload(100, SECOND / 5, false).await;
        assert_eq!(outcome, Ok(()));
        assert!(start.elapsed() >= 20 * SECOND, "20 timeouts long");
        assert!(quietest < SECOND / 2, "the stall clock restarts as bytes go out: {quietest:?}");
    }

    #[test]
    fn what_the_system_holds_drains_at_the_pace_the_body_went_out() {
        assert_eq!(drain(SECOND * 4, HELD * 2), SECOND * 2);
        assert_eq!(drain(SECOND * 4, HELD / 2), SECOND * 4);
        assert_eq!(drain(SECOND, 0), SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_to_a_whole_body_is_waited_for_a_timeout_and_the_drain() {
        let stall = StallClock::default();
        let start = Instant::now();
        let call = async {
            // Four times what the system may hold, in 40 pieces.
            let piece = HELD / 10;
            UPLOAD.with(|sent| sent.total.store(piece * 40, Ordering::Relaxed));
            for _ in 0..40 {
                tokio::time::sleep(SECOND / 10).await;
                UPLOAD.with(|sent| sent.bytes.fetch_add(piece, Ordering::Relaxed));
            }
            std::future::pending::<()>().await;
        };
        let message = watched(&stall, SECOND, call).await.unwrap_err().to_string();
        assert!(message.contains("no reply within 1 s"), "{message}");
        // The body took 4 s: what the system may hold (a quarter of it) takes 1 s more.
        let took = start.elapsed();
        assert!(took >= 6 * SECOND && took < 6 * SECOND + SECOND / 2, "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_upload_that_stops_sending_fails_one_timeout_later_saying_so() {
        let start = Instant::now();
        let (outcome, _) = upload(30, SECOND / 10, true).await;
        let message = outcome.unwrap_err();
        assert!(message.contains("stalled") && message.contains("after 300 of 1000 bytes"), "{message}");
        let took = start.elapsed();
        assert!(took >= 4 * SECOND && took < 4 * SECOND + SECOND / 2, "{took:?}");
    }
}
