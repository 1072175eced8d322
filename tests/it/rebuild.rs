//! Building into a folder that already holds something: a failed publish, reviewed sets, folders
//! that are not qrelgen sets.

use super::{build, sample_corpus, tempdir, write};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file under `out` but the index and the reply cache, as bytes.
fn files(out: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walkdir::WalkDir::new(out)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && !e.path().starts_with(out.join("index")))
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
    fs_err::rename(&queue, &moved).unwrap_or_else(|e| panic!("{e}"));
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
    fs_err::remove_dir_all(&queue).unwrap_or_else(|e| panic!("{e}"));
    fs_err::rename(&moved, &queue).unwrap_or_else(|e| panic!("{e}"));
    let again = build(dir.path(), &sample_corpus(), &["-q", "--queries", "60", "--seed", "3"]);
    again.assert_code(0);
    assert_eq!(again.jsonl("queries.jsonl").len(), 60);
}
