//! `qrelgen build --generator llm` against a mock OpenAI-compatible server over real HTTP.

use super::mock::{self, Behaviour, Counters, Model};
use super::{Run, path_str, qrelgen_with_env, sample_corpus, str_field, tempdir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &str = "sk-test-SECRET-never-written-7f3a";

/// Runs `build` on the sample corpus (unless `args` name another `--corpus`) with the LLM
/// generator pointed at `server`, and `key` (if any) in `OPENAI_API_KEY`.
fn llm_build(out: &Path, server: &str, args: &[&str], key: Option<&str>) -> Run {
    let base_url = format!("{server}/v1");
    let corpus = sample_corpus();
    let mut all = vec!["build"];
    if !args.contains(&"--corpus") {
        all.extend_from_slice(&["--corpus", path_str(&corpus)]);
    }
    all.extend_from_slice(&[
        "--out",
        path_str(out),
        "--generator",
        "llm",
        "--base-url",
        &base_url,
        "--model",
        "mock-model",
        "--review-size",
        "6",
    ]);
    if !args.contains(&"--queries") {
        all.extend_from_slice(&["--queries", "12"]);
    }
    all.extend_from_slice(args);
    let env: Vec<(&str, &str)> = key.map(|k| ("OPENAI_API_KEY", k)).into_iter().collect();
    let output = qrelgen_with_env(&all, &env);
    Run {
        out: out.to_owned(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Starts the mock and runs a build against it, off the async runtime.
pub(super) async fn run_with(model: Model, out: &Path, args: &[&str]) -> Run {
    let server = mock::start(model).await;
    run_on(&server, out, args).await
}

/// Runs a build against a running mock (the base URL is part of the cache key, so reruns that
/// should hit the cache use the same server).
pub(super) async fn run_on(server: &wiremock::MockServer, out: &Path, args: &[&str]) -> Run {
    run_keyed(server, out, args, Some(SECRET)).await
}

/// As [`run_on`], with `key` (or none) in `OPENAI_API_KEY`.
async fn run_keyed(server: &wiremock::MockServer, out: &Path, args: &[&str], key: Option<&str>) -> Run {
    let (uri, out, args): (String, std::path::PathBuf, Vec<String>) =
        (server.uri(), out.to_owned(), args.iter().map(|a| (*a).to_owned()).collect());
    let key = key.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        llm_build(&out, &uri, &args, key.as_deref())
    })
    .await
    .unwrap()
}

pub(super) fn manifest(run: &Run) -> Value {
    serde_json::from_str(&run.file("manifest.json")).unwrap()
}

fn reasons(run: &Run, file: &str, field: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in run.jsonl(file) {
        *counts.entry(str_field(&line, field).to_owned()).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread")]
async fn a_good_model_fills_the_set_and_the_key_never_reaches_a_file() {
    let dir = tempdir();
    let (model, counters) = mock::model(Behaviour::Good);
    let run = run_with(model, dir.path(), &[]).await;
    run.assert_code(0);
    let queries = run.jsonl("queries.jsonl");
    assert_eq!(queries.len(), 12);
    for q in &queries {
        assert!(q.pointer("/metadata/style").is_some(), "{q}");
        if str_field(q, "/metadata/type") != "no_answer" {
            assert!(q.pointer("/metadata/evidence/0").is_some(), "{q}");
        }
    }
    let m = manifest(&run);
    assert_eq!(m["llm"]["json_mode"], "schema");
    assert_eq!(m["generator"], "llm:mock-model");
    // One preflight, then one call per chunk or pair for up to 4 queries each; the judge asks
    // about each source (each hop of a multi_hop query: the gate) and each pooled chunk of a
    // no_answer one.
    let requests = counters.requests();
    let judge = counters.judge_requests();
    assert!(requests - judge <= 1 + 12 / 2, "{} generation requests for 12 queries", requests - judge);
    let judged =
        |t: &str| run.jsonl("candidates.jsonl").iter().filter(|c| str_field(c, "/type") == t).count();
    assert!(
        judge > 0
            && judge
                <= judged("direct")
                    + judged("paraphrase")
                    + 2 * judged("multi_hop")
                    + 5 * judged("no_answer"),
        "{judge} judge requests"
    );
    assert_eq!(m["run"]["llm_network"]["requests"], requests);
    for entry in walkdir::WalkDir::new(dir.path()).into_iter().flatten().filter(|e| e.file_type().is_file()) {
        let bytes = fs_err::read(entry.path()).unwrap_or_default();
        let leaked = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
        assert!(!leaked, "the API key is in {}", entry.path().display());
    }
    assert!(!run.stderr.contains(SECRET) && !run.stdout.contains(SECRET));
}

/// The `Authorization` header of every request the server received.
async fn authorization_headers(server: &wiremock::MockServer) -> Vec<Option<String>> {
    let requests = server.received_requests().await.unwrap_or_default();
    requests
        .iter()
        .map(|r| r.headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_key_is_sent_as_a_bearer_token_and_no_key_sends_no_authorization_header() {
    let (model, _) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let keyed = tempdir();
    run_keyed(&server, keyed.path(), &["--queries", "4"], Some(SECRET)).await.assert_code(0);
    let sent = authorization_headers(&server).await;
    assert!(!sent.is_empty() && sent.iter().all(|h| h.as_deref() == Some(&format!("Bearer {SECRET}"))));

    let (model, _) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let keyless = tempdir();
    run_keyed(&server, keyless.path(), &["--queries", "4"], None).await.assert_code(0);
    let sent = authorization_headers(&server).await;
    assert!(!sent.is_empty());
    assert!(sent.iter().all(Option::is_none), "without a key: {sent:?}");
}

/// The `connect:` line of a run's progress output.
fn connect_line(run: &Run) -> &str {
    run.stderr.lines().find(|l| l.trim_start().starts_with("connect:")).unwrap_or("")
}

/// Preflight probes the server received so far, by response format.
async fn probes(server: &wiremock::MockServer) -> Vec<String> {
    let requests = server.received_requests().await.unwrap_or_default();
    requests
        .iter()
        .filter(|r| mock::is_preflight(&r.body))
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            body.pointer("/response_format/type").and_then(Value::as_str).unwrap_or("plain").to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_rejecting_json_schema_falls_back_to_json_object() {
    let dir = tempdir();
    let (mut model, counters) = mock::model(Behaviour::Good);
    model.reject_json_schema = true;
    let server = mock::start(model).await;
    let run = run_on(&server, dir.path(), &[]).await;
    run.assert_code(0);
    assert_eq!(manifest(&run)["llm"]["json_mode"], "object");
    let probed = probes(&server).await;
    assert_eq!(probed, ["json_schema", "json_object"], "a 500 naming json_schema is not retried");
    let line = connect_line(&run);
    assert!(
        line.contains("json_object output (json_schema refused: HTTP 500: json_schema is not supported)"),
        "{line}"
    );
    let first = counters.requests();
    run_on(&server, dir.path(), &[]).await.assert_code(0);
    assert_eq!(counters.requests(), first, "a warm rerun probes nothing and calls nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transient_500_during_the_preflight_is_retried_and_keeps_json_schema() {
    let dir = tempdir();
    let (mut model, _) = mock::model(Behaviour::Good);
    (model.fail_first, model.fail_status) = (1, 500);
    let server = mock::start(model).await;
    let run = run_on(&server, dir.path(), &[]).await;
    run.assert_code(0);
    assert_eq!(manifest(&run)["llm"]["json_mode"], "schema");
    assert_eq!(probes(&server).await, ["json_schema", "json_schema"], "the probe was retried");
    let line = connect_line(&run);
    assert!(line.contains("json_schema output (the server follows the schema)"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_ignores_the_schema_gets_json_object_and_the_connect_line_says_why() {
    let dir = tempdir();
    let (mut model, _) = mock::model(Behaviour::Good);
    model.ignore_schema = true;
    let server = mock::start(model).await;
    let run = run_on(&server, dir.path(), &[]).await;
    run.assert_code(0);
    assert_eq!(manifest(&run)["llm"]["json_mode"], "object");
    let line = connect_line(&run);
    assert!(
        line.contains("json_object output (json_schema ignored 3 times: the reply holds no JSON object"),
        "{line}"
    );
    let rerun = run_on(&server, dir.path(), &[]).await;
    assert!(
        connect_line(&rerun).contains("json_object output (chosen by an earlier run"),
        "{}",
        rerun.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_garbage_preflight_reply_is_retried_keeps_json_schema_and_the_rerun_pays_nothing() {
    let dir = tempdir();
    let (mut model, counters) = mock::model(Behaviour::Good);
    model.garbage_preflights = 1;
    let server = mock::start(model).await;
    let run = run_on(&server, dir.path(), &[]).await;
    run.assert_code(0);
    assert_eq!(manifest(&run)["llm"]["json_mode"], "schema", "one bad reply downgrades nothing");
    assert_eq!(probes(&server).await, ["json_schema", "json_schema"], "the probe was asked again");
    assert!(
        connect_line(&run).contains("json_schema output (the server follows the schema)"),
        "{}",
        run.stderr
    );
    let first = counters.requests();
    run_on(&server, dir.path(), &[]).await.assert_code(0);
    assert_eq!(counters.requests(), first, "the rerun is served from the cache: nothing is paid twice");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_ignores_the_schema_on_every_probe_is_asked_three_times_before_json_object() {
    let dir = tempdir();
    let (mut model, _) = mock::model(Behaviour::Good);
    model.ignore_schema = true;
    let server = mock::start(model).await;
    run_on(&server, dir.path(), &[]).await.assert_code(0);
    assert_eq!(probes(&server).await, ["json_schema", "json_schema", "json_schema", "json_object"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remembered_mode_that_gave_no_usable_reply_is_probed_again() {
    let dir = tempdir();
    let (model, _) = mock::model(Behaviour::WrongTypes);
    let server = mock::start(model).await;
    run_on(&server, dir.path(), &["--max-rounds", "1", "--repairs", "0"]).await.assert_code(1);
    assert_eq!(probes(&server).await.len(), 1);
    // The server is fixed; the mode remembered from the first run never produced a usable
    // reply, so the next run probes again, and the one after that trusts it.
    remount(&server, mock::model(Behaviour::Good).0).await;
    run_on(&server, dir.path(), &[]).await.assert_code(0);
    assert_eq!(probes(&server).await.len(), 1, "probed again");
    remount(&server, mock::model(Behaviour::Good).0).await;
    run_on(&server, dir.path(), &["--queries", "16"]).await.assert_code(0);
    assert_eq!(probes(&server).await.len(), 0, "a mode that worked is trusted");
}

#[tokio::test(flavor = "multi_thread")]
async fn fenced_replies_with_prose_are_accepted() {
    let dir = tempdir();
    let (model, _) = mock::model(Behaviour::Fenced);
    let run = run_with(model, dir.path(), &[]).await;
    run.assert_code(0);
    assert_eq!(run.jsonl("queries.jsonl").len(), 12);
}

#[tokio::test(flavor = "multi_thread")]
async fn unusable_replies_are_re_asked_then_rejected_with_their_reason() {
    let dir = tempdir();
    let (model, counters) = mock::model(Behaviour::WrongTypes);
    let run = run_with(model, dir.path(), &["--repairs", "2", "--max-rounds", "1"]).await;
    run.assert_code(1);
    let rejects = run.jsonl("rejects.jsonl");
    assert!(!rejects.is_empty());
    assert!(
        rejects
            .iter()
            .all(|r| str_field(r, "/reason").starts_with("unusable reply after 2 repair(s): invalid JSON"))
    );
    assert!(rejects.iter().all(|r| r.get("reply").is_some()), "the bad reply is kept for inspection");
    let calls = counters.requests() - 1;
    assert_eq!(calls % 3, 0, "each call asked 1 + 2 repairs times: {calls}");

    let repaired = tempdir();
    let (model, counters) = mock::model(Behaviour::InvalidThenRepaired);
    let run = run_with(model, repaired.path(), &["--repairs", "1"]).await;
    run.assert_code(0);
    assert_eq!((counters.requests() - 1) % 2, 0, "each call needed exactly one repair");
}

#[tokio::test(flavor = "multi_thread")]
async fn truncated_replies_are_reported_as_truncation() {
    let dir = tempdir();
    let (model, _) = mock::model(Behaviour::Truncated);
    let run = run_with(model, dir.path(), &["--max-rounds", "1"]).await;
    run.assert_code(1);
    let reasons = reasons(&run, "rejects.jsonl", "/reason");
    assert_eq!(
        reasons.keys().collect::<Vec<_>>(),
        ["truncated: the reply hit max_tokens (raise --max-tokens)"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn evidence_not_in_the_source_is_dropped() {
    let dir = tempdir();
    let (model, _) = mock::model(Behaviour::BadEvidence);
    let run = run_with(model, dir.path(), &["--max-rounds", "1", "--allow-shortfall"]).await;
    run.assert_code(1);
    let reasons = reasons(&run, "candidates.jsonl", "/reason");
    assert_eq!(reasons.get("evidence_not_in_source"), Some(&12), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_are_retried_after_retry_after() {
    let dir = tempdir();
    let (mut model, counters) = mock::model(Behaviour::Good);
    (model.fail_first, model.fail_status, model.retry_after) = (2, 429, Some("1".to_owned()));
    let run = run_with(model, dir.path(), &[]).await;
    run.assert_code(0);
    let arrivals = counters.arrivals.lock().map(|a| a.clone()).unwrap_or_default();
    assert!(arrivals[1].duration_since(arrivals[0]) >= Duration::from_secs(1), "retried before Retry-After");
    assert!(arrivals[2].duration_since(arrivals[1]) >= Duration::from_secs(1), "retried before Retry-After");
    let network = &manifest(&run)["run"]["llm_network"];
    assert_eq!((network["rate_limited"].as_u64(), network["retries"].as_u64()), (Some(2), Some(2)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_means_later_never_failed() {
    // One request per rolling second, no --rpm, and only two attempts per call: every call
    // still gets through, however many 429s it meets.
    let dir = tempdir();
    let (mut model, counters) = mock::model(Behaviour::Good);
    model.rate_limit = Some((1, Duration::from_secs(1)));
    let run = run_with(model, dir.path(), &["--queries", "8", "--attempts", "2"]).await;
    run.assert_code(0);
    let network = &manifest(&run)["run"]["llm_network"];
    assert_eq!(network["failures"], 0, "{network}");
    assert!(counters.rate_limited.load(std::sync::atomic::Ordering::SeqCst) > 0, "the limit was met");
    assert!(!run.file("rejects.jsonl").contains("HTTP 429"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_servers_rate_limit_headers_set_the_pace() {
    // The server says 60 requests a minute and enforces one per rolling second; qrelgen, told
    // no --rpm, paces itself by the header from the preflight's answer on.
    let dir = tempdir();
    let (mut model, counters) = mock::model(Behaviour::Good);
    model.rate_limit = Some((1, Duration::from_secs(1)));
    model.rate_headers = Some(60);
    let run = run_with(model, dir.path(), &["--queries", "8"]).await;
    run.assert_code(0);
    let limited = counters.rate_limited.load(std::sync::atomic::Ordering::SeqCst);
    assert!(limited <= 1, "{limited} answers 429 with the limit known from the first answer");
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_are_retried_and_other_4xx_fail_fast() {
    let dir = tempdir();
    let (mut model, _) = mock::model(Behaviour::Good);
    (model.fail_first, model.fail_status) = (1, 500);
    let run = run_with(model, dir.path(), &["--json-mode", "json_object"]).await;
    run.assert_code(0);
    assert_eq!(manifest(&run)["run"]["llm_network"]["retries"], 1);

    let other = tempdir();
    let (mut model, counters) = mock::model(Behaviour::Good);
    (model.fail_first, model.fail_status) = (1, 404);
    let run = run_with(model, other.path(), &["--json-mode", "json_object"]).await;
    run.assert_code(2);
    assert!(run.stderr.contains("does not serve model \"mock-model\""), "{}", run.stderr);
    assert!(run.stderr.contains("hint: check --model"), "{}", run.stderr);
    assert_eq!(counters.requests(), 1, "a 404 is not retried");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_server_times_out_with_a_clear_message() {
    let dir = tempdir();
    let (mut model, counters) = mock::model(Behaviour::Good);
    // Replies would come after 5 s: a client that waited for them would build the set (exit 0),
    // so the exit code, not the clock, tells that it gave up after 1 s.
    model.delay = Duration::from_secs(5);
    let run = run_with(model, dir.path(), &["--timeout", "1", "--attempts", "2"]).await;
    run.assert_code(2);
    assert!(run.stderr.contains("does not answer: no reply within 1 s"), "{}", run.stderr);
    assert_eq!(counters.requests(), 2, "one timeout retried once");
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrency_caps_requests_in_flight() {
    let dir = tempdir();
    let (mut model, counters) = mock::model(Behaviour::Good);
    let delay = Duration::from_millis(400);
    model.delay = delay;
    let run =
        run_with(model, dir.path(), &["--concurrency", "2", "--queries", "24", "--queries-per-call", "2"])
            .await;
    run.assert_code(0);
    let peak = counters.peak_in_flight(delay);
    assert_eq!(peak, 2, "peak in flight {peak} with --concurrency 2");
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_sends_nothing_and_budgets_stop_cleanly() {
    let dir = tempdir();
    let (model, counters) = mock::model(Behaviour::Good);
    let run = run_with(model, dir.path(), &["--dry-run"]).await;
    run.assert_code(0);
    assert!(run.stdout.starts_with("dry run: 12 queries, all rounds: "), "{}", run.stdout);
    // 12 queries = 5 direct, 3 paraphrase (their source each: the gate), 2 multi_hop (2 hops
    // each), 2 no_answer (5 pooled chunks each, --pool-depth): 8 + 2 × 2 + 2 × 5 judge calls
    // in round 1.
    assert!(run.stdout.contains("the judge: up to 22–"), "{}", run.stdout);
    assert_eq!(counters.requests(), 0);
    assert!(!dir.path().join("queries.jsonl").exists());

    let (model, counters) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let capped = ["--max-tokens-total", "2500", "--max-tokens", "400", "--concurrency", "1"];
    let run = run_on(&server, dir.path(), &capped).await;
    run.assert_code(3);
    assert!(run.stderr.contains("budget reached"), "{}", run.stderr);
    assert!(run.stderr.contains("rerun with a higher limit"), "{}", run.stderr);
    assert!(!dir.path().join("queries.jsonl").exists(), "a stopped run publishes nothing");
    let paid = counters.requests();
    assert!(paid >= 2, "the budget allowed some calls: {paid}");
    let resumed = run_on(&server, dir.path(), &["--max-tokens-total", "100000", "--max-tokens", "400"]).await;
    resumed.assert_code(0);
    let network = &manifest(&resumed)["run"]["llm_network"];
    assert_eq!(
        network["cache_hits"].as_u64(),
        Some(paid as u64 - 1),
        "every paid call but the preflight is reused"
    );
}

/// The `low–high` range before `what` in a dry run's output (`3–6 calls`).
fn range_before(stdout: &str, what: &str) -> (u64, u64) {
    let at = stdout.find(what).unwrap_or_else(|| panic!("no {what:?} in {stdout}"));
    let range = stdout[..at].trim_end().rsplit(' ').next().unwrap_or("");
    let (low, high) = range.split_once('–').unwrap_or((range, range));
    let number = |n: &str| n.replace(',', "").parse().unwrap_or_else(|e| panic!("{n:?} in {stdout}: {e}"));
    (number(low), number(high))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_estimates_every_round_as_a_range_and_counts_the_schema() {
    let dir = tempdir();
    let (model, _) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let run = |args: &'static [&'static str]| {
        let (server, dir) = (&server, dir.path());
        async move {
            let run = run_on(server, dir, &[&["--dry-run"][..], args].concat()).await;
            run.assert_code(0);
            run.stdout
        }
    };
    let all = run(&["--json-mode", "json_schema"]).await;
    assert!(all.contains("from every query kept (round 1 only) to half of them dropped"), "{all}");
    let (low, high) = range_before(&all, "calls");
    assert!(high > low, "more rounds cost more calls: {all}");
    let (prompt_low, prompt_high) = range_before(&all, "prompt tokens");
    assert!(prompt_high > prompt_low, "{all}");
    assert!(all.contains("prompt tokens (response_format schema included)"), "{all}");
    let one_round = run(&["--json-mode", "json_schema", "--max-rounds", "1"]).await;
    assert_eq!(range_before(&one_round, "calls"), (low, low), "one round: no range: {one_round}");
    let plain = run(&["--json-mode", "plain"]).await;
    let (plain_low, _) = range_before(&plain, "prompt tokens");
    // prompts/schema.json, in its response_format, is about 120 tokens, sent with every call.
    assert!(prompt_low >= plain_low + 100 * low, "schema {prompt_low} vs plain {plain_low}, {low} calls");
}

/// Every output file but the run section of the manifest.
fn outputs(run: &Run) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for name in [
        "corpus.jsonl",
        "queries.jsonl",
        "qrels.trec",
        "candidates.jsonl",
        "rejects.jsonl",
        "review_queue.jsonl",
        "report.md",
    ] {
        files.insert(name.to_owned(), run.file(name));
    }
    let mut m = manifest(run);
    m.as_object_mut().map(|o| o.remove("run"));
    files.insert("manifest.json".to_owned(), m.to_string());
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warm_cache_gives_identical_files_without_calls() {
    let dir = tempdir();
    let (model, counters) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let first = run_on(&server, dir.path(), &[]).await;
    first.assert_code(0);
    let before = outputs(&first);
    let paid = counters.requests();
    let second = run_on(&server, dir.path(), &[]).await;
    second.assert_code(0);
    assert_eq!(counters.requests(), paid, "the warm rerun sent requests");
    assert_same(&outputs(&second), &before);
}

#[track_caller]
fn assert_same(got: &BTreeMap<String, String>, expected: &BTreeMap<String, String>) {
    for (name, text) in expected {
        let other = got.get(name).map_or("", String::as_str);
        if other != text {
            let line = text.lines().zip(other.lines()).position(|(a, b)| a != b).unwrap_or(0);
            let (a, b) = (text.lines().nth(line).unwrap_or(""), other.lines().nth(line).unwrap_or(""));
            panic!("{name} differs at line {}:\nexpected: {a}\n     got: {b}", line + 1);
        }
    }
}

/// Replies stored in a cache file (the preflight's mode note included).
pub(super) fn cached_replies(cache: &Path) -> usize {
    let conn = rusqlite::Connection::open(cache).unwrap();
    let count: i64 = conn
        .query_row("SELECT COUNT(*) FROM replies WHERE finish_reason IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    usize::try_from(count).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_mid_way_resumes_without_paying_twice() {
    let args = ["--queries", "24", "--queries-per-call", "2", "--concurrency", "1"];
    let (mut model, counters) = mock::model(Behaviour::Good);
    model.delay = Duration::from_millis(150);
    let server = mock::start(model).await;
    // The uninterrupted reference run.
    let reference = tempdir();
    let full = run_on(&server, reference.path(), &args).await;
    full.assert_code(0);
    let total_calls = counters.requests();

    // The same run into another folder, killed with SIGKILL after a few calls.
    let dir = tempdir();
    let base_url = format!("{}/v1", server.uri());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_qrelgen"))
        .args([
            "build",
            "--corpus",
            path_str(&sample_corpus()),
            "--out",
            path_str(dir.path()),
            "--generator",
            "llm",
        ])
        .args(["--base-url", &base_url, "--model", "mock-model", "--review-size", "6", "-q"])
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&counters, total_calls + 5).await;
    child.kill().unwrap();
    let _ = child.wait();
    let paid = cached_replies(&dir.path().join("llm-cache.sqlite"));
    assert!(paid >= 3 && paid < total_calls, "{paid} of {total_calls} calls were paid before the kill");

    let before_rerun = counters.requests();
    let rerun = run_on(&server, dir.path(), &args).await;
    rerun.assert_code(0);
    assert_eq!(
        counters.requests() - before_rerun,
        total_calls - 1 - paid,
        "the rerun must make exactly the calls not yet paid (the preflight's choice is remembered)"
    );
    assert_same(&outputs(&rerun), &outputs(&full));
}

/// Waits until the mock has seen `requests` requests (60 s at most).
pub(super) async fn wait_for(counters: &Arc<Counters>, requests: usize) {
    let started = Instant::now();
    while counters.requests() < requests {
        assert!(started.elapsed() < Duration::from_secs(60), "the run never made {requests} requests");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Replaces what `server` answers with `model` (same address, so the same cache keys).
async fn remount(server: &wiremock::MockServer, model: mock::Model) {
    server.reset().await;
    wiremock::Mock::given(wiremock::matchers::method("POST")).respond_with(model).mount(server).await;
}

/// A server that served a first run into `out` (which leaves the preflight's choice in the
/// cache), then hangs on every new call; and the counters of the hanging part.
async fn hangs_after_a_good_run(out: &Path) -> (wiremock::MockServer, Arc<Counters>) {
    let (model, _) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    run_on(&server, out, &["--queries", "4"]).await.assert_code(0);
    let (mut hanging, counters) = mock::model(Behaviour::Good);
    hanging.delay = Duration::from_secs(30);
    remount(&server, hanging).await;
    (server, counters)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_watchdog_stops_a_run_where_nothing_finishes() {
    let dir = tempdir();
    let (server, _) = hangs_after_a_good_run(dir.path()).await;
    // The replies come after 30 s, within --timeout: without the watchdog the run would finish
    // (exit 0), so the exit code tells that it stopped.
    let run =
        run_on(&server, dir.path(), &["--queries", "12", "--stall-timeout", "2", "--timeout", "60"]).await;
    run.assert_code(2);
    assert!(run.stderr.contains("no LLM call finished in 2 s"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn time_spent_on_our_side_is_not_server_silence() {
    // --rpm 30 holds each request about 2 s in our own limiter: longer than --stall-timeout,
    // but the server answers every request at once.
    let dir = tempdir();
    let (model, counters) = mock::model(Behaviour::Good);
    let args = ["--queries", "4", "--rpm", "30", "--stall-timeout", "1"];
    let run = run_with(model, dir.path(), &args).await;
    run.assert_code(0);
    assert!(counters.requests() >= 3, "{} requests", counters.requests());
}

#[tokio::test(flavor = "multi_thread")]
async fn attempts_that_time_out_do_not_reset_the_stall_clock() {
    let dir = tempdir();
    let (server, counters) = hangs_after_a_good_run(dir.path()).await;
    let args = ["--queries", "12", "--timeout", "1", "--stall-timeout", "3", "--attempts", "20"];
    let run = run_on(&server, dir.path(), &[&args[..], &["--concurrency", "1"]].concat()).await;
    run.assert_code(2);
    assert!(run.stderr.contains("no LLM call finished in 3 s"), "{}", run.stderr);
    // Three attempts of 1 s each (and the backoff between them) are 3 s without an answer.
    let requests = counters.requests();
    assert!((1..=3).contains(&requests), "{requests} attempts of 1 s before the stall was noticed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_server_stops_the_run_and_keeps_the_previous_set() {
    let dir = tempdir();
    let (model, _) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let first = run_on(&server, dir.path(), &[]).await;
    first.assert_code(0);
    let before = first.file("queries.jsonl");
    let uri = server.uri();
    drop(server);
    // New calls (more queries) against the same, now closed, address.
    let (out, base_url) = (dir.path().to_owned(), format!("{uri}/v1"));
    let run = tokio::task::spawn_blocking(move || {
        let corpus = sample_corpus();
        let args = ["build", "--corpus", path_str(&corpus), "--out", path_str(&out), "--generator", "llm"];
        let more = ["--base-url", &base_url, "--model", "mock-model", "--queries", "20", "--attempts", "2"];
        qrelgen_with_env(&[&args[..], &more[..]].concat(), &[])
    })
    .await
    .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stderr).contains("cannot reach the server"));
    assert_eq!(first.file("queries.jsonl"), before, "the previous set was overwritten");
}

/// Runs a build with the LLM generator at `base_url` (no server behind it), with `args`.
async fn run_unserved(base_url: &str, args: &[&str]) -> std::process::Output {
    let dir = tempdir();
    let (out, base_url) = (dir.path().join("out"), base_url.to_owned());
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let corpus = sample_corpus();
        let mut all =
            vec!["build", "--corpus", path_str(&corpus), "--out", path_str(&out), "--generator", "llm"];
        all.extend_from_slice(&["--base-url", &base_url, "--model", "mock-model"]);
        all.extend(args.iter().map(String::as_str));
        qrelgen_with_env(&all, &[])
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_base_url_that_is_not_a_url_or_refuses_locally_fails_at_once_naming_the_cause() {
    for (url, expected) in [
        ("not a url", "is not an http(s) URL: relative URL without a base"),
        ("localhost:8080/v1", "is not an http(s) URL: the scheme is \"localhost\""),
    ] {
        let run = run_unserved(url, &[]).await;
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{url}: {stderr}");
        assert!(stderr.contains("hint: check --base-url"), "{stderr}");
    }
    // A port nobody listens on: refused at once, and not retried (--attempts would allow 6).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or_else(|e| panic!("{e}"), |a| a.port());
    let run = run_unserved(&format!("http://127.0.0.1:{port}/v1"), &["--attempts", "6"]).await;
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot reach the server: connection refused: nothing listens at that address"),
        "{stderr}"
    );
    assert!(stderr.contains("(os error"), "the cause is kept: {stderr}");
    assert!(stderr.contains("not retried"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_are_counted_by_kind_and_their_messages_kept_in_rejects() {
    let dir = tempdir();
    let (mut model, _) = mock::model(Behaviour::Good);
    model.fail_generation = Some(400);
    let run = run_with(model, dir.path(), &["--max-rounds", "1", "--allow-shortfall"]).await;
    run.assert_code(1);
    let rejects = run.jsonl("rejects.jsonl");
    assert!(rejects.len() >= 3, "{} rejects", rejects.len());
    for r in &rejects {
        assert_eq!(str_field(r, "/kind"), "http_error", "{r}");
        let reason = str_field(r, "/reason");
        assert!(
            reason.starts_with("HTTP 400: request ") && reason.ends_with(" refused | try again\nor not"),
            "{r}"
        );
    }
    let m = manifest(&run);
    let failed: u64 = m["counts"].as_object().map_or(0, |counts| {
        counts.values().filter_map(|c| c["generation_failures"]["http_error"].as_u64()).sum()
    });
    assert_eq!(failed, 12, "every request of the 12 failed, counted by kind: {}", m["counts"]);
    let report = run.file("report.md");
    let section: Vec<&str> = report
        .lines()
        .skip_while(|l| !l.starts_with("## Dropped and not generated"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with('|'))
        .collect();
    let rows: Vec<&&str> = section.iter().filter(|l| l.contains("not generated")).collect();
    assert_eq!(rows.len(), 4, "one row per type, not per message: {section:#?}");
    for row in &rows {
        assert_eq!(row.matches('|').count(), 5, "a broken row: {row}");
        assert!(row.contains("| http_error |"), "{row}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_that_times_out_on_every_attempt_fails_alone() {
    let dir = tempdir();
    let (mut model, _) = mock::model(Behaviour::Good);
    model.slow_first_call = Some((Duration::from_secs(5), usize::MAX));
    let args = ["--timeout", "1", "--attempts", "2", "--concurrency", "2", "--allow-shortfall"];
    let run = run_with(model, dir.path(), &args).await;
    run.assert_code(0);
    let timeouts: Vec<Value> =
        run.jsonl("rejects.jsonl").into_iter().filter(|r| str_field(r, "/kind") == "timeout").collect();
    assert!(!timeouts.is_empty(), "the slow call is a failure in rejects.jsonl");
    for r in &timeouts {
        assert_eq!(str_field(r, "/reason"), "no reply within 1 s (--timeout)");
    }
    assert!(!run.jsonl("queries.jsonl").is_empty(), "the other calls made the set");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_abandoned_on_a_timeout_is_counted_as_a_billing_estimate() {
    let dir = tempdir();
    let (mut model, _) = mock::model(Behaviour::Good);
    model.slow_first_call = Some((Duration::from_secs(3), 1));
    let server = mock::start(model).await;
    let args = ["--timeout", "1", "--max-tokens", "400", "--concurrency", "1"];
    let run = run_on(&server, dir.path(), &args).await;
    run.assert_code(0);
    let usage = &manifest(&run)["llm"]["usage"];
    assert_eq!(usage["abandoned"], 1, "{usage}");
    assert_eq!(usage["abandoned_completion_tokens"], 400, "max_tokens as the worst case: {usage}");
    let prompt = usage["abandoned_prompt_tokens"].as_u64().unwrap_or(0);
    assert!(prompt > 100, "the abandoned prompt is estimated: {usage}");
    let report = run.file("report.md");
    let line = report.lines().find(|l| l.contains("abandoned")).unwrap_or("");
    assert!(
        line.contains(&format!("1 attempt abandoned on a timeout (may still be billed): about {prompt} prompt + at most 400 completion tokens (estimate)")),
        "{report}"
    );
    assert_eq!(manifest(&run)["run"]["llm_network"]["paid"]["abandoned"], 1);
    // A warm rerun reports the same: the abandoned attempt is remembered with the reply.
    let rerun = run_on(&server, dir.path(), &args).await;
    rerun.assert_code(0);
    assert_eq!(rerun.file("report.md"), report);
    assert_eq!(manifest(&rerun)["run"]["llm_network"]["paid"]["abandoned"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_reply_is_an_answer_and_top_ups_stop_when_a_round_adds_nothing() {
    let dir = tempdir();
    let (model, counters) = mock::model(Behaviour::NothingFits);
    let run = run_with(model, dir.path(), &["--allow-shortfall", "--queries", "60"]).await;
    // Round 1 asks for the 60 queries and gets none; round 2 plans four times each type's
    // deficit (the least yield planning counts on is 1/4) and gets none: every type stalls,
    // so there is no round 3 (P(0 of 40 | 1/4) ≈ 1e-5).
    assert!(run.stderr.contains("top-ups stopped after round 2: it added 0 of"), "{}", run.stderr);
    let rejects = reasons(&run, "rejects.jsonl", "/reason");
    assert_eq!(
        rejects.keys().collect::<Vec<_>>(),
        ["the model found no query that fits these passages (an empty list)"],
        "no re-ask, no 'unusable reply'"
    );
    let m = manifest(&run);
    assert_eq!(m["rounds"], 2);
    // Every generation request was a first ask: one per call of the two rounds.
    let calls = counters.requests() - counters.judge_requests() - 1;
    assert_eq!(m["run"]["llm_network"]["requests"].as_u64(), Some(counters.requests() as u64));
    assert!(calls <= rejects.values().sum::<usize>(), "{calls} calls for {rejects:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_judge_is_the_gate_with_an_llm_and_the_round_trip_only_when_asked() {
    let dir = tempdir();
    let (model, judged) = mock::model(Behaviour::Good);
    let run = run_with(model, &dir.path().join("judge"), &[]).await;
    run.assert_code(0);
    let m = manifest(&run);
    assert_eq!(m["config"]["filter"]["gate"], "judge");
    assert!(
        run.file("report.md").contains("- gate: the judge (a source graded 2+, each hop 1+), on miss drop")
    );
    // The gate asked about the source of every direct and paraphrase query in the set.
    let answerable = run
        .jsonl("queries.jsonl")
        .iter()
        .filter(|q| matches!(str_field(q, "/metadata/type"), "direct" | "paraphrase"))
        .count();
    let (model, round_trip) = mock::model(Behaviour::Good);
    let run = run_with(model, &dir.path().join("rt"), &["--gate", "round-trip"]).await;
    run.assert_code(0);
    assert!(manifest(&run)["config"]["filter"].get("gate").is_none(), "the round trip is left unwritten");
    assert!(answerable > 0);
    assert!(
        judged.judge_requests() >= round_trip.judge_requests() + answerable,
        "{} judge requests with the gate, {} without, {answerable} answerable candidates",
        judged.judge_requests(),
        round_trip.judge_requests()
    );
}
