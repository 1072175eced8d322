//! Tests of staged writes, publish and recovery: atomic files, the rollback journal, a failed or
//! killed publish rolled back, and the sync of files and folders.

use super::*;

#[test]
fn atomic_write_replaces_and_leaves_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/a.jsonl");
    write_jsonl(&path, [1, 2]).unwrap();
    write_jsonl(&path, ["x"]).unwrap();
    assert_eq!(fs_err::read_to_string(&path).unwrap_or_default(), "\"x\"\n");
    let files = fs_err::read_dir(dir.path().join("sub")).map(Iterator::count).unwrap_or_default();
    assert_eq!(files, 1);
}

#[test]
fn staging_publishes_all_files_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    write_text(&out.join("queries.jsonl"), "old").unwrap();
    {
        let staging = Staging::create(out).unwrap();
        write_text(&staging.path("queries.jsonl"), "new").unwrap();
        // Dropped without publishing: a failed run.
    }
    assert_eq!(fs_err::read_to_string(out.join("queries.jsonl")).unwrap_or_default(), "old");
    assert!(!out.join(STAGING).exists());
    let staging = Staging::create(out).unwrap();
    write_text(&staging.path("queries.jsonl"), "new").unwrap();
    write_text(&staging.path("qrels/test.tsv"), "q\tc\t3\n").unwrap();
    staging.publish(&[]).unwrap();
    assert_eq!(fs_err::read_to_string(out.join("queries.jsonl")).unwrap_or_default(), "new");
    assert!(out.join("qrels/test.tsv").exists());
    assert!(!out.join(STAGING).exists());
}

#[test]
fn the_staging_folder_is_made_on_the_first_write_and_a_leftover_cleared_then() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    write_text(&out.join(STAGING).join("left.jsonl"), "a killed run's").unwrap();
    let listing = || -> Vec<_> {
        walkdir::WalkDir::new(out)
            .sort_by_file_name()
            .into_iter()
            .flatten()
            .map(walkdir::DirEntry::into_path)
            .collect()
    };
    let before = listing();
    {
        let staging = Staging::create(out).unwrap();
        staging.sync().unwrap();
        // Dropped unused: nothing made, nothing cleared.
    }
    assert_eq!(listing(), before);
    assert_eq!(text(&out.join(STAGING).join("left.jsonl")), "a killed run's");
    Staging::create(out).unwrap().publish(&[]).unwrap();
    assert!(!out.join("left.jsonl").exists(), "a publish of nothing staged publishes no leftover");
    let staging = Staging::create(out).unwrap();
    write_text(&staging.path("queries.jsonl"), "new").unwrap();
    assert!(!out.join(STAGING).join("left.jsonl").exists(), "the leftover is cleared by the first write");
    assert_eq!(staging.staged(), [PathBuf::from("queries.jsonl")]);
    staging.publish(&[]).unwrap();
    assert_eq!(text(&out.join("queries.jsonl")), "new");
    assert!(!out.join("left.jsonl").exists() && !out.join(STAGING).exists());
    // A publish of nothing staged makes nothing.
    Staging::create(out).unwrap().publish(&[]).unwrap();
    assert!(!out.join(STAGING).exists() && !out.join(ROLLBACK).exists());
}

#[test]
fn a_publish_that_fails_in_the_middle_puts_the_previous_files_back() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    for name in ["a.jsonl", "z.jsonl", "qrels/test.tsv", MANIFEST] {
        write_text(&out.join(name), "old").unwrap();
    }
    // A folder where a file goes: the move of m.txt fails after a.jsonl, b.jsonl and qrels/.
    write_text(&out.join("m.txt/in-the-way"), "x").unwrap();
    let staging = Staging::create(out).unwrap();
    for name in ["a.jsonl", "b.jsonl", "qrels/test.tsv", "m.txt", "z.jsonl", MANIFEST] {
        write_text(&staging.path(name), "new").unwrap();
    }
    let failed = staging.publish(&[]);
    assert!(failed.is_err_and(|e| chain(&e).contains("m.txt: a folder is where this file goes")));
    for name in ["a.jsonl", "z.jsonl", "qrels/test.tsv", MANIFEST] {
        assert_eq!(fs_err::read_to_string(out.join(name)).unwrap_or_default(), "old", "{name}");
    }
    assert!(!out.join("b.jsonl").exists(), "a file the publish created is removed again");
    assert!(out.join("m.txt/in-the-way").is_file());
    let left: Vec<_> = fs_err::read_dir(out)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .filter(|name| name != super::super::layout::PUBLISH)
        .collect();
    assert_eq!(left.len(), 5, "no staging or rollback folder left (the publish lock aside): {left:?}");
}

#[test]
fn a_publish_killed_in_the_middle_is_rolled_back_by_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    write_text(&out.join("a.jsonl"), "old").unwrap();
    write_text(&out.join(MANIFEST), "old").unwrap();
    let staging = Staging::create(out).unwrap();
    for name in ["a.jsonl", "b.jsonl", MANIFEST] {
        write_text(&staging.path(name), "new").unwrap();
    }
    let files = staging.staged();
    let mut rollback = Rollback::begin(out, &files, None).unwrap();
    for name in ["a.jsonl", "b.jsonl"] {
        rollback.replace(&staging.path(name), Path::new(name)).unwrap();
    }
    // Killed here: a.jsonl and b.jsonl are new, manifest.json is old.
    std::mem::forget(staging);
    assert_eq!(fs_err::read_to_string(out.join("a.jsonl")).unwrap_or_default(), "new");
    assert!(recover(out).unwrap(), "an interrupted publish is found");
    assert_eq!(fs_err::read_to_string(out.join("a.jsonl")).unwrap_or_default(), "old");
    assert_eq!(fs_err::read_to_string(out.join(MANIFEST)).unwrap_or_default(), "old");
    assert!(!out.join("b.jsonl").exists() && !out.join(ROLLBACK).exists());
    assert!(!recover(out).unwrap(), "nothing left to roll back");
}

/// An output folder with the files `names` holding "old", and a staging with them holding
/// "new".
fn old_and_staged(out: &Path, live: &[&str], staged: &[&str]) -> Staging {
    for name in live {
        write_text(&out.join(name), "old").unwrap();
    }
    let staging = Staging::create(out).unwrap();
    for name in staged {
        write_text(&staging.path(name), "new").unwrap();
    }
    staging
}

fn text(path: &Path) -> String {
    fs_err::read_to_string(path).unwrap_or_else(|e| format!("unreadable: {e}"))
}

#[test]
fn a_publish_that_keeps_moves_the_files_it_replaces_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let staging = old_and_staged(out, &["a.jsonl", "b.txt", MANIFEST], &["a.jsonl", "c.txt", MANIFEST]);
    let kept = Path::new("versions/v1");
    let keep = Keep { dir: kept, names: &["a.jsonl", "b.txt", "c.txt"] };
    staging.publish_keeping(&[], Some(&keep)).unwrap();
    for name in ["a.jsonl", "c.txt", MANIFEST] {
        assert_eq!(text(&out.join(name)), "new", "{name}");
    }
    assert_eq!(text(&out.join("versions/v1/a.jsonl")), "old", "replaced and named: moved");
    assert_eq!(text(&out.join("b.txt")), "old", "not replaced: left in place");
    for name in ["b.txt", "c.txt", MANIFEST] {
        assert!(!out.join(kept).join(name).exists(), "{name}: not replaced, new, or not named");
    }
    assert!(!out.join(ROLLBACK).exists() && !out.join(STAGING).exists());
}

#[test]
fn a_publish_that_keeps_puts_the_moved_files_back_when_it_fails_or_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let keep = Keep { dir: Path::new("versions/v1"), names: &["a.jsonl", "z.jsonl"] };
    // Failed: a folder where m.txt goes, after a.jsonl moved.
    write_text(&out.join("m.txt/in-the-way"), "x").unwrap();
    let staging = old_and_staged(out, &["a.jsonl", "z.jsonl"], &["a.jsonl", "m.txt", "z.jsonl"]);
    assert!(staging.publish_keeping(&[], Some(&keep)).is_err());
    for name in ["a.jsonl", "z.jsonl"] {
        assert_eq!(text(&out.join(name)), "old", "{name}");
        assert!(!out.join("versions/v1").join(name).exists(), "{name}");
    }
    // Killed after a.jsonl and b.jsonl moved: the next open puts a.jsonl back from versions/.
    let staging = old_and_staged(out, &[MANIFEST], &["a.jsonl", "b.jsonl", "z.jsonl", MANIFEST]);
    let files = staging.staged();
    let mut rollback = Rollback::begin(out, &files, Some(&keep)).unwrap();
    for name in ["a.jsonl", "b.jsonl"] {
        rollback.replace(&staging.path(name), Path::new(name)).unwrap();
    }
    std::mem::forget(staging);
    assert_eq!(text(&out.join("versions/v1/a.jsonl")), "old");
    assert!(recover(out).unwrap());
    for name in ["a.jsonl", "z.jsonl", MANIFEST] {
        assert_eq!(text(&out.join(name)), "old", "{name}");
    }
    assert!(!out.join("versions/v1/a.jsonl").exists() && !out.join("b.jsonl").exists());
    assert!(!out.join(ROLLBACK).exists());
}

#[test]
fn a_killed_publish_that_keeps_leaves_a_file_already_in_the_kept_folder_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let keep = Keep { dir: Path::new("versions/v1"), names: &["a.jsonl", "z.jsonl"] };
    // Killed before a.jsonl moved, while versions/v1/ holds other copies (an earlier
    // publish's): they are not the files this one moves, and stay; the live files stay.
    let staging = old_and_staged(out, &["a.jsonl", "z.jsonl"], &["a.jsonl", "b.jsonl", "z.jsonl"]);
    for name in ["a.jsonl", "z.jsonl"] {
        write_text(&out.join("versions/v1").join(name), "earlier").unwrap();
    }
    let mut rollback = Rollback::begin(out, &staging.staged(), Some(&keep)).unwrap();
    rollback.replace(&staging.path("b.jsonl"), Path::new("b.jsonl")).unwrap();
    std::mem::forget(staging);
    assert!(recover(out).unwrap());
    for name in ["a.jsonl", "z.jsonl"] {
        assert_eq!(text(&out.join(name)), "old", "{name}: the live file");
        assert_eq!(text(&out.join("versions/v1").join(name)), "earlier", "{name}: the copy");
    }
    assert!(!out.join("b.jsonl").exists() && !out.join(ROLLBACK).exists());
    // Killed after a.jsonl moved (onto the copy there): both go back.
    let staging = old_and_staged(out, &[], &["a.jsonl", "z.jsonl"]);
    let mut rollback = Rollback::begin(out, &staging.staged(), Some(&keep)).unwrap();
    rollback.replace(&staging.path("a.jsonl"), Path::new("a.jsonl")).unwrap();
    std::mem::forget(staging);
    assert_eq!(text(&out.join("versions/v1/a.jsonl")), "old", "moved");
    assert!(recover(out).unwrap());
    for name in ["a.jsonl", "z.jsonl"] {
        assert_eq!(text(&out.join(name)), "old", "{name}: the live file");
        assert_eq!(text(&out.join("versions/v1").join(name)), "earlier", "{name}: the copy");
    }
    // A publish that completes replaces the copy.
    let staging = old_and_staged(out, &[], &["a.jsonl"]);
    staging.publish_keeping(&[], Some(&keep)).unwrap();
    assert_eq!(text(&out.join("a.jsonl")), "new");
    assert_eq!(text(&out.join("versions/v1/a.jsonl")), "old");
    assert!(!out.join(ROLLBACK).exists());
}

#[test]
fn a_killed_publish_that_keeps_rolls_back_by_name_when_the_moved_file_is_renumbered() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let keep = Keep { dir: Path::new("versions/v1"), names: &["a.jsonl"] };
    let staging = old_and_staged(out, &["a.jsonl"], &["a.jsonl"]);
    let mut rollback = Rollback::begin(out, &staging.staged(), Some(&keep)).unwrap();
    rollback.replace(&staging.path("a.jsonl"), Path::new("a.jsonl")).unwrap();
    std::mem::forget(staging);
    // A reboot or remount that gives the moved file another inode (or device number):
    // the same bytes under a new inode.
    let moved = out.join("versions/v1/a.jsonl");
    let bytes = fs_err::read(&moved).unwrap();
    fs_err::remove_file(&moved).unwrap();
    fs_err::write(&moved, bytes).unwrap();
    assert!(recover(out).unwrap());
    assert_eq!(text(&out.join("a.jsonl")), "old", "the live file is back");
    assert!(!moved.exists() && !out.join(ROLLBACK).exists());
}

#[test]
fn make_parent_names_the_folders_it_made_and_the_one_above_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let folders = make_parent(&out.join("versions/v1/qrels/test.tsv")).unwrap();
    let expected =
        [out.join("versions/v1/qrels"), out.join("versions/v1"), out.join("versions"), out.to_owned()];
    assert_eq!(folders, expected);
    assert!(out.join("versions/v1/qrels").is_dir());
    assert_eq!(make_parent(&out.join("versions/v1/a.jsonl")).unwrap(), [out.join("versions/v1")]);
}

#[test]
fn a_publish_syncs_again_only_the_files_written_since_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    let staging = old_and_staged(dir.path(), &[], &["a.jsonl", "qrels/test.tsv"]);
    staging.sync().unwrap();
    write_text(&staging.path("b.jsonl"), "new").unwrap();
    write_text(&staging.path("qrels/test.tsv"), "newer").unwrap();
    let unsynced = staging.unsynced(&staging.staged());
    assert_eq!(unsynced, [PathBuf::from("b.jsonl"), PathBuf::from("qrels/test.tsv")]);
    staging.sync().unwrap();
    assert!(staging.unsynced(&staging.staged()).is_empty());
}

#[test]
fn a_publish_refuses_names_its_rollback_lists_cannot_hold_and_leaves_the_folder_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let mut names = vec![std::ffi::OsString::from("a\tcopy.txt"), "b\nc.txt".into(), "d\r".into()];
    #[cfg(unix)]
    names.push(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"e\xff.txt").to_owned());
    for name in names {
        let staging = old_and_staged(out, &["a.jsonl"], &["a.jsonl"]);
        fs_err::write(staging.path("").join(&name), "new").unwrap();
        let failed = staging.publish(&[]).map_err(|e| chain(&e));
        let Err(message) = failed else { panic!("{name:?} was published") };
        assert!(
            message.contains("a file name with a tab, a line break or bytes that are not UTF-8"),
            "{message}"
        );
        assert!(message.contains(&*name.to_string_lossy()), "{message}");
        assert_eq!(text(&out.join("a.jsonl")), "old", "{name:?}");
        assert!(!out.join(&name).exists() && !out.join(ROLLBACK).exists() && !out.join(STAGING).exists());
    }
    let keep = Keep { dir: Path::new("versions/v\t1"), names: &["a.jsonl"] };
    let staging = old_and_staged(out, &["a.jsonl"], &["a.jsonl"]);
    assert!(staging.publish_keeping(&[], Some(&keep)).is_err());
    assert_eq!(text(&out.join("a.jsonl")), "old");
}

#[test]
fn a_file_rewritten_in_place_after_the_sync_is_synced_again() {
    let dir = tempfile::tempdir().unwrap();
    let staging = old_and_staged(dir.path(), &[], &["a.jsonl", "b.jsonl"]);
    let (a, b) = (staging.path("a.jsonl"), staging.path("b.jsonl"));
    staging.sync().unwrap();
    assert!(staging.unsynced(&staging.staged()).is_empty());
    // Through paths taken before the sync: the same inodes, other contents.
    fs_err::write(&a, "newer").unwrap();
    std::fs::OpenOptions::new().append(true).open(&b).and_then(|mut f| f.write_all(b"+")).unwrap();
    assert_eq!(staging.unsynced(&staging.staged()), [PathBuf::from("a.jsonl"), PathBuf::from("b.jsonl")]);
    staging.sync().unwrap();
    assert!(staging.unsynced(&staging.staged()).is_empty());
    // A path handed out again counts as written, whatever its file looks like.
    let _ = staging.path("b.jsonl");
    assert_eq!(staging.unsynced(&staging.staged()), [PathBuf::from("b.jsonl")]);
}

#[test]
fn failed_fill_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.txt");
    write_text(&path, "old").unwrap();
    let failed = write_atomic(&path, |_| Err(std::io::Error::other("boom")));
    assert!(failed.is_err_and(|e| e.to_string().contains("a.txt")));
    assert_eq!(fs_err::read_to_string(&path).unwrap_or_default(), "old");
}
