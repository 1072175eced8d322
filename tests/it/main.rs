//! Integration tests: run the real `qrelgen` binary on small corpora in temporary folders and
//! check the files it writes.

#![allow(clippy::unwrap_used, reason = "a test that cannot unwrap has failed")]

mod batch;
mod build;
mod chinese;
mod controls;
mod corpus;
mod eval;
mod faults;
mod golden;
mod install;
mod json;
mod llm;
mod mock;
mod modules;
mod pool;
mod pooling;
mod readme;
mod rebuild;
mod refresh;
mod refresh_identity;
mod report;
mod review;
mod run;
mod table;
mod validate;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The bundled sample corpus.
fn sample_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpora/harbor-sync")
}

/// A finished run of the binary.
struct Run {
    out: PathBuf,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    #[track_caller]
    fn assert_code(&self, expected: i32) -> &Self {
        assert_eq!(self.code, Some(expected), "stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }

    fn file(&self, name: &str) -> String {
        fs_err::read_to_string(self.out.join(name)).unwrap()
    }

    fn jsonl(&self, name: &str) -> Vec<Value> {
        self.file(name)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: {e}: {l}")))
            .collect()
    }

    /// `(query id, chunk id, grade)` rows of `qrels.trec`.
    fn trec(&self) -> Vec<(String, String, u8)> {
        self.file("qrels.trec")
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                assert_eq!(f.len(), 4, "bad TREC line {l:?}");
                assert_eq!(f[1], "0");
                (f[0].to_owned(), f[2].to_owned(), f[3].parse().unwrap())
            })
            .collect()
    }
}

/// Runs `qrelgen build --corpus CORPUS --out <dir>/out ARGS…` with no `OpenAI` settings in the
/// environment.
fn build(dir: &Path, corpus: &Path, args: &[&str]) -> Run {
    let out = dir.join("out");
    let mut all = vec!["build", "--corpus", path_str(corpus), "--out", path_str(&out)];
    all.extend_from_slice(args);
    let output = qrelgen(&all);
    Run {
        out,
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Longest a test lets the binary run: a hang fails the test instead of stalling CI.
const RUN_LIMIT: Duration = Duration::from_secs(120);

fn qrelgen(args: &[&str]) -> Output {
    qrelgen_with_env(args, &[])
}

/// Runs the binary with no `OPENAI_*`/`QRELGEN_*` variables but `env`, killing it after
/// [`RUN_LIMIT`].
fn qrelgen_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_qrelgen"));
    command.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (key, _) in std::env::vars() {
        if key.starts_with("OPENAI_") || key.starts_with("QRELGEN_") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot run qrelgen: {e}"));
    let started = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            panic!("qrelgen {args:?} ran longer than {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Whether `path` is one of a set's lock files (`.qrelgen.lock`, `.qrelgen.publish`): state of the
/// folder, not part of the set, and written by every writer.
fn is_lock_file(path: &Path) -> bool {
    path.file_name().is_some_and(|name| name.to_string_lossy().starts_with(".qrelgen."))
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap_or_else(|| panic!("non-UTF-8 temp path {}", path.display()))
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) {
    if let Some(parent) = path.parent() {
        fs_err::create_dir_all(parent).unwrap();
    }
    fs_err::write(path, bytes).unwrap();
}

fn str_field<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| panic!("no {pointer} in {value}"))
}
