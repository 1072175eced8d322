//! A mock OpenAI-compatible server for `bench/llm.sh`: answers chat completions like a
//! well-behaved model after a fixed latency, and enforces a rolling-window rate limit (429 with
//! `Retry-After: 1` beyond it). `GET /stats` reports what it saw.
//!
//!   cargo run --release --example mock_openai -- [PORT] [LATENCY_MS] [LIMIT] [WINDOW_MS]
//!
//! Defaults: port 8090, 300 ms latency, 2 requests per rolling 1000 ms. Loopback only.

#[path = "../tests/it/mock.rs"]
#[allow(dead_code, reason = "shared with the tests, which use more of it")]
mod mock;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Respond, ResponseTemplate};

struct Stats(Arc<mock::Counters>);

impl Respond for Stats {
    fn respond(&self, _: &wiremock::Request) -> ResponseTemplate {
        let accepted = self.0.accepted.lock().map(|a| a.clone()).unwrap_or_default();
        let span = match (accepted.first(), accepted.last()) {
            (Some(first), Some(last)) => last.duration_since(*first).as_secs_f64(),
            _ => 0.0,
        };
        // Busiest rolling second, to show the limit was never exceeded.
        let busiest = accepted
            .iter()
            .map(|t| {
                accepted.iter().filter(|u| *u >= t && u.duration_since(*t) < Duration::from_secs(1)).count()
            })
            .max()
            .unwrap_or(0);
        ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "requests": self.0.requests.load(Ordering::SeqCst),
            "accepted": accepted.len(),
            "rate_limited": self.0.rate_limited.load(Ordering::SeqCst),
            "span_secs": span,
            "busiest_second": busiest,
        }))
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let arg = |i: usize, default: u64| args.get(i).copied().unwrap_or(default);
    let (port, latency, limit, window) = (arg(0, 8090), arg(1, 300), arg(2, 2), arg(3, 1000));
    let listener = std::net::TcpListener::bind(("127.0.0.1", u16::try_from(port).unwrap_or(8090)))
        .unwrap_or_else(|e| panic!("cannot listen on 127.0.0.1:{port}: {e}"));
    let server = MockServer::builder().listener(listener).start().await;
    let (mut model, counters) = mock::model(mock::Behaviour::Good);
    model.delay = Duration::from_millis(latency);
    model.rate_limit =
        (limit > 0).then(|| (usize::try_from(limit).unwrap_or(usize::MAX), Duration::from_millis(window)));
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(model).mount(&server).await;
    Mock::given(method("GET")).and(path("/stats")).respond_with(Stats(counters)).mount(&server).await;
    println!("{}/v1 ({latency} ms latency, {limit} requests per {window} ms)", server.uri());
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        eprintln!("mock up for {:?}", started.elapsed());
    }
}
