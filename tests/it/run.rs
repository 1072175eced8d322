//! `qrelgen run --corpus --queries`: BM25 over a collection the user brought (BEIR format, English
//! and Chinese), named by document ids, then `qrelgen eval --qrels` on it.

use super::{path_str, qrelgen, tempdir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

fn collection(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

#[track_caller]
fn ok(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

/// `qrelgen run --corpus … --queries … --to run ARGS…` on a fixture collection; the run's lines
/// as `(query, doc, rank)`.
fn run_on(name: &str, run: &Path, args: &[&str]) -> Vec<(String, String, usize)> {
    let dir = collection(name);
    let (corpus, queries) = (dir.join("corpus.jsonl"), dir.join("queries.jsonl"));
    let mut all = vec!["run", "--corpus", path_str(&corpus), "--queries", path_str(&queries)];
    all.extend(["--to", path_str(run), "--quiet"]);
    all.extend_from_slice(args);
    ok(&qrelgen(&all));
    fs_err::read_to_string(run)
        .unwrap()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!((f.len(), f[1], f[5]), (6, "Q0", "qrelgen-bm25"), "{line}");
            (f[0].to_owned(), f[2].to_owned(), f[3].parse().unwrap())
        })
        .collect()
}

/// The top document of each query.
fn firsts(rows: &[(String, String, usize)]) -> Vec<(&str, &str)> {
    rows.iter().filter(|r| r.2 == 1).map(|r| (r.0.as_str(), r.1.as_str())).collect()
}

#[test]
fn a_beir_collection_gets_a_document_run_that_eval_scores() {
    let dir = tempdir();
    let run = dir.path().join("bm25.run");
    let rows = run_on("beir-en", &run, &["--k", "3"]);
    // Each query names its document; q4's answer is in the second chunk of the longest document.
    assert_eq!(
        firsts(&rows),
        [
            ("q1", "doc-tides"),
            ("q2", "doc-sourdough"),
            ("q3", "doc-volcano"),
            ("q4", "doc-history"),
            ("q5", "doc-bicycle")
        ]
    );
    for q in ["q1", "q2", "q3", "q4", "q5"] {
        let docs: Vec<&str> = rows.iter().filter(|r| r.0 == q).map(|r| r.1.as_str()).collect();
        assert!(docs.len() <= 3, "{q}: {docs:?}");
        let mut unique = docs.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), docs.len(), "{q} names a document twice: {docs:?}");
        assert!(docs.iter().all(|d| d.starts_with("doc-") && !d.contains(':')), "chunk ids in {docs:?}");
    }
    let qrels = collection("beir-en").join("qrels/test.tsv");
    let out = dir.path().join("eval");
    let stdout = ok(&qrelgen(&[
        "eval",
        "--qrels",
        path_str(&qrels),
        "--run",
        path_str(&run),
        "--out",
        path_str(&out),
    ]));
    assert!(stdout.contains("5 queries: 5 answerable"), "{stdout}");
    let eval: Value = serde_json::from_str(&fs_err::read_to_string(out.join("eval.json")).unwrap()).unwrap();
    let means = &eval["runs"][0]["means"];
    assert_eq!(means["ndcg@10"].as_f64(), Some(1.0), "{means}");
    assert_eq!(means["mrr@10"].as_f64(), Some(1.0), "{means}");
}

#[test]
fn a_chinese_collection_is_segmented_and_the_kept_index_is_reused() {
    let dir = tempdir();
    let (run, index) = (dir.path().join("zh.run"), dir.path().join("index"));
    let rows = run_on("beir-zh", &run, &["--index", path_str(&index)]);
    assert_eq!(firsts(&rows), [("q1", "zh-firewall"), ("q2", "zh-backup"), ("q3", "zh-tea")]);
    assert!(index.join("chunks.jsonl").is_file() && index.join("index").is_dir());
    let dir_c = collection("beir-zh");
    let again = qrelgen(&[
        "run",
        "--corpus",
        path_str(&dir_c.join("corpus.jsonl")),
        "--queries",
        path_str(&dir_c.join("queries.jsonl")),
        "--to",
        path_str(&run),
        "--index",
        path_str(&index),
    ]);
    ok(&again);
    assert!(String::from_utf8_lossy(&again.stderr).contains("index reused"));
    // Bigrams instead of jieba: a new index, the same top documents.
    let bigram = dir.path().join("bigram.run");
    let rows = run_on("beir-zh", &bigram, &["--index", path_str(&index), "--cjk-segmenter", "bigram"]);
    assert_eq!(firsts(&rows), [("q1", "zh-firewall"), ("q2", "zh-backup"), ("q3", "zh-tea")]);
}

#[test]
fn the_index_folder_is_never_a_set_nor_someone_else_s() {
    let dir = tempdir();
    let corpus = super::sample_corpus();
    let built = super::build(dir.path(), &corpus, &["--queries", "4", "--quiet"]);
    built.assert_code(0);
    let c = collection("beir-en");
    let attempt = |index: &Path| {
        qrelgen(&[
            "run",
            "--corpus",
            path_str(&c.join("corpus.jsonl")),
            "--queries",
            path_str(&c.join("queries.jsonl")),
            "--to",
            path_str(&dir.path().join("x.run")),
            "--index",
            path_str(index),
        ])
    };
    let inside = attempt(&built.out.join("tmp-index"));
    assert_eq!(inside.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&inside.stderr).contains("inside the test set"));
    assert!(!built.out.join("tmp-index").exists());
    let mine = dir.path().join("mine");
    fs_err::create_dir_all(&mine).unwrap();
    fs_err::write(mine.join("notes.txt"), "keep").unwrap();
    let theirs = attempt(&mine);
    assert_eq!(theirs.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&theirs.stderr).contains("did not write"));
    assert_eq!(fs_err::read_dir(&mine).unwrap().count(), 1);
    assert!(!dir.path().join("x.run").exists());
}
