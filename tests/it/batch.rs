//! `build --batch submit|export|import` against a wiremock of the OpenAI Files and Batches
//! endpoints (and of the chat endpoint, for the preflight and the online build compared with).

use super::mock::{self, Behaviour, Model};
use super::{Run, path_str, qrelgen_with_env, sample_corpus, tempdir};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The files of a set that must not differ between an online and a batch build.
const SET_FILES: [&str; 6] = [
    "queries.jsonl",
    "qrels.trec",
    "candidates.jsonl",
    "rejects.jsonl",
    "review_queue.jsonl",
    "corpus.jsonl",
];

/// How the batch mock treats the batches it is given.
#[derive(Debug, Default, Clone)]
struct Plan {
    /// Polls before a batch ends.
    polls: usize,
    /// The first batch ends `expired` after running only this many lines (the others are in
    /// its error file, `batch_expired`).
    expire_first_after: Option<usize>,
    /// The first batch ends `cancelled` after running only this many lines (the others are in
    /// neither file).
    cancel_first_after: Option<usize>,
    /// How the model answers, online and in batches.
    behaviour: Behaviour,
    /// Lines (by their order across all batches) answered with HTTP 500 in the error file.
    fail_lines: BTreeSet<usize>,
    /// While set, batches stay `in_progress`.
    hold: Arc<AtomicBool>,
    /// The first create call is answered this late (the batch is made at once, unless
    /// `lose_first_create`).
    slow_create: Option<Duration>,
    /// The first create call makes no batch (as if it never reached the provider).
    lose_first_create: bool,
    /// The first create call makes its batch only when it answers (after `slow_create`).
    made_late: bool,
    /// How the list of batches is written.
    list_shape: ListShape,
    /// Every create call is refused with HTTP 400.
    refuse_create: bool,
}

/// How the mock writes its list of batches.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ListShape {
    /// As OpenAI does.
    #[default]
    Full,
    /// The batches without their `input_file_id`.
    NoInputFile,
    /// No `data` field (a shape qrelgen cannot read).
    NoData,
}

#[derive(Debug, Clone)]
struct MockBatch {
    id: String,
    input_file_id: String,
    lines: Vec<Value>,
    polls: usize,
    status: String,
    output_file_id: Option<String>,
    error_file_id: Option<String>,
    completed: usize,
    failed: usize,
}

/// What the mock holds, shared with the test.
#[derive(Debug, Default)]
struct State {
    files: HashMap<String, String>,
    batches: Vec<MockBatch>,
    polls: usize,
    lines_answered: usize,
    /// Create calls received.
    creates: usize,
    /// The batch a late create call is making: listed only once its call has answered, but
    /// found by id as soon as a client can know the id (no race with the answer's delivery).
    making: Option<MockBatch>,
}

impl State {
    /// The late batch now exists.
    fn made(&mut self) {
        if let Some(batch) = self.making.take() {
            self.batches.push(batch);
        }
    }
}

struct BatchApi {
    model: Model,
    plan: Plan,
    state: Arc<Mutex<State>>,
    ids: AtomicUsize,
}

impl Respond for BatchApi {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let Ok(mut state) = self.state.lock() else { return ResponseTemplate::new(500) };
        let path = request.url.path().to_owned();
        let id = |prefix: &str| format!("{prefix}-{}", self.ids.fetch_add(1, Ordering::SeqCst));
        match (request.method.as_str(), path.as_str()) {
            ("POST", "/v1/files") => {
                let content = multipart_file(request);
                let file_id = id("file");
                let bytes = content.len();
                state.files.insert(file_id.clone(), content);
                ResponseTemplate::new(200)
                    .set_body_json(json!({"id": file_id, "object": "file", "bytes": bytes,
                    "created_at": 0, "filename": "qrelgen-requests.jsonl", "purpose": "batch"}))
            }
            ("POST", "/v1/batches") => {
                state.creates += 1;
                let delay = self.plan.slow_create.filter(|_| state.creates == 1).unwrap_or_default();
                if self.plan.refuse_create {
                    return ResponseTemplate::new(400)
                        .set_body_json(json!({"error": {"message": "model not available for batches"}}));
                }
                if self.plan.lose_first_create && state.creates == 1 {
                    return ResponseTemplate::new(500).set_delay(delay);
                }
                let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
                let input = body["input_file_id"].as_str().unwrap_or("").to_owned();
                assert_eq!(body["endpoint"], "/v1/chat/completions");
                let Some(content) = state.files.get(&input) else { return ResponseTemplate::new(404) };
                let lines = content
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                    .collect();
                let batch = MockBatch {
                    id: id("batch"),
                    input_file_id: input,
                    lines,
                    polls: 0,
                    status: "validating".to_owned(),
                    output_file_id: None,
                    error_file_id: None,
                    completed: 0,
                    failed: 0,
                };
                let object = batch_object(&batch);
                if self.plan.made_late && state.creates == 1 {
                    state.making = Some(batch);
                    let state = Arc::clone(&self.state);
                    std::thread::spawn(move || {
                        std::thread::sleep(delay);
                        if let Ok(mut state) = state.lock() {
                            state.made();
                        }
                    });
                } else {
                    state.batches.push(batch);
                }
                ResponseTemplate::new(200).set_body_json(object).set_delay(delay)
            }
            ("GET", "/v1/batches") => {
                let mut page = list(&state, request);
                match self.plan.list_shape {
                    ListShape::Full => {}
                    ListShape::NoInputFile => {
                        for batch in page["data"].as_array_mut().into_iter().flatten() {
                            batch.as_object_mut().map(|b| b.remove("input_file_id"));
                        }
                    }
                    ListShape::NoData => page = json!({"object": "list", "batches": page["data"].clone()}),
                }
                ResponseTemplate::new(200).set_body_json(page)
            }
            ("GET", p) if p.starts_with("/v1/batches/") => {
                state.polls += 1;
                let batch_id = p.trim_start_matches("/v1/batches/").to_owned();
                if state.making.as_ref().is_some_and(|b| b.id == batch_id) {
                    state.made();
                }
                let Some(at) = state.batches.iter().position(|b| b.id == batch_id) else {
                    return ResponseTemplate::new(404);
                };
                self.advance(&mut state, at);
                ResponseTemplate::new(200).set_body_json(batch_object(&state.batches[at]))
            }
            ("GET", p) if p.starts_with("/v1/files/") && p.ends_with("/content") => {
                let file_id = p.trim_start_matches("/v1/files/").trim_end_matches("/content");
                match state.files.get(file_id) {
                    Some(content) => ResponseTemplate::new(200).set_body_string(content.clone()),
                    None => ResponseTemplate::new(404),
                }
            }
            _ => ResponseTemplate::new(404),
        }
    }
}

impl BatchApi {
    /// One poll of the batch at `at`: it runs after `plan.polls` polls (unless held), and then
    /// writes its output and error files.
    fn advance(&self, state: &mut State, at: usize) {
        let first = at == 0;
        let batch = &mut state.batches[at];
        if batch.output_file_id.is_some()
            || batch.error_file_id.is_some()
            || ["expired", "cancelled"].contains(&batch.status.as_str())
        {
            return;
        }
        batch.polls += 1;
        if self.plan.hold.load(Ordering::SeqCst) || batch.polls < self.plan.polls {
            "in_progress".clone_into(&mut batch.status);
            return;
        }
        let lines = batch.lines.clone();
        let (run, ended) = match (self.plan.expire_first_after, self.plan.cancel_first_after) {
            (Some(n), _) if first => (n, "expired"),
            (_, Some(n)) if first => (n, "cancelled"),
            _ => (lines.len(), "completed"),
        };
        let (mut output, mut errors, mut failed) = (String::new(), String::new(), 0);
        for (i, line) in lines.iter().enumerate() {
            let custom_id = line["custom_id"].clone();
            let number = state.lines_answered;
            if i >= run && ended == "cancelled" {
                continue;
            }
            if i >= run {
                let error = json!({"code": "batch_expired", "message": "This request could not be executed before the completion window expired."});
                errors.push_str(&json!({"id": format!("out-{number}"), "custom_id": custom_id, "response": null, "error": error}).to_string());
                errors.push('\n');
                continue;
            }
            state.lines_answered += 1;
            let (status, body) = if self.plan.fail_lines.contains(&number) {
                failed += 1;
                (500, json!({"error": {"message": format!("line {number} failed on the server")}}))
            } else {
                self.model.reply(&line["body"], number)
            };
            let result = json!({"id": format!("out-{number}"), "custom_id": custom_id,
                "response": {"status_code": status, "request_id": format!("req-{number}"), "body": body}, "error": null});
            let file = if status == 200 { &mut output } else { &mut errors };
            file.push_str(&result.to_string());
            file.push('\n');
        }
        let batch = &mut state.batches[at];
        batch.completed = output.lines().count();
        batch.failed = failed;
        if run < lines.len() { ended } else { "completed" }.clone_into(&mut batch.status);
        let output_id = format!("{}-output", batch.id);
        let error_id = format!("{}-errors", batch.id);
        batch.output_file_id = Some(output_id.clone()).filter(|_| !output.is_empty());
        batch.error_file_id = Some(error_id.clone()).filter(|_| !errors.is_empty());
        state.files.insert(output_id, output);
        state.files.insert(error_id, errors);
    }
}

/// A page of the list of batches, newest first, as OpenAI pages it (`limit`, `after`).
fn list(state: &State, request: &Request) -> Value {
    let param = |name: &str| request.url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
    let limit = param("limit").and_then(|l| l.parse().ok()).unwrap_or(20);
    let newest_first = state.batches.iter().rev();
    let after: Vec<&MockBatch> = match param("after") {
        Some(after) => newest_first.skip_while(|b| b.id != after).skip(1).collect(),
        None => newest_first.collect(),
    };
    let page: Vec<Value> = after.iter().take(limit).map(|b| batch_object(b)).collect();
    json!({"object": "list", "first_id": page.first().map(|b| b["id"].clone()),
        "last_id": page.last().map(|b| b["id"].clone()), "has_more": after.len() > limit, "data": page})
}

fn batch_object(b: &MockBatch) -> Value {
    json!({"id": b.id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": null,
        "input_file_id": b.input_file_id, "completion_window": "24h", "status": b.status,
        "output_file_id": b.output_file_id, "error_file_id": b.error_file_id, "created_at": 0,
        "request_counts": {"total": b.lines.len(), "completed": b.completed, "failed": b.failed}})
}

/// The content of the `file` part of a multipart upload.
fn multipart_file(request: &Request) -> String {
    let body = String::from_utf8_lossy(&request.body).into_owned();
    let content_type = request.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    let boundary = content_type.split("boundary=").nth(1).unwrap_or("").trim_matches('"');
    let part = body
        .split(&format!("--{boundary}"))
        .find(|p| p.contains("name=\"file\""))
        .unwrap_or_else(|| panic!("no file part in {body}"));
    let (_, content) = part.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no part body in {part}"));
    content.strip_suffix("\r\n").unwrap_or(content).to_owned()
}

/// A mock serving the chat endpoint and the Files and Batches endpoints.
async fn start(plan: Plan) -> (MockServer, Arc<Mutex<State>>, Arc<mock::Counters>) {
    let (chat, counters) = mock::model(plan.behaviour);
    let server = MockServer::builder().start().await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(chat).mount(&server).await;
    let state = Arc::new(Mutex::new(State::default()));
    let (model, _) = mock::model(plan.behaviour);
    let api = BatchApi { model, plan, state: Arc::clone(&state), ids: AtomicUsize::new(1) };
    Mock::given(path_regex("^/v1/(files|batches)")).respond_with(api).mount(&server).await;
    (server, state, counters)
}

fn args<'a>(out: &'a Path, base_url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let corpus = Box::leak(sample_corpus().into_boxed_path());
    let mut all = vec![
        "build",
        "--corpus",
        path_str(corpus),
        "--out",
        path_str(out),
        "--generator",
        "llm",
        "--base-url",
        base_url,
        "--model",
        "mock-model",
        "--review-size",
        "6",
        "--queries",
        "12",
    ];
    all.extend_from_slice(extra);
    all
}

/// Runs `build` off the async runtime.
async fn build(server: &MockServer, out: &Path, extra: &[&str]) -> Run {
    let (base_url, out, extra): (String, PathBuf, Vec<String>) =
        (format!("{}/v1", server.uri()), out.to_owned(), extra.iter().map(|a| (*a).to_owned()).collect());
    tokio::task::spawn_blocking(move || {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let output = qrelgen_with_env(&args(&out, &base_url, &extra), &[("OPENAI_API_KEY", "sk-batch-test")]);
        Run {
            out,
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    fs_err::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// What a runner such as `vllm run-batch` writes for a request file: one result line per
/// request, with the fields vLLM adds, in another order than the input.
fn run_like_vllm(model: &Model, requests: &Path, results: &Path, keep: impl Fn(usize) -> bool) {
    let mut out = String::new();
    for (i, line) in read_jsonl(requests).iter().enumerate().rev().filter(|(i, _)| keep(*i)) {
        let (status, mut body) = model.reply(&line["body"], i);
        body["prompt_logprobs"] = Value::Null;
        let result = json!({"id": format!("vllm-{i}"), "custom_id": line["custom_id"],
            "response": {"status_code": status, "request_id": format!("vllm-batch-{i}"), "body": body}, "error": null});
        out.push_str(&result.to_string());
        out.push('\n');
    }
    fs_err::write(results, out).unwrap();
}

fn assert_same_set(online: &Run, batch: &Run) {
    for file in SET_FILES {
        assert_eq!(
            online.file(file),
            batch.file(file),
            "{file} differs between the online and the batch build"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn export_run_elsewhere_and_import_builds_the_set_the_online_build_makes() {
    let (server, _, counters) = start(Plan::default()).await;
    let dir = tempdir();
    let online = build(&server, &dir.path().join("online"), &["--judge-pool", "2"]).await;
    online.assert_code(0);
    let online_requests = counters.requests();

    let out = dir.path().join("batch");
    let requests = dir.path().join("requests-1.jsonl");
    let exported =
        build(&server, &out, &["--judge-pool", "2", "--batch", "export", "--to", path_str(&requests)]).await;
    exported.assert_code(0);
    assert!(exported.stdout.contains("generate, round 1: wrote"), "{}", exported.stdout);
    let lines = read_jsonl(&requests);
    let ids: BTreeSet<&str> = lines.iter().map(|l| l["custom_id"].as_str().unwrap_or("")).collect();
    assert_eq!(ids.len(), lines.len(), "one line per call, each id once");
    for line in &lines {
        assert_eq!(
            (line["method"].as_str(), line["url"].as_str()),
            (Some("POST"), Some("/v1/chat/completions"))
        );
        assert_eq!(line["body"]["model"], "mock-model");
        assert_eq!(line["body"]["seed"], 42);
        assert_eq!(line["body"]["response_format"]["type"], "json_schema");
        assert_eq!(line["custom_id"].as_str().map(str::len), Some(64), "a blake3 cache key");
    }
    assert_eq!(counters.requests(), online_requests, "export sends nothing, not even a preflight");

    // The runner answers with the same model; each import exports what the next stage needs.
    let (runner, _) = mock::model(Behaviour::Good);
    let mut next = requests;
    let mut imports = 0;
    let last = loop {
        let results = dir.path().join(format!("results-{imports}.jsonl"));
        run_like_vllm(&runner, &next, &results, |_| true);
        imports += 1;
        let to = dir.path().join(format!("requests-{}.jsonl", imports + 1));
        let run = build(
            &server,
            &out,
            &["--judge-pool", "2", "--batch", "import", path_str(&results), "--to", path_str(&to)],
        )
        .await;
        run.assert_code(0);
        if !run.stdout.contains("wrote") {
            break run;
        }
        assert!(imports < 12, "the imports never finish: {}", run.stdout);
        next = to;
    };
    assert!(
        imports >= 3,
        "generation, the judge's decisions and its pools are batches of their own: {imports}"
    );
    assert_same_set(&online, &last);
    assert_eq!(counters.requests(), online_requests, "the batch build sent no online call");
    let manifest: Value = serde_json::from_str(&last.file("manifest.json")).unwrap_or_default();
    let usage = &manifest["llm"]["usage"];
    assert_eq!(usage["batch_replies"], usage["replies"], "every reply came through a batch: {usage}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partial_import_sends_only_the_missing_calls_in_the_next_file() {
    let (server, _, _) = start(Plan::default()).await;
    let dir = tempdir();
    let out = dir.path().join("set");
    let first = dir.path().join("first.jsonl");
    build(&server, &out, &["--batch", "export", "--to", path_str(&first)]).await.assert_code(0);
    let lines = read_jsonl(&first);
    assert!(lines.len() >= 4, "{} lines", lines.len());
    let results = dir.path().join("half.jsonl");
    let (runner, _) = mock::model(Behaviour::Good);
    run_like_vllm(&runner, &first, &results, |i| i % 2 == 0);
    let second = dir.path().join("second.jsonl");
    let run =
        build(&server, &out, &["--batch", "import", path_str(&results), "--to", path_str(&second)]).await;
    run.assert_code(0);
    assert!(run.stderr.contains(&format!("imported {} replies", lines.len().div_ceil(2))), "{}", run.stderr);
    let missing: Vec<&Value> = lines.iter().enumerate().filter(|(i, _)| i % 2 == 1).map(|(_, l)| l).collect();
    let again = read_jsonl(&second);
    assert_eq!(again.iter().collect::<Vec<_>>(), missing, "exactly the lines without a result, as they were");

    // Import without --to: the missing calls are named, nothing is written.
    let run = build(&server, &out, &["--batch", "import", path_str(&results)]).await;
    run.assert_code(2);
    assert!(run.stderr.contains(&format!("{} call(s) are not answered", missing.len())), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_splits_by_the_request_limit_polls_and_prices_at_the_batch_rate() {
    let (server, state, counters) = start(Plan { polls: 2, ..Plan::default() }).await;
    let dir = tempdir();
    let online = build(&server, &dir.path().join("online"), &[]).await;
    online.assert_code(0);
    let online_requests = counters.requests();
    let prices = ["--price-prompt", "1", "--price-completion", "2"];
    let mut extra = vec!["--batch", "submit", "--batch-poll", "0.02", "--batch-max-requests", "3"];
    extra.extend_from_slice(&prices);
    let run = build(&server, &dir.path().join("batch"), &extra).await;
    run.assert_code(0);
    assert_same_set(&online, &run);
    assert_eq!(counters.requests(), online_requests + 1, "online: only the preflight (a fresh cache)");
    assert_no_line_submitted_twice(&state);
    let state = state.lock().map(|s| s.batches.clone()).unwrap_or_default();
    assert!(state.len() >= 3, "{} batches", state.len());
    assert!(state.iter().all(|b| b.lines.len() <= 3), "at most 3 requests a batch");
    assert!(run.stderr.contains("in_progress (0 of 3 done"), "progress from request_counts: {}", run.stderr);

    let manifest: Value = serde_json::from_str(&run.file("manifest.json")).unwrap_or_default();
    let usage = &manifest["llm"]["usage"];
    let tokens = |field: &str| usage[field].as_f64().unwrap_or(f64::NAN);
    let full = (tokens("prompt_tokens") + 2.0 * tokens("completion_tokens")) / 1e6;
    let cost = manifest["llm"]["cost"].as_f64().unwrap_or(f64::NAN);
    assert!((cost - full * 0.5).abs() < 1e-9, "batch replies at half price: {cost} vs {full}");
    let report = run.file("report.md");
    assert!(
        report.contains(&format!("{cost:.4}")) && report.contains("priced at 0.5 × the online price"),
        "{report}"
    );

    let status = qrelgen_with_env(&["batch", "status", "--set", path_str(&run.out)], &[]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success() && text.contains(&state[0].id) && text.contains("completed"), "{text}");
    let json = qrelgen_with_env(&["batch", "status", "--set", path_str(&run.out), "--json"], &[]);
    assert!(json.status.success());
    let doc: Value = serde_json::from_slice(&json.stdout).unwrap_or_default();
    let batches = doc["batches"].as_array().cloned().unwrap_or_default();
    assert_eq!(batches.len(), state.len(), "{doc}");
    for b in &batches {
        assert_eq!((b["imported"].as_bool(), &b["completed"]), (Some(true), &b["total"]), "{b}");
    }
    assert_eq!(doc["not_imported"], 0);
    assert_eq!(doc["batched_replies"], usage["batch_replies"], "{doc}");
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_lines_go_to_rejects_and_an_expired_batch_is_resumed_with_its_missing_lines() {
    let plan = Plan { expire_first_after: Some(1), fail_lines: BTreeSet::from([1]), ..Plan::default() };
    let (server, state, _) = start(plan).await;
    let dir = tempdir();
    let run = build(
        &server,
        &dir.path().join("set"),
        &["--batch", "submit", "--batch-poll", "0.02", "--allow-shortfall"],
    )
    .await;
    run.assert_code(0);
    let batches = state.lock().map(|s| s.batches.clone()).unwrap_or_default();
    let (first, second) = (&batches[0], &batches[1]);
    assert_eq!(first.status, "expired");
    assert_eq!(second.lines, first.lines[1..], "only the lines the expired batch did not run");
    let rejects = run.jsonl("rejects.jsonl");
    let failed: Vec<&Value> = rejects
        .iter()
        .filter(|r| r["reason"].as_str().is_some_and(|m| m.contains("line 1 failed on the server")))
        .collect();
    assert!(!failed.is_empty(), "{rejects:?}");
    assert!(failed.iter().all(|r| r["kind"] == "http_error"), "{failed:?}");
}

/// Starts qrelgen with `args` and kills it once the mock's state passes `reached`.
async fn kill_once(args: &[&str], state: &Mutex<State>, reached: impl Fn(&State) -> bool) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_qrelgen"))
        .args(args)
        .env("OPENAI_API_KEY", "sk-batch-test")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !state.lock().is_ok_and(|s| reached(&s)) {
        assert!(started.elapsed() < Duration::from_secs(60), "the build never got there");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The batch flags of the runs killed while they wait.
const WAITING: [&str; 4] = ["--batch", "submit", "--batch-poll", "0.02"];

/// Kills a build (with [`WAITING`]) while its first batch runs, held `in_progress` until the
/// returned flag is cleared; the mock, its state, the flag, and the set's folder in `dir`.
async fn kill_while_waiting(dir: &Path) -> (MockServer, Arc<Mutex<State>>, Arc<AtomicBool>, PathBuf) {
    let hold = Arc::new(AtomicBool::new(true));
    let (server, state, _) = start(Plan { hold: Arc::clone(&hold), ..Plan::default() }).await;
    let out = dir.join("set");
    let base_url = format!("{}/v1", server.uri());
    kill_once(&args(&out, &base_url, &WAITING), &state, |s| s.polls >= 3).await;
    (server, state, hold, out)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_while_waiting_resumes_by_polling_the_same_batch() {
    let dir = tempdir();
    let (server, state, hold, out) = kill_while_waiting(dir.path()).await;
    let extra = WAITING;
    let submitted = state.lock().map_or(0, |s| s.batches.len());
    assert_eq!(submitted, 1);
    let status = qrelgen_with_env(&["batch", "status", "--set", path_str(&out)], &[]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("batch-") && text.contains("in_progress") && text.contains("1 not imported"),
        "{text}"
    );

    hold.store(false, Ordering::SeqCst);
    let run = build(&server, &out, &extra).await;
    run.assert_code(0);
    assert!(run.stderr.contains("resuming batch"), "{}", run.stderr);
    assert_no_line_submitted_twice(&state);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_budget_covers_the_whole_batch_run_before_anything_is_submitted_and_the_dry_run_counts_batches() {
    let (server, state, _) = start(Plan::default()).await;
    let dir = tempdir();
    let run =
        build(&server, &dir.path().join("set"), &["--batch", "submit", "--max-tokens-total", "5000"]).await;
    run.assert_code(3);
    assert!(
        run.stderr.contains("whole batch run") && run.stderr.contains("nothing was submitted"),
        "{}",
        run.stderr
    );
    assert_eq!(state.lock().map_or(99, |s| s.batches.len()), 0);

    let run = build(
        &server,
        &dir.path().join("dry"),
        &["--batch", "submit", "--dry-run", "--batch-max-requests", "2"],
    )
    .await;
    run.assert_code(0);
    let line =
        run.stdout.lines().find(|l| l.starts_with("batch: ")).unwrap_or_else(|| panic!("{}", run.stdout));
    let calls: u64 = run
        .stdout
        .split(" calls")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|s| s.split('–').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{}", run.stdout));
    let low: u64 = line["batch: ".len()..].split(['–', ' ']).next().and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(
        low > calls.div_ceil(2),
        "round 1's calls in batches of 2, and the judge's: {line} ({calls} calls)"
    );
}

/// Every `custom_id` the mock was given, over all batches: each must be there once.
fn assert_no_line_submitted_twice(state: &Mutex<State>) -> usize {
    let batches = state.lock().map(|s| s.batches.clone()).unwrap_or_default();
    let ids: Vec<&str> =
        batches.iter().flat_map(|b| b.lines.iter().filter_map(|l| l["custom_id"].as_str())).collect();
    let distinct = ids.iter().collect::<BTreeSet<_>>().len();
    assert_eq!(ids.len(), distinct, "a call was submitted twice, in {} batches", batches.len());
    batches.len()
}

/// Kills a build while its first create call waits for an answer, checks what `batch status`
/// says, and reruns it to the end.
async fn kill_during_the_first_create(plan: Plan) -> (Run, Arc<Mutex<State>>) {
    let (server, state, _) = start(Plan { slow_create: Some(Duration::from_secs(120)), ..plan }).await;
    let dir = tempdir();
    let out = dir.path().join("set");
    let base_url = format!("{}/v1", server.uri());
    // A create call takes 4 s at most (--timeout × --attempts), backoffs aside: a younger
    // record may be a create call of another run still in flight, but the killed run is gone,
    // so the rerun does not wait for it.
    let extra = ["--batch", "submit", "--batch-poll", "0.02", "--timeout", "2", "--attempts", "2"];
    kill_once(&args(&out, &base_url, &extra), &state, |s| s.creates >= 1).await;
    let status = qrelgen_with_env(&["batch", "status", "--set", path_str(&out)], &[]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("file-") && text.contains("creating") && text.contains("1 not imported"), "{text}");
    assert!(text.contains("qrelgen batch forget ID"), "the way out of a record that blocks: {text}");

    let run = build(&server, &out, &extra).await;
    run.assert_code(0);
    assert!(run.stderr.contains("stopped while creating a batch of file-"), "{}", run.stderr);
    (run, state)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_before_the_create_call_returned_finds_its_batch_and_submits_nothing_twice() {
    // The provider made the batch; its answer had not reached the build.
    let (run, state) = kill_during_the_first_create(Plan::default()).await;
    let first = state.lock().map(|s| s.batches[0].id.clone()).unwrap_or_default();
    assert!(run.stderr.contains(&format!("resuming batch {first}")), "{}", run.stderr);
    assert!(assert_no_line_submitted_twice(&state) >= 2, "the later stages' batches came after it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_before_its_create_call_made_a_batch_submits_the_lines_again_once() {
    let (run, state) =
        kill_during_the_first_create(Plan { lose_first_create: true, ..Plan::default() }).await;
    assert!(run.stderr.contains("no batch was made of file-"), "{}", run.stderr);
    assert!(run.stderr.contains("on this machine) is gone"), "{}", run.stderr);
    assert!(
        run.stderr.contains("may have reached the provider: looking for its batch for 2 s more"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("may still be creating it"),
        "it waited for the young record of a run that was killed: {}",
        run.stderr
    );
    assert!(!run.stderr.contains("resuming batch"), "{}", run.stderr);
    assert_eq!(state.lock().map_or(0, |s| s.creates), assert_no_line_submitted_twice(&state) + 1);
}

/// Kills a build while its first create call waits, with a list of batches the rerun cannot
/// read: the rerun must stop, naming the input file, and submit nothing again.
async fn a_rerun_that_cannot_read_the_list_stops(list_shape: ListShape) {
    let plan = Plan { slow_create: Some(Duration::from_secs(120)), list_shape, ..Plan::default() };
    let (server, state, _) = start(plan).await;
    let dir = tempdir();
    let out = dir.path().join("set");
    let base_url = format!("{}/v1", server.uri());
    let extra = ["--batch", "submit", "--batch-poll", "0.02"];
    kill_once(&args(&out, &base_url, &extra), &state, |s| s.creates >= 1).await;

    let run = build(&server, &out, &extra).await;
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot tell whether a batch was made of input file file-"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("nothing was submitted again"), "{}", run.stderr);
    assert_eq!(state.lock().map_or(0, |s| s.creates), 1, "the lines were submitted again");
    let status = qrelgen_with_env(&["batch", "status", "--set", path_str(&out)], &[]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("creating") && text.contains("1 not imported"), "the record is kept: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listed_batch_without_its_input_file_stops_the_rerun_instead_of_submitting_again() {
    a_rerun_that_cannot_read_the_list_stops(ListShape::NoInputFile).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_list_of_batches_of_another_shape_stops_the_rerun_instead_of_submitting_again() {
    a_rerun_that_cannot_read_the_list_stops(ListShape::NoData).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_call_that_timed_out_is_not_made_again_and_the_rerun_takes_the_batch_it_made() {
    // The provider makes the batch only when it answers, after the build gave up waiting.
    let plan = Plan { slow_create: Some(Duration::from_secs(3)), made_late: true, ..Plan::default() };
    let (server, state, _) = start(plan).await;
    let dir = tempdir();
    let out = dir.path().join("set");
    let extra = ["--batch", "submit", "--batch-poll", "0.02", "--timeout", "1"];
    let run = build(&server, &out, &extra).await;
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains("no reply within 1 s") && run.stderr.contains("rerun the same command"),
        "{}",
        run.stderr
    );
    assert_eq!(state.lock().map_or(0, |s| s.creates), 1, "the create call was made again");
    let started = Instant::now();
    while state.lock().map_or(0, |s| s.batches.len()) == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "the mock never made the batch");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let run = build(&server, &out, &extra).await;
    run.assert_code(0);
    let first = state.lock().map(|s| s.batches[0].id.clone()).unwrap_or_default();
    assert!(run.stderr.contains("stopped while creating a batch of file-"), "{}", run.stderr);
    assert!(run.stderr.contains(&format!("resuming batch {first}")), "{}", run.stderr);
    assert_eq!(state.lock().map_or(0, |s| s.creates), assert_no_line_submitted_twice(&state));
}

/// Builds the set online and with `--batch submit` (and `extra`) against a mock following
/// `plan`, and checks they are the same.
async fn submit_builds_the_online_set(
    plan: Plan,
    extra: &[&str],
) -> (Run, Arc<Mutex<State>>, tempfile::TempDir) {
    let (server, state, _) = start(plan).await;
    let dir = tempdir();
    let mut args = vec!["--batch", "submit", "--batch-poll", "0.02"];
    args.extend_from_slice(extra);
    let run = build(&server, &dir.path().join("batch"), &args).await;
    run.assert_code(0);
    let online = build(&server, &dir.path().join("online"), &[]).await;
    online.assert_code(0);
    assert_same_set(&online, &run);
    (run, state, dir)
}

/// Whether a request line re-asks (holds the model's earlier reply).
fn re_asks(line: &Value) -> bool {
    line["body"]["messages"].as_array().is_some_and(|m| m.iter().any(|m| m["role"] == "assistant"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repair_re_ask_goes_in_a_follow_up_batch_and_the_set_equals_the_online_one() {
    let plan = Plan { behaviour: Behaviour::InvalidThenRepaired, ..Plan::default() };
    let (_, state, _dir) = submit_builds_the_online_set(plan, &[]).await;
    assert_no_line_submitted_twice(&state);
    let batches = state.lock().map(|s| s.batches.clone()).unwrap_or_default();
    let (first, repairs) = (&batches[0], &batches[1]);
    assert!(!first.lines.iter().any(re_asks), "the first batch asks, it does not re-ask");
    assert_eq!(repairs.lines.len(), first.lines.len(), "one re-ask per unusable reply");
    for again in &repairs.lines {
        let again = &again["body"]["messages"];
        assert!(again.as_array().is_some_and(|m| m.len() == 4), "{again}");
        let asked = first.lines.iter().map(|l| &l["body"]["messages"]);
        assert_eq!(asked.filter(|m| (&m[0], &m[1]) == (&again[0], &again[1])).count(), 1, "the same prompt");
        assert_eq!(again[2]["content"], "{\"queries\": [ oops", "the invalid reply is quoted back");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_batch_keeps_what_it_ran_and_submits_only_the_rest_again() {
    let plan = Plan { cancel_first_after: Some(1), ..Plan::default() };
    let (run, state, _dir) = submit_builds_the_online_set(plan, &[]).await;
    let batches = state.lock().map(|s| s.batches.clone()).unwrap_or_default();
    let (first, second) = (&batches[0], &batches[1]);
    let ids: Vec<&str> =
        batches[1..].iter().flat_map(|b| b.lines.iter().filter_map(|l| l["custom_id"].as_str())).collect();
    assert_eq!(ids.len(), ids.iter().collect::<BTreeSet<_>>().len(), "after it, each call once");
    let ran = first.lines[0]["custom_id"].as_str().unwrap_or_default();
    assert!(!ids.contains(&ran), "the line it ran is not submitted again");
    assert_eq!(first.status, "cancelled");
    assert_eq!(second.lines, first.lines[1..], "only the lines the cancelled batch did not run");
    let told = format!(
        "batch {} was cancelled before it ran {} of its {} requests: they are submitted again",
        first.id,
        first.lines.len() - 1,
        first.lines.len()
    );
    assert!(run.stderr.contains(&told), "{}", run.stderr);
    let manifest: Value = serde_json::from_str(&run.file("manifest.json")).unwrap_or_default();
    let usage = &manifest["llm"]["usage"];
    assert_eq!(
        usage["batch_replies"], usage["replies"],
        "the reply it ran is used, not asked again: {usage}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_call_refused_with_a_4xx_leaves_no_creating_record() {
    let (server, state, _) = start(Plan { refuse_create: true, ..Plan::default() }).await;
    let dir = tempdir();
    let out = dir.path().join("set");
    let run = build(&server, &out, &["--batch", "submit", "--batch-poll", "0.02"]).await;
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stderr.contains("model not available for batches"), "{}", run.stderr);
    assert_eq!(state.lock().map_or(0, |s| s.creates), 1, "a 400 is not retried");
    let status = qrelgen_with_env(&["batch", "status", "--set", path_str(&out)], &[]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("no batches recorded"), "{text}");
}

/// The chat endpoint of `model`, which drops the cache's `replies` table while it answers
/// its `after`-th request: that reply is paid for and cannot be kept.
struct BreakCacheAt {
    model: Model,
    cache: PathBuf,
    after: usize,
    seen: AtomicUsize,
}

impl Respond for BreakCacheAt {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.after {
            let dropped =
                rusqlite::Connection::open(&self.cache).and_then(|c| c.execute_batch("DROP TABLE replies"));
            assert!(dropped.is_ok(), "{dropped:?}");
        }
        self.model.respond(request)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_the_cache_cannot_keep_stops_the_run_instead_of_being_rejected() {
    let dir = tempdir();
    let cache = dir.path().join("cache.sqlite");
    let (model, counters) = mock::model(Behaviour::default());
    let server = MockServer::builder().start().await;
    let chat = BreakCacheAt { model, cache: cache.clone(), after: 4, seen: AtomicUsize::new(0) };
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(chat).mount(&server).await;
    let run = build(&server, &dir.path().join("set"), &["--cache", path_str(&cache), "--threads", "1"]).await;
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains("its reply cannot be kept") && run.stderr.contains("no such table"),
        "{}",
        run.stderr
    );
    let sent = counters.requests.load(Ordering::SeqCst);
    assert!(sent <= 6, "the run went on sending after the cache failed: {sent} requests");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_that_cannot_be_polled_names_the_way_out_and_forgetting_it_lets_the_rerun_go_on() {
    let dir = tempdir();
    let (server, state, hold, out) = kill_while_waiting(dir.path()).await;
    let extra = WAITING;
    // The provider no longer knows the batch (deleted, or another project's key): 404.
    let gone = state.lock().map(|mut s| s.batches.remove(0)).unwrap();
    hold.store(false, Ordering::SeqCst);
    let run = build(&server, &out, &extra).await;
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    let told = format!("batch {}: HTTP 404", gone.id);
    let way_out = format!("`qrelgen batch forget {} --set DIR`", gone.id);
    assert!(run.stderr.contains(&told) && run.stderr.contains(&way_out), "{}", run.stderr);
    assert_eq!(state.lock().map_or(0, |s| s.creates), 1, "nothing was submitted again");

    let drop_record = |id: &str| qrelgen_with_env(&["batch", "forget", id, "--set", path_str(&out)], &[]);
    let forgot = drop_record(&gone.id);
    let text = String::from_utf8_lossy(&forgot.stdout);
    assert!(forgot.status.success(), "{text}");
    let lines = gone.lines.len();
    for expected in [
        format!("forgot batch {} (generate, round 1, in_progress, {lines} requests)", gone.id),
        "0 of its requests have replies in the cache: they stay there".to_owned(),
        format!("{lines} have none: the next `build --batch submit` submits them again"),
        format!("warning: batch {} is not cancelled by this and may still run and bill", gone.id),
    ] {
        assert!(text.contains(&expected), "{expected:?} in {text}");
    }
    let again = drop_record(&gone.id);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains(&format!("no batch {} is recorded", gone.id)));

    let run = build(&server, &out, &extra).await;
    run.assert_code(0);
    let batches = state.lock().map(|s| s.batches.clone()).unwrap_or_default();
    assert_eq!(batches[0].lines, gone.lines, "its requests went in a new batch, once");
    assert_no_line_submitted_twice(&state);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_sharing_the_cache_waits_for_the_batch_another_run_is_creating_instead_of_forgetting_it() {
    // The provider makes the first batch only when it answers the create call, 8 s on.
    let plan = Plan { slow_create: Some(Duration::from_secs(8)), made_late: true, ..Plan::default() };
    let (server, state, _) = start(plan).await;
    let dir = tempdir();
    let cache = dir.path().join("shared-cache.sqlite");
    let extra = ["--batch", "submit", "--batch-poll", "0.05", "--cache", path_str(&cache)];
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let second = async {
        let started = Instant::now();
        while state.lock().map_or(0, |s| s.creates) == 0 {
            assert!(started.elapsed() < Duration::from_secs(60), "the first run never created a batch");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        build(&server, &b, &extra).await
    };
    let (first, second) = tokio::join!(build(&server, &a, &extra), second);
    first.assert_code(0);
    second.assert_code(0);
    // Both runs are on this machine: the second sees the first one run and waits for it.
    assert!(second.stderr.contains("still runs: waiting for its create call"), "{}", second.stderr);
    let batches = state.lock().map(|s| s.batches.clone()).unwrap_or_default();
    // It then polled that batch, or found its replies already imported by the first run.
    let ids = |b: &MockBatch| {
        b.lines.iter().filter_map(|l| l["custom_id"].as_str().map(str::to_owned)).collect::<BTreeSet<_>>()
    };
    let first_lines = ids(&batches[0]);
    for later in &batches[1..] {
        assert!(
            ids(later).is_disjoint(&first_lines),
            "the first run's lines were submitted again in {}",
            later.id
        );
    }
    assert_same_set(&first, &second);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_import_rejects_unknown_custom_ids_and_keeps_the_first_reply_of_a_duplicate() {
    let (server, _, counters) = start(Plan::default()).await;
    let dir = tempdir();
    let online = build(&server, &dir.path().join("online"), &["--judge-pool", "2"]).await;
    online.assert_code(0);
    let online_requests = counters.requests();
    let out = dir.path().join("batch");
    let mut next = dir.path().join("requests-1.jsonl");
    build(&server, &out, &["--judge-pool", "2", "--batch", "export", "--to", path_str(&next)])
        .await
        .assert_code(0);
    let (runner, _) = mock::model(Behaviour::Good);
    let mut imports = 0;
    let last = loop {
        let results = dir.path().join(format!("results-{imports}.jsonl"));
        run_like_vllm(&runner, &next, &results, |_| true);
        // Each result again, after it, with a reply that would break the set; and a line for a
        // call that was never asked for.
        let mut lines = String::new();
        for line in fs_err::read_to_string(&results).unwrap().lines() {
            let mut spoiled: Value = serde_json::from_str(line).unwrap();
            spoiled["response"]["body"]["choices"][0]["message"]["content"] = json!("garbage");
            for text in [line.to_owned(), spoiled.to_string()] {
                lines.push_str(&text);
                lines.push('\n');
            }
        }
        // Two strangers: an id that is no cache key, and one shaped like a key but never exported.
        for custom_id in ["not-a-request".to_owned(), format!("{:064x}", 0xfeed + imports)] {
            let stranger =
                json!({"id": "x", "custom_id": custom_id, "response": {"status_code": 200, "body": {}}});
            lines.push_str(&stranger.to_string());
            lines.push('\n');
        }
        fs_err::write(&results, lines).unwrap();
        imports += 1;
        let to = dir.path().join(format!("requests-{}.jsonl", imports + 1));
        let run = build(
            &server,
            &out,
            &["--judge-pool", "2", "--batch", "import", path_str(&results), "--to", path_str(&to)],
        )
        .await;
        run.assert_code(0);
        let answered = read_jsonl(&next).len();
        let said = format!("2 unknown custom_id(s) rejected, {answered} duplicate(s)");
        assert!(run.stderr.contains(&said), "{said}: {}", run.stderr);
        if !run.stdout.contains("wrote") {
            break run;
        }
        assert!(imports < 12, "the imports never finish: {}", run.stdout);
        next = to;
    };
    // The first (good) replies stood: the set is the online build's.
    assert_same_set(&online, &last);
    assert_eq!(counters.requests(), online_requests, "the batch build sent no online call");
}
