//! The README says what the tool does today: its first output block, the chunk id suffixes, the
//! query metadata, the Rust version.

use super::{build, path_str, sample_corpus, str_field, tempdir, write};
use std::path::Path;

fn readme() -> String {
    fs_err::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// The lines of the README's first code block without a language: what the main job prints.
fn first_output_block(readme: &str) -> Vec<String> {
    let mut blocks = readme.split("```").skip(1).step_by(2);
    let block =
        blocks.find(|b| b.starts_with('\n')).unwrap_or_else(|| panic!("no output block in the README"));
    block.lines().skip(1).map(str::to_owned).collect()
}

/// `(0.01s)` → `(…s)`: timings differ from run to run.
fn without_timings(line: &str) -> String {
    match line.rfind(" (") {
        Some(at) if line.ends_with("s)") && line[at + 2..line.len() - 2].parse::<f64>().is_ok() => {
            format!("{} (…s)", &line[..at])
        }
        _ => line.to_owned(),
    }
}

#[test]
fn the_first_output_block_is_what_the_main_job_prints() {
    let dir = tempdir();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_qrelgen"))
        .current_dir(dir.path())
        .args(["build", "--corpus", path_str(&sample_corpus()), "--out", "output/harbor-sync"])
        .env_remove("OPENAI_BASE_URL")
        .env_remove("QRELGEN_MODEL")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let printed: Vec<String> = String::from_utf8_lossy(&output.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&output.stdout).lines())
        .map(without_timings)
        .collect();
    let readme: Vec<String> = first_output_block(&readme()).iter().map(|l| without_timings(l)).collect();
    assert_eq!(readme, printed, "update the README's first output block");
}

#[test]
fn repeated_chunks_get_the_suffixes_the_readme_names() {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    let paragraph = "Deleted files stay in the trash for thirty days before the nightly purge removes them.";
    write(&corpus.join("a.md"), format!("{paragraph}\n\n{paragraph}\n\n{paragraph}\n"));
    let run = build(
        dir.path(),
        &corpus,
        &["--chunk-size", "100", "--chunk-overlap", "0", "--queries", "1", "--allow-shortfall"],
    );
    let ids: Vec<String> =
        run.jsonl("corpus.jsonl").iter().map(|c| str_field(c, "/_id").to_owned()).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(ids[1], format!("{}-1", ids[0]));
    assert_eq!(ids[2], format!("{}-2", ids[0]));
    assert!(
        readme().contains("(plus `-1`, `-2` … when a document repeats a chunk's text"),
        "the README names the suffixes"
    );
}

#[test]
fn the_query_metadata_is_as_documented() {
    let dir = tempdir();
    let run = build(dir.path(), &sample_corpus(), &["--queries", "20"]);
    run.assert_code(0);
    for q in run.jsonl("queries.jsonl") {
        let answerable = str_field(&q, "/metadata/type") != "no_answer";
        assert_eq!(q.pointer("/metadata/difficulty").is_some(), answerable, "{q}");
        assert!(q.pointer("/metadata/language").is_some(), "{q}");
    }
    let readme = readme();
    assert!(
        readme.contains("\"difficulty\"? (not on `no_answer`"),
        "the README says difficulty is absent on no_answer"
    );
    assert!(readme.contains("\"language\""), "the README lists the language field");
}

#[test]
fn the_readme_says_how_to_install_and_which_rust() {
    let manifest =
        fs_err::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap_or_default();
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no rust-version in Cargo.toml"));
    let readme = readme();
    assert!(readme.contains(&format!("Rust {version} or newer")), "the README names Rust {version}");
    assert!(readme.contains("cargo install --path ."), "the README says how to install");
}
