//! `qrelgen eval`: scores runs against a set (or any qrels), compares them, and writes
//! `eval.json`, `per_query.tsv` and `eval.html`.

use super::exit;
use super::json::JsonFlag;
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use qrelgen::eval::{
    self, Collection, Correction, EvalError, Gain, Inputs, Level, LooseFiles, Measure, Role, Settings,
    StatSettings, Ties, files, html, report, table, unjudged,
};
use qrelgen::set::{Overwrite, ReadGuard, ensure_outside_set};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The set folder (the --out of qrelgen build): queries.jsonl, qrels.trec,
    /// qrels/provenance.tsv, no_answer.txt, corpus.jsonl, manifest.json.
    #[arg(long, value_name = "DIR", conflicts_with = "qrels", required_unless_present = "qrels")]
    set: Option<PathBuf>,
    /// Any qrels instead of a set: TREC (`qid 0 docid grade`) or BEIR TSV (with its header)
    /// [default: none: the set's qrels].
    #[arg(long, value_name = "FILE")]
    qrels: Option<PathBuf>,
    /// With --qrels: a queries.jsonl (ids; type and difficulty when qrelgen wrote it) [default:
    /// none: no breakdown by type or difficulty].
    #[arg(long, value_name = "FILE", requires = "qrels")]
    queries: Option<PathBuf>,
    /// With --qrels: the ids of no_answer queries, one per line (scored for abstention)
    /// [default: none: no abstention scores].
    #[arg(long, value_name = "FILE", requires = "qrels")]
    no_answer: Option<PathBuf>,
    /// With --qrels: a corpus.jsonl mapping chunks to documents (needed for --level doc)
    /// [default: none].
    #[arg(long, value_name = "FILE", requires = "qrels")]
    corpus: Option<PathBuf>,
    /// A run to score: TREC (`qid Q0 docid rank score tag`) or JSONL
    /// ({"qid", "hits": [{"id", "score"}]}); repeat for several runs.
    #[arg(long = "run", value_name = "FILE", required = true)]
    runs: Vec<PathBuf>,
    /// A run to compare every --run with (paired bootstrap, randomization test, t-test)
    /// [default: none: the runs are compared pairwise].
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// The first-stage run the --run files rerank: each failing query is attributed to
    /// retrieval or reranking [default: none: no attribution].
    #[arg(long, value_name = "FILE")]
    candidates: Option<PathBuf>,
    /// Human qrels on the same corpus: does the set order the runs as they do (Kendall's τ)?
    /// [default: none].
    #[arg(long, value_name = "FILE")]
    human_qrels: Option<PathBuf>,
    /// Rank cut-offs of hit, recall, p, mrr, map and ndcg.
    #[arg(long, value_delimiter = ',', default_value = "1,3,5,10,20,100", value_name = "K,…")]
    k: Vec<usize>,
    /// The measure runs are compared, ranked and layered on (e.g. ndcg@10, mrr@10, recall@100,
    /// map, bpref).
    #[arg(long, default_value = "ndcg@10", value_name = "MEASURE")]
    metric: Measure,
    /// Measures to score besides the standard set, in qrelgen's or ir_measures' names, e.g.
    /// `--measures 'nDCG@10,P(rel=2)@10,RBP(p=0.8),ERR@20,Rprec'` (a list pasted from a paper)
    /// [default: none].
    #[arg(long, value_delimiter = ',', value_name = "MEASURE,…")]
    measures: Vec<Measure>,
    /// The grade from which a document counts as relevant for the binary measures of the
    /// standard set (hit, recall, p, mrr, map, bpref, rprec, rbp), as trec_eval's -l; nDCG and
    /// ERR use the grades themselves.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=3))]
    rel_level: u8,
    /// Also print the comparison table (runs × headline measures, best in bold, significance
    /// markers on --metric: † better than --baseline, or letters of the runs a run beats over all
    /// pairs) as Markdown or LaTeX after the normal table, and write it to eval.json as `table`
    /// [default: none].
    #[arg(long, value_enum, value_name = "FORMAT")]
    table: Option<TableArg>,
    /// Also print every run's per-query scores on stdout (TSV, as per_query.tsv) after the
    /// table.
    #[arg(long, conflicts_with = "json")]
    per_query: bool,
    /// nDCG gain: exponential (2^grade − 1) or linear (the grade, as trec_eval); the two are
    /// not comparable.
    #[arg(long, value_enum, default_value_t = GainArg::Exponential)]
    gain: GainArg,
    /// How a run's hits are ordered before scoring; the two differ only where scores tie.
    #[arg(long, value_enum, default_value_t = TiesArg::TrecEval)]
    ties: TiesArg,
    /// What the runs name: chunk ids (as the set's qrels) or document ids (a document takes the
    /// best grade of its chunks).
    #[arg(long, value_enum, default_value_t = LevelArg::Chunk)]
    level: LevelArg,
    /// Bootstrap and randomization resamples.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    resamples: usize,
    /// Seed of the resampling.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Significance level.
    #[arg(long, default_value_t = 0.05)]
    alpha: f64,
    /// Correction when comparing all pairs of several runs.
    #[arg(long, value_enum, default_value_t = CorrectionArg::Holm)]
    correction: CorrectionArg,
    /// Answer a query when its top-1 score is at least this [default: the threshold with the
    /// best accuracy on these queries, reported as such].
    #[arg(long, value_name = "T")]
    abstain_threshold: Option<f64>,
    /// The difference to plan the number of queries for [default: the observed one].
    #[arg(long, value_name = "D")]
    effect: Option<f64>,
    /// Write the unjudged chunks the runs put in their top k (k of --metric) as a decisions
    /// file for `qrelgen review apply` (JSONL; fill in each chunk's grade) [default: none].
    #[arg(long, value_name = "FILE")]
    export_unjudged: Option<PathBuf>,
    /// Where eval.json, per_query.tsv and eval.html go [default: DIR/eval with --set, ./eval
    /// otherwise].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    // With --json, stdout is the document eval.json holds: settings, query counts, every run's
    // means and intervals, breakdowns, comparisons, and the set's pooling checks.
    #[command(flatten)]
    json: JsonFlag,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TableArg {
    /// A Markdown table (GitHub): bold `**…**`, markers as `<sup>…</sup>`.
    Md,
    /// A LaTeX tabular (booktabs): `\textbf{…}`, markers as `$^{…}$`.
    Latex,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum GainArg {
    Exponential,
    Linear,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TiesArg {
    /// By score, then by document id in reverse byte order; the rank column is ignored (as
    /// trec_eval, pytrec_eval and ir_measures' trec_eval provider).
    TrecEval,
    /// In the order the run lists its hits: TREC by the rank column, then file order; JSONL in
    /// list order; scores do not reorder them (as the validity harness and tools that score a
    /// ranked list).
    RunOrder,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LevelArg {
    Chunk,
    Doc,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CorrectionArg {
    /// Holm's correction of the pairwise randomization tests.
    Holm,
    /// Randomized Tukey HSD: one randomization over all runs.
    Tukey,
}

/// Runs the evaluation.
pub fn run(args: &EvalArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    let settings = settings(args)?;
    let out = args.out.clone().unwrap_or_else(|| match &args.set {
        Some(set) => set.join(files::EVAL_DIR),
        None => PathBuf::from(files::EVAL_DIR),
    });
    check_outputs(&out, args.export_unjudged.as_deref())?;
    let _read = match &args.set {
        Some(set) => Some(
            ReadGuard::open(set, "eval").with_context(|| format!("reading the set in {}", set.display()))?,
        ),
        None => None,
    };
    let mut collection = match (&args.set, &args.qrels) {
        (Some(set), _) => Collection::from_set(set, settings.level),
        (None, qrels) => {
            let qrels = qrels.clone().unwrap_or_default();
            let files = LooseFiles {
                qrels,
                queries: args.queries.clone(),
                no_answer: args.no_answer.clone(),
                corpus: args.corpus.clone(),
            };
            Collection::from_files(&files, settings.level)
        }
    }?;
    if let Some(human) = &args.human_qrels {
        collection.add_human(human)?;
    }
    let runs = read_runs(args, &collection, settings.ties)?;
    let inputs = Inputs { collection, runs };
    let evaluation = eval::evaluate(&inputs, &settings);
    let pooling = args.set.as_ref().map(|set| eval::pooling::check(set, &evaluation));
    let table = args.table.map(|_| table::build(&evaluation, settings.k()));
    write_outputs(&out, &evaluation, pooling.as_ref(), table.as_ref(), &inputs, settings.k())?;
    if let Some(path) = &args.export_unjudged {
        export_unjudged(path, args, &inputs, settings.k())?;
    }
    if args.json.json {
        JsonFlag::write(
            stdout,
            &WithPooling { evaluation: &evaluation, pooling: pooling.as_ref(), table: table.as_ref() },
        )?;
    } else {
        write!(stdout, "{}", report::render_table(&evaluation, settings.k()))?;
    }
    if let Some(pooling) = pooling.as_ref().filter(|_| !args.json.json) {
        write!(stdout, "{}", eval::pooling::render(pooling))?;
    }
    if let (Some(table), Some(format), false) = (&table, args.table, args.json.json) {
        let format = match format {
            TableArg::Md => table::Format::Markdown,
            TableArg::Latex => table::Format::Latex,
        };
        write!(stdout, "\n{}", table::render(table, format))?;
    }
    if args.per_query {
        writeln!(stdout)?;
        report::write_per_query(stdout, &evaluation, &inputs.collection)?;
    }
    eprintln!(
        "wrote {}, {} and {} in {}",
        files::EVAL_JSON,
        files::PER_QUERY_TSV,
        files::EVAL_HTML,
        out.display()
    );
    Ok(exit::OK)
}

fn settings(args: &EvalArgs) -> anyhow::Result<Settings> {
    let mut cutoffs = args.k.clone();
    cutoffs.sort_unstable();
    cutoffs.dedup();
    if cutoffs.is_empty() || cutoffs.contains(&0) {
        anyhow::bail!("invalid --k: cut-offs are 1 or more, e.g. --k 1,10,100");
    }
    if !(0.0..1.0).contains(&args.alpha) || args.alpha == 0.0 {
        anyhow::bail!("invalid --alpha: between 0 and 1, e.g. 0.05");
    }
    Ok(Settings {
        cutoffs,
        gain: match args.gain {
            GainArg::Exponential => Gain::Exponential,
            GainArg::Linear => Gain::Linear,
        },
        ties: match args.ties {
            TiesArg::TrecEval => Ties::TrecEval,
            TiesArg::RunOrder => Ties::RunOrder,
        },
        level: match args.level {
            LevelArg::Chunk => Level::Chunk,
            LevelArg::Doc => Level::Doc,
        },
        metric: args.metric,
        rel_level: args.rel_level,
        extra: args.measures.clone(),
        stats: StatSettings {
            resamples: args.resamples,
            seed: args.seed,
            alpha: args.alpha,
            effect: args.effect,
            correction: match args.correction {
                CorrectionArg::Tukey => Correction::Tukey,
                CorrectionArg::Holm => Correction::Holm,
            },
        },
        abstain_threshold: args.abstain_threshold,
    })
}

/// Reads every run; the problems of all of them are reported together.
fn read_runs(args: &EvalArgs, collection: &Collection, ties: Ties) -> anyhow::Result<Vec<(eval::Run, Role)>> {
    let same_file = |a: &Path, b: &Path| match (fs_err::canonicalize(a), fs_err::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    let mut files: Vec<(PathBuf, Role)> = Vec::new();
    for path in &args.runs {
        if args.baseline.as_deref().is_some_and(|b| same_file(path, b)) {
            eprintln!("note: {} is the --baseline; it is scored once, as the baseline", path.display());
        } else {
            files.push((path.clone(), Role::Run));
        }
    }
    files.extend(args.baseline.iter().map(|p| (p.clone(), Role::Baseline)));
    files.extend(args.candidates.iter().map(|p| (p.clone(), Role::Candidates)));
    let names = eval::run_names(&files.iter().map(|f| f.0.clone()).collect::<Vec<_>>());
    let mut runs = Vec::new();
    let mut problems = Vec::new();
    for ((path, role), name) in files.into_iter().zip(names) {
        match eval::run::read(&path, &name, collection, ties) {
            Ok(run) => runs.push((run, role)),
            Err(EvalError::Problems(mut found)) => problems.append(&mut found),
            Err(other) => return Err(other.into()),
        }
    }
    if problems.is_empty() { Ok(runs) } else { Err(EvalError::Problems(problems).into()) }
}

/// Refuses outputs inside a set folder (but its eval/ folder): `out`'s files and the unjudged pool.
fn check_outputs(out: &Path, unjudged: Option<&Path>) -> anyhow::Result<()> {
    for name in [files::EVAL_JSON, files::PER_QUERY_TSV, files::EVAL_HTML] {
        ensure_outside_set(&out.join(name), "--out", &[files::EVAL_DIR], Overwrite::Force, |_| true)?;
    }
    if let Some(path) = unjudged {
        ensure_outside_set(path, "--export-unjudged", &[files::EVAL_DIR], Overwrite::Force, |_| true)?;
    }
    Ok(())
}

/// `eval.json` (and `eval --json`): the evaluation, and for a set the runs' pooling.
#[derive(serde::Serialize)]
struct WithPooling<'a> {
    #[serde(flatten)]
    evaluation: &'a eval::Evaluation,
    #[serde(skip_serializing_if = "Option::is_none")]
    pooling: Option<&'a eval::pooling::Pooling>,
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<&'a table::Table>,
}

fn write_outputs(
    out: &Path,
    evaluation: &eval::Evaluation,
    pooling: Option<&eval::pooling::Pooling>,
    table: Option<&table::Table>,
    inputs: &Inputs,
    k: usize,
) -> anyhow::Result<()> {
    qrelgen::output::write_json(&out.join(files::EVAL_JSON), &WithPooling { evaluation, pooling, table })?;
    qrelgen::output::write_atomic(&out.join(files::PER_QUERY_TSV), |w| {
        report::write_per_query(w, evaluation, &inputs.collection)
    })?;
    qrelgen::output::write_text(&out.join(files::EVAL_HTML), &html::render(evaluation, k))?;
    Ok(())
}

fn export_unjudged(path: &Path, args: &EvalArgs, inputs: &Inputs, k: usize) -> anyhow::Result<()> {
    let runs: Vec<&eval::Run> = inputs.runs.iter().map(|(r, _)| r).collect();
    let mut items = unjudged::pool(&inputs.collection, &runs, k)?;
    let (queries, corpus) = match &args.set {
        Some(set) => {
            let (q, c) = unjudged::set_text_files(set);
            (Some(q), Some(c))
        }
        None => (args.queries.clone(), args.corpus.clone()),
    };
    unjudged::fill_texts(&mut items, queries.as_deref(), corpus.as_deref())?;
    qrelgen::output::write_jsonl(path, &items).with_context(|| format!("writing {}", path.display()))?;
    let chunks: usize = items.iter().map(|i| i.pool.len()).sum();
    eprintln!(
        "unjudged pool: {chunks} chunks of {} queries in {}; grade them and run qrelgen review apply --decisions {}",
        items.len(),
        path.display(),
        path.display()
    );
    Ok(())
}
