//! Byte identity: the files a build writes, on both sample corpora, pgdocs and LLM builds
//! against the mock, and what the review loop, `run` and `eval` write and print on the sample
//! set, must hash to what `tests/fixtures/golden/<case>.b3` records. A
//! restructuring keeps these hashes; a change of behaviour updates them on purpose, with
//! `QRELGEN_UPDATE_GOLDEN=1 cargo test --release golden` and the diff reviewed.
//!
//! Every file under the output folder counts but the index (`index/`), the LLM reply cache and
//! `manifest.json`'s `run` section (timings and network counts differ per run). Paths that
//! differ per machine (the corpus, the output folder, the mock's address) are replaced by
//! placeholders before hashing.

use super::mock::{self, Behaviour};
use super::{Run, path_str, qrelgen, sample_corpus, tempdir};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Set to `1` to write the hashes of this build into the fixtures instead of checking them.
const UPDATE: &str = "QRELGEN_UPDATE_GOLDEN";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(case: &str) -> PathBuf {
    repo().join("tests/fixtures/golden").join(format!("{case}.b3"))
}

/// `relative path → blake3` of every file in `out`.
fn hashes(out: &Path, placeholders: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in walkdir::WalkDir::new(out).sort_by_file_name() {
        let entry = entry.unwrap();
        let relative = entry.path().strip_prefix(out).unwrap();
        let name = relative.to_string_lossy().replace('\\', "/");
        if !entry.file_type().is_file()
            || name.split('/').any(|part| part == "index" || part.starts_with("llm-cache.sqlite"))
            || super::is_lock_file(relative)
        {
            continue;
        }
        let mut text = String::from_utf8(fs_err::read(entry.path()).unwrap()).unwrap();
        if name.ends_with("manifest.json") {
            text = without_run(&text);
        }
        for (from, to) in placeholders {
            text = text.replace(from, to);
        }
        files.insert(name, blake3::hash(text.as_bytes()).to_hex().to_string());
    }
    files
}

/// The manifest without its top-level `run` object (pretty-printed JSON, two-space indent).
fn without_run(manifest: &str) -> String {
    let mut kept = String::new();
    let mut in_run = false;
    for line in manifest.lines() {
        if line.starts_with("  \"run\": ") {
            in_run = !line.ends_with(',');
            continue;
        }
        if in_run {
            in_run = !(line == "  }" || line == "  },");
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

fn read_fixture(case: &str) -> BTreeMap<String, String> {
    let text = fs_err::read_to_string(fixture(case)).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(hash, name)| (name.to_owned(), hash.to_owned()))
        .collect()
}

/// Checks `got` against the case's fixture, or writes it with [`UPDATE`] set.
#[track_caller]
fn check(case: &str, got: &BTreeMap<String, String>) {
    if std::env::var(UPDATE).is_ok_and(|v| v == "1") {
        let text: String = got.iter().flat_map(|(name, hash)| [hash, " ", name, "\n"]).collect();
        fs_err::create_dir_all(fixture(case).parent().unwrap()).unwrap();
        fs_err::write(fixture(case), text).unwrap();
        return;
    }
    let expected = read_fixture(case);
    let mut problems = Vec::new();
    for (name, hash) in &expected {
        match got.get(name) {
            None => problems.push(format!("{name}: not written")),
            Some(other) if other != hash => problems.push(format!("{name}: differs")),
            Some(_) => {}
        }
    }
    problems.extend(got.keys().filter(|n| !expected.contains_key(*n)).map(|n| format!("{n}: new file")));
    assert!(
        problems.is_empty(),
        "the {case} build's files differ from {}:\n  {}\nA restructuring must keep them byte for byte. If the \
         change of output is intended, rerun with {UPDATE}=1 (cargo test --release golden) and review the diff.",
        fixture(case).display(),
        problems.join("\n  ")
    );
}

/// Builds `corpus` with `args` and checks the files.
fn offline_case(case: &str, corpus: &Path, args: &[&str]) {
    let dir = tempdir();
    let out = dir.path().join("out");
    let mut all = vec!["build", "--corpus", path_str(corpus), "--out", path_str(&out), "--quiet"];
    all.extend_from_slice(args);
    let output = qrelgen(&all);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    check(case, &hashes(&out, &[(path_str(corpus), "<corpus>"), (path_str(&out), "<out>")]));
}

#[test]
fn harbor_sync_builds_byte_identical() {
    offline_case("harbor-sync", &sample_corpus(), &[]);
}

/// Runs `qrelgen ARGS…`, expecting exit code 0, and returns its stdout and the warnings and
/// hints on its stderr (progress lines carry timings).
fn ok(args: &[&str]) -> String {
    let output = qrelgen(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{args:?}:\n{stderr}");
    let notes = stderr.lines().filter(|l| l.starts_with("warning:") || l.starts_with("hint:"));
    String::from_utf8_lossy(&output.stdout).into_owned() + &notes.flat_map(|l| [l, "\n"]).collect::<String>()
}

#[test]
fn the_review_loop_run_and_eval_are_byte_identical() {
    let dir = tempdir();
    let work = dir.path().join("work");
    let set = work.join("set");
    let (set_arg, at) = (path_str(&set), |name: &str| work.join(name));
    let corpus = sample_corpus();
    ok(&["build", "--corpus", path_str(&corpus), "--out", set_arg, "--quiet"]);
    let mut printed = String::new();
    for (format, to) in [("jsonl", "queue.jsonl"), ("csv", "queue.csv"), ("label-studio", "tasks.json")] {
        let to = at(to);
        printed += &ok(&["review", "export", "--set", set_arg, "--format", format, "--to", path_str(&to)]);
    }
    let fixtures = repo().join("tests/fixtures/label-studio");
    let (export, map) = (fixtures.join("export.json"), fixtures.join("annotators.txt"));
    printed += &ok(&[
        "review",
        "apply",
        "--set",
        set_arg,
        "--decisions",
        path_str(&export),
        "--reviewer-map",
        path_str(&map),
    ]);
    printed += &ok(&["review", "status", "--set", set_arg]);
    let bm25 = at("bm25.run");
    printed += &ok(&["run", "--set", set_arg, "--to", path_str(&bm25)]);
    printed += &ok(&["eval", "--set", set_arg, "--run", path_str(&bm25)]);
    fs_err::write(at("printed.txt"), printed).unwrap();
    // eval records the blake3 of the live manifest, whose `run` section differs per run.
    let manifest = blake3::hash(&fs_err::read(set.join("manifest.json")).unwrap()).to_hex().to_string();
    let placeholders = [
        (path_str(&corpus), "<corpus>"),
        (path_str(&work), "<work>"),
        (path_str(&fixtures), "<fixtures>"),
        (manifest.as_str(), "<manifest-blake3>"),
    ];
    check("harbor-sync-loop", &hashes(&work, &placeholders));
}

#[test]
fn haigang_zh_builds_byte_identical() {
    offline_case("haigang-zh", &repo().join("corpora/haigang-zh"), &[]);
}

#[test]
fn pgdocs_builds_byte_identical() {
    let pages = repo().join("../shared/corpora/pgdocs/pages");
    if !pages.is_dir() {
        let missing = format!("{} is absent (the shared corpora beside the checkout)", pages.display());
        return super::skip("pgdocs_builds_byte_identical", "shared", &missing);
    }
    offline_case("pgdocs", &pages, &[]);
}

/// Builds the sample corpus with the LLM generator against a mock that behaves as `behaviour`,
/// and checks the files (written also when the build exits with `code` 1).
async fn llm_case(case: &str, behaviour: Behaviour, args: &[&str], code: i32) {
    let dir = tempdir();
    let (model, _) = mock::model(behaviour);
    let server = mock::start(model).await;
    let out = dir.path().join("out");
    let run: Run = super::llm::run_on(&server, &out, args).await;
    run.assert_code(code);
    let (corpus, uri) = (sample_corpus(), server.uri());
    let placeholders = [(path_str(&corpus), "<corpus>"), (path_str(&out), "<out>"), (uri.as_str(), "<mock>")];
    check(case, &hashes(&out, &placeholders));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_build_against_the_mock_is_byte_identical() {
    let args = ["--queries", "24", "--queries-per-call", "2", "--judge-pool", "2", "--reclassify"];
    llm_case("llm-mock", Behaviour::Good, &args, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_build_with_failures_is_byte_identical() {
    // Unusable replies (rejects with their reasons) and a judge that never grades (flags).
    let args = ["--max-rounds", "1", "--allow-shortfall", "--judge-pool", "1"];
    llm_case("llm-wrong-types", Behaviour::WrongTypes, &args, 1).await;
    llm_case("llm-judge-babbles", Behaviour::JudgeBabbles, &args, 0).await;
}
