//! `qrelgen validate`: every rule, each tripped by a problem planted in a small hand-made set (or
//! a loose qrels file), with the exact line it prints and the exit code.

use super::{path_str, qrelgen};
use std::path::{Path, PathBuf};

const CORPUS: &str = "{\"_id\":\"d1:aa\",\"title\":\"One\",\"text\":\"one\"}\n\
                      {\"_id\":\"d2:bb\",\"title\":\"Two\",\"text\":\"two\"}\n";
const QUERIES: &str = "{\"_id\":\"direct-q1\",\"text\":\"one?\"}\n\
                       {\"_id\":\"no_answer-q2\",\"text\":\"three?\"}\n";
const TREC: &str = "direct-q1 0 d1:aa 3\n";
const TSV: &str = "query-id\tcorpus-id\tscore\ndirect-q1\td1:aa\t3\n";
const PROVENANCE: &str = "query-id\tcorpus-id\tscore\tprovenance\ndirect-q1\td1:aa\t3\tsource\n\
                          no_answer-q2\td2:bb\t0\thuman\n";
const NO_ANSWER: &str = "no_answer-q2\n";
const MANIFEST: &str = "{\"tool\": \"qrelgen 0.1.0\", \"format_version\": 3}\n";

/// A valid set in `dir/set`, with `planted` files written over the clean ones.
fn set(dir: &Path, planted: &[(&str, &str)]) -> PathBuf {
    let out = dir.join("set");
    fs_err::create_dir_all(out.join("qrels")).unwrap();
    let clean = [
        ("corpus.jsonl", CORPUS),
        ("queries.jsonl", QUERIES),
        ("qrels.trec", TREC),
        ("qrels/test.tsv", TSV),
        ("qrels/provenance.tsv", PROVENANCE),
        ("no_answer.txt", NO_ANSWER),
        ("manifest.json", MANIFEST),
    ];
    for (name, text) in clean.iter().chain(planted) {
        fs_err::write(out.join(name), text).unwrap();
    }
    out
}

/// Runs `qrelgen validate ARGS`: its exit code, stdout lines and stderr.
fn validate(args: &[&str]) -> (Option<i32>, Vec<String>, String) {
    let mut all = vec!["validate"];
    all.extend_from_slice(args);
    let output = qrelgen(&all);
    let stdout = String::from_utf8_lossy(&output.stdout);
    (
        output.status.code(),
        stdout.lines().map(str::to_owned).collect(),
        String::from_utf8_lossy(&output.stderr).into(),
    )
}

/// The findings `validate --set` prints for the clean set with `planted` files; exit 1 with the
/// count on stderr.
#[track_caller]
fn findings(planted: &[(&str, &str)]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let out = set(dir.path(), planted);
    let (code, lines, stderr) = validate(&["--set", path_str(&out)]);
    assert_eq!(code, Some(1), "{lines:?}\n{stderr}");
    assert!(stderr.contains(&format!("{} problem(s)", lines.len())), "{stderr}");
    lines
}

#[test]
fn the_clean_set_has_no_problems() {
    let dir = tempfile::tempdir().unwrap();
    let out = set(dir.path(), &[]);
    let (code, lines, stderr) = validate(&["--set", path_str(&out)]);
    assert_eq!((code, lines), (Some(0), Vec::new()), "{stderr}");
    assert!(stderr.ends_with("no problems\n"), "{stderr}");
}

#[test]
fn a_malformed_jsonl_line_is_named_with_its_line() {
    let corpus = format!("{CORPUS}not json\n");
    assert_eq!(
        findings(&[("corpus.jsonl", &corpus)]),
        ["corpus.jsonl:3: malformed line: expected ident at line 1 column 2"]
    );
}

#[test]
fn ids_that_trec_or_beir_cannot_hold_are_named() {
    let queries = format!("{QUERIES}{{\"_id\":\"a b\"}}\n{{\"_id\":\"a#b\"}}\n{{\"_id\":\"\"}}\n");
    assert_eq!(
        findings(&[("queries.jsonl", &queries)]),
        [
            "queries.jsonl:3: query id \"a b\" contains whitespace",
            "queries.jsonl:4: query id \"a#b\" contains '#'",
            "queries.jsonl:5: query id \"\" is empty",
        ]
    );
}

#[test]
fn an_id_twice_in_a_file_names_its_first_line() {
    let corpus = format!("{CORPUS}{{\"_id\":\"d1:aa\",\"text\":\"again\"}}\n");
    assert_eq!(
        findings(&[("corpus.jsonl", &corpus)]),
        ["corpus.jsonl:3: duplicate corpus id d1:aa (first on line 1)"]
    );
}

#[test]
fn a_query_id_that_is_also_a_corpus_id_is_fine_but_a_row_judging_itself_is_not() {
    // BEIR collections such as ArguAna and Quora have query ids that are corpus ids.
    let dir = tempfile::tempdir().unwrap();
    let queries = format!("{QUERIES}{{\"_id\":\"d2:bb\",\"text\":\"two?\"}}\n");
    let out = set(dir.path(), &[("queries.jsonl", &queries)]);
    let (code, lines, stderr) = validate(&["--set", path_str(&out)]);
    assert_eq!((code, lines), (Some(0), Vec::new()), "{stderr}");
    let trec = format!("{TREC}d2:bb 0 d2:bb 1\n");
    let tsv = format!("{TSV}d2:bb\td2:bb\t1\n");
    let message = "query d2:bb judges a document with its own id: BEIR's evaluator ignores such hits (ignore_identical_ids), so this row never counts there";
    assert_eq!(
        findings(&[("queries.jsonl", &queries), ("qrels.trec", &trec), ("qrels/test.tsv", &tsv)]),
        [format!("qrels.trec:2: {message}"), format!("qrels/test.tsv:3: {message}")]
    );
}

#[test]
fn qrels_lines_of_the_wrong_shape() {
    let trec = format!("{TREC}direct-q1 0 d2:bb\n");
    let tsv = format!("{TSV}direct-q1\td2:bb\n");
    let provenance = format!("{PROVENANCE}direct-q1\td2:bb\t1\tbm25\n");
    assert_eq!(
        findings(&[("qrels.trec", &trec), ("qrels/test.tsv", &tsv), ("qrels/provenance.tsv", &provenance)]),
        [
            "qrels.trec:2: expected 4 fields (query 0 doc grade), found 3: ids cannot hold whitespace",
            "qrels/test.tsv:3: expected 3 tab-separated fields, found 2",
            "qrels/provenance.tsv:4: unknown provenance \"bm25\"",
        ]
    );
}

#[test]
fn a_beir_tsv_without_its_header() {
    assert_eq!(
        findings(&[("qrels/test.tsv", "direct-q1\td1:aa\t3\n")]),
        [
            "qrels/test.tsv:1: no header: a BEIR qrels TSV starts with the line \"query-id\\tcorpus-id\\tscore\""
        ]
    );
}

#[test]
fn bad_grades_bad_and_dangling_ids_and_repeated_pairs() {
    let trec = "direct-q1 0 d1:aa 3\ndirect-q1 0 d2:bb 4\ndirect-q1 0 d2:bb x\ndirect-q9 0 d9:zz 1\n";
    let tsv = format!("{TSV}direct-q1\td 1\t3\n");
    assert_eq!(
        findings(&[("qrels.trec", trec), ("qrels/test.tsv", &tsv)]),
        [
            "qrels.trec:2: grade 4 is out of range 0–3",
            "qrels.trec:3: grade \"x\" is not an integer",
            "qrels.trec:3: duplicate pair (direct-q1, d2:bb), first on line 2",
            "qrels.trec:4: dangling query id direct-q9 (not in queries.jsonl)",
            "qrels.trec:4: dangling corpus id d9:zz (not in corpus.jsonl)",
            "qrels/test.tsv:3: corpus id \"d 1\" contains whitespace",
            "qrels/test.tsv:3: dangling corpus id d 1 (not in corpus.jsonl)",
            "qrels.trec: (direct-q1, d2:bb, grade 4) is not in qrels/test.tsv",
            "qrels.trec: (direct-q1, d2:bb, grade x) is not in qrels/test.tsv",
            "qrels.trec: (direct-q9, d9:zz, grade 1) is not in qrels/test.tsv",
            "qrels/test.tsv: (direct-q1, d 1, grade 3) is not in qrels.trec",
        ]
    );
}

#[test]
fn trec_and_tsv_must_hold_the_same_judgments() {
    assert_eq!(
        findings(&[("qrels.trec", "direct-q1 0 d1:aa 2\n")]),
        [
            "qrels.trec: (direct-q1, d1:aa, grade 2) is not in qrels/test.tsv",
            "qrels/test.tsv: (direct-q1, d1:aa, grade 3) is not in qrels.trec",
        ]
    );
}

#[test]
fn no_answer_lists_only_unanswered_queries_of_the_set() {
    assert_eq!(
        findings(&[("no_answer.txt", "no_answer-q2\ndirect-q1\nno_answer-q7\n")]),
        [
            "no_answer.txt:2: direct-q1 is listed as no_answer but has a relevant chunk (d1:aa in qrels.trec)",
            "no_answer.txt:3: no_answer-q7 is not in queries.jsonl",
        ]
    );
}

#[test]
fn a_file_that_cannot_be_read_is_an_error_not_a_finding() {
    let dir = tempfile::tempdir().unwrap();
    let out = set(dir.path(), &[]);
    fs_err::remove_file(out.join("qrels.trec")).unwrap();
    let (code, lines, stderr) = validate(&["--set", path_str(&out)]);
    assert_eq!((code, lines), (Some(2), Vec::new()), "{stderr}");
    assert!(
        stderr.contains(&format!("validating {}", out.display())) && stderr.contains("qrels.trec"),
        "{stderr}"
    );
}

#[test]
fn a_loose_qrels_file_is_checked_against_the_files_given() {
    let dir = tempfile::tempdir().unwrap();
    let out = set(dir.path(), &[]);
    let qrels = dir.path().join("run.qrels");
    fs_err::write(&qrels, "direct-q1 0 d1:aa 3\ndirect-q1 0 d3:cc 1\n").unwrap();
    let (code, lines, _) = validate(&["--qrels", path_str(&qrels)]);
    assert_eq!((code, lines), (Some(0), Vec::new()), "without --corpus no id is dangling");
    let corpus = out.join("corpus.jsonl");
    let (code, lines, _) = validate(&["--qrels", path_str(&qrels), "--corpus", path_str(&corpus)]);
    assert_eq!(code, Some(1));
    assert_eq!(
        lines,
        [format!("{}:2: dangling corpus id d3:cc (not in {})", qrels.display(), corpus.display())]
    );
}

#[test]
fn a_missing_or_newer_manifest_is_a_problem() {
    let newer = findings(&[("manifest.json", "{\"tool\": \"qrelgen 9.0.0\", \"format_version\": 99}\n")]);
    assert_eq!(newer.len(), 1, "{newer:?}");
    assert!(
        newer[0].starts_with("manifest.json: the set is in format 99 (written by qrelgen 9.0.0); qrelgen ")
            && newer[0].ends_with(
                "update qrelgen (cargo install qrelgen, or pip install -U qrelgen) and run the command again"
            ),
        "{newer:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = set(dir.path(), &[]);
    fs_err::remove_file(out.join("manifest.json")).unwrap();
    let (code, lines, _) = validate(&["--set", path_str(&out)]);
    assert_eq!(code, Some(1));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("manifest.json: missing"), "{lines:?}");
}
