//! `report.md` held to snapshots (insta, in `tests/it/snapshots/`): the offline build of the
//! bundled sample corpus; a build of a copy of it with a repeated file, an unreadable one and an
//! ignored one that falls short and flags misses; and an LLM build against the mock (the LLM and
//! judge sections). The report holds no timings or versions; the paths and the mock's address,
//! which differ per run, are redacted. A changed report fails here: check the new one with
//! `cargo insta review` (or rerun with `INSTA_UPDATE=always`) and commit the `.snap` files.

use super::mock::{self, Behaviour};
use super::{build, path_str, sample_corpus, tempdir};
use std::path::Path;

/// `report.md` of a build of `corpus` into `dir` with `args`, its paths redacted.
fn report(dir: &Path, corpus: &Path, args: &[&str]) -> String {
    let run = build(dir, corpus, args);
    run.assert_code(0);
    run.file("report.md").replace(path_str(corpus), "<corpus>").replace(path_str(&run.out), "<out>")
}

#[test]
fn the_sample_corpus_report() {
    let dir = tempdir();
    insta::assert_snapshot!("harbor_sync", report(dir.path(), &sample_corpus(), &["--quiet"]));
}

#[test]
fn a_report_with_shortfalls_flags_copies_and_skipped_inputs() {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    for entry in walkdir::WalkDir::new(sample_corpus()).sort_by_file_name() {
        let entry = entry.unwrap();
        let to = corpus.join(entry.path().strip_prefix(sample_corpus()).unwrap());
        if entry.file_type().is_dir() {
            fs_err::create_dir_all(&to).unwrap();
        } else {
            fs_err::copy(entry.path(), &to).unwrap();
        }
    }
    fs_err::copy(corpus.join("admin/audit-log.md"), corpus.join("admin/zz-copy-audit-log.md")).unwrap();
    fs_err::write(corpus.join("broken.txt"), b"ok\xff\xfe bad\n").unwrap();
    fs_err::write(corpus.join("logo.png"), b"PNG").unwrap();
    let args =
        ["--quiet", "--queries", "200", "--per-doc-cap", "3", "--on-miss", "flag", "--allow-shortfall"];
    let report = report(dir.path(), &corpus, &args);
    for section in ["**Shortfall**", "admin/zz-copy-audit-log.md", "broken.txt: invalid UTF-8", "1 ignored"] {
        assert!(report.contains(section), "the case shows {section:?}:\n{report}");
    }
    insta::assert_snapshot!("harbor_sync_short", report);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_build_report() {
    let dir = tempdir();
    let (model, _) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let out = dir.path().join("out");
    let args = ["--queries", "24", "--queries-per-call", "2", "--judge-pool", "2", "--reclassify"];
    let run = super::llm::run_on(&server, &out, &args).await;
    run.assert_code(0);
    let report = run
        .file("report.md")
        .replace(path_str(&sample_corpus()), "<corpus>")
        .replace(&server.uri(), "<mock>");
    assert!(report.contains("## LLM") && report.contains("<mock>"), "{report}");
    insta::assert_snapshot!("llm_mock", report);
}
