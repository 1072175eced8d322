//! `qrelgen eval --table md|latex`: a worked example whose bold cells and significance markers
//! are known by hand, on stdout and in eval.json.

use super::{path_str, qrelgen, tempdir, write};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// 30 queries, one relevant document each. `good` ranks it first every time (nDCG@10 1); `mid`
/// ranks it second in the first 15 queries and misses it in the others (nDCG@10 =
/// 15 × 1/log2(3) / 30 = 0.3155, MRR@10 0.25); `bad` never finds it (0). Every pair differs on
/// 15 or 30 queries in the same direction, so every corrected randomization p is far below 0.05.
fn worked_example(dir: &Path) {
    let (mut qrels, mut good, mut mid, mut bad) =
        (String::new(), String::new(), String::new(), String::new());
    for q in 0..30 {
        let _ = writeln!(qrels, "q{q} 0 rel{q} 1");
        let _ = writeln!(good, "q{q} Q0 rel{q} 1 2.0 good\nq{q} Q0 junk{q} 2 1.0 good");
        if q < 15 {
            let _ = writeln!(mid, "q{q} Q0 junk{q} 1 2.0 mid\nq{q} Q0 rel{q} 2 1.0 mid");
        } else {
            let _ = writeln!(mid, "q{q} Q0 junk{q} 1 2.0 mid");
        }
        let _ = writeln!(bad, "q{q} Q0 junk{q} 1 2.0 bad");
    }
    write(&dir.join("qrels.trec"), qrels);
    write(&dir.join("good.run"), good);
    write(&dir.join("mid.run"), mid);
    write(&dir.join("bad.run"), bad);
}

fn eval(dir: &Path, args: &[&str]) -> (String, Value) {
    let out = dir.join("eval");
    let qrels = dir.join("qrels.trec");
    let mut all = vec!["eval", "--qrels", path_str(&qrels), "--out", path_str(&out), "--k", "1,10,100"];
    all.extend_from_slice(args);
    let output = qrelgen(&all);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let json = serde_json::from_str(&fs_err::read_to_string(out.join("eval.json")).unwrap()).unwrap();
    (stdout, json)
}

#[test]
fn all_pairs_letters_and_bold_in_markdown_and_eval_json() {
    let dir = tempdir();
    worked_example(dir.path());
    let run = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (good, mid, bad) = (run("good.run"), run("mid.run"), run("bad.run"));
    let (stdout, json) = eval(dir.path(), &["--run", &good, "--run", &mid, "--run", &bad, "--table", "md"]);
    let row = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {name}")))
            .unwrap_or_else(|| panic!("{stdout}"))
            .to_owned()
    };
    assert!(stdout.contains("| run | ndcg@10 | mrr@10 |"), "{stdout}");
    // good beats b (mid) and c (bad); mid beats c; bad beats none. Bold: the best of each column.
    assert!(row("(a) good").starts_with("| (a) good | **1.0000**<sup>bc</sup> | **1.0000** |"), "{stdout}");
    assert!(row("(b) mid").starts_with("| (b) mid | 0.3155<sup>c</sup> | 0.2500 |"), "{stdout}");
    assert!(row("(c) bad").starts_with("| (c) bad | 0.0000 | 0.0000 |"), "{stdout}");
    assert!(
        stdout.contains("paired randomization tests, Holm-corrected over all pairs, p < 0.05"),
        "{stdout}"
    );
    let table = &json["table"];
    assert_eq!(table["marked"], "ndcg@10");
    let cell = |r: usize, c: usize| &table["rows"][r]["cells"][c];
    assert_eq!(
        (cell(0, 0)["best"].as_bool(), cell(0, 0)["beats"].clone()),
        (Some(true), serde_json::json!(["b", "c"]))
    );
    assert_eq!(cell(1, 0)["beats"], serde_json::json!(["c"]));
    assert_eq!(cell(1, 1)["beats"], serde_json::json!([]), "only the compared measure is marked");
    assert!((cell(1, 0)["value"].as_f64().unwrap() - 0.5 / 3f64.log2()).abs() < 1e-12);
    // docs/eval.md shows this table as printed.
    let guide = fs_err::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/eval.md")).unwrap();
    let printed: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("| run |")).take(5).collect();
    assert!(
        guide.contains(&format!("```\n{}\n```", printed.join("\n"))),
        "update docs/eval.md's table:\n{stdout}"
    );
}

#[test]
fn a_baseline_gets_daggers_in_latex() {
    let dir = tempdir();
    worked_example(dir.path());
    let run = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (good, mid, bad) = (run("good.run"), run("mid.run"), run("bad.run"));
    let (stdout, json) =
        eval(dir.path(), &["--run", &good, "--run", &mid, "--baseline", &bad, "--table", "latex"]);
    assert!(stdout.contains("\\begin{tabular}{lrrrrrrrrr}"), "{stdout}");
    assert!(stdout.contains("bad (baseline) & 0.0000 & 0.0000 &"), "{stdout}");
    assert!(stdout.contains("good & \\textbf{1.0000}$^{\\dagger }$ & \\textbf{1.0000} &"), "{stdout}");
    assert!(stdout.contains("mid & 0.3155$^{\\dagger }$ & 0.2500 &"), "{stdout}");
    assert!(
        stdout.contains("% Bold: best in its column. † on ndcg@10: better than the baseline bad"),
        "{stdout}"
    );
    assert_eq!(json["table"]["rows"][0]["baseline"], true);
    assert_eq!(json["table"]["rows"][1]["cells"][0]["beats_baseline"], true);
    // Without --table, eval.json has no table.
    let (_, plain) = eval(dir.path(), &["--run", &good, "--baseline", &bad]);
    assert!(plain.get("table").is_none());
}
