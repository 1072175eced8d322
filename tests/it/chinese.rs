//! Chinese corpora through the whole pipeline: the bundled Chinese sample corpus, with the
//! offline generator and with the LLM generator against the mock.

use super::mock::{self, Behaviour};
use super::{Run, path_str, qrelgen_with_env, str_field, tempdir};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn chinese_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpora/haigang-zh")
}

fn run(out: &Path, args: &[&str]) -> Run {
    let corpus = chinese_corpus();
    let mut all = vec!["build", "--corpus", path_str(&corpus), "--out", path_str(out)];
    all.extend_from_slice(args);
    let output = qrelgen_with_env(&all, &[]);
    Run {
        out: out.to_owned(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn is_chinese(text: &str) -> bool {
    text.chars().filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c)).count() >= 2
}

/// The median BM25 rank of the sources of the direct queries.
fn median_direct_rank(queries: &[Value]) -> u64 {
    let mut ranks: Vec<u64> = queries
        .iter()
        .filter(|q| str_field(q, "/metadata/type") == "direct")
        .filter_map(|q| q.pointer("/metadata/ranks/0").and_then(Value::as_u64))
        .collect();
    ranks.sort_unstable();
    ranks.get(ranks.len() / 2).copied().unwrap_or(u64::MAX)
}

#[test]
fn the_offline_generator_writes_chinese_queries_that_find_their_chunks() {
    let dir = tempdir();
    let run = run(dir.path(), &[]);
    run.assert_code(0);
    let manifest: Value = serde_json::from_str(&run.file("manifest.json")).unwrap();
    assert_eq!(manifest["language"], "zh");
    assert_eq!(manifest["filter_checks"]["language"], "zh", "the filter checked the corpus language");
    assert_eq!(manifest["corpus"]["languages"]["zh"], 20);
    let queries = run.jsonl("queries.jsonl");
    assert_eq!(queries.len(), 100);
    for q in &queries {
        assert!(is_chinese(str_field(q, "/text")), "not Chinese: {q}");
        assert_eq!(str_field(q, "/metadata/language"), "zh");
    }
    assert_eq!(median_direct_rank(&queries), 1);
    // Chinese chunks are sized in characters: none over the Chinese default of 400.
    for chunk in run.jsonl("corpus.jsonl") {
        assert!(str_field(&chunk, "/text").chars().count() <= 400);
    }
}

#[test]
fn the_english_terms_of_chinese_text_are_indexed_too() {
    // Queries in English drawn from the Chinese chunks' Latin terms (commands, product names).
    let dir = tempdir();
    let run =
        run(dir.path(), &["--language", "en", "--queries", "20", "--mix", "direct=1", "--allow-shortfall"]);
    run.assert_code(0);
    let queries = run.jsonl("queries.jsonl");
    assert!(queries.len() >= 5, "only {} English queries", queries.len());
    assert!(queries.iter().all(|q| !is_chinese(str_field(q, "/text"))));
    assert!(median_direct_rank(&queries) <= 3, "topical queries find their chunks near the top");
}

#[test]
fn bigram_segmentation_works_too() {
    let dir = tempdir();
    let run = run(dir.path(), &["--cjk-segmenter", "bigram", "--queries", "40"]);
    run.assert_code(0);
    assert_eq!(median_direct_rank(&run.jsonl("queries.jsonl")), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_llm_generator_is_asked_in_chinese_and_keeps_chinese_queries() {
    let dir = tempdir();
    let (model, _) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let server_uri = server.uri();
    let first = server.received_requests();
    let out = dir.path().to_owned();
    let run = tokio::task::spawn_blocking(move || {
        let base_url = format!("{server_uri}/v1");
        run(
            &out,
            &["--generator", "llm", "--base-url", &base_url, "--model", "mock-model", "--queries", "12"],
        )
    })
    .await
    .unwrap();
    drop(first);
    run.assert_code(0);
    let queries = run.jsonl("queries.jsonl");
    assert_eq!(queries.len(), 12);
    assert!(queries.iter().all(|q| is_chinese(str_field(q, "/text"))));
    assert_eq!(median_direct_rank(&queries), 1);
    let requests = server.received_requests().await.unwrap_or_default();
    let asked_in_chinese =
        requests.iter().filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok()).any(|b| {
            b.pointer("/messages/1/content")
                .and_then(Value::as_str)
                .is_some_and(|u| u.contains("请写出以下查询"))
        });
    assert!(asked_in_chinese, "the Chinese prompts were not used");
    assert!(requests.iter().any(|r| String::from_utf8_lossy(&r.body).contains("Simplified Chinese")));
}
