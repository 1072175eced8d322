//! `qrelgen pool`: flags (and, for the LLM judge, the set's recorded LLM settings under them) →
//! [`qrelgen::pool::PoolConfig`] → [`qrelgen::pool::run`] → summary.

use super::exit;
use super::json::JsonFlag;
use super::refresh::{read_manifest, settings_of};
use super::settings::{Inputs, Settings};
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use qrelgen::pool::{self, PoolConfig, PoolJudge, PoolRecord, PoolSummary};
use qrelgen::progress::Progress;
use qrelgen::set::{SetLock, Wait, layout};
use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct PoolArgs {
    /// The set folder (the --out of qrelgen build).
    #[arg(long, value_name = "DIR")]
    set: PathBuf,
    /// A TREC run (`qid Q0 docid rank score tag`) of a system you compare, over the set's
    /// queries; ids are chunk ids or document ids (a document stands for its chunks). Repeat.
    #[arg(long = "run", value_name = "FILE", required = true)]
    runs: Vec<PathBuf>,
    /// Top chunks of each run pooled per query.
    #[arg(long, default_value_t = pool::DEFAULT_DEPTH, value_name = "N")]
    depth: usize,
    /// Who grades the pairs nobody judged yet: the LLM judge (needs an endpoint: the set's, or
    /// --base-url/--model), the offline one-shot labeller (closeness in the corpus's topic space
    /// to the query's known relevant chunks), or none (recorded unjudged, for review).
    #[arg(long, value_enum, default_value_t = JudgeArg::Llm)]
    judge: JudgeArg,
    /// New machine-graded pairs sampled into the review queue per run and grade (their grade
    /// hidden from the reviewer), so that `review status` can check the judge.
    #[arg(long, default_value_t = REVIEW_PER_STRATUM, value_name = "N")]
    review_per_stratum: usize,
    /// LLM settings for --judge llm; each defaults to the value the set's manifest records.
    #[command(flatten)]
    settings: Settings,
    /// If another command is changing the set, wait for it to finish instead of failing at once.
    #[arg(long)]
    wait: bool,
    /// No progress output (warnings and errors still go to stderr).
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    json: JsonFlag,
}

/// `pool --json`: what the pool step did.
#[derive(Debug, Serialize)]
struct PoolJson<'a> {
    /// The set folder.
    set: &'a Path,
    /// The version written; null when every pooled pair was pooled and judged already (nothing
    /// written).
    version: Option<u32>,
    /// One record per run: pairs, queries, new pairs, grades after the step.
    runs: &'a [PoolRecord],
    /// Pairs new to the pools.
    new_pairs: usize,
    /// Of those, graded in this step.
    graded: usize,
    /// Of those, relevant (grade 1 or more).
    relevant: usize,
    /// New machine-graded pairs sampled into the review queue.
    queued: usize,
    /// Judge calls made.
    judge_calls: usize,
    /// Their prompt tokens.
    judge_tokens: u64,
}

impl<'a> PoolJson<'a> {
    fn new(summary: &'a PoolSummary, set: &'a Path) -> Self {
        Self {
            set,
            version: summary.version,
            runs: &summary.records,
            new_pairs: summary.new_pairs,
            graded: summary.graded,
            relevant: summary.relevant,
            queued: summary.queued,
            judge_calls: summary.judge_calls,
            judge_tokens: summary.judge_tokens,
        }
    }
}

/// New machine-graded pairs per run and grade sampled into the review queue by default.
const REVIEW_PER_STRATUM: usize = 5;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum JudgeArg {
    Llm,
    OneShot,
    None,
}

/// Runs the pool step and returns the exit code.
pub fn run(mut args: PoolArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    if args.depth == 0 {
        anyhow::bail!("invalid --depth: at least 1 chunk of each run per query");
    }
    read_manifest(&args.set)?; // a set folder, before its lock is taken (which makes the folder)
    let _lock = SetLock::acquire(&args.set, "pool", Wait::from_flag(args.wait))?;
    let manifest = read_manifest(&args.set)?;
    let judge = match args.judge {
        JudgeArg::Llm => PoolJudge::Llm,
        JudgeArg::OneShot => PoolJudge::OneShot,
        JudgeArg::None => PoolJudge::None,
    };
    let seed = manifest.pointer("/config/seed").and_then(Value::as_u64).unwrap_or(42);
    let llm = match judge {
        PoolJudge::Llm => Some(llm_config(&mut args, &manifest)?),
        PoolJudge::OneShot | PoolJudge::None => None,
    };
    let config = PoolConfig {
        runs: args.runs.clone(),
        depth: args.depth,
        judge,
        review_per_stratum: args.review_per_stratum,
        seed,
    };
    pool_into(&args.set, &config, llm.as_ref(), Progress::stderr(args.quiet), args.json.json, stdout)?;
    Ok(exit::OK)
}

/// `build --pool-run`: the pool step on the set just built in `set` (its writer lock held by
/// the build), with the build's LLM judge, or the one-shot labeller for an offline build.
pub fn after_build(
    set: &Path,
    runs: Vec<PathBuf>,
    build: &qrelgen::BuildConfig,
    progress: Progress,
    stdout: &mut dyn Write,
) -> anyhow::Result<()> {
    let offline = matches!(build.generator, qrelgen::config::GeneratorConfig::Offline);
    let config = PoolConfig {
        runs,
        depth: build.pool_runs.depth,
        judge: if offline { PoolJudge::OneShot } else { PoolJudge::Llm },
        review_per_stratum: REVIEW_PER_STRATUM,
        seed: build.seed,
    };
    pool_into(set, &config, (!offline).then_some(build), progress, false, stdout)
}

/// Pools `config`'s runs into the set in `set` and prints the summary (as JSON with `json`).
fn pool_into(
    set: &Path,
    config: &PoolConfig,
    llm: Option<&qrelgen::BuildConfig>,
    progress: Progress,
    json: bool,
    stdout: &mut dyn Write,
) -> anyhow::Result<()> {
    let (index, _) = qrelgen::eval::baseline::open_set_index(set, &progress)
        .with_context(|| format!("opening the index of {}", set.display()))?;
    let summary = pool::run(set, &index, config, llm, &progress)
        .with_context(|| format!("pooling into {}", set.display()))?;
    if json {
        Ok(JsonFlag::write(stdout, &PoolJson::new(&summary, set))?)
    } else {
        print_summary(&summary, set, &config.runs, stdout)
    }
}

/// The LLM settings: the set's recorded ones under the flags given; the generator is left to
/// the endpoint (an offline set can be judged by an LLM given --base-url).
fn llm_config(args: &mut PoolArgs, manifest: &Value) -> anyhow::Result<qrelgen::BuildConfig> {
    let path = args.set.join(layout::MANIFEST);
    let config = manifest.get("config").with_context(|| format!("{} records no config", path.display()))?;
    let mut recorded = settings_of(config);
    recorded.remove("generator");
    let recorded: Settings = serde_json::from_value(Value::Object(recorded))
        .with_context(|| format!("{}: the recorded config cannot be read", path.display()))?;
    let settings = std::mem::take(&mut args.settings).over(Some(recorded));
    let corpus = args.set.join(layout::CORPUS);
    let api_key = std::env::var("OPENAI_API_KEY").ok();
    let config = settings.resolve(Inputs { corpus: &corpus, prechunked: true, dry_run: false, api_key })?;
    if matches!(config.generator, qrelgen::config::GeneratorConfig::Offline) {
        anyhow::bail!(
            "--judge llm needs an LLM endpoint: give --base-url and --model (or --judge one-shot, offline)"
        );
    }
    Ok(config)
}

fn print_summary(
    summary: &PoolSummary,
    set: &Path,
    runs: &[PathBuf],
    stdout: &mut dyn Write,
) -> anyhow::Result<()> {
    let Some(version) = summary.version else {
        writeln!(
            stdout,
            "nothing new: every pair the runs pool in {} is pooled and judged already; nothing written",
            set.display()
        )?;
        return Ok(());
    };
    for r in &summary.records {
        let grades: Vec<String> = r.grades.iter().map(|(g, n)| format!("{g}: {n}")).collect();
        writeln!(
            stdout,
            "{}: {} pairs over {} queries, {} new; grades {}",
            r.run,
            r.pairs,
            r.queries,
            r.new_pairs,
            grades.join(", ")
        )?;
    }
    writeln!(
        stdout,
        "version {version} of {}: {} new pairs, {} graded ({} relevant), {} queued for review; {} judge calls, {} prompt tokens",
        set.display(),
        summary.new_pairs,
        summary.graded,
        summary.relevant,
        summary.queued,
        summary.judge_calls,
        summary.judge_tokens
    )?;
    let runs: Vec<String> = runs.iter().map(|r| format!("--run {}", r.display())).collect();
    writeln!(stdout, "next: qrelgen eval --set {} {}", set.display(), runs.join(" "))?;
    Ok(())
}
