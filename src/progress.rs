//! Progress on stderr: a bar per stage on a terminal, a line every few seconds otherwise,
//! nothing with `--quiet`.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a non-terminal stderr gets a progress line.
const LINE_INTERVAL: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Hidden,
    Bar,
    Lines,
}

/// Where progress goes; hands out one [`StageProgress`] per pipeline stage.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    mode: Mode,
    warnings: bool,
}

impl Progress {
    /// Progress for the terminal (or log) on stderr; `quiet` silences it.
    #[must_use]
    pub fn stderr(quiet: bool) -> Self {
        let mode = match (quiet, std::io::stderr().is_terminal()) {
            (true, _) => Mode::Hidden,
            (false, true) => Mode::Bar,
            (false, false) => Mode::Lines,
        };
        Self { mode, warnings: true }
    }

    /// No progress at all (tests, library use).
    #[must_use]
    pub fn hidden() -> Self {
        Self { mode: Mode::Hidden, warnings: false }
    }

    /// Prints a warning (even with `--quiet`; not for [`Progress::hidden`]).
    pub fn warn(&self, message: &str) {
        if self.warnings {
            eprintln!("warning: {message}");
        }
    }

    /// Starts a stage of `total` steps (0 if unknown).
    #[must_use]
    pub fn stage(&self, name: &'static str, total: u64) -> StageProgress {
        self.start(name, total, false)
    }

    /// Starts a stage that counts bytes, `total` of them (0 if unknown).
    #[must_use]
    pub fn stage_bytes(&self, name: &'static str, total: u64) -> StageProgress {
        self.start(name, total, true)
    }

    fn start(self, name: &'static str, total: u64, bytes: bool) -> StageProgress {
        let bar = (self.mode == Mode::Bar).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let template = match (total, bytes) {
                (0, false) => "{prefix:>9} {spinner} {human_pos} done, {elapsed}",
                (0, true) => "{prefix:>9} {spinner} {binary_bytes} done, {binary_bytes_per_sec}, {elapsed}",
                (_, false) => "{prefix:>9} [{bar:30}] {human_pos}/{human_len} {per_sec:.0}, eta {eta} {msg}",
                (_, true) => {
                    "{prefix:>9} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}, eta {eta} {msg}"
                }
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(name);
            bar
        });
        StageProgress {
            name,
            bytes,
            mode: self.mode,
            total: AtomicU64::new(total),
            done: AtomicU64::new(0),
            bar,
            started: Instant::now(),
            last_line: Mutex::new(Instant::now()),
            note: Mutex::new(String::new()),
        }
    }
}

/// Progress of one stage.
#[derive(Debug)]
pub struct StageProgress {
    name: &'static str,
    /// Whether the steps are bytes.
    bytes: bool,
    mode: Mode,
    total: AtomicU64,
    done: AtomicU64,
    bar: Option<ProgressBar>,
    started: Instant,
    last_line: Mutex<Instant>,
    note: Mutex<String>,
}

impl StageProgress {
    /// A stage that reports nothing.
    #[must_use]
    pub fn hidden() -> Self {
        Progress::hidden().stage("", 0)
    }

    /// Shows a short note next to the count (e.g. tokens and errors so far).
    pub fn note(&self, note: String) {
        if let Some(bar) = &self.bar {
            bar.set_message(note.clone());
        }
        if let Ok(mut slot) = self.note.lock() {
            *slot = note;
        }
    }

    /// Records `n` more steps done.
    pub fn inc(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(bar) = &self.bar {
            bar.inc(n);
        } else if self.mode == Mode::Lines {
            let Ok(mut last) = self.last_line.lock() else { return };
            if last.elapsed() >= LINE_INTERVAL {
                *last = Instant::now();
                let total = self.total.load(Ordering::Relaxed);
                let note = self.note.lock().map(|n| n.clone()).unwrap_or_default();
                let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
                if self.bytes {
                    let mib = |n: f64| n / f64::from(1 << 20);
                    let (done, total) = (mib(done as f64), mib(total as f64));
                    eprintln!("{:>9}: {done:.1}/{total:.1} MiB ({:.1} MiB/s) {note}", self.name, mib(rate));
                } else {
                    eprintln!("{:>9}: {done}/{total} ({rate:.1}/s) {note}", self.name);
                }
            }
        }
    }

    /// Prints a line about the stage now (a batch submitted, polled, imported).
    pub fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("{:>9}: {line}", self.name)),
            None if self.mode == Mode::Lines => eprintln!("{:>9}: {line}", self.name),
            None => {}
        }
    }

    /// Ends the stage with a one-line summary and returns its wall time.
    pub fn finish(&self, summary: &str) -> Duration {
        let elapsed = self.started.elapsed();
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if self.mode != Mode::Hidden {
            eprintln!("{:>9}: {summary} ({:.2}s)", self.name, elapsed.as_secs_f64());
        }
        elapsed
    }
}

/// Wall time per stage in milliseconds, summed over rounds (the manifest's `run.timings_ms`).
#[derive(Debug, Default)]
pub struct Timings(BTreeMap<&'static str, u64>);

impl Timings {
    /// Adds `elapsed` to `stage`'s time.
    pub fn add(&mut self, stage: &'static str, elapsed: Duration) {
        *self.0.entry(stage).or_insert(0) += u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    }

    /// Milliseconds per stage.
    #[must_use]
    pub fn into_millis(self) -> BTreeMap<&'static str, u64> {
        self.0
    }
}
