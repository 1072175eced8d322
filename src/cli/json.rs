//! `--json`: the one flag, and the one way, by which a command prints its summary for a script.
//!
//! With `--json` a command writes one JSON document (pretty-printed, one trailing newline) to
//! stdout and nothing else there; progress, notes and warnings stay on stderr, and the exit code
//! is the one the text summary would have. Each command's document is a typed struct in its own
//! module, built from the same outcome its text summary prints.

use clap::Args;
use serde::Serialize;
use std::io::Write;

/// The `--json` flag, flattened into every command that prints a summary.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct JsonFlag {
    /// Print the summary as one JSON document on stdout (nothing else goes there); progress,
    /// notes and warnings stay on stderr, and the exit code is the same.
    #[arg(long)]
    pub json: bool,
}

impl JsonFlag {
    /// Writes `summary` to `out` as the command's one JSON document.
    ///
    /// # Errors
    /// When `summary` cannot be serialized or `out` cannot be written.
    pub fn write(out: &mut dyn Write, summary: &impl Serialize) -> anyhow::Result<()> {
        // Serialized whole first, so that a closed stdout is an io::Error (a quiet exit 0), not
        // a serde_json error.
        let json = serde_json::to_string_pretty(summary)?;
        writeln!(out, "{json}")?;
        Ok(())
    }
}

/// What a build or refresh would cost (`--dry-run`), as a range: from every query kept in round 1
/// (`low`) to half of them dropped in each round (`high`).
#[derive(Debug, Serialize)]
pub struct DryRunJson {
    /// Queries planned in round 1.
    pub queries: usize,
    /// Round 1, if every query is kept.
    pub low: qrelgen::generate::Estimate,
    /// Every round, if half the queries are dropped.
    pub high: qrelgen::generate::Estimate,
    /// Rounds at the high end.
    pub rounds: u32,
    /// The share of queries kept in each round at the high end, in percent.
    pub low_yield_percent: u32,
    /// With `--batch`: batches at the low and at the high end.
    pub batches: [u64; 2],
}

impl From<&qrelgen::build::DryRun> for DryRunJson {
    fn from(d: &qrelgen::build::DryRun) -> Self {
        Self {
            queries: d.queries,
            low: d.low,
            high: d.high,
            rounds: d.rounds,
            low_yield_percent: d.low_yield_percent,
            batches: [d.batches.0, d.batches.1],
        }
    }
}
