//! `build --pool-run`: the build, then the pool step with the user's own runs (their top
//! chunks listed in `qrels/pooled.tsv`, graded by the build's judge or the one-shot labeller),
//! the queries those of a build without them; and `report.md` says what the set measures.

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

/// `(query, chunk) → (grade, graded-by, runs)` of `qrels/pooled.tsv`.
fn pooled(text: &str) -> BTreeMap<(String, String), (String, String, String)> {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("query-id\tcorpus-id\tgrade\tgraded-by\truns"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 5, "{l:?}");
            ((f[0].to_owned(), f[1].to_owned()), (f[2].to_owned(), f[3].to_owned(), f[4].to_owned()))
        })
        .collect()
}

#[test]
fn a_build_with_runs_is_the_build_then_the_pool_step() {
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
    let mut args = vec!["--queries", "30", "--pool-run-depth", "3"];
    for r in &run_args {
        args.extend(["--pool-run", r.as_str()]);
    }
    let second = build(&dir.path().join("second"), &sample_corpus(), &args);
    second.assert_code(0);
    assert_eq!(second.file("queries.jsonl"), first.file("queries.jsonl"), "the runs change no query");
    assert!(second.stdout.contains("version 2 of "), "{}", second.stdout);

    let listed = pooled(&second.file("qrels/pooled.tsv"));
    let no_answer: BTreeSet<String> = second.file("no_answer.txt").lines().map(str::to_owned).collect();
    let mut checked = 0;
    for (run, tops) in &expected {
        for (query, top) in tops.iter().filter(|(q, _)| !no_answer.contains(*q)) {
            for chunk in top {
                let (grade, by, runs) = listed
                    .get(&(query.clone(), chunk.clone()))
                    .unwrap_or_else(|| panic!("{run}'s {chunk} not pooled for {query}"));
                assert!(runs.split(',').any(|r| r.starts_with(&format!("{run}:"))), "{runs}");
                assert!(matches!(by.as_str(), "source" | "one_shot" | "topic"), "{by}");
                assert!(matches!(grade.as_str(), "0" | "1" | "2" | "3"), "{grade}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 100, "only {checked} run chunks checked");
    // Offline, the one-shot labeller grades the new pairs; its non-relevant ones are rel-0 rows.
    assert!(listed.values().any(|(g, by, _)| by == "one_shot" && g == "0"));
    assert!(second.file("qrels.trec").lines().any(|l| l.ends_with(" 0")));
    let manifest: Value = serde_json::from_str(&second.file("manifest.json")).unwrap();
    let pools: Vec<(&str, u64)> = manifest["pools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| (p["run"].as_str().unwrap_or_default(), p["depth"].as_u64().unwrap_or_default()))
        .collect();
    assert_eq!(pools, [("dense.run", 3), ("splade.run", 3)]);
    assert_eq!(manifest["review"]["version"], 2);
    assert_eq!(manifest["config"]["pool_runs"]["files"].as_array().map(Vec::len), Some(0));
}

#[test]
fn a_bad_run_is_a_clear_error_and_the_built_set_is_kept() {
    let dir = tempdir();
    let missing = dir.path().join("missing.run");
    let failed = build(dir.path(), &sample_corpus(), &["--pool-run", path_str(&missing)]);
    failed.assert_code(2);
    assert!(failed.stderr.contains("missing.run: no such file (nothing was built)"), "{}", failed.stderr);
    assert!(!dir.path().join("out/queries.jsonl").exists());

    let run = dir.path().join("bad.run");
    fs_err::write(&run, "q1 Q0 no-such-chunk 1 1.0 x\n").unwrap();
    let failed = build(dir.path(), &sample_corpus(), &["--pool-run", path_str(&run)]);
    failed.assert_code(2);
    assert!(
        failed.stderr.contains("bad.run:1:")
            && failed.stderr.contains("neither a chunk id nor a document id")
            && failed.stderr.contains("qrelgen pool --set"),
        "{}",
        failed.stderr
    );
    assert!(dir.path().join("out/queries.jsonl").exists(), "the set is built");
    assert!(!dir.path().join("out/qrels/pooled.tsv").exists(), "and not pooled");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_judge_grades_what_a_run_pooled() {
    // One query from keys.md; the run ranks billing.md (which the round trip's pool of 1 does
    // not reach) first: the build's judge grades it (0: it shares no word) in the pool step.
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
    let listed = pooled(&second.file("qrels/pooled.tsv"));
    let billing: Vec<_> = listed.iter().filter(|((_, chunk), _)| chunk.starts_with("billing.md:")).collect();
    assert_eq!(billing.len(), 1, "{listed:?}");
    assert_eq!(
        billing[0].1,
        &("0".to_owned(), "judge".to_owned(), "mine:1".to_owned()),
        "graded 0 by the judge"
    );
    assert_eq!(
        counters.judge_requests(),
        3,
        "the source (the gate), the round trip's one pooled chunk, and the run's in the pool step"
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
    assert!(
        report.contains("qrelgen pool --set SET --run RUN"),
        "the warning says how to get a set that can compare"
    );
}
