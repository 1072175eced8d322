//! Building into a folder that already holds something: a failed publish, reviewed sets, folders
//! that are not qrelgen sets.

use super::{build, path_str, sample_corpus, str_field, tempdir, write};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file under `out` but the index and the reply cache, as bytes.
fn files(out: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walkdir::WalkDir::new(out)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && !e.path().starts_with(out.join("index")))
        .filter(|e| !super::is_lock_file(e.path()))
        .map(|e| {
            let relative = e.path().strip_prefix(out).unwrap_or(e.path()).to_owned();
            (relative, fs_err::read(e.path()).unwrap_or_default())
        })
        .collect()
}

#[test]
fn a_build_whose_publish_fails_in_the_middle_leaves_the_previous_set_whole() {
    let dir = tempdir();
    let first = build(dir.path(), &sample_corpus(), &["-q"]);
    first.assert_code(0);
    // A folder where review_queue.jsonl goes: files are moved in by name, so corpus.jsonl,
    // queries.jsonl and the qrels are in place before it fails.
    let queue = first.out.join("review_queue.jsonl");
    let moved = dir.path().join("queue.jsonl");
    fs_err::rename(&queue, &moved).unwrap();
    write(&queue.join("in-the-way"), "x");
    let before = files(&first.out);
    let failed = build(dir.path(), &sample_corpus(), &["-q", "--queries", "60", "--seed", "3"]);
    failed.assert_code(2);
    assert!(failed.stderr.contains("review_queue.jsonl"), "{}", failed.stderr);
    assert!(failed.stderr.contains("put back"), "{}", failed.stderr);
    let after = files(&first.out);
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    for (name, bytes) in &before {
        assert!(after[name] == *bytes, "{} changed", name.display());
    }
    fs_err::remove_dir_all(&queue).unwrap();
    fs_err::rename(&moved, &queue).unwrap();
    let again = build(dir.path(), &sample_corpus(), &["-q", "--queries", "60", "--seed", "3"]);
    again.assert_code(0);
    assert_eq!(again.jsonl("queries.jsonl").len(), 60);
}

/// Runs `qrelgen ARGS…` and returns its exit code, stdout and stderr.
fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let output = super::qrelgen(args);
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// Applies one decision file of `lines` to the set in `out`, expecting success.
fn apply(out: &Path, decisions: &Path, lines: &[serde_json::Value]) {
    let text: String = lines.iter().map(|l| l.to_string() + "\n").collect();
    write(decisions, text);
    let set = path_str(out);
    let (code, stdout, stderr) = run(&["review", "apply", "--set", set, "--decisions", path_str(decisions)]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
}

fn manifest(out: &Path) -> serde_json::Value {
    serde_json::from_str(&fs_err::read_to_string(out.join("manifest.json")).unwrap_or_default()).unwrap()
}

fn first_queued(out: &Path) -> String {
    let queue = fs_err::read_to_string(out.join("review_queue.jsonl")).unwrap_or_default();
    let first: serde_json::Value = serde_json::from_str(queue.lines().next().unwrap_or_default()).unwrap();
    str_field(&first, "/query_id").to_owned()
}

#[test]
fn a_reviewed_set_is_never_replaced_and_force_makes_the_build_its_next_version() {
    let dir = tempdir();
    let set = build(dir.path(), &sample_corpus(), &["-q"]);
    set.assert_code(0);
    let rejected = first_queued(&set.out);
    let reject = serde_json::json!({"query_id": rejected, "decision": "reject", "reject_reason": "vague"});
    apply(&set.out, &dir.path().join("ann.jsonl"), &[reject]);
    let reviewed = files(&set.out);

    // A plain rebuild is refused and touches nothing.
    let refused = build(dir.path(), &sample_corpus(), &["-q", "--seed", "5"]);
    refused.assert_code(2);
    for way_out in ["--force", "qrelgen refresh", "versions/", "review/"] {
        assert!(refused.stderr.contains(way_out), "no {way_out}: {}", refused.stderr);
    }
    assert!(files(&set.out) == reviewed, "a refused build changed the set");

    // --force: version 2 (reviewed) is kept whole, the build becomes version 3.
    let forced = build(dir.path(), &sample_corpus(), &["-q", "--seed", "5", "--force"]);
    forced.assert_code(0);
    let after = files(&set.out);
    for (name, bytes) in reviewed.iter().filter(|(n, _)| n.starts_with("versions") || n.starts_with("review"))
    {
        assert!(after.get(name) == Some(bytes), "{} changed", name.display());
    }
    for name in [
        "queries.jsonl",
        "qrels.trec",
        "qrels/test.tsv",
        "qrels/provenance.tsv",
        "manifest.json",
        "corpus.jsonl",
        "review_queue.jsonl",
    ] {
        let kept = after.get(&Path::new("versions/v2").join(name));
        assert!(kept == reviewed.get(Path::new(name)), "versions/v2/{name} is not the reviewed version 2");
    }
    let fresh_dir = tempdir();
    let fresh = build(fresh_dir.path(), &sample_corpus(), &["-q", "--seed", "5"]);
    fresh.assert_code(0);
    assert_eq!(forced.file("queries.jsonl"), fresh.file("queries.jsonl"), "the new build is live");
    let log = &manifest(&set.out)["review"];
    assert_eq!(
        (log["version"].as_u64(), log["parent"].as_u64(), log["base"].as_u64()),
        (Some(3), Some(2), Some(3))
    );
    let last = &log["history"][1];
    assert_eq!((last["version"].as_u64(), last["parent"].as_u64()), (Some(3), Some(2)));
    assert_eq!(last["made_by"], "build");

    // The review loop works on the new version: status, export and apply.
    let out = path_str(&set.out);
    let (code, status, stderr) = run(&["review", "status", "--set", out]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        status.contains("(version 3)") && status.contains("overall        100    50        0"),
        "{status}"
    );
    let exported = dir.path().join("queue.jsonl");
    let (code, _, stderr) =
        run(&["review", "export", "--set", out, "--format", "jsonl", "--to", path_str(&exported)]);
    assert_eq!(code, Some(0), "{stderr}");
    let new_first = first_queued(&set.out);
    let reject = serde_json::json!({"query_id": new_first, "decision": "reject", "reject_reason": "vague"});
    apply(&set.out, &dir.path().join("bob.jsonl"), &[reject]);
    let log = &manifest(&set.out)["review"];
    assert_eq!((log["version"].as_u64(), log["parent"].as_u64()), (Some(4), Some(3)));
    let queries = fs_err::read_to_string(set.out.join("queries.jsonl")).unwrap_or_default();
    let expected: Vec<&str> = fresh
        .file("queries.jsonl")
        .leak()
        .lines()
        .filter(|l| !l.contains(&format!("\"{new_first}\"")))
        .collect();
    assert_eq!(queries.lines().count(), 99);
    assert_eq!(queries.lines().filter(|l| !l.contains("\"review\"")).collect::<Vec<_>>(), expected[..]);
    assert!(
        after[Path::new("queries.jsonl")]
            == fs_err::read(set.out.join("versions/v3/queries.jsonl")).unwrap_or_default()
    );
    let ledger = fs_err::read_to_string(set.out.join("review/decisions.jsonl")).unwrap_or_default();
    assert_eq!(ledger.lines().count(), 2, "the earlier build's judgment stays in the ledger: {ledger}");
    let (code, stdout, _) = run(&["validate", "--set", out]);
    assert_eq!(code, Some(0), "{stdout}");
}

#[test]
fn a_folder_that_is_not_a_set_is_refused_unless_forced() {
    let dir = tempdir();
    let out = dir.path().join("out");
    // A BEIR dataset someone downloaded.
    for name in ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/dev.tsv"] {
        write(&out.join(name), format!("theirs: {name}\n"));
    }
    let before = files(&out);
    let refused = build(dir.path(), &sample_corpus(), &["-q"]);
    refused.assert_code(2);
    for named in ["not a qrelgen", "qrels/dev.tsv", "corpus.jsonl", "--force"] {
        assert!(refused.stderr.contains(named), "no {named}: {}", refused.stderr);
    }
    assert!(files(&out) == before, "a refused build changed the folder");
    let forced = build(dir.path(), &sample_corpus(), &["-q", "--force"]);
    forced.assert_code(0);
    assert!(forced.stderr.contains("qrels/dev.tsv"), "{}", forced.stderr);
    assert_eq!(
        forced.file("qrels/dev.tsv"),
        "theirs: qrels/dev.tsv\n",
        "files the build does not write stay"
    );
    assert_eq!(forced.jsonl("queries.jsonl").len(), 100);

    // What a killed first build leaves (index, reply cache, staging) is not in the way.
    let killed = tempdir();
    let first = build(killed.path(), &sample_corpus(), &["-q"]);
    first.assert_code(0);
    for entry in fs_err::read_dir(&first.out).into_iter().flatten().flatten() {
        if entry.file_name() != "index" && entry.path().is_file() {
            fs_err::remove_file(entry.path()).unwrap();
        } else if entry.file_name() != "index" {
            fs_err::remove_dir_all(entry.path()).unwrap();
        }
    }
    write(&first.out.join(".staging/queries.jsonl"), "half\n");
    write(&first.out.join("llm-cache.sqlite"), "");
    build(killed.path(), &sample_corpus(), &["-q"]).assert_code(0);
}

/// Every file a build publishes is one the library lists as its own (so the check of a
/// folder's files cannot drift from what the build writes).
#[test]
fn the_files_a_build_writes_are_the_ones_it_knows() {
    let dir = tempdir();
    let set = build(dir.path(), &sample_corpus(), &["-q"]);
    set.assert_code(0);
    let mut written: Vec<String> = files(&set.out).keys().map(|p| p.to_string_lossy().into_owned()).collect();
    written.sort();
    let mut known: Vec<String> =
        qrelgen::output::layout::BUILD_FILES.iter().map(|s| (*s).to_owned()).collect();
    known.sort();
    assert_eq!(written, known);
}

#[test]
fn a_set_exported_to_label_studio_is_under_review() {
    let dir = tempdir();
    let set = build(dir.path(), &sample_corpus(), &["-q"]);
    set.assert_code(0);
    let out = path_str(&set.out);
    let (code, _, stderr) = run(&["review", "export", "--set", out, "--format", "label-studio"]);
    assert_eq!(code, Some(0), "{stderr}");
    let refused = build(dir.path(), &sample_corpus(), &["-q"]);
    refused.assert_code(2);
    assert!(refused.stderr.contains("under review (review/)"), "{}", refused.stderr);
    let forced = build(dir.path(), &sample_corpus(), &["-q", "--force", "--seed", "9"]);
    forced.assert_code(0);
    assert!(forced.stdout.contains("version 2 of the set; version 1 is kept in"), "{}", forced.stdout);
    assert!(set.out.join("review/label-studio.json").is_file(), "the export stays");
    let (code, status, stderr) = run(&["review", "status", "--set", out]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(status.contains("(version 2)"), "{status}");
}
