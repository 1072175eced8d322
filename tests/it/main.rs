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
/// Says loudly that a test is skipped for want of `prerequisite` (what is missing and how to get
/// it), or fails it when `QRELGEN_REQUIRE` names the prerequisite (`.ci/run` sets it for what it
/// installed or found, so that CI never passes a test it did not run).
fn skip(test: &str, prerequisite: &str, missing: &str) {
    let required = std::env::var("QRELGEN_REQUIRE").unwrap_or_default();
    let said = skip_or_fail(&required, test, prerequisite, missing);
    // Straight to the process's stderr: the test harness captures `eprintln!` of passing tests.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), said.as_bytes());
}

/// What [`skip`] prints, given `QRELGEN_REQUIRE`'s value `required`; panics if it names
/// `prerequisite`.
fn skip_or_fail(required: &str, test: &str, prerequisite: &str, missing: &str) -> String {
    assert!(
        !required.split(',').any(|r| r.trim() == prerequisite),
        "{test}: {missing}, and QRELGEN_REQUIRE says {prerequisite} is here"
    );
    format!("\n**** SKIPPED {test}: {missing} ****\n")
}

#[test]
fn a_skip_is_loud_and_a_required_prerequisite_fails_instead() {
    assert!(skip_or_fail("shared", "t", "chromium", "no browser").contains("**** SKIPPED t: no browser"));
    let failed = std::panic::catch_unwind(|| skip_or_fail("shared, chromium", "t", "chromium", "no browser"));
    assert!(failed.is_err(), "a required prerequisite that is missing fails the test");
}

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
    let child = command.spawn().unwrap_or_else(|e| panic!("cannot run qrelgen: {e}"));
    output_within(child, RUN_LIMIT)
        .unwrap_or_else(|| panic!("qrelgen {args:?} ran longer than {RUN_LIMIT:?}"))
}

/// The output of `child` once it ends, or `None` (and the child killed) if it runs longer than
/// `limit` (a guard against a hang, not a verdict). Its piped stdout and stderr are read while
/// it runs: a child writing more than a pipe holds would otherwise wait for us forever.
fn output_within(mut child: std::process::Child, limit: Duration) -> Option<Output> {
    fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Some(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
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

#[test]
fn a_child_writing_more_than_a_pipe_holds_is_read_to_the_end() {
    let child = Command::new("sh")
        .args(["-c", "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = output_within(child, Duration::from_secs(60)).unwrap_or_else(|| panic!("it hung"));
    assert!(output.status.success());
    assert_eq!((output.stdout.len(), output.stderr.len()), (300_000, 200_000));
}
