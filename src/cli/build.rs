//! `qrelgen build`: flags → [`BuildConfig`] → [`pipeline::build`] → summary and exit code.

use super::exit;
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use qrelgen::BuildConfig;
use qrelgen::chunk::{ChunkConfig, SizeUnit};
use qrelgen::filter::{FilterConfig, HopRule, OnMiss};
use qrelgen::generate::Mix;
use qrelgen::pipeline::{self, Outcome};
use qrelgen::progress::Progress;
use qrelgen::sample::SampleConfig;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Corpus: a folder of .txt/.md/.html files (recursive), or a JSONL file of
    /// {"id","title","text"} lines (BEIR corpus.jsonl with "_id" works too).
    #[arg(long, value_name = "PATH")]
    corpus: PathBuf,

    /// Output folder; it becomes a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/test.tsv)
    /// plus qrels.trec, candidates.jsonl, `review_queue.jsonl`, manifest.json and report.md.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,

    /// The JSONL lines are chunks already: use them as-is and keep their ids.
    #[arg(long)]
    prechunked: bool,

    /// Largest chunk, in --chunk-unit units.
    #[arg(long, default_value_t = 1000, value_name = "N", help_heading = "Chunking")]
    chunk_size: usize,

    /// Overlap between neighbouring chunks, in --chunk-unit units.
    #[arg(long, default_value_t = 100, value_name = "N", help_heading = "Chunking")]
    chunk_overlap: usize,

    /// What chunk sizes count: characters, or `cl100k_base` tokens.
    #[arg(long, value_enum, default_value_t = UnitArg::Chars, help_heading = "Chunking")]
    chunk_unit: UnitArg,

    /// Queries wanted in the test set.
    #[arg(long, default_value_t = 100, value_name = "N", help_heading = "Queries")]
    queries: usize,

    /// Share of each query type (direct, paraphrase, `multi_hop`, `no_answer`); shares add up to 1.
    #[arg(long, default_value = "direct=0.4,paraphrase=0.3,multi_hop=0.15,no_answer=0.15",
          value_parser = str::parse::<Mix>, help_heading = "Queries")]
    mix: Mix,

    /// Most queries per document, so a few long files don't dominate [default: twice a fair
    /// share, at least 2].
    #[arg(long, value_name = "N", help_heading = "Queries")]
    per_doc_cap: Option<usize>,

    /// Seed of every random draw: the same corpus, flags and seed give identical files.
    #[arg(long, default_value_t = 42, help_heading = "Queries")]
    seed: u64,

    /// Generation rounds at most; rounds after the first top up types that fell short.
    #[arg(long, default_value_t = 5, value_name = "N", help_heading = "Queries")]
    max_rounds: u32,

    /// A query's source chunk must rank within the top N of a BM25 search with the query.
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1000), help_heading = "Round-trip filter")]
    top_n: u64,

    /// What to do with a query whose source misses the top N: drop it, or keep it flagged for
    /// review.
    #[arg(long, value_enum, default_value_t = OnMissArg::Drop, help_heading = "Round-trip filter")]
    on_miss: OnMissArg,

    /// Which hops of a `multi_hop` query must rank within the top N.
    #[arg(long, value_enum, default_value_t = HopRuleArg::All, help_heading = "Round-trip filter")]
    multi_hop_rule: HopRuleArg,

    /// Queries in the review queue (stratified by type, flagged first).
    #[arg(long, default_value_t = 50, value_name = "N", help_heading = "Review queue")]
    review_size: usize,

    /// Review-queue items per query type at least, so rare types appear.
    #[arg(long, default_value_t = 5, value_name = "N", help_heading = "Review queue")]
    review_min_per_type: usize,

    /// Exit 0 even if some type ends below its quota (the report still says so).
    #[arg(long)]
    allow_shortfall: bool,

    /// No progress output (warnings and errors still go to stderr).
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum UnitArg {
    Chars,
    Tokens,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnMissArg {
    Drop,
    Flag,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum HopRuleArg {
    All,
    Any,
}

impl BuildArgs {
    fn config(&self) -> BuildConfig {
        BuildConfig {
            corpus: self.corpus.clone(),
            prechunked: self.prechunked,
            chunking: ChunkConfig {
                size: self.chunk_size,
                overlap: self.chunk_overlap,
                unit: match self.chunk_unit {
                    UnitArg::Chars => SizeUnit::Chars,
                    UnitArg::Tokens => SizeUnit::Tokens,
                },
            },
            queries: self.queries,
            mix: self.mix.clone(),
            per_doc_cap: self.per_doc_cap,
            seed: self.seed,
            max_rounds: self.max_rounds,
            filter: FilterConfig {
                top_n: usize::try_from(self.top_n).unwrap_or(usize::MAX),
                on_miss: match self.on_miss {
                    OnMissArg::Drop => OnMiss::Drop,
                    OnMissArg::Flag => OnMiss::Flag,
                },
                multi_hop_rule: match self.multi_hop_rule {
                    HopRuleArg::All => HopRule::All,
                    HopRuleArg::Any => HopRule::Any,
                },
            },
            review: SampleConfig { size: self.review_size, min_per_type: self.review_min_per_type },
        }
    }
}

/// Runs the build and returns the exit code.
pub fn run(args: &BuildArgs) -> anyhow::Result<u8> {
    let config = args.config();
    let progress = Progress::stderr(args.quiet);
    let outcome = pipeline::build(&config, &args.out, &progress)
        .with_context(|| format!("building a test set from {}", config.corpus.display()))?;
    print_summary(&outcome, args);
    Ok(exit_code(&outcome, args.allow_shortfall))
}

fn print_summary(outcome: &Outcome, args: &BuildArgs) {
    let per_type: Vec<String> = outcome.counts.iter().map(|(t, c)| format!("{t} {}", c.in_set())).collect();
    println!(
        "{} queries ({}) and {} to review in {}",
        outcome.in_set,
        per_type.join(", "),
        outcome.review_items,
        args.out.display()
    );
    if !outcome.skipped.is_empty() {
        println!("{} input(s) skipped, listed in the report", outcome.skipped.len());
    }
    println!("report: {}", args.out.join("report.md").display());
    for shortfall in &outcome.shortfalls {
        eprintln!("warning: shortfall: {shortfall}");
    }
}

fn exit_code(outcome: &Outcome, allow_shortfall: bool) -> u8 {
    if outcome.in_set == 0 {
        eprintln!(
            "error: no query passed the round-trip filter\nhint: see the report; try --on-miss flag or a larger --top-n"
        );
        exit::SHORTFALL
    } else if !outcome.shortfalls.is_empty() && !allow_shortfall {
        eprintln!(
            "error: the test set falls short of --queries/--mix\nhint: raise --max-rounds or --per-doc-cap, use \
             --on-miss flag, add documents, or pass --allow-shortfall to accept a smaller set"
        );
        exit::SHORTFALL
    } else {
        exit::OK
    }
}
