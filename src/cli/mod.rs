//! Command-line parsing (clap) and dispatch. The library never sees flags: each command maps its
//! arguments onto the library's config structs.

mod build;
mod eval;
mod review;
mod run;
mod settings;
mod validate;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Exit codes, as documented in the README.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Finished, but the set falls short of what was asked (or is empty).
    pub const SHORTFALL: u8 = 1;
    /// `validate` found problems.
    pub const PROBLEMS: u8 = 1;
    /// Usage error or fatal problem.
    pub const FATAL: u8 = 2;
    /// The token or cost budget ran out; rerunning with a higher limit resumes.
    pub const BUDGET: u8 = 3;
}

/// Build synthetic retrieval test sets (queries, qrels, review queue) from a corpus.
#[derive(Debug, Parser)]
#[command(name = "qrelgen", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build a test set: chunk the corpus, index it, write queries, filter them by a BM25 round
    /// trip, sample a review queue, and write a BEIR dataset with TREC qrels.
    Build(Box<build::BuildArgs>),
    /// The human review loop: export the review queue to annotators, apply their decisions as a
    /// new version of the set, compare two reviewers, estimate the share of good queries.
    Review(review::ReviewArgs),
    /// Check a set folder or a qrels file: ids, duplicate pairs, dangling ids, grades; exit 1 and
    /// one line per problem.
    Validate(validate::ValidateArgs),
    /// Write a baseline run: every query of a set searched in the set's own BM25 index (TREC
    /// format), so a first number needs no retriever of your own.
    Run(run::RunArgs),
    /// Score runs against a set (or any qrels): metrics per query and by slice, no_answer
    /// abstention, layers, paired statistics, agreement with human judgments; writes
    /// eval.json, per_query.tsv and eval.html.
    Eval(Box<eval::EvalArgs>),
}

/// Parses the command line, runs the command and maps the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(args) => build::run(*args),
        Command::Review(args) => review::run(args),
        Command::Validate(args) => validate::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Eval(args) => eval::run(&args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(exit::FATAL)
        }
    }
}
