//! `--json`: every command that prints a summary prints, with it, one JSON document on stdout
//! and nothing else there, its figures matching the files the command wrote; exit codes as
//! without it.

use super::{Run, build, path_str, qrelgen, sample_corpus, str_field, tempdir, write};
use serde_json::{Value, json};
use std::path::Path;

/// Runs `qrelgen ARGS…` for the set `out`.
fn cli(out: &Path, args: &[&str]) -> Run {
    let output = qrelgen(args);
    Run {
        out: out.to_owned(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The one JSON document `run` printed: the whole of stdout must parse as one value.
#[track_caller]
fn document(run: &Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| {
        panic!("stdout is not one JSON document ({e}):\n{}\nstderr:\n{}", run.stdout, run.stderr)
    })
}

/// Lines of a file of the set.
fn line_count(run: &Run, name: &str) -> u64 {
    run.file(name).lines().count() as u64
}

fn u64_at(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or_else(|| panic!("no count {pointer} in {value}"))
}

/// A set built from the sample corpus in `dir/out`.
fn built(dir: &Path) -> Run {
    let run = build(dir, &sample_corpus(), &["--quiet"]);
    run.assert_code(0);
    run
}

#[test]
fn build_json_counts_what_the_set_holds_and_keeps_progress_on_stderr() {
    let dir = tempdir();
    let run = build(dir.path(), &sample_corpus(), &["--json"]);
    run.assert_code(0);
    let doc = document(&run);
    assert_eq!(doc["outcome"], "built");
    assert_eq!(u64_at(&doc, "/queries"), line_count(&run, "queries.jsonl"));
    assert_eq!(u64_at(&doc, "/review_items"), line_count(&run, "review_queue.jsonl"));
    let by_type: u64 = doc["by_type"].as_object().into_iter().flatten().filter_map(|(_, n)| n.as_u64()).sum();
    assert_eq!(by_type, u64_at(&doc, "/queries"));
    let no_answer = run.file("no_answer.txt").lines().count() as u64;
    assert_eq!(u64_at(&doc, "/by_type/no_answer"), no_answer);
    assert_eq!(u64_at(&doc, "/counts/direct/requested"), 40, "the default mix of 100 queries");
    assert_eq!(str_field(&doc, "/report"), path_str(&run.out.join("report.md")));
    assert!(doc["llm"].is_null() && doc["version"].is_null(), "offline, a fresh folder: {doc}");
    assert_eq!(doc["shortfalls"], json!([]));
    assert!(run.stderr.contains("write: 100 queries"), "progress stays on stderr: {}", run.stderr);
}

#[test]
fn build_json_with_a_shortfall_lists_it_and_exits_1() {
    let dir = tempdir();
    let run =
        build(dir.path(), &sample_corpus(), &["--json", "--quiet", "--queries", "1000", "--max-rounds", "1"]);
    run.assert_code(1);
    let doc = document(&run);
    let shortfalls = doc["shortfalls"].as_array().cloned().unwrap_or_default();
    assert!(!shortfalls.is_empty(), "{doc}");
    for s in &shortfalls {
        assert!(u64_at(s, "/got") < u64_at(s, "/wanted"), "{s}");
    }
    assert!(run.stderr.contains("warning: shortfall:"), "{}", run.stderr);
}

#[test]
fn build_dry_run_json_is_a_range_of_calls() {
    let dir = tempdir();
    let endpoint = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--dry-run", "--json", "-q"];
    let run = build(dir.path(), &sample_corpus(), &endpoint);
    run.assert_code(0);
    let doc = document(&run);
    assert_eq!(doc["outcome"], "dry_run");
    assert!(u64_at(&doc, "/queries") >= 100, "{doc}");
    assert!(
        u64_at(&doc, "/low/calls") >= 1 && u64_at(&doc, "/low/calls") <= u64_at(&doc, "/high/calls"),
        "{doc}"
    );
    assert!(u64_at(&doc, "/low/prompt_tokens") <= u64_at(&doc, "/high/prompt_tokens"), "{doc}");
    assert!(!run.out.join("queries.jsonl").exists(), "a dry run writes no set");
}

#[test]
fn run_json_counts_the_queries_and_the_hits_written() {
    let dir = tempdir();
    let set = built(dir.path());
    let to = dir.path().join("bm25.run");
    let run =
        cli(&set.out, &["run", "--set", path_str(&set.out), "--to", path_str(&to), "--k", "5", "--json"]);
    run.assert_code(0);
    let doc = document(&run);
    assert_eq!(u64_at(&doc, "/queries"), line_count(&set, "queries.jsonl"));
    let lines = fs_err::read_to_string(&to).unwrap().lines().count() as u64;
    assert_eq!(u64_at(&doc, "/hits"), lines);
    assert_eq!(u64_at(&doc, "/k"), 5);
    assert_eq!(str_field(&doc, "/to"), path_str(&to));
    assert!(run.stderr.contains("next: qrelgen eval"), "{}", run.stderr);
}

#[test]
fn eval_json_is_the_eval_json_document() {
    let dir = tempdir();
    let set = built(dir.path());
    let to = dir.path().join("bm25.run");
    cli(&set.out, &["run", "--set", path_str(&set.out), "--to", path_str(&to), "-q"]).assert_code(0);
    let eval = cli(&set.out, &["eval", "--set", path_str(&set.out), "--run", path_str(&to), "--json"]);
    eval.assert_code(0);
    let doc = document(&eval);
    let file: Value = serde_json::from_str(&set.file("eval/eval.json")).unwrap();
    assert_eq!(doc, file, "stdout holds what eval.json holds");
    let runs = doc["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["name"], "bm25");
    let ndcg = runs[0]["means"]["ndcg@10"].as_f64().unwrap_or(f64::NAN);
    assert!((0.0..=1.0).contains(&ndcg), "{ndcg}");
    let table = cli(&set.out, &["eval", "--set", path_str(&set.out), "--run", path_str(&to)]);
    assert!(table.stdout.contains(&format!("{ndcg:.4}")), "the table shows the same mean:\n{}", table.stdout);
    let both = cli(
        &set.out,
        &["eval", "--set", path_str(&set.out), "--run", path_str(&to), "--json", "--per-query"],
    );
    both.assert_code(2);
}

#[test]
fn validate_json_lists_the_problems_the_text_lists_and_keeps_the_exit_code() {
    let dir = tempdir();
    let set = built(dir.path());
    let clean = cli(&set.out, &["validate", "--set", path_str(&set.out), "--json"]);
    clean.assert_code(0);
    let doc = document(&clean);
    assert_eq!((doc["valid"].as_bool(), u64_at(&doc, "/count")), (Some(true), 0));

    let trec = set.file("qrels.trec");
    let first = trec.lines().next().unwrap_or_default().to_owned();
    write(&set.out.join("qrels.trec"), format!("{trec}{first}\n"));
    let text = cli(&set.out, &["validate", "--set", path_str(&set.out)]);
    text.assert_code(1);
    let json = cli(&set.out, &["validate", "--set", path_str(&set.out), "--json"]);
    json.assert_code(1);
    let doc = document(&json);
    assert_eq!(doc["valid"], false);
    let problems = doc["problems"].as_array().cloned().unwrap_or_default();
    assert_eq!(u64_at(&doc, "/count"), problems.len() as u64);
    assert_eq!(problems.len(), text.stdout.lines().count(), "{}", text.stdout);
    let line = trec.lines().count() as u64 + 1;
    assert!(
        problems
            .iter()
            .any(|p| p["line"].as_u64() == Some(line) && str_field(p, "/file").ends_with("qrels.trec")),
        "the duplicate row, at its line: {doc}"
    );
}

#[test]
fn refresh_json_counts_the_changes_and_the_new_version() {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    for entry in
        walkdir::WalkDir::new(sample_corpus()).into_iter().flatten().filter(|e| e.file_type().is_file())
    {
        let relative = entry.path().strip_prefix(sample_corpus()).unwrap();
        write(&corpus.join(relative), fs_err::read(entry.path()).unwrap());
    }
    let set = build(dir.path(), &corpus, &["--quiet"]);
    set.assert_code(0);
    let refresh = |extra: &[&str]| {
        let mut args =
            vec!["refresh", "--set", path_str(&set.out), "--corpus", path_str(&corpus), "--json", "-q"];
        args.extend_from_slice(extra);
        cli(&set.out, &args)
    };
    let same = refresh(&[]);
    same.assert_code(0);
    let doc = document(&same);
    assert_eq!((doc["nothing_changed"].as_bool(), doc["version"].is_null()), (Some(true), true), "{doc}");

    write(
        &corpus.join("billing/refund-windows.md"),
        "# Refund windows\n\nAnnual plans bought through the reseller portal can be refunded within \
         45 days of purchase when fewer than three seats were ever activated on the workspace.\n",
    );
    let dry = refresh(&["--dry-run"]);
    dry.assert_code(0);
    let doc = document(&dry);
    assert_eq!((doc["dry_run"].as_bool(), doc["version"].is_null()), (Some(true), true), "{doc}");
    assert!(u64_at(&doc, "/chunks/added") >= 1, "{doc}");

    let changed = refresh(&[]);
    changed.assert_code(0);
    let doc = document(&changed);
    assert_eq!(u64_at(&doc, "/version"), 2);
    assert!(u64_at(&doc, "/chunks/added") >= 1, "{doc}");
    assert_eq!(u64_at(&doc, "/in_set"), line_count(&set, "queries.jsonl"));
    assert_eq!(str_field(&doc, "/changelog"), path_str(&set.out.join("refresh/changelog.jsonl")));
    let map = set.file("refresh/chunk_map.tsv");
    let added = map.lines().filter(|l| l.split('\t').nth(2) == Some("added")).count() as u64;
    assert_eq!(u64_at(&doc, "/chunks/added"), added, "{map}");
}

#[test]
fn review_apply_json_says_what_the_decisions_did() {
    let dir = tempdir();
    let set = built(dir.path());
    let queue = set.jsonl("review_queue.jsonl");
    let (first, second) = (str_field(&queue[0], "/query_id"), str_field(&queue[1], "/query_id"));
    let decisions = dir.path().join("ann.jsonl");
    let lines = [
        json!({"query_id": first, "decision": "reject", "reject_reason": "off topic"}),
        json!({"query_id": second, "decision": "accept"}),
    ];
    write(&decisions, lines.iter().map(|l| l.to_string() + "\n").collect::<String>());
    let apply = || {
        cli(
            &set.out,
            &["review", "apply", "--set", path_str(&set.out), "--decisions", path_str(&decisions), "--json"],
        )
    };
    let applied = apply();
    applied.assert_code(0);
    let doc = document(&applied);
    assert_eq!(doc["outcome"], "applied");
    assert_eq!(u64_at(&doc, "/version"), 2);
    assert_eq!((u64_at(&doc, "/counts/accepted"), u64_at(&doc, "/counts/rejected")), (1, 1));
    assert_eq!(u64_at(&doc, "/counts/queries"), line_count(&set, "queries.jsonl"));
    assert_eq!(str_field(&doc, "/kept"), path_str(&set.out.join("versions/v1")));

    let again = apply();
    again.assert_code(0);
    let doc = document(&again);
    assert_eq!((doc["outcome"].as_str(), u64_at(&doc, "/version")), (Some("already_applied"), 2));

    let status = cli(&set.out, &["review", "status", "--set", path_str(&set.out), "--json"]);
    status.assert_code(0);
    let doc = document(&status);
    let in_set: u64 =
        doc["types"].as_array().into_iter().flatten().filter_map(|t| t["in_set"].as_u64()).sum();
    assert_eq!(in_set, line_count(&set, "versions/v1/queries.jsonl"), "the strata are version 1's");
}

#[test]
fn pool_json_has_one_record_per_run_and_the_new_version() {
    let dir = tempdir();
    let set = built(dir.path());
    let to = dir.path().join("bm25.run");
    cli(&set.out, &["run", "--set", path_str(&set.out), "--to", path_str(&to), "--k", "10", "-q"])
        .assert_code(0);
    let args =
        ["pool", "--set", path_str(&set.out), "--run", path_str(&to), "--judge", "one-shot", "--json", "-q"];
    let pooled = cli(&set.out, &args);
    pooled.assert_code(0);
    let doc = document(&pooled);
    assert_eq!(u64_at(&doc, "/version"), 2);
    let runs = doc["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["run"], "bm25.run");
    assert_eq!(u64_at(&runs[0], "/new_pairs"), u64_at(&doc, "/new_pairs"));
    let graded: u64 = runs[0]["grades"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(grade, _)| grade.as_str() != "unjudged")
        .filter_map(|(_, n)| n.as_u64())
        .sum();
    assert!(u64_at(&doc, "/graded") <= graded, "{doc}");
    assert!(0 < u64_at(&doc, "/relevant") && u64_at(&doc, "/relevant") <= u64_at(&doc, "/graded"), "{doc}");
    let manifest: Value = serde_json::from_str(&set.file("manifest.json")).unwrap();
    assert_eq!(manifest["pools"][0]["new_pairs"], runs[0]["new_pairs"], "{}", manifest["pools"]);

    let again = cli(&set.out, &args);
    again.assert_code(0);
    let doc = document(&again);
    assert!(doc["version"].is_null() && u64_at(&doc, "/new_pairs") == 0, "nothing new: {doc}");
}
