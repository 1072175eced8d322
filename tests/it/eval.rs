//! `qrelgen run` and `qrelgen eval`: the numbers against the reference tools, the outputs on the
//! sample set, bad input, layers, comparisons, human agreement, the unjudged pool, and both HTML
//! pages in a real headless browser.

use super::{build, path_str, qrelgen, sample_corpus, tempdir, write};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/eval").join(name)
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[track_caller]
fn ok(output: &Output) -> String {
    let (stdout, stderr) = text(output);
    assert_eq!(output.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

fn read(path: &Path) -> String {
    fs_err::read_to_string(path).unwrap()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `per_query.tsv` as run → query → measure → value (answerable rows).
fn per_query(path: &Path) -> BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>> {
    let text = read(path);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
    let mut all: BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>> = BTreeMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split('\t').collect();
        if cells[2] != "answerable" {
            continue;
        }
        let row = all.entry(cells[0].to_owned()).or_default().entry(cells[1].to_owned()).or_default();
        for (name, cell) in header.iter().zip(&cells).skip(7) {
            row.insert((*name).to_owned(), cell.parse().unwrap_or_else(|e| panic!("{name}={cell}: {e}")));
        }
    }
    all
}

fn eval_fixture(out: &Path, gain: &str, ties: &str) -> Output {
    let (a, b, c) = (fixture("a.run"), fixture("b.run"), fixture("c.run"));
    let (qrels, queries, no_answer) =
        (fixture("qrels.trec"), fixture("queries.jsonl"), fixture("no_answer.txt"));
    qrelgen(&[
        "eval",
        "--qrels",
        path_str(&qrels),
        "--queries",
        path_str(&queries),
        "--no-answer",
        path_str(&no_answer),
        "--run",
        path_str(&a),
        "--run",
        path_str(&b),
        "--run",
        path_str(&c),
        "--gain",
        gain,
        "--ties",
        ties,
        "--resamples",
        "1000",
        "--out",
        path_str(out),
    ])
}

/// Every value of `tests/fixtures/eval/expected.json` (pytrec_eval, cross-checked with
/// ir_measures; see `reference.py`) matches to 1e-4, under both gains.
#[test]
fn metrics_match_the_reference_tools() {
    let stdout = matches_reference("expected.json", "trec-eval");
    assert!(stdout.contains("broken as trec_eval does"), "{stdout}");
}

/// The same with `--ties run-order` against `expected_run_order.json`: pytrec_eval on the runs
/// with scores replaced by -rank, as the validity harness scores them. The fixture's runs tie
/// often, so 252 of its 1,860 values differ from trec_eval's order.
#[test]
fn run_order_matches_the_reference_tools_on_minus_rank_scores() {
    let rule = "hits are scored in the order the run lists them (--ties run-order)";
    let stdout = matches_reference("expected_run_order.json", "run-order");
    assert!(stdout.contains(rule), "{stdout}");
    let dir = tempdir();
    ok(&eval_fixture(dir.path(), "linear", "run-order"));
    let settings = &json(&dir.path().join("eval.json"))["settings"];
    assert_eq!(settings["ties"], "run_order");
    assert!(settings["tie_breaking"].as_str().unwrap_or_default().starts_with(rule), "{settings}");
    assert!(read(&dir.path().join("eval.html")).contains(rule), "eval.html states the rule");
}

/// The measures beyond trec_eval's standard set, named as ir_measures names them, against
/// `expected_more.json` (pytrec_eval at rel=2, gdeval's ERR, trectools' RBP and residual; see
/// `reference_more.py` and `tests/interop/eval-agreement.sh`), per query; and `--per-query`
/// prints the same rows on stdout as per_query.tsv holds.
#[test]
fn more_measures_match_the_reference_tools() {
    let dir = tempdir();
    let list = "Rprec,P(rel=2)@10,R(rel=2)@100,AP(rel=2),Success(rel=2)@5,Rprec(rel=2),ERR@5,ERR@10,ERR@20,RBP(p=0.8),rbp_residual(p=0.8)";
    let (qrels, queries) = (fixture("qrels.trec"), fixture("queries.jsonl"));
    let mut args = vec!["eval", "--qrels", path_str(&qrels), "--queries", path_str(&queries)];
    let runs = [fixture("a.run"), fixture("b.run"), fixture("c.run")];
    for run in &runs {
        args.extend(["--run", path_str(run)]);
    }
    args.extend(["--measures", list, "--resamples", "100", "--per-query", "--out", path_str(dir.path())]);
    let stdout = ok(&qrelgen(&args));
    let tsv = read(&dir.path().join("per_query.tsv"));
    assert!(stdout.ends_with(&tsv), "--per-query prints per_query.tsv after the table");
    let ours = per_query(&dir.path().join("per_query.tsv"));
    let expected = json(&fixture("expected_more.json"));
    let mut checked = 0;
    for (run, queries) in expected["runs"].as_object().into_iter().flatten() {
        for (query, values) in queries.as_object().into_iter().flatten() {
            for (measure, want) in values.as_object().into_iter().flatten() {
                let (got, want) = (ours[run][query][measure], want.as_f64().unwrap_or(f64::NAN));
                // gdeval prints 5 decimals, per_query.tsv 6.
                assert!((got - want).abs() <= 5e-6 + 1e-9, "{run} {query} {measure}: {got} != {want}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 3 * 10 * 10 + 27, "{checked} values checked");
}

#[test]
fn rel_level_moves_the_binary_measures_of_the_standard_set() {
    let dir = tempdir();
    let (qrels, queries, run) = (fixture("qrels.trec"), fixture("queries.jsonl"), fixture("a.run"));
    let stdout = ok(&qrelgen(&[
        "eval",
        "--qrels",
        path_str(&qrels),
        "--queries",
        path_str(&queries),
        "--run",
        path_str(&run),
        "--rel-level",
        "2",
        "--metric",
        "P(rel=2)@10",
        "--resamples",
        "100",
        "--out",
        path_str(dir.path()),
    ]));
    let header = stdout.lines().find(|l| l.starts_with("run ")).unwrap_or_default();
    assert!(header.contains("p(rel=2)@10") && header.contains("map(rel=2)"), "{header}");
    let eval = json(&dir.path().join("eval.json"));
    assert_eq!(eval["settings"]["metric"], "p(rel=2)@10");
    let measures = eval["settings"]["measures"].as_array().cloned().unwrap_or_default();
    assert!(measures.iter().all(|m| m != "p@10"), "no grade-1 binary measure is left: {measures:?}");
    assert!(measures.iter().any(|m| m == "ndcg@10"), "nDCG keeps its grades");
}

/// Checks every value of the fixture `expected` under `--ties ties`; the stdout of the last
/// evaluation.
fn matches_reference(expected: &str, ties: &str) -> String {
    let expected = json(&fixture(expected));
    let runs = expected["runs"].as_object().unwrap_or_else(|| panic!("no runs"));
    let mut checked = 0;
    let mut stdout = String::new();
    for gain in ["linear", "exponential"] {
        let dir = tempdir();
        stdout = ok(&eval_fixture(dir.path(), gain, ties));
        assert!(stdout.contains(&format!("nDCG with {gain} gain")), "{stdout}");
        let ours = per_query(&dir.path().join("per_query.tsv"));
        for (run, queries) in runs {
            let queries = queries.as_object().unwrap_or_else(|| panic!("{run}"));
            assert_eq!(ours[run].len(), queries.len(), "{run}: the same answerable queries");
            for (query, values) in queries {
                for (name, want) in values.as_object().unwrap_or_else(|| panic!("{query}")) {
                    let measure = match name.split_once(':') {
                        Some((g, m)) if g == gain => m,
                        Some(_) => continue,
                        None => name,
                    };
                    let want = want.as_f64().unwrap_or(f64::NAN);
                    let got = ours[run][query][measure];
                    assert!(
                        (got - want).abs() < 1e-4,
                        "{ties} {gain} {run} {query} {measure}: {got} != {want}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 3000, "{checked} values checked");
    stdout
}

#[test]
fn missing_queries_count_as_empty_and_no_answer_is_scored() {
    let dir = tempdir();
    let stdout = ok(&eval_fixture(dir.path(), "exponential", "trec-eval"));
    // Run a has no line for q3; c none for q7 and the no_answer query q11.
    assert!(
        stdout.contains(
            "a: 1 query has no results and counts as empty (1 answerable, scored 0; 0 no_answer, counted as refusals): q3"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("c: 2 queries have no results and count as empty"), "{stdout}");
    assert!(stdout.contains("1 without judgments (not scored)"), "{stdout}");
    let eval = json(&dir.path().join("eval.json"));
    assert_eq!(eval["queries"]["no_answer"], 1);
    let a = &eval["runs"][0];
    assert_eq!(a["missing"]["ids"], serde_json::json!(["q3"]));
    assert_eq!(a["abstention"]["no_answer"], 1);
    assert_eq!(a["abstention"]["answerable"], 10);
    // The third run never answers q11 (no results), so its abstention is perfect there.
    let c = &eval["runs"][2]["abstention"];
    assert_eq!(c["at_threshold"]["wrong_answers"], 0.0);
    let per_query = read(&dir.path().join("per_query.tsv"));
    assert!(per_query.lines().any(|l| l.starts_with("c\tq11\tno_answer\t")), "no_answer rows are written");
    assert!(per_query.lines().any(|l| l.starts_with("a\tq3\tanswerable\t") && l.ends_with("\t0.000000")));
    assert_eq!(eval["settings"]["gain_description"], "exponential gain (2^grade − 1)");
    assert!(eval["settings"]["tie_breaking"].as_str().unwrap_or_default().contains("trec_eval"));
    assert_eq!(eval["settings"]["ties"], "trec_eval");
    // The fixture's queries carry no qrelgen metadata: their provenance is not known.
    assert!(per_query.lines().skip(1).all(|l| l.split('\t').nth(5) == Some("unknown")), "{per_query}");
    assert_eq!(eval["runs"][0]["breakdowns"][2]["slices"][0]["value"], "unknown");
    // Intervals of means stay within [0, 1].
    for run in eval["runs"].as_array().into_iter().flatten() {
        for (m, i) in run["intervals"].as_object().into_iter().flatten() {
            let (low, high) = (i["low"].as_f64().unwrap_or(-1.0), i["high"].as_f64().unwrap_or(2.0));
            assert!((0.0..=high).contains(&low) && high <= 1.0, "{m}: {i}");
        }
    }
}

/// A set built from the sample, its BM25 run, and the run's path.
fn sample_set(dir: &Path) -> (PathBuf, PathBuf) {
    let built = build(dir, &sample_corpus(), &["--quiet"]);
    built.assert_code(0);
    let run = dir.join("bm25.run");
    ok(&qrelgen(&["run", "--set", path_str(&built.out), "--to", path_str(&run), "--quiet"]));
    (built.out, run)
}

#[test]
fn run_then_eval_on_the_sample_set() {
    let dir = tempdir();
    let (set, run) = sample_set(dir.path());
    let lines = read(&run);
    let first: Vec<&str> = lines.lines().next().unwrap_or_default().split(' ').collect();
    assert_eq!((first.len(), first[1], first[3], first[5]), (6, "Q0", "1", "qrelgen-bm25"));
    let stdout =
        ok(&qrelgen(&["eval", "--set", path_str(&set), "--run", path_str(&run), "--resamples", "500"]));
    assert!(stdout.contains("100 queries: 85 answerable (scored), 15 no_answer (abstention)"), "{stdout}");
    assert!(stdout.contains("bm25: abstention from the top-1 score: AUROC"), "{stdout}");
    let eval = json(&set.join("eval/eval.json"));
    let manifest = fs_err::read(set.join("manifest.json")).unwrap_or_default();
    assert_eq!(eval["set"]["manifest_blake3"], blake3::hash(&manifest).to_hex().to_string());
    let ndcg = eval["runs"][0]["means"]["ndcg@10"].as_f64().unwrap_or(-1.0);
    assert!(ndcg > 0.5 && ndcg <= 1.0, "BM25 finds the sources of its own round trip: {ndcg}");
    let types: Vec<&str> = eval["runs"][0]["breakdowns"][0]["slices"]
        .as_array()
        .map(|s| s.iter().filter_map(|x| x["value"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(types, ["direct", "paraphrase", "multi_hop"]);
    let slices = &eval["runs"][0]["breakdowns"][0]["slices"];
    assert_eq!(
        slices[0]["queries"].as_u64().unwrap_or(0)
            + slices[1]["queries"].as_u64().unwrap_or(0)
            + slices[2]["queries"].as_u64().unwrap_or(0),
        85
    );
    assert_eq!(read(&set.join("eval/per_query.tsv")).lines().count(), 1 + 100);
    // Without its index, run rebuilds it from corpus.jsonl and writes the same run.
    fs_err::remove_dir_all(set.join("index")).unwrap();
    let again = dir.path().join("again.run");
    ok(&qrelgen(&["run", "--set", path_str(&set), "--to", path_str(&again), "--quiet"]));
    assert_eq!(read(&again), lines);
}

#[test]
fn bad_runs_get_one_line_per_problem_and_exit_2() {
    let dir = tempdir();
    let (set, run) = sample_set(dir.path());
    let lines: Vec<String> = read(&run).lines().map(str::to_owned).collect();
    let first: Vec<&str> = lines[0].split(' ').collect();
    let doc = first[2].split(':').next().unwrap_or_default();
    let bad = format!(
        "{}\n{}\nnope Q0 {} 1 1.0 x\n{} Q0 {} 2 high x\n{} Q0 {doc} 3 0.1 x\n",
        lines[0], lines[0], first[2], first[0], "other:1", first[0]
    );
    let path = dir.path().join("bad.run");
    write(&path, bad);
    let output = qrelgen(&["eval", "--set", path_str(&set), "--run", path_str(&path)]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let p = path.display();
    for expected in [
        format!("{p}:2: {} is retrieved again for this query (first on line 1)", first[2]),
        format!("{p}:3: unknown query id nope (not in the set's queries.jsonl; 1 row(s))"),
        format!("{p}:4: score \"high\" is not a number"),
        format!("{p}:5: the run names document ids, not chunk ids (e.g. {doc}; 1 row(s))"),
    ] {
        assert!(stderr.contains(&expected), "{expected}\nnot in:\n{stderr}");
    }
    assert!(!set.join("eval/eval.json").exists(), "nothing is written");
    // The same document ids are right at --level doc.
    let docs = dir.path().join("docs.run");
    write(&docs, format!("{} Q0 {doc} 1 1.0 x\n", first[0]));
    let stdout = ok(&qrelgen(&[
        "eval",
        "--set",
        path_str(&set),
        "--run",
        path_str(&docs),
        "--level",
        "doc",
        "--resamples",
        "100",
    ]));
    assert!(stdout.contains("99 queries have no results"), "{stdout}");
}

/// Writes `run` keeping each query's first `depth` hits, optionally in reverse order.
fn cut(run: &Path, to: &Path, depth: usize, reverse: bool) {
    let mut by_query: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in read(run).lines() {
        let q = line.split(' ').next().unwrap_or_default().to_owned();
        by_query.entry(q).or_default().push(line.to_owned());
    }
    let mut out = String::new();
    for lines in by_query.values() {
        let mut kept: Vec<&String> = lines.iter().take(depth).collect();
        if reverse {
            kept.reverse();
        }
        for (rank, line) in kept.iter().enumerate() {
            let f: Vec<&str> = line.split(' ').collect();
            let _ = writeln!(out, "{} Q0 {} {} {} cut", f[0], f[2], rank + 1, 100 - rank);
        }
    }
    write(to, out);
}

#[test]
fn layers_comparisons_and_the_unjudged_pool() {
    let dir = tempdir();
    let (set, run) = sample_set(dir.path());
    let worse = dir.path().join("reversed.run");
    cut(&run, &worse, 20, true);
    let pool = dir.path().join("unjudged.jsonl");
    let stdout = ok(&qrelgen(&[
        "eval",
        "--set",
        path_str(&set),
        "--run",
        path_str(&worse),
        "--baseline",
        path_str(&run),
        "--candidates",
        path_str(&run),
        "--resamples",
        "2000",
        "--export-unjudged",
        path_str(&pool),
    ]));
    assert!(stdout.contains("bm25 is better than reversed on ndcg@10: bm25 − reversed = +"), "{stdout}");
    let eval = json(&set.join("eval/eval.json"));
    let paired = &eval["comparisons"][0];
    // The difference and interval printed are the same way round: the interval holds it.
    let words = paired["verdict_text"].as_str().unwrap_or_default();
    let numbers: Vec<f64> = words
        .split(['=', '[', ',', ']'])
        .skip(1)
        .take(3)
        .map(|n| n.trim().parse().unwrap_or_else(|e| panic!("{n:?} in {words}: {e}")))
        .collect();
    assert!(numbers[1] <= numbers[0] && numbers[0] <= numbers[2] && numbers[1] > 0.0, "{words}");
    assert_eq!(paired["verdict"]["kind"], "better");
    assert_eq!(paired["verdict"]["better"], "bm25");
    assert_eq!((paired["run"].as_str(), paired["baseline"].as_str()), (Some("reversed"), Some("bm25")));
    assert!(paired["interval"]["high"].as_f64().unwrap_or(0.0) < 0.0);
    assert!(paired["randomization_p"].as_f64().unwrap_or(1.0) < 0.01);
    let layers = &eval["layers"][0];
    let counts = &layers["counts"];
    let total: u64 = ["retrieval", "rerank", "fine"].iter().map(|k| counts[k].as_u64().unwrap_or(0)).sum();
    assert_eq!(total, 85);
    assert!(
        counts["rerank"].as_u64().unwrap_or(0) > 0,
        "reversing the top 20 pushes relevant chunks out: {layers}"
    );
    assert_eq!(
        layers["rerank_failures"].as_array().map(Vec::len),
        counts["rerank"].as_u64().map(|n| n as usize)
    );
    assert!(eval["multiple"]["discriminative_power"].as_f64().is_some());

    // The pool is a decisions file review apply reads: grade one chunk, apply it.
    let first = read(&pool).lines().next().unwrap_or_default().to_owned();
    let mut item: Value = serde_json::from_str(&first).unwrap();
    assert!(item["pool"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "chunk texts are filled in");
    item["pool"][0]["grade"] = Value::from(2);
    let chunk = item["pool"][0]["chunk_id"].as_str().unwrap_or_default().to_owned();
    let graded = dir.path().join("graded.jsonl");
    write(&graded, format!("{item}\n"));
    ok(&qrelgen(&[
        "review",
        "apply",
        "--set",
        path_str(&set),
        "--decisions",
        path_str(&graded),
        "--reviewer",
        "ann",
    ]));
    let provenance = read(&set.join("qrels/provenance.tsv"));
    assert!(provenance.contains(&format!("\t{chunk}\t2\thuman")), "{provenance}");
}

#[test]
fn several_runs_and_human_qrels() {
    let dir = tempdir();
    let (set, run) = sample_set(dir.path());
    let (short, reversed) = (dir.path().join("top3.run"), dir.path().join("reversed.run"));
    cut(&run, &short, 3, false);
    cut(&run, &reversed, 30, true);
    // "Human" judgments: the set's own qrels of the first 40 judged queries.
    let qrels = read(&set.join("qrels.trec"));
    let mut queries: Vec<&str> = qrels.lines().filter_map(|l| l.split(' ').next()).collect();
    queries.dedup();
    let keep: std::collections::HashSet<&str> = queries.into_iter().take(40).collect();
    let human = dir.path().join("human.trec");
    write(
        &human,
        qrels.lines().filter(|l| keep.contains(l.split(' ').next().unwrap_or_default())).fold(
            String::new(),
            |mut all, l| {
                let _ = writeln!(all, "{l}");
                all
            },
        ),
    );
    let stdout = ok(&qrelgen(&[
        "eval",
        "--set",
        path_str(&set),
        "--run",
        path_str(&run),
        "--run",
        path_str(&short),
        "--run",
        path_str(&reversed),
        "--human-qrels",
        path_str(&human),
        "--correction",
        "tukey",
        "--resamples",
        "1000",
    ]));
    assert!(stdout.contains("all pairs on ndcg@10 (randomized Tukey HSD"), "{stdout}");
    assert!(stdout.contains("human judgments (40 queries) vs the set (85 queries)"), "{stdout}");
    let eval = json(&set.join("eval/eval.json"));
    let h = &eval["human"];
    assert_eq!(h["top_set"], "bm25");
    assert_eq!(h["top_agrees"], true);
    assert!(h["tau"].as_f64().unwrap_or(-1.0) > 0.0, "{h}");
    assert_eq!(eval["multiple"]["pairs"].as_array().map(Vec::len), Some(3));
}

#[test]
fn a_baseline_also_given_as_a_run_is_scored_once_and_one_pair_has_one_p_value() {
    let dir = tempdir();
    let (set, run) = sample_set(dir.path());
    let short = dir.path().join("top3.run");
    cut(&run, &short, 3, false);
    let stdout = ok(&qrelgen(&[
        "eval",
        "--set",
        path_str(&set),
        "--run",
        path_str(&short),
        "--run",
        path_str(&run),
        "--baseline",
        path_str(&run),
        "--k",
        "10,100",
        "--alpha",
        "0.01",
        "--resamples",
        "500",
    ]));
    let eval = json(&set.join("eval/eval.json"));
    let names: Vec<&str> =
        eval["runs"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, ["top3", "bm25"], "the baseline is not compared with itself");
    assert_eq!(eval["comparisons"].as_array().map(Vec::len), Some(1));
    // hit@1 is not scored with --k 10,100, so it is not shown as 0: hit@10 is.
    let header = stdout.lines().find(|l| l.starts_with("run ")).unwrap_or_default();
    assert!(!header.contains("hit@1 ") && header.contains("hit@10"), "{header}");
    assert!(!read(&set.join("eval/eval.html")).contains("hit@1<"), "nor on the page");
    // One randomization p-value per pair, wherever it is shown; --alpha sets the interval.
    let paired = &eval["comparisons"][0];
    assert_eq!(paired["randomization_p"], eval["multiple"]["pairs"][0]["p"]);
    assert_eq!(paired["alpha"], 0.01);
    assert!(
        paired["verdict_text"].as_str().unwrap_or_default().contains("99 % bootstrap interval"),
        "{paired}"
    );
}

/// Chromium from Debian's packages, if installed.
fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Runs headless Chromium with a fresh profile and no network services, killed after a minute.
fn headless(browser: &Path, args: &[&str]) -> String {
    let profile = tempdir();
    let child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", browser.display()));
    let output =
        super::output_within(child, Duration::from_secs(60)).unwrap_or_else(|| panic!("chromium hung"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn both_pages_render_in_a_real_browser_and_escape_untrusted_text() {
    let Some(browser) = chromium() else {
        let missing = "no Chromium installed (apt-get install chromium) to render eval.html and report.html";
        return super::skip("both_pages_render_in_a_real_browser", "chromium", missing);
    };
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    let sample = sample_corpus();
    for entry in walkdir::WalkDir::new(&sample).into_iter().flatten().filter(|e| e.file_type().is_file()) {
        let relative = entry.path().strip_prefix(&sample).unwrap();
        write(&corpus.join(relative), fs_err::read(entry.path()).unwrap_or_default());
    }
    write(
        &corpus.join("<script>alert(1)<script>.md"),
        "# Sync <b>limits</b>\n\nThe desktop sync engine uploads files up to fifty gigabytes and pauses large uploads on metered networks until the owner resumes them.\n",
    );
    write(
        &corpus.join("notes.md"),
        "# Notes\n\nWorkspace owners rotate recovery keys every quarter and store the printed copy in the office safe.\n",
    );
    let built = build(dir.path(), &corpus, &["--quiet", "--queries", "20"]);
    built.assert_code(0);
    let report = read(&built.out.join("report.html"));
    assert!(report.contains("&lt;script&gt;") && !report.contains("<script"), "the file name is escaped");
    let run = dir.path().join("x<b>y.run");
    ok(&qrelgen(&["run", "--set", path_str(&built.out), "--to", path_str(&run), "--quiet"]));
    ok(&qrelgen(&["eval", "--set", path_str(&built.out), "--run", path_str(&run), "--resamples", "200"]));
    for (page, headings) in [
        (built.out.join("eval/eval.html"), ["Means per run", "by query type", "Abstention"]),
        (built.out.join("report.html"), ["BM25 rank of the sources", "Query length", "Document coverage"]),
    ] {
        let url = format!("file://{}", page.display());
        let dom = headless(&browser, &["--dump-dom", &url]);
        for heading in headings {
            assert!(dom.contains(heading), "{heading} missing from the rendered {}", page.display());
        }
        assert!(dom.matches("<svg").count() >= 3, "charts render as inline SVG: {}", page.display());
        assert!(
            !dom.contains("<script") && !dom.contains("<b>"),
            "untrusted text stays text: {}",
            page.display()
        );
        let shot = dir.path().join("shot.png");
        headless(&browser, &[&format!("--screenshot={}", shot.display()), "--window-size=1200,1600", &url]);
        assert!(
            fs_err::metadata(&shot).map_or(0, |m| m.len()) > 10_000,
            "a screenshot of {}",
            page.display()
        );
    }
}

/// `run` with each query's ranking rotated by `by` places (a different, worse system).
fn rotated(run: &str, by: usize, name: &str) -> String {
    let mut per_query: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in run.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match per_query.last_mut() {
            Some((query, docs)) if *query == fields[0] => docs.push(fields[2]),
            _ => per_query.push((fields[0], vec![fields[2]])),
        }
    }
    let mut out = String::new();
    for (query, mut docs) in per_query {
        let by = by % docs.len();
        docs.rotate_left(by);
        for (rank, doc) in docs.iter().enumerate() {
            let _ = writeln!(out, "{query} Q0 {doc} {} {} {name}", rank + 1, 100 - rank);
        }
    }
    out
}

/// What `tests/fixtures/layout-check.js` measured on `page` rendered by `browser` in a 1200 px
/// window (a copy of the page without its CSP, the script added).
fn layout_check(browser: &Path, page: &Path) -> Value {
    let script = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layout-check.js"));
    let html = read(page);
    let csp = "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">";
    assert!(html.contains(csp), "the page carries its CSP");
    let copy = page.with_extension("measured.html");
    write(&copy, html.replace(csp, "").replace("</body>", &format!("<script>{script}</script></body>")));
    let dom =
        headless(browser, &["--window-size=1200,1600", "--dump-dom", &format!("file://{}", copy.display())]);
    let (_, rest) = dom
        .rsplit_once("<pre id=\"layout-check\">")
        .unwrap_or_else(|| panic!("the layout check did not run on {}", page.display()));
    let json = rest.split_once("</pre>").map_or(rest, |(json, _)| json);
    serde_json::from_str(&json.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")).unwrap()
}

#[test]
fn eval_html_for_2_and_for_12_runs_has_every_chart_and_no_label_overflowing_or_overlapping_in_chromium() {
    let Some(browser) = chromium() else {
        let missing = "no Chromium installed (apt-get install chromium) to lay out eval.html";
        return super::skip("eval_html_layout", "chromium", missing);
    };
    let dir = tempdir();
    let built = build(dir.path(), &sample_corpus(), &["--quiet"]);
    built.assert_code(0);
    let set = path_str(&built.out);
    let bm25 = dir.path().join("bm25.run");
    ok(&qrelgen(&["run", "--set", set, "--to", path_str(&bm25), "--quiet"]));
    let text = read(&bm25);
    let mut runs = Vec::new();
    for by in 1..=11 {
        let name = format!("system-{by:02}-rotated");
        let path = dir.path().join(format!("{name}.run"));
        write(&path, rotated(&text, by, &name));
        runs.push(path);
    }
    for count in [2, 12] {
        let out = dir.path().join(format!("eval-{count}"));
        let mut args = vec!["eval", "--set", set, "--baseline", path_str(&bm25), "--resamples", "200"];
        for run in &runs[..count - 1] {
            args.extend(["--run", path_str(run)]);
        }
        args.extend(["--out", path_str(&out)]);
        ok(&qrelgen(&args));
        let page = out.join("eval.html");
        let measured = layout_check(&browser, &page);
        let charts = read(&page).matches("<svg").count();
        assert!(charts >= 6 + count, "{count} runs: {charts} charts in the page");
        assert_eq!(measured["charts"], charts, "{count} runs: every chart rendered");
        assert_eq!(measured["empty"], serde_json::json!([]), "{count} runs: no chart without a size");
        assert_eq!(
            measured["overflow"],
            serde_json::json!([]),
            "{count} runs: a label crosses its chart's edge"
        );
        assert_eq!(measured["overlaps"], serde_json::json!([]), "{count} runs: labels overlap");
        let (width, window) = (measured["pageWidth"].as_u64(), measured["viewport"].as_u64());
        assert!(
            width <= window && width.is_some(),
            "{count} runs: the page is {width:?} px wide in {window:?}"
        );
    }
}
