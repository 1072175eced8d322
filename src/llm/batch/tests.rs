//! The batch steps' tests: request and result lines, the split at the provider's limits, and
//! submission, lookup, upload and import against mock endpoints.

use super::defer::*;
use super::records::*;
use super::submit::*;
use super::wire::*;
use super::*;
use crate::llm::creator::Process;
use crate::llm::{Cache, CachedReply, Effect, Llm};
use rusqlite::params;
use std::path::Path;

fn pending(line: &str) -> Pending {
    Pending { line: line.to_owned(), tokens: 1 }
}

#[test]
fn a_batch_object_is_read_whatever_its_created_at() {
    let cases = [
        (r#","created_at":null"#, None),
        ("", None),
        (r#","created_at":1714000000.7"#, Some(1_714_000_000)),
        (r#","created_at":1714000000"#, Some(1_714_000_000)),
        (r#","created_at":"soon""#, None),
    ];
    for (field, expected) in cases {
        let text = format!(r#"{{"id":"batch_1","status":"completed","input_file_id":"file-1"{field}}}"#);
        let batch = serde_json::from_str::<BatchObject>(&text).map_err(|e| e.to_string());
        assert_eq!(batch.map(|b| (b.id, b.created_at)), Ok(("batch_1".to_owned(), expected)), "{text}");
    }
}

#[test]
fn only_a_definite_refusal_of_a_create_call_forgets_its_record() {
    let http = |status| LlmError::Http { status, message: String::new(), retry_after: None };
    assert!(refused(&http(400)) && refused(&http(404)));
    assert!(!refused(&http(429)) && !refused(&http(408)) && !refused(&http(500)));
    assert!(!refused(&LlmError::Timeout(Duration::from_secs(1))));
}

#[test]
fn a_request_line_is_openai_batch_input_with_the_body_verbatim() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi \"you\""}],"seed":42}"#;
    let line = request_line("abc123", body);
    let value: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
    assert_eq!(value["custom_id"], "abc123");
    assert_eq!(value["method"], "POST");
    assert_eq!(value["url"], "/v1/chat/completions");
    assert_eq!(value["body"]["messages"][0]["content"], "hi \"you\"");
    assert!(line.ends_with(&format!(",\"body\":{body}}}")), "{line}");
}

#[test]
fn batches_split_at_the_request_and_byte_limits() {
    let keys: Vec<String> = (0..5).map(|i| i.to_string()).collect();
    let values: Vec<Pending> = (0..5).map(|_| pending("0123456789")).collect();
    let lines: Vec<(&String, &Pending)> = keys.iter().zip(&values).collect();
    let sizes = |parts: Vec<&[(&String, &Pending)]>| parts.iter().map(|p| p.len()).collect::<Vec<_>>();
    assert_eq!(sizes(split(&lines, 2, 1_000)), [2, 2, 1]);
    // 11 bytes a line with its newline: three fit in 33.
    assert_eq!(sizes(split(&lines, 100, 33)), [3, 2]);
    assert_eq!(sizes(split(&lines, 100, 5)), [1, 1, 1, 1, 1], "a line too large goes alone");
    assert_eq!(sizes(split(&lines, 0, 1_000)), [1, 1, 1, 1, 1]);
}

fn parse(line: &str) -> CallResult {
    call_result(&serde_json::from_str::<OutputLine>(line).unwrap())
}

#[test]
fn result_lines_become_replies_failures_or_calls_to_send_again() {
    let ok = r#"{"id":"b1","custom_id":"k","response":{"status_code":200,"request_id":"r","body":
        {"choices":[{"message":{"content":"{\"grade\":2}"},"finish_reason":"stop"}],
         "usage":{"prompt_tokens":7,"completion_tokens":3}}},"error":null}"#
        .replace('\n', "");
    let CallResult::Reply(reply) = parse(&ok) else { panic!("{ok}") };
    assert_eq!(
        (reply.content.as_str(), reply.prompt_tokens, reply.completion_tokens),
        ("{\"grade\":2}", 7, 3)
    );
    let refused =
        r#"{"custom_id":"k","response":{"status_code":400,"body":{"error":{"message":"bad max_tokens"}}}}"#;
    assert!(
        matches!(parse(refused), CallResult::Failed(LlmError::Http { status: 400, message, .. }) if message == "bad max_tokens")
    );
    let expired =
        r#"{"custom_id":"k","response":null,"error":{"code":"batch_expired","message":"not run in time"}}"#;
    assert!(matches!(parse(expired), CallResult::NotRun));
    let cancelled = r#"{"custom_id":"k","error":{"code":"batch_cancelled","message":"x"}}"#;
    assert!(matches!(parse(cancelled), CallResult::NotRun));
    let broken = r#"{"custom_id":"k","error":{"code":"server_error","message":"boom"}}"#;
    assert!(matches!(parse(broken), CallResult::Failed(LlmError::Body(m)) if m.contains("boom")));
    let empty = r#"{"custom_id":"k","response":{"status_code":200,"body":{"choices":[]}}}"#;
    assert!(matches!(parse(empty), CallResult::Failed(LlmError::Body(_))));
}

/// A client in `--batch submit` mode against `server`, its cache in `dir`.
fn submitting(server: &str, dir: &Path) -> Llm {
    submitting_with(server, dir, super::super::Budget::default())
}

/// As [`submitting`], with `budget`.
fn submitting_with(server: &str, dir: &Path, budget: super::super::Budget) -> Llm {
    submitting_tuned(server, dir, |config| config.budget = budget)
}

/// As [`submitting`], its configuration changed by `tune`.
fn submitting_tuned(server: &str, dir: &Path, tune: impl FnOnce(&mut super::super::LlmConfig)) -> Llm {
    let mut config = super::super::LlmConfig {
        endpoint: super::super::Endpoint {
            base_url: format!("{server}/v1"),
            model: "m".into(),
            api_key: None,
        },
        timeout: Duration::from_secs(5),
        limits: super::super::LimitConfig { concurrency: 1, rpm: None, tpm: None },
        retry: super::super::RetryPolicy::default(),
        temperature: 0.0,
        max_tokens: 16,
        seed: 1,
        budget: super::super::Budget::default(),
        batch: Some(BatchConfig {
            mode: BatchMode::Submit,
            poll: Duration::from_millis(10),
            max_requests: MAX_REQUESTS,
            max_bytes: MAX_BYTES,
            stall_after: Duration::ZERO,
        }),
        batch_discount: DEFAULT_DISCOUNT,
    };
    tune(&mut config);
    Llm::new(config, Cache::open(&dir.join("cache.sqlite")).unwrap()).unwrap()
}

/// Asks `server` for batch `batch_1` with 2 attempts of 300 ms each, after `first` answered
/// the first `times` requests; what came back, the requests the server got, and the
/// retries counted.
async fn retrieve_after(
    first: wiremock::ResponseTemplate,
    times: u64,
) -> (Result<String, String>, usize, u64) {
    let server = wiremock::MockServer::start().await;
    let path = || wiremock::matchers::path("/v1/batches/batch_1");
    wiremock::Mock::given(path()).respond_with(first).up_to_n_times(times).mount(&server).await;
    let batch = serde_json::json!({"id": "batch_1", "status": "completed"});
    wiremock::Mock::given(path())
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(batch))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let llm = submitting_tuned(&server.uri(), dir.path(), |config| {
        config.timeout = Duration::from_millis(300);
        config.retry = super::super::RetryPolicy {
            max_attempts: 2,
            base: Duration::from_millis(10),
            max: Duration::from_millis(10),
        };
    });
    let got: Result<BatchObject, BatchError> = llm
        .retrying(Effect::Repeatable, || async { llm.client.batches().retrieve_byot("batch_1").await })
        .await;
    let sent = server.received_requests().await.unwrap_or_default().len();
    (got.map(|b| b.id).map_err(|e| e.to_string()), sent, llm.network().retries)
}

#[tokio::test]
async fn a_files_or_batches_call_that_times_out_is_sent_again() {
    let late = wiremock::ResponseTemplate::new(200)
        .set_body_json(serde_json::json!({"id": "batch_1", "status": "completed"}))
        .set_delay(Duration::from_secs(3));
    assert_eq!(retrieve_after(late, 1).await, (Ok("batch_1".to_owned()), 2, 1));
}

#[tokio::test]
async fn a_files_or_batches_call_answered_429_uses_no_attempt_as_a_chat_call() {
    let limited = wiremock::ResponseTemplate::new(429).insert_header("retry-after", "0");
    assert_eq!(retrieve_after(limited, 3).await, (Ok("batch_1".to_owned()), 4, 3));
    let broken = wiremock::ResponseTemplate::new(500);
    let (got, sent, _) = retrieve_after(broken, 3).await;
    assert!(got.is_err_and(|e| e.contains("HTTP 500")));
    assert_eq!(sent, 2, "a 500 uses an attempt");
}

#[test]
fn a_batch_is_reserved_at_the_batch_price_beside_online_spend_at_the_full_price() {
    let dir = tempfile::tempdir().unwrap();
    let price = super::super::Price { prompt: 1.0, completion: 2.0 };
    let budget = |max_cost| super::super::Budget {
        max_cost: Some(max_cost),
        price: Some(price),
        max_tokens_total: Some(6_000_000_000),
    };
    // 1,000 prompt tokens spent online (1,000 per million) and a batch of 1,000 tokens at
    // the dearest price halved (1,000): 2,000 in all.
    let llm = submitting_with("http://127.0.0.1:9", dir.path(), budget(1.8e-3));
    llm.update(|t| t.used.prompt_tokens = 1_000);
    assert!(matches!(llm.reserve_batch(1_000), Err(BatchError::Budget(m)) if m.contains("0.0020")));
    let llm = submitting_with("http://127.0.0.1:9", dir.path(), budget(2.1e-3));
    llm.update(|t| t.used.prompt_tokens = 1_000);
    assert!(llm.reserve_batch(1_000).is_ok());
    assert_eq!(llm.update(|t| t.reserved), 0, "a check, not a reservation: nothing is in flight");
    let refused = llm.reserve_batch(7_000_000_000);
    assert!(
        matches!(&refused, Err(BatchError::Budget(m)) if m.contains("--max-tokens-total")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_cache_that_cannot_be_read_stops_the_run_before_anything_is_submitted() {
    let server = wiremock::MockServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let llm = submitting(&server.uri(), dir.path());
    let asked = llm.complete(&[super::super::Message::new(super::super::Role::User, "hi")], None).await;
    assert!(matches!(asked, Err(LlmError::Deferred)), "{asked:?}");
    llm.cache.with(|c| c.execute_batch("DROP TABLE replies")).unwrap();
    let flushed = llm.flush("generate", &|_| {}).await;
    assert!(
        matches!(&flushed, Err(BatchError::Cache(e)) if e.to_string().contains("no such table: replies")),
        "{flushed:?}"
    );
    let sent = server.received_requests().await.unwrap_or_default();
    assert!(sent.is_empty(), "nothing uploaded or submitted: {sent:?}");
}

fn reply() -> CachedReply {
    CachedReply {
        content: "{}".into(),
        finish_reason: None,
        prompt_tokens: 1,
        completion_tokens: 2,
        abandoned: 0,
    }
}

#[test]
fn forgetting_a_record_keeps_the_replies_its_batch_brought() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(&dir.path().join("cache.sqlite")).unwrap();
    let keys: Vec<String> = ["a", "b", "c"].map(String::from).into();
    let lines: Vec<&String> = keys.iter().collect();
    cache.record_batch("batch_1", "generate", "in_progress", &lines, None).unwrap();
    cache.put_batched("a", &reply(), "batch_1").unwrap();
    let forgotten = cache.forget_record("batch_1").unwrap();
    assert_eq!(
        forgotten.map(|f| (f.record.id, f.record.status, f.record.total, f.cached, f.missing)),
        Some(("batch_1".to_owned(), "in_progress".to_owned(), 3, 1, 2))
    );
    assert_eq!(
        cache.get("a").unwrap().map(|(_, via)| via),
        Some(super::super::Via::Batch),
        "the reply stays"
    );
    assert!(cache.batches().unwrap().is_empty());
    assert!(cache.open_batches(&lines).unwrap().is_empty(), "its lines no longer wait for it");
    assert_eq!(cache.forget_record("batch_1").unwrap(), None);
}

/// A list of `count` batches (`batch_{i}` of `file-{i}`, newest first) as OpenAI pages it
/// (`after`, `has_more`, `last_id`), `per_page` at a time whatever the limit asked.
struct Pages {
    count: usize,
    per_page: usize,
    /// `last_id` is written.
    last_id: bool,
    /// `after` is ignored: every page is the first.
    stuck: bool,
    asked: std::sync::atomic::AtomicUsize,
}

impl wiremock::Respond for Pages {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let param =
            |name: &str| request.url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
        assert_eq!(param("limit").as_deref(), Some("100"));
        let after = param("after").filter(|_| !self.stuck);
        let start = after
            .map_or(0, |id| id.trim_start_matches("batch_").parse::<usize>().map_or(self.count, |i| i + 1));
        let ids: Vec<usize> = (start..self.count).take(self.per_page).collect();
        let data: Vec<serde_json::Value> = ids
            .iter()
            .map(|i| {
                serde_json::json!({"id": format!("batch_{i}"), "status": "completed",
                "input_file_id": format!("file-{i}"), "created_at": 0})
            })
            .collect();
        let mut page =
            serde_json::json!({"object": "list", "data": data, "has_more": start + ids.len() < self.count});
        if self.last_id {
            page["last_id"] = serde_json::json!(ids.last().map(|i| format!("batch_{i}")));
        }
        wiremock::ResponseTemplate::new(200).set_body_json(page)
    }
}

/// Looks up `file` in a list of `pages`; the answer and the pages asked for.
async fn look_up(pages: Pages, file: &str) -> (Result<Option<String>, String>, usize) {
    let server = wiremock::MockServer::start().await;
    let pages = std::sync::Arc::new(pages);
    wiremock::Mock::given(wiremock::matchers::path("/v1/batches"))
        .respond_with(ArcResponder(std::sync::Arc::clone(&pages)))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let llm = submitting(&server.uri(), dir.path());
    let found = llm.find_batch(file, 0).await.map(|b| b.map(|b| b.id)).map_err(|e| e.to_string());
    (found, pages.asked.load(std::sync::atomic::Ordering::SeqCst))
}

struct ArcResponder(std::sync::Arc<Pages>);

impl wiremock::Respond for ArcResponder {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        self.0.respond(request)
    }
}

fn pages(count: usize, last_id: bool, stuck: bool) -> Pages {
    Pages { count, per_page: 3, last_id, stuck, asked: std::sync::atomic::AtomicUsize::new(0) }
}

#[tokio::test]
async fn a_lookup_pages_through_the_list_until_it_finds_the_batch_or_the_list_ends() {
    // Pages of 3: batch_7 is on the third.
    assert_eq!(look_up(pages(10, true, false), "file-7").await, (Ok(Some("batch_7".to_owned())), 3));
    // Without last_id, the page's last batch says where the next starts.
    assert_eq!(look_up(pages(10, false, false), "file-9").await, (Ok(Some("batch_9".to_owned())), 4));
    // Not in any of the 4 pages, the last without has_more: no batch was made.
    assert_eq!(look_up(pages(10, true, false), "file-x").await, (Ok(None), 4));
}

#[tokio::test]
async fn a_lookup_that_cannot_finish_is_inconclusive_never_not_made() {
    let (found, asked) = look_up(pages(10, true, true), "file-7").await;
    let message = found.unwrap_err();
    assert!(message.contains("does not move on past batch batch_2"), "{message}");
    assert_eq!(asked, 2);
    let (found, asked) = look_up(pages(MAX_PAGES * 3 + 1, true, false), "file-x").await;
    let message = found.unwrap_err();
    assert!(message.contains(&format!("not in the newest {} batches listed", MAX_PAGES * 3)), "{message}");
    assert!(message.contains("batch forget file-x"), "the way out is named: {message}");
    assert_eq!(asked, MAX_PAGES, "the page cap");
}

/// A server that answers a file upload and cuts the connection (RST) of every create call;
/// its base URL and the create calls it got.
async fn cutting_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let creates = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&creates);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = std::sync::Arc::clone(&seen);
            tokio::spawn(async move {
                let mut data = Vec::new();
                let mut buf = vec![0; 65_536];
                loop {
                    let Ok(n) = stream.read(&mut buf).await else { return };
                    if n == 0 {
                        return;
                    }
                    data.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&data).into_owned();
                    let Some(end) = text.find("\r\n\r\n") else { continue };
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().to_owned())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if data.len() < end + 4 + length {
                        continue;
                    }
                    if text.starts_with("POST /v1/batches") {
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        stream.set_zero_linger().unwrap();
                        return;
                    }
                    let body = r#"{"id":"file-1","object":"file","bytes":1,"created_at":0,"filename":"x","purpose":"batch"}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    data.clear();
                }
            });
        }
    });
    (url, creates)
}

#[tokio::test]
async fn a_create_call_cut_off_is_not_made_again_and_its_record_is_kept() {
    let (url, creates) = cutting_server().await;
    let dir = tempfile::tempdir().unwrap();
    let llm = submitting(&url, dir.path());
    let key = "k".to_owned();
    let line = pending("{}");
    let made = llm.create("generate", &[(&key, &line)]).await;
    assert!(
        matches!(&made, Err(BatchError::CreateUnanswered { file, error: LlmError::Connect { .. }, .. }) if file == "file-1"),
        "{made:?}"
    );
    assert_eq!(creates.load(std::sync::atomic::Ordering::SeqCst), 1, "the create call was sent again");
    let records = llm.cache.batches().unwrap();
    let kept: Vec<(&str, &str)> = records.iter().map(|r| (r.id.as_str(), r.status.as_str())).collect();
    assert_eq!(kept, [("file-1", "creating")], "the next run looks the batch up by its file");
    let message = made.map_err(|e| e.to_string()).unwrap_err();
    assert!(message.contains("rerun the same command"), "{message}");
}

/// A server that reads each request's body `piece` bytes at a time, `every` apart, and
/// none past its first `stop_after` bytes; it answers an upload with file `file-1` and a
/// create call with batch `batch_1`. Its receive buffer is small, so the client sends only
/// as fast as it reads. Its base URL.
fn slow_reader(piece: usize, every: Duration, stop_after: usize) -> String {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut reader = tokio::io::BufReader::new(stream);
                let mut buf = vec![0; piece];
                loop {
                    let (mut head, mut line) = (String::new(), String::new());
                    while line != "\r\n" {
                        line.clear();
                        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push_str(&line.to_ascii_lowercase());
                    }
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    let mut read = 0;
                    while read < length {
                        if read >= stop_after {
                            std::future::pending::<()>().await;
                        }
                        let want = piece.min(length - read);
                        let Ok(n @ 1..) = reader.read(&mut buf[..want]).await else { return };
                        read += n;
                        tokio::time::sleep(every).await;
                    }
                    let body = if head.starts_with("post /v1/files") {
                        r#"{"id":"file-1","object":"file","bytes":1,"created_at":0,"filename":"x","purpose":"batch"}"#
                    } else {
                        r#"{"id":"batch_1","status":"validating"}"#
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if reader.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// Creates a batch of 16 MiB of lines against `server`, each attempt of the upload given
/// `timeout`; what came of it, and how long it took.
async fn create_large(server: &str, timeout: Duration) -> (Result<String, String>, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let llm = submitting_tuned(server, dir.path(), |config| {
        config.timeout = timeout;
        config.retry = super::super::RetryPolicy { max_attempts: 1, ..super::super::RetryPolicy::default() };
    });
    let keys: Vec<String> = (0..256).map(|i| format!("k{i}")).collect();
    let line = pending(&"x".repeat(64 * 1024 - 1));
    let lines: Vec<(&String, &Pending)> = keys.iter().map(|k| (k, &line)).collect();
    let start = std::time::Instant::now();
    let made = llm.create("generate", &lines).await;
    (made.map_err(|e| e.to_string()), start.elapsed())
}

#[tokio::test]
async fn an_upload_slower_than_the_timeout_that_keeps_sending_succeeds() {
    // 64 KiB every 10 ms: 16 MiB take some 2.6 s, more than twice the timeout.
    let server = slow_reader(64 * 1024, Duration::from_millis(10), usize::MAX);
    let (made, took) = create_large(&server, Duration::from_secs(1)).await;
    assert_eq!(made, Ok("batch_1".to_owned()));
    assert!(took > Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn an_upload_that_stops_going_out_fails_saying_it_stalled() {
    let server = slow_reader(64 * 1024, Duration::ZERO, 2 * 1024 * 1024);
    let (made, took) = create_large(&server, Duration::from_secs(1)).await;
    let message = made.unwrap_err();
    assert!(message.contains("the upload stalled: no bytes went out for 1 s (--timeout)"), "{message}");
    let counts = message.split(" after ").nth(1).and_then(|rest| rest.strip_suffix(" bytes"));
    let counts: Vec<u64> = counts.unwrap_or_default().split(" of ").filter_map(|n| n.parse().ok()).collect();
    assert!(
        matches!(counts[..], [sent, total] if sent >= 2 << 20 && sent < total && total > 16 << 20),
        "{message}"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
}

/// A fresh client (its `--stall-timeout` `stall_after`) and a `creating` record made `age`
/// seconds ago by `creator`, the provider listing no batch of its file.
async fn a_record(
    creator: Option<Process>,
    age: u64,
    stall_after: Duration,
) -> (wiremock::MockServer, tempfile::TempDir, Llm) {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path("/v1/batches"))
        .respond_with(
            wiremock::ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"object": "list", "data": [], "has_more": false})),
        )
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let llm = submitting_tuned(&server.uri(), dir.path(), |config| {
        if let Some(batch) = &mut config.batch {
            batch.stall_after = stall_after;
        }
    });
    let key = "k".to_owned();
    llm.cache.record_batch("file-1", "generate", CREATING, &[&key], creator.as_ref()).unwrap();
    let created = i64::try_from(unix_now() - age).unwrap();
    llm.cache.with(|c| c.execute("UPDATE batches SET created = ?1", params![created])).unwrap();
    (server, dir, llm)
}

/// What `llm` makes of its record now; and whether the record is kept.
async fn resolve_again(llm: &Llm) -> (Resolved, bool) {
    let key = "k".to_owned();
    let mut open = llm.cache.open_batches(&[&key]).unwrap();
    assert_eq!(open.len(), 1);
    let resolved = llm.resolve(open.remove(0), "generate", &|_| {}).await.unwrap();
    (resolved, !llm.cache.batches().unwrap().is_empty())
}

/// What a run (with a fresh client) makes of a `creating` record made `age` seconds ago by
/// `creator`, when the provider lists no batch of its file; and whether the record is kept.
async fn resolve_record(creator: Option<Process>, age: u64) -> (Resolved, bool) {
    let (_server, _dir, llm) = a_record(creator, age, Duration::ZERO).await;
    resolve_again(&llm).await
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_record_of_a_process_that_is_gone_is_submitted_again_one_timeout_after_it_was_seen_gone() {
    let me = Process::current().unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let gone = me.with_pid(child.id());
    child.wait().unwrap();
    let (_server, _dir, llm) = a_record(Some(gone), 0, Duration::ZERO).await;
    let (resolved, kept) = resolve_again(&llm).await;
    assert!(matches!(resolved, Resolved::Waiting) && kept, "its request may not be listed yet: {resolved:?}");
    let deferral = llm.batch.as_ref().unwrap();
    // Seen gone a little less than one --timeout (5 s) ago: still looked for.
    let back = |by: Duration| {
        let then = std::time::Instant::now().checked_sub(by).unwrap();
        lock(&deferral.gone_since).insert("file-1".to_owned(), then);
    };
    back(Duration::from_secs(4));
    let (resolved, kept) = resolve_again(&llm).await;
    assert!(matches!(resolved, Resolved::Waiting) && kept, "{resolved:?}");
    back(Duration::from_secs(5));
    let (resolved, kept) = resolve_again(&llm).await;
    assert!(matches!(resolved, Resolved::Forgotten) && !kept, "{resolved:?}");
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_record_of_a_process_that_runs_is_waited_for_whatever_its_age() {
    let me = Process::current().unwrap();
    let (resolved, kept) = resolve_record(Some(me.clone()), 0).await;
    assert!(matches!(resolved, Resolved::Waiting) && kept, "a live run's record is waited for");
    let (resolved, kept) = resolve_record(Some(me), 86_400).await;
    assert!(matches!(resolved, Resolved::Waiting) && kept, "its create call kept getting 429s: {resolved:?}");
}

#[tokio::test]
async fn a_record_is_waited_for_as_long_as_its_create_call_can_take_backoffs_included() {
    // --timeout 5 s × 6 attempts = 30 s, and backoffs of 0.5 + 1 + 2 + 4 + 8 s at their longest.
    let (resolved, kept) = resolve_record(None, 44).await;
    assert!(matches!(resolved, Resolved::Waiting) && kept, "{resolved:?}");
    let (resolved, kept) = resolve_record(None, 46).await;
    assert!(matches!(resolved, Resolved::Forgotten) && !kept, "{resolved:?}");
}

#[tokio::test]
async fn an_unknown_creators_record_is_waited_for_up_to_the_stall_limit_if_that_is_longer() {
    let stall = Duration::from_secs(100);
    let (_server, _dir, llm) = a_record(None, 99, stall).await;
    let (resolved, kept) = resolve_again(&llm).await;
    assert!(
        matches!(resolved, Resolved::Waiting) && kept,
        "its creator's watchdog may not have fired: {resolved:?}"
    );
    let (_server, _dir, llm) = a_record(None, 101, stall).await;
    let (resolved, kept) = resolve_again(&llm).await;
    assert!(matches!(resolved, Resolved::Forgotten) && !kept, "{resolved:?}");
}

#[test]
fn a_batch_reply_is_stored_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(&dir.path().join("cache.sqlite")).unwrap();
    let reply = reply();
    // The second write fails: the first must not stay (a reply priced as an online one).
    cache.with(|c| c.execute_batch("DROP TABLE batch_replies")).unwrap();
    let stored = cache.put_batched("k", &reply, "batch_1");
    assert!(stored.is_err_and(|e| e.to_string().contains("no such table: batch_replies")));
    assert!(!cache.contains("k").unwrap(), "half a record was left");
}

#[test]
fn a_reply_read_from_the_cache_says_whether_it_came_through_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let cache = super::super::Cache::open(&dir.path().join("cache.sqlite")).unwrap();
    let reply = reply();
    cache.put("online", &reply).unwrap();
    cache.put_batched("batched", &reply, "batch_1").unwrap();
    let via = |key: &str| cache.get(key).unwrap().map(|(_, via)| via);
    assert_eq!(via("online"), Some(super::super::Via::Online));
    assert_eq!(via("batched"), Some(super::super::Via::Batch));
    assert_eq!(via("missing"), None);
}
