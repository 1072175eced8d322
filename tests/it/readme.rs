//! The README and the guides in docs/ say what the tool does today: the README's first output
//! block, its install lines and Rust version; the `run` and `eval` examples with their output (the
//! README's quick start, docs/eval.md's); the chunk id suffixes (docs/build.md); the query metadata
//! (docs/formats.md).

use super::{build, path_str, sample_corpus, str_field, tempdir, write};
use std::path::Path;

fn readme() -> String {
    doc("README.md")
}

/// A documentation file, by its path from the repository's root.
fn doc(path: &str) -> String {
    fs_err::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
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
        doc("docs/build.md").contains("(plus `-1`, `-2` … when a document repeats a chunk's text"),
        "docs/build.md names the suffixes"
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
    let formats = doc("docs/formats.md");
    assert!(
        formats.contains("\"difficulty\"? (not on `no_answer`"),
        "docs/formats.md says difficulty is absent on no_answer"
    );
    assert!(formats.contains("\"language\""), "docs/formats.md lists the language field");
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

/// A Markdown file's fenced blocks in order: (info string, lines).
fn fenced_blocks(readme: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, Vec<String>)> = None;
    for line in readme.lines() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(info), None) => open = Some((info.trim().to_owned(), Vec::new())),
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some((info, mut lines))) => {
                lines.push(line.to_owned());
                open = Some((info, lines));
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The `run` and `eval` examples: a `sh` block with such a command, and the output block after it.
fn eval_examples(readme: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let blocks = fenced_blocks(readme);
    blocks
        .windows(2)
        .filter(|pair| {
            pair[0].0 == "sh"
                && pair[1].0.is_empty()
                && pair[0].1.iter().any(|l| l.starts_with("cargo run --release -- eval"))
        })
        .map(|pair| (pair[0].1.clone(), pair[1].1.clone()))
        .collect()
}

/// Whether `printed` shows `shown` in order: a shown line ending in `…` matches a printed line it
/// begins, a line `…` alone skips printed lines, any other must be printed as it is.
fn shows(printed: &[&str], shown: &[String]) -> Result<(), String> {
    let mut at = 0;
    let mut skipping = false;
    for want in shown {
        if want == "…" {
            skipping = true;
            continue;
        }
        let matches = |line: &str| match want.strip_suffix('…') {
            Some(prefix) => line.starts_with(prefix),
            None => line == want,
        };
        let found = if skipping {
            printed[at..].iter().position(|l| matches(l)).map(|i| at + i)
        } else {
            printed.get(at).filter(|l| matches(l)).map(|_| at)
        };
        match found {
            Some(i) => at = i + 1,
            None => return Err(format!("not printed as shown: {want:?} (after line {at})")),
        }
        skipping = false;
    }
    Ok(())
}

#[test]
fn the_readme_eval_examples_print_what_it_shows() {
    // The README's quick start first (it writes the run docs/eval.md's examples compare with).
    let readme = eval_examples(&readme());
    assert!(!readme.is_empty(), "the README shows an eval example with its output");
    let guide = eval_examples(&doc("docs/eval.md"));
    assert!(guide.len() >= 2, "docs/eval.md shows eval examples with their output");
    let examples =
        readme.into_iter().map(|e| ("README.md", e)).chain(guide.into_iter().map(|e| ("docs/eval.md", e)));
    let dir = tempdir();
    let bin = env!("CARGO_BIN_EXE_qrelgen");
    let sh = |command: &str| {
        std::process::Command::new("sh")
            .current_dir(dir.path())
            .args(["-c", &command.replace("cargo run --release --", &format!("'{bin}'"))])
            .env_remove("OPENAI_BASE_URL")
            .env_remove("QRELGEN_MODEL")
            .output()
            .unwrap()
    };
    let build = format!(
        "cargo run --release -- build --corpus '{}' --out output/harbor-sync --quiet",
        sample_corpus().display()
    );
    assert_eq!(sh(&build).status.code(), Some(0));
    // The examples on the bundled BEIR-format collections name them from the repository's root.
    fs_err::create_dir_all(dir.path().join("tests")).unwrap();
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
        dir.path().join("tests/fixtures"),
    )
    .unwrap();
    for (file, (commands, shown)) in examples {
        let mut printed = String::new();
        for command in &commands {
            let command = command.split(" # ").next().unwrap_or_default().trim();
            let output = sh(command);
            assert_eq!(
                output.status.code(),
                Some(0),
                "{command}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            printed = String::from_utf8_lossy(&output.stdout).into_owned();
        }
        let lines: Vec<&str> = printed.lines().collect();
        if let Err(problem) = shows(&lines, &shown) {
            panic!("update {file}'s output block after {commands:?}: {problem}\nprinted:\n{printed}");
        }
    }
}

#[test]
fn shown_lines_match_in_order_with_ellipses() {
    let printed = ["a", "b 1", "c", "d"];
    let shown = |lines: &[&str]| lines.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
    assert_eq!(shows(&printed, &shown(&["a", "b …", "c"])), Ok(()));
    assert_eq!(shows(&printed, &shown(&["…", "c", "d"])), Ok(()));
    assert!(shows(&printed, &shown(&["a", "c"])).is_err(), "a line cannot be skipped without …");
    assert!(shows(&printed, &shown(&["a", "b 2"])).is_err(), "a changed figure fails");
}
