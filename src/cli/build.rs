//! `qrelgen build`: flags and config file → [`qrelgen::BuildConfig`] → [`build::build`] →
//! summary and exit code.

use super::exit;
use super::json::{DryRunJson, JsonFlag};
use super::settings::{Inputs, Settings};
use anyhow::Context as _;
use clap::Args;
use qrelgen::build::{self, BuildSummary, IfOccupied};
use qrelgen::corpus::Skipped;
use qrelgen::generate::Prompts;
use qrelgen::llm::BatchError;
use qrelgen::llm::NetworkStats;
use qrelgen::output::{Shortfall, TypeCounts};
use qrelgen::progress::Progress;
use qrelgen::record::QueryType;
use qrelgen::set::{SetLock, Wait, layout};
use qrelgen::text::Language;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
#[expect(clippy::struct_excessive_bools, reason = "each bool is an independent command-line switch")]
pub struct BuildArgs {
    /// Corpus: a folder of .txt/.md/.html files (recursive; hidden files and folders, whose
    /// names start with ".", are not read), or a JSONL file of {"id","title","text"} lines
    /// (BEIR corpus.jsonl with "_id" works too).
    #[arg(long, value_name = "PATH", required_unless_present = "print_prompts")]
    corpus: Option<PathBuf>,

    /// Output folder; it becomes a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/test.tsv)
    /// plus qrels.trec, candidates.jsonl, rejects.jsonl, review_queue.jsonl, manifest.json and
    /// report.md.
    #[arg(long, value_name = "DIR", required_unless_present = "print_prompts")]
    out: Option<PathBuf>,

    /// Build even into a folder that holds a set under review (`versions/` or `review/`: its
    /// current version is kept under versions/ and this build becomes its next version; nothing
    /// reviewed is deleted) or files qrelgen did not write (they are left as they are). Without
    /// it, such a folder is refused.
    #[arg(long)]
    force: bool,

    /// If another command is changing the set in --out, wait for it to finish instead of failing
    /// at once.
    #[arg(long)]
    wait: bool,

    /// TOML file with any of the settings below (keys as the flags, with underscores, plus
    /// `schema_version = 1`); flags override it [default: none: flags and defaults only].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// The JSONL lines are chunks already: use them as-is and keep their ids.
    #[arg(long)]
    prechunked: bool,

    #[command(flatten)]
    settings: Settings,

    #[command(flatten)]
    batch: super::batch::BatchArgs,

    /// Plan the calls and estimate their tokens; send nothing, write no test set.
    #[arg(long)]
    dry_run: bool,

    /// Threads for indexing, the offline generator's pass over the chunks and the round trip
    /// (default: all cores). The outputs are the same for any number.
    #[arg(long, value_name = "N", default_value_t = qrelgen::config::all_cores())]
    threads: NonZeroUsize,

    /// Print the effective prompt templates and exit.
    #[arg(long)]
    print_prompts: bool,

    /// Exit 0 even if some type ends below its quota (the report still says so).
    #[arg(long)]
    allow_shortfall: bool,

    /// No progress output (warnings and errors still go to stderr).
    #[arg(long, short)]
    quiet: bool,

    #[command(flatten)]
    json: JsonFlag,
}

/// `build --json`: what the build did, would do (`--dry-run`), or the batch file it exported.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum BuildJson<'a> {
    /// The set was written.
    Built(Built<'a>),
    /// `--dry-run`: the calls it would make; nothing sent, nothing written.
    DryRun(DryRunJson),
    /// `--batch export` (or an import that left calls for the next stage): the request file
    /// written; the build stops here.
    BatchExported {
        /// The stage whose calls were exported.
        stage: &'a str,
        /// Requests written.
        lines: usize,
        /// The request file.
        path: &'a Path,
    },
}

/// A written set, as the text summary and the report tell it.
#[derive(Debug, Serialize)]
struct Built<'a> {
    /// The set folder.
    out: &'a Path,
    /// The report.
    report: PathBuf,
    /// Queries in the set.
    queries: usize,
    /// Queries in the set, by type.
    by_type: BTreeMap<QueryType, usize>,
    /// Queries in the review queue.
    review_items: usize,
    /// With `--force` into a reviewed set: the version the build became (the previous one kept
    /// under versions/).
    version: Option<u32>,
    /// What happened to each type's queries (quota, planned, generated, kept, dropped …).
    counts: &'a BTreeMap<QueryType, TypeCounts>,
    /// Types below their quota.
    shortfalls: &'a [Shortfall],
    /// Inputs not read, with the reason.
    skipped: &'a [Skipped],
    /// The LLM generator's tokens and this run's requests, when it was used.
    llm: Option<LlmJson<'a>>,
}

/// The LLM part of a build's summary.
#[derive(Debug, Serialize)]
struct LlmJson<'a> {
    /// Endpoint, model, response format, tokens of the replies behind the set, cost.
    #[serde(flatten)]
    summary: &'a qrelgen::generate::LlmSummary,
    /// What this run sent: requests, retries, 429s, cache hits, tokens paid and abandoned.
    network: &'a NetworkStats,
}

impl<'a> Built<'a> {
    fn new(summary: &'a BuildSummary, out: &'a Path) -> Self {
        Self {
            out,
            report: out.join(layout::REPORT_MD),
            queries: summary.in_set,
            by_type: summary.counts.iter().map(|(t, c)| (*t, c.in_set())).collect(),
            review_items: summary.review_items,
            version: summary.version,
            counts: &summary.counts,
            shortfalls: &summary.shortfalls,
            skipped: &summary.skipped,
            llm: summary.llm.as_ref().map(|llm| LlmJson { summary: &llm.summary, network: &llm.network }),
        }
    }
}

/// Runs the build and returns the exit code.
pub fn run(args: BuildArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    let file = args.config.as_deref().map(Settings::from_file).transpose()?;
    let settings = args.settings.over(file);
    if args.print_prompts {
        if args.json.json {
            anyhow::bail!("--json does not apply to --print-prompts, which prints the prompt templates");
        }
        let language = settings.language().unwrap_or(Language::En);
        write!(stdout, "{}", Prompts::load(settings.prompts_dir(), language)?.listing())?;
        return Ok(exit::OK);
    }
    let (Some(corpus), Some(out)) = (args.corpus.as_deref(), args.out.as_deref()) else {
        anyhow::bail!("--corpus and --out are required");
    };
    let api_key = std::env::var("OPENAI_API_KEY").ok();
    let mut config =
        settings.resolve(Inputs { corpus, prechunked: args.prechunked, dry_run: args.dry_run, api_key })?;
    args.batch.apply(&mut config)?;
    config.threads = args.threads.get();
    // `--pool-run` is the pool step after the build, so the runs never change the queries.
    let pool_runs = std::mem::take(&mut config.pool_runs.files);
    if let Some(unreadable) = pool_runs.iter().find(|run| !run.is_file()) {
        anyhow::bail!("--pool-run {}: no such file (nothing was built)", unreadable.display());
    }
    if matches!(config.generator, qrelgen::config::GeneratorConfig::Offline) && !args.quiet {
        eprintln!(
            "note: no LLM endpoint configured (--base-url), so the offline generator writes the queries"
        );
    }
    if let Some(set) = qrelgen::set::enclosing_set(out) {
        anyhow::bail!(
            "--out {} lies inside the test set in {}: a build never writes into another set's folder\n\
             hint: choose an --out outside it",
            out.display(),
            set.display()
        );
    }
    // A folder the build would refuse is refused before its lock file is made in it.
    let is_corpus = out.canonicalize().is_ok_and(|o| corpus.canonicalize().is_ok_and(|c| c == o));
    if !args.force
        && !is_corpus
        && let Some(refusal) = qrelgen::output::inspect(out)?.refusal(out)
    {
        return Err(refusal.into());
    }
    // One writer at a time: a dry run into a folder that does not exist yet makes nothing.
    let _lock = if args.dry_run && !out.exists() {
        None
    } else {
        Some(SetLock::acquire(out, "build", Wait::from_flag(args.wait))?)
    };
    qrelgen::set::pause_point("locked");
    let progress = Progress::stderr(args.quiet);
    let if_occupied = if args.force { IfOccupied::Force } else { IfOccupied::Refuse };
    let summary = match build::build(&config, out, if_occupied, &progress) {
        Err(err @ (qrelgen::Error::Budget(_) | qrelgen::Error::Batch(BatchError::Budget(_)))) => {
            eprintln!("error: {err}");
            return Ok(exit::BUDGET);
        }
        Err(qrelgen::Error::Batch(exported @ BatchError::Exported { .. })) => {
            if let (true, BatchError::Exported { stage, lines, path }) = (args.json.json, &exported) {
                let json = BuildJson::BatchExported { stage, lines: *lines, path };
                JsonFlag::write(stdout, &json)?;
                eprintln!("batch: {exported}");
            } else {
                writeln!(stdout, "batch: {exported}")?;
            }
            return Ok(exit::OK);
        }
        other => other.with_context(|| format!("building a test set from {}", corpus.display()))?,
    };
    if let Some(dry_run) = summary.dry_run {
        if args.json.json {
            JsonFlag::write(stdout, &BuildJson::DryRun(DryRunJson::from(&dry_run)))?;
        } else {
            print_dry_run(&dry_run, stdout)?;
        }
        return Ok(exit::OK);
    }
    if args.json.json {
        JsonFlag::write(stdout, &BuildJson::Built(Built::new(&summary, out)))?;
        warn_shortfalls(&summary);
    } else {
        print_summary(&summary, out, stdout)?;
    }
    if !pool_runs.is_empty() {
        // With --json, stdout holds the build's document alone: the pool step's summary goes to stderr.
        let pool_out: &mut dyn Write = if args.json.json { &mut std::io::stderr() } else { stdout };
        super::pool::after_build(out, pool_runs, &config, progress, pool_out).with_context(|| {
            format!(
                "the set in {} is built; pooling its runs failed: fix them and run qrelgen pool --set {} --run …",
                out.display(),
                out.display()
            )
        })?;
    }
    Ok(exit_code(&summary, args.allow_shortfall))
}

fn print_dry_run(dry_run: &build::DryRun, w: &mut dyn Write) -> std::io::Result<()> {
    let (low, high) = (&dry_run.low, &dry_run.high);
    let range = |a: u64, b: u64| if a == b { a.to_string() } else { format!("{a}–{b}") };
    let schema = if high.with_schema { " (response_format schema included)" } else { "" };
    writeln!(
        w,
        "dry run: {} queries, all rounds: {} calls, about {} prompt tokens{schema} and at most {} completion \
         tokens; nothing sent",
        dry_run.queries,
        range(low.calls, high.calls),
        range(low.prompt_tokens, high.prompt_tokens),
        range(low.max_completion_tokens, high.max_completion_tokens),
    )?;
    writeln!(
        w,
        "range: from every query kept (round 1 only) to half of them dropped ({} % kept in each of {} \
         round(s), --max-rounds at most)",
        dry_run.low_yield_percent, dry_run.rounds
    )?;
    if high.judge_calls > 0 {
        writeln!(
            w,
            "the judge: up to {} more calls, one chunk each",
            range(low.judge_calls, high.judge_calls)
        )?;
    }
    if dry_run.batches.1 > 0 {
        writeln!(
            w,
            "batch: {} batches (one per generation round and judge phase; a repair of an unusable reply adds one)",
            range(dry_run.batches.0, dry_run.batches.1)
        )?;
    }
    Ok(())
}

fn print_summary(summary: &BuildSummary, out: &Path, w: &mut dyn Write) -> std::io::Result<()> {
    let per_type: Vec<String> = summary.counts.iter().map(|(t, c)| format!("{t} {}", c.in_set())).collect();
    writeln!(
        w,
        "{} queries ({}) and {} to review in {}",
        summary.in_set,
        per_type.join(", "),
        summary.review_items,
        out.display()
    )?;
    if let Some(llm) = &summary.llm {
        let n = llm.network;
        writeln!(
            w,
            "llm: {} replies used ({} prompt + {} completion tokens); this run sent {} requests ({} retries, {} answered 429), {} from cache",
            llm.summary.usage.replies,
            llm.summary.usage.prompt_tokens,
            llm.summary.usage.completion_tokens,
            n.requests,
            n.retries,
            n.rate_limited,
            n.cache_hits
        )?;
        if n.paid.abandoned > 0 {
            writeln!(
                w,
                "llm: {} attempt(s) abandoned on a timeout, possibly billed: up to {} tokens (estimate)",
                n.paid.abandoned,
                n.paid.abandoned_prompt_tokens + n.paid.abandoned_completion_tokens
            )?;
        }
    }
    if let Some(version) = summary.version {
        let kept = qrelgen::review::version::version_dir(out, version - 1);
        writeln!(
            w,
            "the build is version {version} of the set; version {} is kept in {}",
            version - 1,
            kept.display()
        )?;
    }
    if !summary.skipped.is_empty() {
        writeln!(w, "{} input(s) skipped, listed in the report", summary.skipped.len())?;
    }
    writeln!(w, "report: {}", out.join(layout::REPORT_MD).display())?;
    warn_shortfalls(summary);
    Ok(())
}

fn warn_shortfalls(summary: &BuildSummary) {
    for shortfall in &summary.shortfalls {
        eprintln!("warning: shortfall: {shortfall}");
    }
}

fn exit_code(summary: &BuildSummary, allow_shortfall: bool) -> u8 {
    let planned: usize = summary.counts.values().map(|c| c.planned).sum();
    if planned == 0 {
        eprintln!(
            "error: no query could be planned: no chunk has 5+ distinct query words\nhint: check the corpus, \
             or raise --chunk-size"
        );
        exit::SHORTFALL
    } else if summary.counts.values().all(|c| c.generated == 0) {
        eprintln!(
            "error: the generator wrote no usable query; every request failed (reasons and replies in \
             rejects.jsonl)\nhint: check the model with --print-prompts and a few --queries; small local \
             models may need --json-mode plain or a larger --max-tokens"
        );
        exit::SHORTFALL
    } else if summary.in_set == 0 {
        eprintln!(
            "error: no query passed the round-trip filter\nhint: see the report; try --on-miss flag or a larger --top-n"
        );
        exit::SHORTFALL
    } else if !summary.shortfalls.is_empty() && !allow_shortfall {
        eprintln!(
            "error: the test set falls short of --queries/--mix\nhint: raise --max-rounds or --per-doc-cap, use \
             --on-miss flag, add documents, or pass --allow-shortfall to accept a smaller set"
        );
        exit::SHORTFALL
    } else {
        exit::OK
    }
}
