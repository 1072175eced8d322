//! `qrelgen review export|apply|agree|status`: the review queue out to annotators, their
//! decisions back into new versions of the set, two reviewers compared, and what the review says.

use super::exit;
use super::json::JsonFlag;
use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};
use qrelgen::output;
use qrelgen::review::agreement::{self, About, Agreement, Policy};
use qrelgen::review::apply::{self, ApplySummary, Batch};
use qrelgen::review::decisions::{self, Decisions, ReviewerMap, Reviewers};
use qrelgen::review::estimate::Interval;
use qrelgen::review::export::{self, ExportItem};
use qrelgen::review::label_studio;
use qrelgen::review::set::ReviewSet;
use qrelgen::review::status::{self, ReviewStatus};
use qrelgen::review::{Decision, Format, Located, Location};
use qrelgen::set::{Overwrite, ReadGuard, SetLock, Wait, ensure_outside_set};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct ReviewArgs {
    #[command(subcommand)]
    command: ReviewCommand,
}

#[derive(Debug, Subcommand)]
enum ReviewCommand {
    /// Write the review queue for annotators: query, type, status, reason, source chunks with the
    /// evidence marked, pooled chunks with their machine grades, and empty decision fields.
    #[command(after_help = "Examples:
  # A spreadsheet, one row per query:
  qrelgen review export --set out --format csv --to queue.csv
  # Tasks and labeling config for a Label Studio project (out/review/label-studio.json and .xml):
  qrelgen review export --set out --format label-studio
  # JSONL on stdout:
  qrelgen review export --set out --format jsonl")]
    Export(ExportArgs),
    /// Apply a decisions file: write the next version of the set, the previous one kept under
    /// versions/. A file with one bad row applies nothing; the same file twice changes nothing.
    #[command(after_help = "Examples:
  qrelgen review apply --set out --decisions queue.csv --reviewer ann
  # Label Studio's JSON export; annotators' user ids named by a file of ID=NAME lines:
  qrelgen review apply --set out --decisions project-1-export.json --reviewer-map annotators.txt")]
    Apply(ApplyArgs),
    /// Compare two reviewers who judged the same items (Cohen's kappa, disagreements); with
    /// --resolve, apply their merged judgments as the next version.
    #[command(after_help = "Examples:
  qrelgen review agree --set out --decisions ann.csv --decisions bob.csv
  # Merge them, the more severe decision winning, into the next version:
  qrelgen review agree --set out --decisions ann.csv --decisions bob.csv --resolve strict
  # One Label Studio export with two annotators per task, as JSON:
  qrelgen review agree --set out --decisions project-1-export.json --reviewer-map annotators.txt --json")]
    Agree(AgreeArgs),
    /// Show reviewed and pending items per type and the estimated share of good queries.
    #[command(after_help = "Examples:
  qrelgen review status --set out
  qrelgen review status --set out --json")]
    Status(StatusArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    Jsonl,
    Csv,
    LabelStudio,
}

impl From<FormatArg> for Format {
    fn from(arg: FormatArg) -> Self {
        match arg {
            FormatArg::Jsonl => Self::Jsonl,
            FormatArg::Csv => Self::Csv,
            FormatArg::LabelStudio => Self::LabelStudio,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PolicyArg {
    /// The more severe decision wins (reject > answerable > edit > accept); the lower grade wins.
    Strict,
    /// The less severe decision wins; the higher grade wins.
    Lenient,
}

impl From<PolicyArg> for Policy {
    fn from(arg: PolicyArg) -> Self {
        match arg {
            PolicyArg::Strict => Self::Strict,
            PolicyArg::Lenient => Self::Lenient,
        }
    }
}

#[derive(Debug, Args)]
struct ExportArgs {
    /// The set folder (the --out of qrelgen build).
    #[arg(long, value_name = "DIR")]
    set: PathBuf,
    /// jsonl, csv, or label-studio (tasks JSON plus the labeling config as XML beside it).
    #[arg(long, value_enum)]
    format: FormatArg,
    /// Where to write [default: stdout; label-studio: DIR/review/label-studio.json and .xml].
    #[arg(long, value_name = "FILE")]
    to: Option<PathBuf>,
    /// `changed`: only the queries the last `qrelgen refresh` changed and queued
    /// (refresh/changelog.jsonl), less those decided since [default: the whole queue].
    #[arg(long, value_enum, value_name = "WHAT")]
    only: Option<OnlyArg>,
}

/// A part of the review queue.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum OnlyArg {
    /// What the last refresh changed and no decision applied since has settled.
    Changed,
}

#[derive(Debug, Args)]
struct ApplyArgs {
    /// The set folder.
    #[arg(long, value_name = "DIR")]
    set: PathBuf,
    /// The decisions: an exported JSONL or CSV file filled in, or a Label Studio JSON or JSON-MIN
    /// export.
    #[arg(long, value_name = "FILE")]
    decisions: PathBuf,
    /// Who decided, for rows that do not say: a row's own reviewer field (a Label Studio
    /// annotator's email) wins; also the name of the one annotator of a Label Studio export that
    /// knows them only by user id [default: the file name].
    #[arg(long, value_name = "NAME")]
    reviewer: Option<String>,
    /// Names for Label Studio user ids (its JSON and JSON-MIN exports give annotators as
    /// numbers): a file of ID=NAME lines [default: none: one annotator takes --reviewer, others
    /// are recorded as label-studio-user-ID, with a warning].
    #[arg(long, value_name = "FILE")]
    reviewer_map: Option<PathBuf>,
    /// The decisions file's format [default: by extension: .jsonl, .csv, .json].
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// If another command is changing the set, wait for it to finish instead of failing at once.
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    json: JsonFlag,
}

#[derive(Debug, Args)]
struct AgreeArgs {
    /// The set folder.
    #[arg(long, value_name = "DIR")]
    set: PathBuf,
    /// Decisions files: one per reviewer, or one Label Studio export with two annotators.
    #[arg(long, value_name = "FILE", required = true)]
    decisions: Vec<PathBuf>,
    /// The reviewer of each --decisions file, in the same order, for rows that do not say (as
    /// apply) [default: the file names].
    #[arg(long, value_name = "NAME")]
    reviewer: Vec<String>,
    /// Names for Label Studio user ids, as apply [default: none].
    #[arg(long, value_name = "FILE")]
    reviewer_map: Option<PathBuf>,
    /// The decisions files' format [default: by extension].
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// Merge the two reviewers' judgments by this policy and apply them as the next version
    /// [default: none: compare only, write nothing].
    #[arg(long, value_enum)]
    resolve: Option<PolicyArg>,
    // With --json: the agreement, and with --resolve what was applied under "resolved".
    #[command(flatten)]
    json: JsonFlag,
    /// With --resolve: if another command is changing the set, wait for it to finish instead of
    /// failing at once.
    #[arg(long)]
    wait: bool,
}

#[derive(Debug, Args)]
struct StatusArgs {
    /// The set folder.
    #[arg(long, value_name = "DIR")]
    set: PathBuf,
    #[command(flatten)]
    json: JsonFlag,
}

/// Runs a review command and returns the exit code.
pub fn run(args: ReviewArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    match args.command {
        ReviewCommand::Export(args) => export(&args, stdout),
        ReviewCommand::Apply(args) => apply(&args, stdout),
        ReviewCommand::Agree(args) => agree(&args, stdout),
        ReviewCommand::Status(args) => show_status(&args, stdout),
    }
}

fn load(set: &Path) -> anyhow::Result<ReviewSet> {
    ReviewSet::load(set).with_context(|| format!("reading the set in {}", set.display()))
}

/// Holds the set for a command that only reads it.
fn read_guard(set: &Path, command: &str) -> anyhow::Result<ReadGuard> {
    ReadGuard::open(set, command).with_context(|| format!("reading the set in {}", set.display()))
}

/// Takes the set's writer lock for `command`.
fn lock(set: &Path, command: &str, wait: bool) -> anyhow::Result<SetLock> {
    let lock = SetLock::acquire(set, command, Wait::from_flag(wait))?;
    qrelgen::set::pause_point("locked");
    Ok(lock)
}

fn export(args: &ExportArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    if let Some(to) = &args.to {
        ensure_outside_set(to, "--to", &[], Overwrite::Force, |_| true)?;
    }
    let _read = read_guard(&args.set, "review export")?;
    let set = load(&args.set)?;
    // A changed query decided since the refresh is done with; the whole queue keeps every item
    // (a second reviewer judges the same ones).
    let only = match args.only {
        Some(OnlyArg::Changed) => Some((qrelgen::refresh::changed_queries(&set)?, status::reviewed(&set))),
        None => None,
    };
    let keep = |id: &qrelgen::id::QueryId| {
        only.as_ref()
            .is_none_or(|(changed, decided)| changed.contains(id.as_str()) && !decided.contains_key(id))
    };
    let items = export::items(&set, keep);
    let written = match args.format {
        FormatArg::Jsonl => write_to(args.to.as_deref(), stdout, |w| export::write_jsonl(&items, w))?,
        FormatArg::Csv => write_to(args.to.as_deref(), stdout, |w| export::write_csv(&items, w))?,
        FormatArg::LabelStudio => export_label_studio(&items, args.to.as_deref(), &set.dir)?,
    };
    let slots = export::slots(&items);
    eprintln!(
        "exported {} items ({} source and {} pool slots each){written}",
        items.len(),
        slots.sources,
        slots.pool
    );
    Ok(exit::OK)
}

/// Writes to `to` atomically, or to `stdout`; returns " to <path>" for the message.
fn write_to(
    to: Option<&Path>,
    stdout: &mut dyn Write,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> anyhow::Result<String> {
    if let Some(path) = to {
        output::write_atomic(path, fill)?;
        return Ok(format!(" to {}", path.display()));
    }
    fill(stdout).context("writing to stdout")?;
    Ok(String::new())
}

fn export_label_studio(items: &[ExportItem], to: Option<&Path>, set: &Path) -> anyhow::Result<String> {
    let tasks = to.map_or_else(|| set.join("review/label-studio.json"), Path::to_owned);
    let config = tasks.with_extension("xml");
    if config == tasks {
        bail!(
            "--to {} would be overwritten by the labeling config: name the tasks file .json",
            tasks.display()
        );
    }
    let (mut task_bytes, mut config_bytes) = (Vec::new(), Vec::new());
    label_studio::write(items, &mut task_bytes, &mut config_bytes)?;
    output::write_atomic(&tasks, |w| w.write_all(&task_bytes))?;
    output::write_atomic(&config, |w| w.write_all(&config_bytes))?;
    Ok(format!(" to {} (tasks) and {} (labeling config)", tasks.display(), config.display()))
}

fn read_decisions(
    set: &ReviewSet,
    path: &Path,
    format: Option<FormatArg>,
    reviewers: &Reviewers,
) -> anyhow::Result<Decisions> {
    let decisions = decisions::read_for(set, path, format.map(Format::from), reviewers)?;
    for warning in &decisions.warnings {
        eprintln!("warning: {}: {warning}", path.display());
    }
    Ok(decisions)
}

fn reviewer_map(path: Option<&Path>) -> anyhow::Result<Option<ReviewerMap>> {
    Ok(path.map(ReviewerMap::read).transpose()?)
}

fn apply(args: &ApplyArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    let _lock = lock(&args.set, "review apply", args.wait)?;
    let set = load(&args.set)?;
    let reviewers =
        Reviewers { name: args.reviewer.clone(), map: reviewer_map(args.reviewer_map.as_deref())? };
    let decisions = read_decisions(&set, &args.decisions, args.format, &reviewers)?;
    let outcome = apply::apply(&set, &Batch::single(&decisions))
        .with_context(|| format!("applying {}", args.decisions.display()))?;
    if args.json.json {
        let kept = match outcome {
            ApplySummary::Applied { .. } => {
                Some(qrelgen::review::version::version_dir(&set.dir, set.version()))
            }
            ApplySummary::AlreadyApplied { .. } | ApplySummary::NoChange => None,
        };
        let json = ApplyJson { set: &set.dir, decisions: &args.decisions, outcome: &outcome, kept };
        JsonFlag::write(stdout, &json)?;
    } else {
        stdout.write_all(report(&outcome, &set, &args.decisions.display().to_string()).as_bytes())?;
    }
    Ok(exit::OK)
}

/// `review apply --json`: what applying the decisions did.
#[derive(Serialize)]
struct ApplyJson<'a> {
    /// The set folder.
    set: &'a Path,
    /// The decisions file.
    decisions: &'a Path,
    /// `applied` (the new version and what the decisions did), `already_applied` (the version
    /// this file made before) or `no_change`.
    #[serde(flatten)]
    outcome: &'a ApplySummary,
    /// Where the previous version is kept, when a new one was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    kept: Option<PathBuf>,
}

fn report(outcome: &ApplySummary, set: &ReviewSet, input: &str) -> String {
    match outcome {
        ApplySummary::Applied { version, counts: c } => {
            let kept = qrelgen::review::version::version_dir(&set.dir, set.version());
            format!(
                "version {version} of {}: {} accepted, {} edited, {} answerable, {} rejected, {} grades; {} queries, {} qrels rows\n\
                 version {} is kept in {}\n",
                set.dir.display(),
                c.accepted,
                c.edited,
                c.answerable,
                c.rejected,
                c.grades,
                c.queries,
                c.qrels,
                set.version(),
                kept.display()
            )
        }
        ApplySummary::AlreadyApplied { version } => {
            format!("{input} was already applied as version {version}: nothing changed\n")
        }
        ApplySummary::NoChange => format!("the decisions in {input} change nothing: no new version\n"),
    }
}

/// `review agree --json`: the agreement, and what --resolve applied.
#[derive(Serialize)]
struct AgreeJson<'a> {
    #[serde(flatten)]
    agreement: &'a Agreement,
    #[serde(skip_serializing_if = "Option::is_none")]
    resolved: Option<&'a ApplySummary>,
}

fn agree(args: &AgreeArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    if !args.reviewer.is_empty() && args.reviewer.len() != args.decisions.len() {
        bail!(
            "give --reviewer once per --decisions file ({} files, {} names)",
            args.decisions.len(),
            args.reviewer.len()
        );
    }
    let (_lock, _read) = if args.resolve.is_some() {
        (Some(lock(&args.set, "review agree --resolve", args.wait)?), None)
    } else {
        (None, Some(read_guard(&args.set, "review agree")?))
    };
    let set = load(&args.set)?;
    let map = reviewer_map(args.reviewer_map.as_deref())?;
    let files = args
        .decisions
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let reviewers = Reviewers { name: args.reviewer.get(i).cloned(), map: map.clone() };
            read_decisions(&set, path, args.format, &reviewers)
        })
        .collect::<anyhow::Result<Vec<Decisions>>>()?;
    let all: Vec<_> = files.iter().flat_map(|d| d.judgments.iter().map(|l| l.judgment.clone())).collect();
    let [(first, mine), (second, theirs)] = agreement::split(&all)?;
    let agreement = agreement::agreement((&first, &mine), (&second, &theirs));
    let text = if args.json.json { String::new() } else { agreement_text(&agreement) };
    // Resolve before printing, so a reader that stops early (`| head`) never stops the apply.
    let mut outcome = None;
    if let Some(policy) = args.resolve {
        let judgments = agreement::resolve(&mine, &theirs, policy.into());
        let judgments =
            judgments.into_iter().map(|judgment| Located::new(Location::Resolved, judgment)).collect();
        let batch = Batch { inputs: files.iter().collect(), judgments, resolve: Some(policy.into()) };
        match apply::apply(&set, &batch) {
            Ok(applied) => outcome = Some(applied),
            Err(err) => {
                // The agreement is still worth seeing; the error is what the command reports.
                let _ = stdout.write_all(text.as_bytes());
                return Err(err).context("applying the resolved judgments");
            }
        }
    }
    stdout.write_all(text.as_bytes())?;
    if args.json.json {
        JsonFlag::write(stdout, &AgreeJson { agreement: &agreement, resolved: outcome.as_ref() })?;
    } else if let Some(outcome) = &outcome {
        let inputs: Vec<String> = args.decisions.iter().map(|p| p.display().to_string()).collect();
        stdout.write_all(report(outcome, &set, &inputs.join(" + ")).as_bytes())?;
    }
    Ok(exit::OK)
}

fn agreement_text(a: &Agreement) -> String {
    let [first, second] = &a.reviewers;
    let mut text =
        format!("reviewers: {first} ({} queries), {second} ({} queries)\n", a.judged[0], a.judged[1]);
    for (what, kappa) in [("decisions", a.decisions), ("grades (unweighted)", a.grades)] {
        let _ = match kappa {
            Some(k) => match k.kappa {
                Some(kappa) => writeln!(
                    text,
                    "kappa, {what}: {kappa:.3} over {} items (observed agreement {:.3}, expected by chance {:.3})",
                    k.items, k.observed, k.expected
                ),
                None => writeln!(
                    text,
                    "kappa, {what}: undefined over {} items (observed agreement {:.3}, expected by chance 1: both gave every item the same rating)",
                    k.items, k.observed
                ),
            },
            None => writeln!(text, "kappa, {what}: no item judged by both"),
        };
    }
    let _ = writeln!(text, "{} disagreement(s)", a.disagreements.len());
    for d in &a.disagreements {
        let _ = match &d.about {
            About::Decision { first: x, second: y } => {
                writeln!(text, "  {}  decision: {first} {x}, {second} {y}", d.query_id)
            }
            About::Grade { chunk_id, first: x, second: y } => {
                writeln!(text, "  {}  grade of {chunk_id}: {first} {x}, {second} {y}", d.query_id)
            }
            About::EditedText { first: x, second: y } => {
                writeln!(text, "  {}  edited text: {first} {x:?}, {second} {y:?}", d.query_id)
            }
        };
    }
    text
}

fn show_status(args: &StatusArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    let _read = read_guard(&args.set, "review status")?;
    let set = load(&args.set)?;
    let status = status::status(&set);
    let judge = qrelgen::review::judge_agreement::agreement(&set.dir)?;
    if args.json.json {
        JsonFlag::write(stdout, &StatusJson { status: &status, judge_agreement: judge.as_ref() })?;
    } else {
        stdout.write_all(status_text(&status, &set.dir).as_bytes())?;
        if let Some(judge) = &judge {
            stdout.write_all(qrelgen::review::judge_agreement::render(judge).as_bytes())?;
        }
    }
    Ok(exit::OK)
}

/// `review status --json`: the status, and the machine judges' agreement with the reviewers on
/// pooled pairs when there is one.
#[derive(serde::Serialize)]
struct StatusJson<'a> {
    #[serde(flatten)]
    status: &'a ReviewStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    judge_agreement: Option<&'a qrelgen::review::judge_agreement::JudgeAgreement>,
}

fn status_text(s: &ReviewStatus, dir: &Path) -> String {
    let mut text = format!("review of {} (version {})\n\n", dir.display(), s.version);
    let _ = writeln!(
        text,
        "{:<11} {:>6} {:>5} {:>8} {:>7} {:>6} {:>4} {:>10} {:>6}  {:>5}  95% interval",
        "type", "in set", "queue", "reviewed", "pending", "accept", "edit", "answerable", "reject", "good"
    );
    for t in &s.types {
        let count = |d| t.decisions.get(&d).copied().unwrap_or(0);
        let _ = writeln!(
            text,
            "{:<11} {:>6} {:>5} {:>8} {:>7} {:>6} {:>4} {:>10} {:>6}  {}",
            t.query_type.label(),
            t.in_set,
            t.queue,
            t.reviewed,
            t.pending(),
            count(Decision::Accept),
            count(Decision::Edit),
            count(Decision::Answerable),
            count(Decision::Reject),
            share(t.good)
        );
    }
    let total = |f: fn(&status::TypeStatus) -> usize| s.types.iter().map(f).sum::<usize>();
    let _ = writeln!(
        text,
        "{:<11} {:>6} {:>5} {:>8} {:>7} {:>29}  {}",
        "overall",
        total(|t| t.in_set),
        total(|t| t.queue),
        total(|t| t.reviewed),
        total(status::TypeStatus::pending),
        "",
        share(s.overall)
    );
    text.push_str(
        "\ngood = accepted (chunk grades may have been corrected; an accepted query keeps a relevant chunk);\n\
         edited, rejected and answerable no_answer queries are not good.\n\
         Strata: each type's flagged and kept queries, weighted by their share of the set (version 1);\n\
         Wilson 95% interval per stratum, combined by MOVER per type and overall; no finite-population\n\
         correction (conservative).\n",
    );
    notes(s, &mut text);
    text
}

fn notes(s: &ReviewStatus, text: &mut String) {
    let flagged = s.flagged_reviewed();
    if flagged > 0 {
        let _ = writeln!(
            text,
            "note: {flagged} reviewed item(s) were flagged: the queue draws them first, so they are weighted by their share of the set"
        );
    }
    let missing = s.unreviewed_strata();
    if !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(|(t, st)| st.name(*t)).collect();
        let _ = writeln!(
            text,
            "note: no reviewed item yet among the {} queries: an estimate needs one in each (type, status) stratum",
            names.join(", ")
        );
    }
    let unsampled: Vec<String> = s
        .types
        .iter()
        .flat_map(|t| {
            t.strata.iter().filter(|st| st.in_set > 0 && st.queue == 0).map(|st| st.name(t.query_type))
        })
        .collect();
    if !unsampled.is_empty() {
        let what = if s.refreshed {
            "they are not estimated (only a build with a larger --review-size draws them, and a build starts the set over from its corpus)"
        } else {
            "rebuild with a larger --review-size to estimate them"
        };
        let _ = writeln!(text, "note: the queue holds none of the {} queries: {what}", unsampled.join(", "));
    }
    if s.refreshed {
        let _ = writeln!(
            text,
            "note: a refresh made this version: the queries it changed and queued are strata of their own, all in the queue; decisions applied before it still count for the items it carried over"
        );
    }
    if s.outside_queue > 0 {
        let _ = writeln!(
            text,
            "note: {} decision(s) concern queries outside the queue: applied, but not in the estimate",
            s.outside_queue
        );
    }
}

fn share(interval: Option<Interval>) -> String {
    interval
        .map_or_else(|| "    –".to_owned(), |i| format!("{:.3}  [{:.3}, {:.3}]", i.estimate, i.low, i.high))
}
