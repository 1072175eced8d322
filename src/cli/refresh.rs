//! `qrelgen refresh`: the set's recorded settings (manifest.json), overridden by flags →
//! [`qrelgen::BuildConfig`] → [`qrelgen::refresh::refresh`] → summary.

use super::exit;
use super::json::{DryRunJson, JsonFlag};
use super::settings::{Inputs, Settings};
use anyhow::{Context as _, bail};
use clap::Args;
use qrelgen::progress::Progress;
use qrelgen::refresh::{self, NewQueries, Options, RefreshSummary};
use qrelgen::set::{ReadGuard, SetLock, Wait, layout};
use serde::Serialize;
use serde_json::{Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
// A refresh keeps the set's queries: --new-queries says how many new ones it writes.
#[command(mut_arg("queries", |arg| arg.hide(true)))]
#[expect(clippy::struct_excessive_bools, reason = "each bool is an independent command-line switch")]
pub struct RefreshArgs {
    /// The set folder to refresh (the --out of qrelgen build).
    #[arg(long, value_name = "DIR")]
    set: PathBuf,

    /// The changed corpus, in any form `build --corpus` reads.
    #[arg(long, value_name = "PATH")]
    corpus: PathBuf,

    /// New queries for new and rewritten text: `auto` (the set's size times the share of the
    /// new corpus's text that is new: added chunks, and edited ones less than 0.8 alike to their
    /// old text) or a number.
    #[arg(long, value_name = "auto|N", default_value = "auto", value_parser = parse_new_queries, allow_negative_numbers = true)]
    new_queries: NewQueries,

    /// Report what would change and the LLM calls it would make; write nothing.
    #[arg(long)]
    dry_run: bool,

    /// If another command is changing the set, wait for it to finish instead of failing at once.
    #[arg(long)]
    wait: bool,

    /// Refresh even when under half of the set's chunks carry over into --corpus, or more of
    /// its files or lines are unreadable than were the set's (without it, such a corpus is
    /// refused: another corpus, a damaged or truncated copy, or the wrong path would retire the
    /// set's queries on what is missing).
    #[arg(long)]
    accept_new_corpus: bool,

    /// Settings that override the set's recorded ones (recorded in the new manifest). Each
    /// defaults to the value the set's manifest records, not to the build default its help shows.
    #[command(flatten)]
    settings: Settings,

    /// No progress output (warnings and errors still go to stderr).
    #[arg(long, short)]
    quiet: bool,

    #[command(flatten)]
    json: JsonFlag,
}

/// `refresh --json`: what the refresh did (with `--dry-run`, would do).
#[derive(Debug, Serialize)]
struct RefreshJson<'a> {
    /// The set folder.
    set: &'a Path,
    /// The changed corpus.
    corpus: &'a Path,
    /// Whether this was a dry run (nothing written).
    dry_run: bool,
    /// Chunks and queries per change, new queries, LLM calls, the new version's figures.
    #[serde(flatten)]
    summary: &'a RefreshSummary,
    /// With `--dry-run`: the LLM calls it would make, fewest and most.
    planned_calls: Option<[u64; 2]>,
    /// With `--dry-run`: what the new queries would cost.
    estimate: Option<DryRunJson>,
    /// The changelog of the version written.
    changelog: Option<PathBuf>,
}

fn parse_new_queries(value: &str) -> Result<NewQueries, String> {
    if value == "auto" {
        return Ok(NewQueries::Auto);
    }
    value.parse().map(NewQueries::Count).map_err(|_| format!("expected auto or a number, got {value:?}"))
}

/// Build flags a refresh cannot apply, and why.
const REFUSED: [(&str, &str); 3] = [
    ("--queries", "the set keeps its queries, and --new-queries says how many to write for new documents"),
    (
        "--review-size",
        "its review queue is what changed, then the previous queue's items still in the set (the queue's size is set when the set is built)",
    ),
    (
        "--review-min-per-type",
        "its review queue is what changed, then the previous queue's items still in the set",
    ),
];

/// Runs the refresh and returns the exit code.
pub fn run(mut args: RefreshArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    let given = args.settings.given();
    if let Some((flag, why)) = REFUSED.iter().find(|(flag, _)| given.iter().any(|g| g == flag)) {
        bail!("{flag} does not apply to a refresh: {why}");
    }
    // The set's own files are not a corpus: its corpus.jsonl holds chunks, not the documents
    // they came from, so a refresh from it would see every document as changed.
    if let Some(inside) = qrelgen::set::set_around(&args.corpus) {
        bail!(
            "--corpus {} lies inside the test set in {}: a set's own files are not a corpus to refresh from \
             (its corpus.jsonl holds chunks, not the documents they came from)\nhint: pass the changed corpus, \
             in the form the set was built from",
            args.corpus.display(),
            inside.display()
        );
    }
    // A dry run only reads the set; a refresh changes it, one writer at a time.
    let (_lock, _read) = if args.dry_run {
        (None, Some(ReadGuard::open(&args.set, "refresh --dry-run")?))
    } else {
        (Some(SetLock::acquire(&args.set, "refresh", Wait::from_flag(args.wait))?), None)
    };
    qrelgen::set::pause_point("locked");
    let manifest = read_manifest(&args.set)?;
    let recorded = recorded_settings(&manifest, &args.set)?;
    let settings = std::mem::take(&mut args.settings).over(Some(recorded));
    let api_key = std::env::var("OPENAI_API_KEY").ok();
    let config = settings.resolve(Inputs {
        corpus: &args.corpus,
        prechunked: manifest.pointer("/config/prechunked").and_then(Value::as_bool).unwrap_or(false),
        dry_run: args.dry_run,
        api_key,
    })?;
    if let qrelgen::config::GeneratorConfig::Llm(setup) = &config.generator
        && setup.llm.endpoint.base_url.contains("<redacted>")
    {
        bail!(
            "the set's --base-url carried a credential, which its manifest does not keep ({})\n\
             hint: pass --base-url (or OPENAI_BASE_URL) again, credential included",
            setup.llm.endpoint.base_url
        );
    }
    let progress = Progress::stderr(args.quiet);
    let options = Options {
        new_queries: args.new_queries,
        dry_run: args.dry_run,
        accept_new_corpus: args.accept_new_corpus,
    };
    let summary = refresh::refresh(&config, &args.set, options, &progress)?;
    if summary.nothing_changed && !given.is_empty() {
        progress.warn(&format!(
            "the corpus is the set's, so nothing was written and {} took no effect; to change a \
             set's settings, build it again (qrelgen build)",
            given.join(", ")
        ));
    }
    if args.json.json {
        let planned = args.dry_run.then(|| summary.planned_calls());
        let json = RefreshJson {
            set: &args.set,
            corpus: &args.corpus,
            dry_run: args.dry_run,
            summary: &summary,
            planned_calls: planned.map(|(low, high)| [low, high]),
            estimate: summary.estimate.as_ref().filter(|_| args.dry_run).map(DryRunJson::from),
            changelog: summary.version.map(|_| args.set.join(refresh::CHANGELOG)),
        };
        JsonFlag::write(stdout, &json)?;
    } else {
        print_summary(&summary, &args, stdout)?;
    }
    Ok(exit::OK)
}

fn print_summary(summary: &RefreshSummary, args: &RefreshArgs, stdout: &mut dyn Write) -> anyhow::Result<()> {
    if summary.nothing_changed {
        writeln!(stdout, "nothing changed: {} has the chunks of the set's corpus", args.corpus.display())?;
        return Ok(());
    }
    let chunks = refresh::report_chunks(summary);
    let queries = refresh::report_queries(summary);
    let check = summary.corpus_check;
    writeln!(
        stdout,
        "corpus: {} of the set's {} chunks carry over ({:.0} %), {} file(s) or line(s) skipped ({} before)",
        check.carried,
        check.old_chunks,
        check.share() * 100.0,
        check.skipped,
        check.skipped_before
    )?;
    if args.dry_run {
        writeln!(stdout, "dry run, nothing written: chunks {chunks}; queries {queries}")?;
        let estimate = summary.estimate.unwrap_or_default();
        let range = |a: u64, b: u64| if a == b { a.to_string() } else { format!("{a}–{b}") };
        let (low, high) = (estimate.low, estimate.high);
        let (calls_low, calls_high) = summary.planned_calls();
        writeln!(
            stdout,
            "{} wanted; LLM calls it would make: {} ({} prompt tokens, at most {} completion \
             tokens; the range goes from every new query kept in round 1 to half of them dropped in \
             each of {} round(s))",
            qrelgen::text::count(summary.new_wanted, "new query", "new queries"),
            range(calls_low, calls_high),
            range(low.prompt_tokens, high.prompt_tokens),
            range(low.max_completion_tokens, high.max_completion_tokens),
            estimate.rounds.max(1),
        )?;
        return Ok(());
    }
    writeln!(stdout, "chunks: {chunks}")?;
    writeln!(stdout, "queries: {queries}")?;
    writeln!(
        stdout,
        "version {} of {}: {} queries, {} changed to review (review export --only changed; {} in the review queue), {:.1} % human-verified, {} LLM calls ({} from the cache)",
        summary.version.unwrap_or(0),
        args.set.display(),
        summary.in_set,
        summary.review_items,
        summary.queue_items,
        summary.human_share * 100.0,
        summary.llm_calls,
        summary.llm_cache_hits
    )?;
    writeln!(stdout, "changelog: {}", args.set.join(refresh::CHANGELOG).display())?;
    Ok(())
}

/// The set's `manifest.json`.
pub(super) fn read_manifest(set: &Path) -> anyhow::Result<Value> {
    let path = set.join(layout::MANIFEST);
    let text =
        fs_err::read_to_string(&path).with_context(|| format!("{} is not a set folder", set.display()))?;
    serde_json::from_str(&text).with_context(|| format!("invalid {}", path.display()))
}

/// The settings the set's `manifest` records, as if given in a config file.
fn recorded_settings(manifest: &Value, set: &Path) -> anyhow::Result<Settings> {
    let path = set.join(layout::MANIFEST);
    let config = manifest.get("config").with_context(|| format!("{} records no config", path.display()))?;
    serde_json::from_value(Value::Object(settings_of(config)))
        .with_context(|| format!("{}: the recorded config cannot be read", path.display()))
}

/// The recorded config (`BuildConfig` as serialized) as settings keys.
pub(super) fn settings_of(config: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    let mut put = |key: &str, value: Option<&Value>| {
        if let Some(value) = value.filter(|v| !v.is_null()) {
            out.insert(key.to_owned(), value.clone());
        }
    };
    let at = |pointer: &str| config.pointer(pointer);
    // The Chinese size and overlap too: a build derives them from --chunk-size and
    // --chunk-overlap (or the defaults), the refresh takes them as they were.
    put("chunk_size", at("/chunking/size"));
    put("chunk_overlap", at("/chunking/overlap"));
    put("chunk_size_zh", at("/chunking/size_zh"));
    put("chunk_overlap_zh", at("/chunking/overlap_zh"));
    put("chunk_unit", at("/chunking/unit"));
    put("cjk_segmenter", at("/segmenter"));
    put("queries", at("/queries"));
    put("per_doc_cap", at("/per_doc_cap"));
    put("seed", at("/seed"));
    put("max_rounds", at("/max_rounds"));
    put("language", at("/language"));
    for key in ["top_n", "on_miss", "multi_hop_rule", "pool_depth", "max_paraphrase_overlap", "on_copy"] {
        put(key, at(&format!("/filter/{key}")));
    }
    // A set without a recorded gate was built with the round trip as its gate.
    let round_trip = serde_json::Value::from("round_trip");
    put("gate", at("/filter/gate").or(Some(&round_trip)));
    put("dedup_threshold", at("/dedup_threshold"));
    put("chunk_dup_threshold", at("/chunk_dup_threshold"));
    put("judge_pool", at("/judge/pool"));
    put("reclassify", at("/judge/reclassify"));
    put("review_size", at("/review/size"));
    put("review_min_per_type", at("/review/min_per_type"));
    put("topic_labels", at("/topics/labels"));
    put("topic_min_cosine", at("/topics/min_cosine"));
    put("pool_run", at("/pool_runs/files"));
    put("pool_run_depth", at("/pool_runs/depth"));
    put("generator", at("/generator/kind"));
    // The LLM settings (never the API key: the manifest does not hold it; the environment
    // gives it).
    put("base_url", at("/generator/llm/endpoint/base_url"));
    put("model", at("/generator/llm/endpoint/model"));
    put("timeout", at("/generator/llm/timeout_secs"));
    for key in ["concurrency", "rpm", "tpm"] {
        put(key, at(&format!("/generator/llm/limits/{key}")));
    }
    put("temperature", at("/generator/llm/temperature"));
    put("max_tokens", at("/generator/llm/max_tokens"));
    put("max_tokens_total", at("/generator/llm/budget/max_tokens_total"));
    put("max_cost", at("/generator/llm/budget/max_cost"));
    put("price_prompt", at("/generator/llm/budget/price/prompt"));
    put("price_completion", at("/generator/llm/budget/price/completion"));
    put("queries_per_call", at("/generator/generation/queries_per_call"));
    put("repairs", at("/generator/generation/repairs"));
    // Recorded as the mode's name (`schema`), given as the flag's value (`json_schema`).
    let json_mode = at("/generator/generation/json_mode").and_then(Value::as_str).map(|mode| match mode {
        "schema" | "object" => Value::from(format!("json_{mode}")),
        other => Value::from(other),
    });
    put("json_mode", json_mode.as_ref());
    let styles = at("/generator/generation/styles").and_then(Value::as_array).map(|styles| {
        let spec: Vec<String> = styles
            .iter()
            .filter_map(|pair| Some(format!("{}={}", pair.get(0)?.as_str()?, pair.get(1)?)))
            .collect();
        Value::from(spec.join(","))
    });
    put("styles", styles.as_ref());
    put("prompts", at("/generator/prompts"));
    put("cache", at("/generator/cache"));
    if let Some(Value::Object(mix)) = at("/mix") {
        let spec: Vec<String> = mix.iter().map(|(t, share)| format!("{t}={share}")).collect();
        out.insert("mix".to_owned(), Value::from(spec.join(",")));
    }
    out.insert("schema_version".to_owned(), Value::from(1));
    out
}
