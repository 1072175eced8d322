//! `qrelgen run`: the set's own BM25 index as a baseline run, written in TREC format.

use super::exit;
use anyhow::Context as _;
use clap::Args;
use qrelgen::eval::baseline;
use qrelgen::progress::Progress;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The set folder (the --out of qrelgen build): its queries are searched in its index
    /// (index/, rebuilt from corpus.jsonl if missing or stale).
    #[arg(long, value_name = "DIR")]
    set: PathBuf,
    /// Hits per query.
    #[arg(long, default_value_t = 100, value_name = "N")]
    k: usize,
    /// The run file to write (TREC: `qid Q0 docid rank score qrelgen-bm25`).
    #[arg(long, value_name = "FILE")]
    to: PathBuf,
    /// No progress output.
    #[arg(long, short)]
    quiet: bool,
}

/// Writes the baseline run.
pub fn run(args: &RunArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    if args.k == 0 {
        anyhow::bail!("invalid --k: at least 1 hit per query");
    }
    let progress = Progress::stderr(args.quiet);
    let run = baseline::bm25_run(&args.set, args.k, &progress)
        .with_context(|| format!("searching the queries of {}", args.set.display()))?;
    qrelgen::output::write_atomic(&args.to, |w| baseline::write_trec(w, &run))?;
    let hits: usize = run.results.iter().map(|r| r.hits.len()).sum();
    writeln!(stdout, "{} queries, {hits} hits (top {}) in {}", run.results.len(), args.k, args.to.display())?;
    if !args.quiet {
        eprintln!("next: qrelgen eval --set {} --run {}", args.set.display(), args.to.display());
    }
    Ok(exit::OK)
}
