//! `--pool-run`: the top chunks of the user's own runs join each query's pool, reach the review
//! queue and the judge, and are listed in `qrels/pool.tsv`; and `report.md` says what the set
//! measures.

use super::controls::pool_corpus;
use super::llm::run_with;
use super::mock::{self, Behaviour};
use super::{build, path_str, sample_corpus, str_field, tempdir};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// A run that ranks, for every query of `queries`, `depth + 1` chunks of `corpus_ids` picked
/// from the end of the corpus (far from BM25's pool), the first by document id, the rest by
/// chunk id; returns the run and, per query, the chunk ids its top `depth` stand for.
fn write_run(
    path: &Path,
    queries: &[Value],
    corpus: &[Value],
    depth: usize,
    offset: usize,
) -> BTreeMap<String, Vec<String>> {
    let mut text = String::new();
    let mut expected = BTreeMap::new();
    for (i, q) in queries.iter().enumerate() {
        let id = str_field(q, "/_id");
        let picks: Vec<&Value> =
            (0..=depth).map(|k| &corpus[corpus.len() - 1 - (i * 3 + k + offset) % corpus.len()]).collect();
        let mut top = Vec::new();
        for (rank, chunk) in picks.iter().enumerate() {
            let chunk_id = str_field(chunk, "/_id");
            if rank == 0 {
                // A document id stands for all its chunks, at its rank.
                let doc = str_field(chunk, "/metadata/doc_id");
                let _ = writeln!(text, "{id} Q0 {doc} 1 9.0 mine");
                let chunks = corpus.iter().filter(|c| str_field(c, "/metadata/doc_id") == doc);
                top.extend(chunks.map(|c| str_field(c, "/_id").to_owned()));
            } else {
                let _ = writeln!(text, "{id} Q0 {chunk_id} {} {}.0 mine", rank + 1, 9 - rank);
                top.push(chunk_id.to_owned());
            }
        }
        top.truncate(depth);
        expected.insert(id.to_owned(), top);
    }
    fs_err::write(path, text).unwrap();
    expected
}

/// Every chunk pooled for a candidate (`candidates.jsonl` lines), with the sources that pooled it.
fn pooled(items: &[Value]) -> BTreeMap<(String, String), Vec<String>> {
    let mut out = BTreeMap::new();
    for item in items {
        let query = str_field(item, "/id").to_owned();
        for p in item.pointer("/pool").and_then(Value::as_array).into_iter().flatten() {
            let by: Vec<String> = p["pooled_by"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            out.insert((query.clone(), str_field(p, "/chunk_id").to_owned()), by);
        }
    }
    out
}

#[test]
fn every_runs_top_k_is_pooled_listed_and_queued_for_review() {
    let dir = tempdir();
    let first = build(&dir.path().join("first"), &sample_corpus(), &["--queries", "30"]);
    first.assert_code(0);
    let queries = first.jsonl("queries.jsonl");
    let corpus = first.jsonl("corpus.jsonl");
    let runs = [("dense.run", 0), ("splade.run", 7)];
    let expected: Vec<(String, BTreeMap<String, Vec<String>>)> = runs
        .iter()
        .map(|(name, offset)| {
            (name.replace(".run", ""), write_run(&dir.path().join(name), &queries, &corpus, 3, *offset))
        })
        .collect();
    let run_args: Vec<String> = runs.iter().map(|(n, _)| path_str(&dir.path().join(n)).to_owned()).collect();
    let mut args = vec!["--queries", "30", "--review-size", "30", "--pool-run-depth", "3"];
    for r in &run_args {
        args.extend(["--pool-run", r.as_str()]);
    }
    let second = build(&dir.path().join("second"), &sample_corpus(), &args);
    second.assert_code(0);
    assert_eq!(second.file("queries.jsonl"), first.file("queries.jsonl"), "same settings, same queries");

    let candidates: Vec<Value> =
        second.jsonl("candidates.jsonl").into_iter().filter(|c| c["status"] != "dropped").collect();
    let in_pool = pooled(&candidates);
    let queue = second.jsonl("review_queue.jsonl");
    let queued: BTreeSet<&str> = queue.iter().map(|i| str_field(i, "/query_id")).collect();
    assert_eq!(queued.len(), queries.len(), "the whole set is queued");
    let mut in_review = BTreeSet::new();
    for item in &queue {
        let q = str_field(item, "/query_id");
        let shown = item.pointer("/pool").and_then(Value::as_array).into_iter().flatten();
        in_review.extend(shown.map(|p| (q.to_owned(), str_field(p, "/chunk_id").to_owned())));
        let sources = item.pointer("/sources").and_then(Value::as_array).into_iter().flatten();
        in_review.extend(sources.map(|s| (q.to_owned(), str_field(s, "/chunk_id").to_owned())));
    }
    let pool_tsv = second.file("qrels/pool.tsv");
    let listed: BTreeSet<(&str, &str, &str)> = pool_tsv
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0], f[1], f[2])
        })
        .collect();
    assert!(pool_tsv.starts_with("query-id\tcorpus-id\tpooled-by\trank\tgrade\n"));
    let mut checked = 0;
    for (run, tops) in &expected {
        for (query, top) in tops {
            let sources: Vec<&str> = candidates
                .iter()
                .find(|c| str_field(c, "/id") == query)
                .and_then(|c| c["sources"].as_array())
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for chunk in top {
                let key = (query.clone(), chunk.clone());
                assert!(in_review.contains(&key), "{run}'s {chunk} for {query} is not in the review queue");
                if sources.contains(&chunk.as_str()) {
                    continue; // already relevant: shown as a source, not pooled again
                }
                let by =
                    in_pool.get(&key).unwrap_or_else(|| panic!("{run}'s {chunk} not pooled for {query}"));
                assert!(by.iter().any(|s| s.starts_with(&format!("{run}:"))), "{by:?}");
                assert!(
                    listed.contains(&(query.as_str(), chunk.as_str(), run.as_str())),
                    "{query} {chunk} {run}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 150, "only {checked} run chunks checked");
    // The round trip's own pool is labelled as such; the manifest records the runs.
    assert!(in_pool.values().flatten().any(|s| s.starts_with("round_trip:")));
    let manifest: Value = serde_json::from_str(&second.file("manifest.json")).unwrap();
    assert_eq!(manifest["config"]["pool_runs"]["depth"], 3);
    assert_eq!(manifest["config"]["pool_runs"]["files"].as_array().map(Vec::len), Some(2));
    let report = second.file("report.md");
    assert!(report.contains("runs pooled: dense (") && report.contains("splade ("), "{report}");
}

#[test]
fn a_bad_run_is_a_clear_error_and_writes_nothing() {
    let dir = tempdir();
    let run = dir.path().join("bad.run");
    fs_err::write(&run, "q1 Q0 no-such-chunk 1 1.0 x\n").unwrap();
    let failed = build(dir.path(), &sample_corpus(), &["--pool-run", path_str(&run)]);
    failed.assert_code(2);
    assert!(
        failed.stderr.contains("bad.run:1:")
            && failed.stderr.contains("neither a chunk id nor a document id"),
        "{}",
        failed.stderr
    );
    assert!(!dir.path().join("out/queries.jsonl").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_judge_grades_what_a_run_pooled() {
    // One query from keys.md; the run ranks billing.md (which the round trip's pool of 1 does
    // not reach) first: the judge grades it (0: it shares no word) besides the first pooled.
    let dir = tempdir();
    let corpus = pool_corpus(dir.path());
    let args = ["--corpus", path_str(&corpus), "--queries", "1", "--mix", "direct=1", "--per-doc-cap", "1"];
    let (model, _) = mock::model(Behaviour::Good);
    let first = run_with(model, &dir.path().join("first"), &args).await;
    first.assert_code(0);
    let id = str_field(&first.jsonl("queries.jsonl")[0], "/_id").to_owned();
    let run = dir.path().join("mine.run");
    fs_err::write(&run, format!("{id} Q0 billing.md 1 1.0 mine\n")).unwrap();
    let mut pooled_args = args.to_vec();
    pooled_args.extend(["--judge-pool", "1", "--pool-depth", "1", "--pool-run", path_str(&run)]);
    let (model, counters) = mock::model(Behaviour::Good);
    let second = run_with(model, &dir.path().join("second"), &pooled_args).await;
    second.assert_code(0);
    let pool_tsv = second.file("qrels/pool.tsv");
    let billing: Vec<&str> = pool_tsv.lines().filter(|l| l.contains("billing.md")).collect();
    assert_eq!(billing.len(), 1, "{pool_tsv}");
    assert!(billing[0].ends_with("\tmine\t1\t0"), "graded 0 by the judge: {pool_tsv}");
    assert_eq!(
        counters.judge_requests(),
        3,
        "the source (the gate), the round trip's one pooled chunk and the run's"
    );
    let provenance = second.file("qrels/provenance.tsv");
    assert!(
        provenance.lines().any(|l| l.contains("billing.md") && l.ends_with("\t0\tjudge")),
        "{provenance}"
    );
}

#[test]
fn the_report_says_what_the_set_measures() {
    let dir = tempdir();
    let topical = build(&dir.path().join("topical"), &sample_corpus(), &["--queries", "40"]);
    topical.assert_code(0);
    let report = topical.file("report.md");
    assert!(report.contains("## What this set measures"), "{report}");
    assert!(report.contains("| queries whose sources are the only chunks holding all their words |"));
    assert!(
        report.contains("| relevant rows by provenance | source ") && report.contains("topic "),
        "{report}"
    );
    assert!(!report.contains("known-item"), "{report}");
    let known =
        build(&dir.path().join("known"), &sample_corpus(), &["--queries", "40", "--topic-labels", "0"]);
    known.assert_code(0);
    let report = known.file("report.md");
    assert!(report.contains("**This is a known-item"), "{report}");
    assert!(report.contains("--pool-run RUN"), "the warning says how to get a set that can compare");
}
