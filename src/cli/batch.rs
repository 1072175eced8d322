//! Batch inference on the command line: `build --batch submit|export|import`,
//! `qrelgen batch status` and `qrelgen batch forget`.

use super::exit;
use super::json::JsonFlag;
use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use qrelgen::config::{BuildConfig, GeneratorConfig};
use qrelgen::llm::{
    BatchConfig, BatchMode, BatchRecord, Cache, DEFAULT_DISCOUNT, Forgotten, MAX_BYTES, MAX_REQUESTS,
};
use qrelgen::set::layout;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The batch flags of `build`.
#[derive(Debug, Default, Args)]
pub struct BatchArgs {
    /// Run the LLM calls as batches instead of online: `submit` uploads each stage's calls to
    /// the OpenAI Batch API (Files + Batches endpoints), waits and goes on; `export` writes
    /// them to --to (OpenAI batch input format, for `vllm run-batch` or any runner) and stops;
    /// `import FILE` reads a runner's output file into the cache and goes on, exporting what
    /// the next stage needs to --to [default: online calls].
    #[arg(long, num_args = 1..=2, value_names = ["MODE", "FILE"], help_heading = "Batch")]
    batch: Vec<String>,
    /// Request file that `--batch export` (and `--batch import` for the next stage) writes
    /// [default: none; needed with export].
    #[arg(long, value_name = "FILE", help_heading = "Batch")]
    to: Option<PathBuf>,
    /// Price of a batch reply, as a share of the online price (the report's cost and
    /// --max-cost) [default: 0.5].
    #[arg(long, value_name = "0..1", help_heading = "Batch")]
    batch_discount: Option<f64>,
    /// Seconds between polls of a submitted batch [default: 60].
    #[arg(long, value_name = "SECONDS", help_heading = "Batch")]
    batch_poll: Option<f64>,
    /// Requests per batch at most; more are split into several batches [default: 50000].
    #[arg(long, value_name = "N", help_heading = "Batch")]
    batch_max_requests: Option<usize>,
    /// Bytes per batch input file at most [default: 209715200, 200 MiB].
    #[arg(long, value_name = "BYTES", help_heading = "Batch")]
    batch_max_bytes: Option<u64>,
}

impl BatchArgs {
    /// Puts the batch settings into `config`.
    ///
    /// # Errors
    /// For an unknown mode, a missing file, or batch flags without the LLM generator.
    pub fn apply(&self, config: &mut BuildConfig) -> anyhow::Result<()> {
        let discount = self.batch_discount.unwrap_or(DEFAULT_DISCOUNT);
        if !(0.0..=1.0).contains(&discount) {
            bail!("invalid --batch-discount: must be between 0 and 1");
        }
        let poll = self.batch_poll.unwrap_or(60.0);
        if !(poll.is_finite() && poll > 0.0) {
            bail!("invalid --batch-poll: must be a number of seconds above 0");
        }
        let mode = self.mode()?;
        let GeneratorConfig::Llm(setup) = &mut config.generator else {
            if mode.is_some() {
                bail!("--batch needs the LLM generator\nhint: pass --base-url and --model");
            }
            return Ok(());
        };
        setup.llm.batch_discount = discount;
        setup.llm.batch = mode.map(|mode| BatchConfig {
            mode,
            poll: Duration::from_secs_f64(poll.min(86_400.0)),
            max_requests: self.batch_max_requests.unwrap_or(MAX_REQUESTS).max(1),
            max_bytes: self.batch_max_bytes.unwrap_or(MAX_BYTES).max(1),
            stall_after: setup.generation.stall_after,
        });
        Ok(())
    }

    fn mode(&self) -> anyhow::Result<Option<BatchMode>> {
        let (mode, file) = match self.batch.as_slice() {
            [] => return Ok(None),
            [mode] => (mode.as_str(), None),
            [mode, file] => (mode.as_str(), Some(PathBuf::from(file))),
            _ => bail!("--batch takes a mode and at most one file"),
        };
        Ok(Some(match (mode, file) {
            ("submit", None) => BatchMode::Submit,
            ("export", None) => match &self.to {
                Some(to) => BatchMode::Export { to: to.clone() },
                None => bail!("--batch export needs --to FILE, the request file to write"),
            },
            ("import", Some(from)) => BatchMode::Import { from, to: self.to.clone() },
            ("import", None) => bail!("--batch import needs the runner's output file: --batch import FILE"),
            ("submit" | "export", Some(file)) => {
                bail!("--batch {mode} takes no file (got {}); the request file is --to", file.display())
            }
            (other, _) => bail!("invalid --batch mode {other:?}: submit, export or import"),
        }))
    }
}

/// The examples of `qrelgen batch --help` and `qrelgen batch status --help`.
pub const STATUS_EXAMPLES: &str = "Examples:
  qrelgen batch status --set out
  qrelgen batch status --set out --cache shared-cache.sqlite
  qrelgen batch forget file-abc123 --set out";

/// The examples and notes of `qrelgen batch forget --help`.
const FORGET_EXAMPLES: &str =
    "Replies already in the cache stay there, whichever batch brought them: a rerun uses them
without paying again. A batch the provider made or runs is not cancelled by this: it may
still bill, so cancel it there if it is not needed.

Examples:
  qrelgen batch status --set out              # the ids of the recorded batches
  qrelgen batch forget batch_abc123 --set out
  qrelgen batch forget file-abc123 --set out --cache shared-cache.sqlite";

/// `qrelgen batch`.
#[derive(Debug, Args)]
pub struct BatchCommand {
    #[command(subcommand)]
    command: BatchSub,
}

#[derive(Debug, Subcommand)]
enum BatchSub {
    /// Where the batches of a set stand, as the last poll left them (sends nothing).
    #[command(after_help = STATUS_EXAMPLES)]
    Status {
        #[command(flatten)]
        cache: CacheArgs,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Drops the record of a batch that can never be looked up or polled again (no list
    /// endpoint, the batch was deleted, it was made with another project's key), so reruns
    /// are not blocked by it: the next `build --batch submit` submits its requests that have
    /// no reply again (sends nothing itself).
    #[command(after_help = FORGET_EXAMPLES)]
    Forget {
        /// The record's id, as `batch status` lists it: a batch id, or the input file id of a
        /// batch that was being created.
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        cache: CacheArgs,
        #[command(flatten)]
        json: JsonFlag,
    },
}

/// `batch status --json`: the batches recorded in a reply cache, as the last poll left them.
#[derive(Debug, Serialize)]
struct StatusJson<'a> {
    /// The reply cache.
    cache: &'a Path,
    /// Every recorded batch: id, stage, status, requests done and failed, imported or not.
    batches: &'a [BatchRecord],
    /// Batches whose results are not imported yet (a rerun of `build --batch submit` polls them).
    not_imported: usize,
    /// Replies in the cache that came through a batch.
    batched_replies: u64,
}

/// `batch forget --json`: the record dropped, and what becomes of its requests.
#[derive(Debug, Serialize)]
struct ForgetJson<'a> {
    /// The reply cache.
    cache: &'a Path,
    /// The record as it was.
    forgotten: &'a BatchRecord,
    /// Its requests with a reply in the cache: they stay, and a rerun uses them unpaid.
    cached: u64,
    /// Its requests without one: the next `build --batch submit` submits them again (0 when
    /// its results were imported).
    resubmitted: u64,
}

/// Which reply cache.
#[derive(Debug, Args)]
struct CacheArgs {
    /// The set's output folder (its cache is OUT/llm-cache.sqlite).
    #[arg(long, value_name = "DIR")]
    set: PathBuf,
    /// The reply cache, if the build used --cache [default: SET/llm-cache.sqlite].
    #[arg(long, value_name = "FILE")]
    cache: Option<PathBuf>,
}

impl CacheArgs {
    /// Opens the cache, which must exist.
    fn open(&self) -> anyhow::Result<(Cache, PathBuf)> {
        let path = self.cache.clone().unwrap_or_else(|| self.set.join(layout::LLM_CACHE));
        if !path.is_file() {
            bail!("no reply cache at {}\nhint: pass the build's --cache, or check --set", path.display());
        }
        Ok((Cache::open(&path)?, path))
    }
}

/// Runs `qrelgen batch …`.
pub fn run(args: &BatchCommand, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    match &args.command {
        BatchSub::Status { cache, json } => status(cache, *json, stdout),
        BatchSub::Forget { id, cache, json } => forget(id, cache, *json, stdout),
    }
}

fn forget(id: &str, args: &CacheArgs, json: JsonFlag, w: &mut dyn Write) -> anyhow::Result<u8> {
    let (cache, path) = args.open()?;
    let forgotten = cache.forget_record(id).with_context(|| format!("updating {}", path.display()))?;
    let Some(Forgotten { record, cached, missing }) = forgotten else {
        bail!(
            "no batch {id} is recorded in {}\nhint: `qrelgen batch status --set {}` lists the recorded batches",
            path.display(),
            args.set.display()
        );
    };
    if json.json {
        let resubmitted = if record.imported { 0 } else { missing };
        JsonFlag::write(w, &ForgetJson { cache: &path, forgotten: &record, cached, resubmitted })?;
        return Ok(exit::OK);
    }
    writeln!(
        w,
        "forgot batch {} ({}, {}, {} requests)",
        record.id, record.stage, record.status, record.total
    )?;
    writeln!(
        w,
        "{cached} of its requests have replies in the cache: they stay there, and a rerun uses them without paying again"
    )?;
    if record.imported {
        writeln!(w, "its results were imported: nothing of it is submitted again")?;
        return Ok(exit::OK);
    }
    writeln!(w, "{missing} have none: the next `build --batch submit` submits them again")?;
    let made = if record.status == "creating" {
        format!("a batch made of input file {} (if the provider made one)", record.id)
    } else {
        format!("batch {}", record.id)
    };
    writeln!(
        w,
        "warning: {made} is not cancelled by this and may still run and bill; cancel it with the provider if it is not needed"
    )?;
    Ok(exit::OK)
}

fn status(args: &CacheArgs, json: JsonFlag, w: &mut dyn Write) -> anyhow::Result<u8> {
    let (cache, path) = args.open()?;
    let path = path.as_path();
    let batches = cache.batches().with_context(|| format!("reading {}", path.display()))?;
    if json.json {
        let not_imported = batches.iter().filter(|b| !b.imported).count();
        let batched_replies = cache.batched_replies()?;
        JsonFlag::write(w, &StatusJson { cache: path, batches: &batches, not_imported, batched_replies })?;
        return Ok(exit::OK);
    }
    if batches.is_empty() {
        writeln!(w, "no batches recorded in {}", path.display())?;
        return Ok(exit::OK);
    }
    writeln!(w, "{:<40} {:<22} {:<11} {:>9} {:>7} imported", "batch", "stage", "status", "done", "failed")?;
    for b in &batches {
        writeln!(
            w,
            "{:<40} {:<22} {:<11} {:>9} {:>7} {}",
            b.id,
            b.stage,
            b.status,
            format!("{}/{}", b.completed, b.total),
            b.failed,
            if b.imported { "yes" } else { "no" }
        )?;
    }
    let open = batches.iter().filter(|b| !b.imported).count();
    writeln!(
        w,
        "{} batch(es), {open} not imported yet; {} replies in the cache came through a batch",
        batches.len(),
        cache.batched_replies()?
    )?;
    if open > 0 {
        writeln!(
            w,
            "rerun the same `build --batch submit` to poll and import them (nothing is submitted twice); \
             a record that can never be looked up or polled again can be dropped with `qrelgen batch forget ID`"
        )?;
    }
    Ok(exit::OK)
}
