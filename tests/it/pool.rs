//! `qrelgen pool`: runs pooled into a built set as its next version, the new pairs graded by the
//! one-shot labeller, the LLM judge (against the mock) or nobody; human judgments kept; judged
//! non-relevant pairs in the qrels; `eval` refusing to rank a run the set did not pool; `review
//! status` checking the machine grades against the reviewers'.

use super::llm::run_on;
use super::mock::{self, Behaviour};
use super::{Run, build, path_str, qrelgen, qrelgen_with_env, sample_corpus, tempdir, write};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// Runs the binary with `args`, as a [`Run`] of the set in `set`.
fn cli(set: &Path, args: &[&str]) -> Run {
    let output = qrelgen(args);
    Run {
        out: set.to_owned(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The set's BM25 run (top 20) and a second run made of its ranks 11–20 (another system's finds).
fn runs(set: &Run, dir: &Path) -> (String, String) {
    let bm25 = dir.join("bm25.run");
    cli(&set.out, &["run", "--set", path_str(&set.out), "--to", path_str(&bm25), "--k", "20", "-q"])
        .assert_code(0);
    let deep: String = fs_err::read_to_string(&bm25)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let rank: u32 = f[3].parse().unwrap();
            (rank > 10).then(|| format!("{} Q0 {} {} {} deep\n", f[0], f[2], rank - 10, f[4]))
        })
        .collect();
    let other = dir.join("deep.run");
    write(&other, deep);
    (path_str(&bm25).to_owned(), path_str(&other).to_owned())
}

fn pool(set: &Run, runs: &[&str], judge: &str) -> Run {
    // Depth 10: the deep run's pairs lie beyond the BM25 run's pool.
    let mut args = vec!["pool", "--set", path_str(&set.out), "--judge", judge, "--depth", "10"];
    for run in runs {
        args.extend_from_slice(&["--run", run]);
    }
    cli(&set.out, &args)
}

/// `qrels/provenance.tsv` as (query, chunk) → (grade, provenance).
fn provenance(set: &Run) -> BTreeMap<(String, String), (u8, String)> {
    set.file("qrels/provenance.tsv")
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            ((f[0].to_owned(), f[1].to_owned()), (f[2].parse().unwrap(), f[3].to_owned()))
        })
        .collect()
}

/// `qrels/pooled.tsv` rows as fields.
fn pooled(set: &Run) -> Vec<Vec<String>> {
    let text = set.file("qrels/pooled.tsv");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("query-id\tcorpus-id\tgrade\tgraded-by\truns"));
    lines.map(|l| l.split('\t').map(str::to_owned).collect()).collect()
}

fn manifest(set: &Run) -> Value {
    serde_json::from_str(&set.file("manifest.json")).unwrap()
}

#[test]
fn a_one_shot_pool_is_the_next_version_and_a_rerun_adds_nothing() {
    let dir = tempdir();
    let set = build(dir.path(), &sample_corpus(), &[]);
    set.assert_code(0);
    let (bm25, deep) = runs(&set, dir.path());
    let before = provenance(&set);
    let queries = set.file("queries.jsonl");
    let trec_before = set.trec();
    assert!(trec_before.iter().all(|r| r.2 >= 1), "a build's qrels hold relevant rows only");

    let pooled_run = pool(&set, &[&bm25, &deep], "one-shot");
    pooled_run.assert_code(0);
    assert!(pooled_run.stdout.contains("version 2 of"), "{}", pooled_run.stdout);
    assert_eq!(set.file("queries.jsonl"), queries, "queries untouched");
    assert_eq!(set.file("versions/v1/queries.jsonl"), queries, "version 1 kept");
    let after = provenance(&set);
    for (pair, row) in &before {
        assert_eq!(after.get(pair), Some(row), "every earlier judgment kept as it was");
    }
    let one_shot: Vec<_> = after.iter().filter(|(_, (_, p))| p == "one_shot").collect();
    assert!(one_shot.iter().any(|(_, (g, _))| *g == 1) && one_shot.iter().any(|(_, (g, _))| *g == 0));
    // Judged non-relevant pairs are rel-0 rows of queries that have a relevant chunk.
    let trec = set.trec();
    let zeros: Vec<_> = trec.iter().filter(|r| r.2 == 0).collect();
    assert!(!zeros.is_empty(), "rel-0 rows in qrels.trec");
    for zero in &zeros {
        assert!(trec.iter().any(|r| r.0 == zero.0 && r.2 >= 1), "{} has a relevant chunk", zero.0);
    }
    let no_answer = set.file("no_answer.txt");
    assert!(!trec.iter().any(|r| no_answer.lines().any(|q| q == r.0)), "no_answer queries get no rows");

    // Every pooled pair names the runs and ranks that pooled it, and who graded it.
    let rows = pooled(&set);
    assert!(rows.iter().any(|r| r[4].contains("bm25:1")));
    assert!(rows.iter().any(|r| r[4].starts_with("deep:")));
    for r in &rows {
        let judged = after.get(&(r[0].clone(), r[1].clone()));
        match judged {
            Some((grade, by)) => assert_eq!((&r[2], &r[3]), (&grade.to_string(), by), "{r:?}"),
            None => assert_eq!((r[2].as_str(), r[3].as_str()), ("", ""), "{r:?}"),
        }
    }
    let records = manifest(&set)["pools"].as_array().unwrap().clone();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["run"], "bm25.run");
    assert_eq!(records[0]["judge"], "one_shot");
    assert_eq!(records[0]["version"], 2);
    let digest = blake3::hash(&fs_err::read(&bm25).unwrap()).to_hex().to_string();
    assert_eq!(records[0]["blake3"], digest.as_str());
    assert_eq!(manifest(&set)["review"]["history"][0]["made_by"], "pool");
    // The review queue holds a sample of the new machine-graded pairs, their grade hidden.
    let queue = set.jsonl("review_queue.jsonl");
    let queued: Vec<&Value> = queue
        .iter()
        .flat_map(|item| item["pool"].as_array().into_iter().flatten())
        .filter(|c| {
            c["pooled_by"]
                .as_array()
                .is_some_and(|by| by.iter().any(|s| s.as_str().unwrap().starts_with("deep:")))
        })
        .collect();
    assert!(!queued.is_empty(), "deep's pairs are sampled for review");
    assert!(queued.iter().all(|c| c.get("grade").is_none()), "the machine grade is hidden");
    // … in the export too: the machine grade column of a queued pooled pair is empty.
    let exported = dir.path().join("queue.jsonl");
    let export =
        ["review", "export", "--set", path_str(&set.out), "--format", "jsonl", "--to", path_str(&exported)];
    cli(&set.out, &export).assert_code(0);
    let machine: BTreeMap<(String, String), String> = pooled(&set)
        .into_iter()
        .filter(|r| r[3] == "one_shot")
        .map(|r| ((r[0].clone(), r[1].clone()), r[2].clone()))
        .collect();
    let mut hidden = 0;
    for line in fs_err::read_to_string(&exported).unwrap().lines() {
        let item: Value = serde_json::from_str(line).unwrap();
        let query = item["query_id"].as_str().unwrap().to_owned();
        for c in item["pool"].as_array().into_iter().flatten() {
            if machine.contains_key(&(query.clone(), c["chunk_id"].as_str().unwrap().to_owned())) {
                assert!(c.get("machine_grade").is_none_or(Value::is_null), "{c}");
                hidden += 1;
            }
        }
    }
    assert!(hidden > 0);
    cli(&set.out, &["validate", "--set", path_str(&set.out)]).assert_code(0);

    let manifest_bytes = set.file("manifest.json");
    let again = pool(&set, &[&bm25, &deep], "one-shot");
    again.assert_code(0);
    assert!(again.stdout.starts_with("nothing new"), "{}", again.stdout);
    assert_eq!(set.file("manifest.json"), manifest_bytes, "nothing written");
    assert!(!set.out.join("versions/v2").exists());
}

#[test]
fn unjudged_pools_are_graded_by_a_later_pool_and_human_grades_are_never_regraded() {
    let dir = tempdir();
    let set = build(dir.path(), &sample_corpus(), &[]);
    set.assert_code(0);
    let (bm25, deep) = runs(&set, dir.path());
    // A reviewer grades one of deep's finds before any pool.
    let first = fs_err::read_to_string(&deep).unwrap();
    let line: Vec<&str> = first.lines().next().unwrap().split(' ').collect();
    let (query, chunk) = (line[0].to_owned(), line[2].to_owned());
    let decisions = dir.path().join("ann.jsonl");
    write(
        &decisions,
        format!("{}\n", json!({"query_id": query, "reviewer": "ann", "add": format!("{chunk}=2")})),
    );
    cli(&set.out, &["review", "apply", "--set", path_str(&set.out), "--decisions", path_str(&decisions)])
        .assert_code(0);
    let human = provenance(&set);
    assert_eq!(human.get(&(query.clone(), chunk.clone())), Some(&(2, "human".to_owned())));

    pool(&set, &[&bm25, &deep], "none").assert_code(0);
    assert_eq!(provenance(&set), human, "nothing graded: the judgments are version 2's");
    let rows = pooled(&set);
    assert!(rows.iter().any(|r| r[2].is_empty() && r[3].is_empty()), "unjudged pairs recorded");
    let reviewed = rows.iter().find(|r| r[0] == query && r[1] == chunk).unwrap();
    assert_eq!((reviewed[2].as_str(), reviewed[3].as_str()), ("2", "human"));

    let graded = pool(&set, &[&bm25, &deep], "one-shot");
    graded.assert_code(0);
    assert!(graded.stdout.contains("version 4 of"), "{}", graded.stdout);
    let after = provenance(&set);
    assert_eq!(
        after.get(&(query.clone(), chunk.clone())),
        Some(&(2, "human".to_owned())),
        "a human grade stays"
    );
    assert!(after.values().any(|(_, p)| p == "one_shot"), "the unjudged pairs are graded now");
    assert!(
        pooled(&set).iter().all(|r| !r[2].is_empty() || !after.contains_key(&(r[0].clone(), r[1].clone())))
    );
    assert_eq!(manifest(&set)["pools"].as_array().unwrap().len(), 4);
}

#[test]
fn review_status_checks_the_machine_grades_against_the_reviewers() {
    let dir = tempdir();
    let set = build(dir.path(), &sample_corpus(), &[]);
    set.assert_code(0);
    let (bm25, deep) = runs(&set, dir.path());
    pool(&set, &[&bm25, &deep], "one-shot").assert_code(0);
    // The reviewer calls every machine-graded pair in the queue not relevant.
    let machine: BTreeMap<(String, String), String> = pooled(&set)
        .into_iter()
        .filter(|r| r[3] == "one_shot")
        .map(|r| ((r[0].clone(), r[1].clone()), r[2].clone()))
        .collect();
    let mut lines = String::new();
    for item in set.jsonl("review_queue.jsonl") {
        let query = item["query_id"].as_str().unwrap().to_owned();
        let graded: Vec<String> = item["pool"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["chunk_id"].as_str().unwrap().to_owned())
            .filter(|chunk| machine.contains_key(&(query.clone(), chunk.clone())))
            .map(|chunk| format!("{chunk}=0"))
            .collect();
        if !graded.is_empty() {
            let row = json!({"query_id": query, "reviewer": "ann", "add": graded.join(" ")});
            lines.push_str(&row.to_string());
            lines.push('\n');
        }
    }
    let relevant = machine.values().filter(|g| *g == "1").count();
    assert!(relevant > 0 && !lines.is_empty());
    let decisions = dir.path().join("ann.jsonl");
    write(&decisions, lines);
    let before = fs_err::read_to_string(set.out.join("report.md")).unwrap();
    assert!(!before.contains("## Machine judge"), "no reviewer has graded a pooled pair yet");
    let applied =
        cli(&set.out, &["review", "apply", "--set", path_str(&set.out), "--decisions", path_str(&decisions)]);
    applied.assert_code(0);
    let status = cli(&set.out, &["review", "status", "--set", path_str(&set.out)]);
    status.assert_code(0);
    assert!(status.stdout.contains("machine grades of pooled pairs vs reviewers:"), "{}", status.stdout);
    assert!(status.stdout.contains("warning: the machine judge agrees poorly"), "{}", status.stdout);
    // The report says it too, once, before nothing else of the build is lost.
    let report = fs_err::read_to_string(set.out.join("report.md")).unwrap();
    assert_eq!(report.matches("## Machine judge vs reviewers").count(), 1, "{report}");
    let section = &report[report.find("## Machine judge vs reviewers").unwrap()..];
    assert!(section.contains("Version 3 of the set"), "{section}");
    assert!(section.contains("Machine grades of pooled pairs vs reviewers:"), "{section}");
    assert!(section.contains("**Warning:** the machine judge agrees poorly"), "{section}");
    assert!(report.starts_with(before.trim_end()), "the build's sections stay as they were");
    let json = cli(&set.out, &["review", "status", "--set", path_str(&set.out), "--json"]);
    let value: Value = serde_json::from_str(&json.stdout).unwrap();
    let agreement = &value["judge_agreement"];
    assert!(agreement["pairs"].as_u64().unwrap() >= 2, "{agreement}");
    assert_eq!(agreement["precision"]["estimate"], 0.0, "no relevant label of the machine held");
}

#[test]
fn a_refresh_carries_the_pooled_pairs_into_the_new_corpus() {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    super::refresh::copy_tree(&sample_corpus(), &corpus);
    let set = build(dir.path(), &corpus, &[]);
    set.assert_code(0);
    let (bm25, deep) = runs(&set, dir.path());
    pool(&set, &[&bm25, &deep], "one-shot").assert_code(0);
    let before = pooled(&set);
    // Delete the document most pooled pairs point into.
    let mut per_doc: BTreeMap<String, usize> = BTreeMap::new();
    for row in &before {
        *per_doc.entry(row[1].split(':').next().unwrap().to_owned()).or_default() += 1;
    }
    let (doc, pairs) = per_doc.iter().max_by_key(|(_, n)| **n).unwrap();
    assert!(*pairs > 0);
    fs_err::remove_file(corpus.join(doc)).unwrap();
    let refreshed = cli(
        &set.out,
        &["refresh", "--set", path_str(&set.out), "--corpus", path_str(&corpus), "--new-queries", "0", "-q"],
    );
    refreshed.assert_code(0);
    let after = pooled(&set);
    let chunks: std::collections::BTreeSet<String> =
        set.jsonl("corpus.jsonl").iter().map(|c| c["_id"].as_str().unwrap().to_owned()).collect();
    let queries: std::collections::BTreeSet<String> =
        set.jsonl("queries.jsonl").iter().map(|q| q["_id"].as_str().unwrap().to_owned()).collect();
    assert!(after.iter().all(|r| chunks.contains(&r[1])), "every pooled chunk is in the new corpus");
    assert!(after.iter().all(|r| queries.contains(&r[0])), "every pooled query is in the new version");
    assert!(!after.iter().any(|r| r[1].starts_with(&format!("{doc}:"))), "the deleted document's pairs went");
    // The other pairs stay as they were: their chunks' text did not change.
    let kept: Vec<&Vec<String>> =
        before.iter().filter(|r| !r[1].starts_with(&format!("{doc}:")) && queries.contains(&r[0])).collect();
    assert_eq!(after.iter().collect::<Vec<_>>(), kept);
    assert!(!after.is_empty() && after.len() < before.len(), "{} of {}", after.len(), before.len());
    assert_eq!(
        set.file("versions/v2/qrels/pooled.tsv").lines().count(),
        before.len() + 1,
        "the pooled version is kept"
    );
}

#[test]
fn eval_does_not_rank_a_run_the_set_did_not_pool() {
    let dir = tempdir();
    let set = build(dir.path(), &sample_corpus(), &[]);
    set.assert_code(0);
    let (bm25, deep) = runs(&set, dir.path());
    pool(&set, &[&bm25], "one-shot").assert_code(0);
    let eval = cli(
        &set.out,
        &["eval", "--set", path_str(&set.out), "--run", &bm25, "--run", &deep, "--resamples", "200"],
    );
    eval.assert_code(0);
    let expected = format!(
        "bm25 vs deep: not decidable on this set (deep not pooled into the set): qrelgen pool --set {} --run {deep}",
        path_str(&set.out)
    );
    assert!(eval.stdout.contains(&expected), "{}", eval.stdout);
    let json: Value = serde_json::from_str(&set.file("eval/eval.json")).unwrap();
    let pooling = &json["pooling"];
    assert_eq!(pooling["runs"][0]["pooled"], true);
    assert_eq!(pooling["runs"][1]["pooled"], false);
    assert_eq!(pooling["comparisons"][0]["decidable"], false);

    pool(&set, &[&deep], "one-shot").assert_code(0);
    let eval = cli(
        &set.out,
        &["eval", "--set", path_str(&set.out), "--run", &bm25, "--run", &deep, "--resamples", "200"],
    );
    eval.assert_code(0);
    assert!(!eval.stdout.contains("not decidable"), "{}", eval.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_pool_grades_through_the_judge_once() {
    let dir = tempdir();
    let out = dir.path().join("out");
    let (model, counters) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let set = run_on(&server, &out, &[]).await;
    set.assert_code(0);
    let (bm25, deep) = runs(&set, dir.path());
    let before = counters.judge_requests();
    let base_url = format!("{}/v1", server.uri());
    let args = vec![
        "pool".to_owned(),
        "--set".to_owned(),
        path_str(&out).to_owned(),
        "--run".to_owned(),
        bm25,
        "--run".to_owned(),
        deep,
        "--base-url".to_owned(),
        base_url,
        "--model".to_owned(),
        "mock-model".to_owned(),
    ];
    let pool_once = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            qrelgen_with_env(&args, &[("OPENAI_API_KEY", "sk-test")])
        })
    };
    let first = pool_once(args.clone()).await.unwrap();
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert_eq!(first.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&first.stderr));
    let asked = counters.judge_requests() - before;
    assert!(asked > 0, "the judge graded the new pairs");
    let rows = provenance(&set);
    let judged: Vec<_> = rows.values().filter(|(_, p)| p == "judge").collect();
    assert!(!judged.is_empty());
    // A judge's 1 is judged not relevant: rel 0 in qrels.trec.
    let trec: BTreeMap<(String, String), u8> = set.trec().into_iter().map(|(q, c, g)| ((q, c), g)).collect();
    for ((q, c), (grade, p)) in &rows {
        if p == "judge"
            && let Some(rel) = trec.get(&(q.clone(), c.clone()))
        {
            assert_eq!(*rel, if *grade >= 2 { *grade } else { 0 }, "{q} {c}");
        }
    }
    let records = manifest(&set)["pools"].as_array().unwrap().clone();
    assert_eq!(records[0]["judge"], "llm");
    assert!(records[0]["judge_calls"].as_u64().unwrap() > 0);

    let second = pool_once(args).await.unwrap();
    assert_eq!(second.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&second.stdout).starts_with("nothing new"));
    assert_eq!(counters.judge_requests() - before, asked, "a rerun pays nothing twice");
}
