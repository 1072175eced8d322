//! `qrelgen run`: the set's own BM25 index as a baseline run, written in TREC format.

use super::exit;
use super::json::JsonFlag;
use anyhow::Context as _;
use clap::Args;
use qrelgen::eval::baseline;
use qrelgen::progress::Progress;
use qrelgen::set::{Overwrite, RUNS_DIR, ReadGuard, ensure_outside_set};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The set folder (the --out of qrelgen build): its queries are searched in its index
    /// (index/, rebuilt from corpus.jsonl if missing or stale).
    #[arg(long, value_name = "DIR")]
    set: PathBuf,
    /// Hits per query.
    #[arg(long, default_value_t = 100, value_name = "N")]
    k: usize,
    /// The run file to write (TREC: `qid Q0 docid rank score qrelgen-bm25`): outside the set
    /// folder, or in its runs/ folder; an existing file must be a run qrelgen wrote.
    #[arg(long, value_name = "FILE")]
    to: PathBuf,
    /// Replace --to even if it is not a run qrelgen wrote (never a file of a set).
    #[arg(long)]
    force: bool,
    /// No progress output.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    json: JsonFlag,
}

/// `run --json`: the run written.
#[derive(Debug, Serialize)]
struct RunJson<'a> {
    /// The set whose queries were searched.
    set: &'a Path,
    /// The run file written.
    to: &'a Path,
    /// Hits per query at most.
    k: usize,
    /// Queries searched (every query of the set, one result list each).
    queries: usize,
    /// Hits written, over all queries.
    hits: usize,
}

/// Writes the baseline run.
pub fn run(args: &RunArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    if args.k == 0 {
        anyhow::bail!("invalid --k: at least 1 hit per query");
    }
    let overwrite = if args.force { Overwrite::Force } else { Overwrite::Ours };
    ensure_outside_set(&args.to, "--to", &[RUNS_DIR], overwrite, baseline::is_our_run)?;
    let progress = Progress::stderr(args.quiet);
    let _read = ReadGuard::open(&args.set, "run")
        .with_context(|| format!("reading the set in {}", args.set.display()))?;
    let run = baseline::bm25_run(&args.set, args.k, &progress)
        .with_context(|| format!("searching the queries of {}", args.set.display()))?;
    qrelgen::output::write_atomic(&args.to, |w| baseline::write_trec(w, &run))?;
    let hits: usize = run.results.iter().map(|r| r.hits.len()).sum();
    if args.json.json {
        let json = RunJson { set: &args.set, to: &args.to, k: args.k, queries: run.results.len(), hits };
        JsonFlag::write(stdout, &json)?;
    } else {
        writeln!(
            stdout,
            "{} queries, {hits} hits (top {}) in {}",
            run.results.len(),
            args.k,
            args.to.display()
        )?;
    }
    if !args.quiet {
        eprintln!("next: qrelgen eval --set {} --run {}", args.set.display(), args.to.display());
    }
    Ok(exit::OK)
}
