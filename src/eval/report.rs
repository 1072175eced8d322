//! The evaluation's results as records ([`Evaluation`], serialized whole as `eval.json`), the
//! compact table printed on stdout, and `per_query.tsv`.

use super::abstain::{self, Abstention};
use super::breakdown::{self, Breakdown};
use super::collection::{Collection, Level, QueryClass};
use super::compare::{Correction, Multiple, Paired};
use super::human::HumanAgreement;
use super::layers::Layers;
use super::metrics::{Binary, Gain, Measure};
use super::run::{Run, Ties};
use super::score::Scores;
use super::stats::{self, Interval};
use super::{JUDGED_LOW, Role, Settings};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

/// Missing query ids listed in outputs (eval.json lists them all).
const MISSING_LISTED: usize = 5;

/// The settings as outputs state them.
#[derive(Debug, Clone, Serialize)]
pub struct SettingsReport {
    /// Rank cut-offs.
    pub cutoffs: Vec<usize>,
    /// Every measure scored.
    pub measures: Vec<Measure>,
    /// nDCG gain.
    pub gain: Gain,
    /// The gain in words.
    pub gain_description: &'static str,
    /// How a run's hits are ordered (`--ties`).
    pub ties: Ties,
    /// The same in words.
    pub tie_breaking: &'static str,
    /// Chunk or document ids.
    pub level: Level,
    /// What a document of a document-level evaluation is worth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level_rule: Option<&'static str>,
    /// The measure runs are compared on.
    pub metric: Measure,
    /// The relevance level of the standard set's binary measures (`--rel-level`).
    pub rel_level: u8,
    /// Bootstrap and randomization resamples.
    pub resamples: usize,
    /// Seed.
    pub seed: u64,
    /// Significance level.
    pub alpha: f64,
    /// Multiple-comparison correction.
    pub correction: Correction,
    /// `--abstain-threshold`, if given.
    pub abstain_threshold: Option<f64>,
    /// `--effect`, if given.
    pub effect: Option<f64>,
}

/// Where the judgments come from.
#[derive(Debug, Clone, Serialize)]
pub struct SetReport {
    /// The set folder.
    pub folder: Option<PathBuf>,
    /// The qrels file.
    pub qrels: PathBuf,
    /// blake3 of the set's `manifest.json`.
    pub manifest_blake3: Option<String>,
}

/// Queries of the collection by class.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct QueryCounts {
    /// Every query known.
    pub total: usize,
    /// With a relevant document: scored.
    pub answerable: usize,
    /// no_answer: scored for abstention.
    pub no_answer: usize,
    /// Neither: not scored.
    pub unjudged: usize,
}

/// Queries of the collection that a run does not name.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Missing {
    /// Answerable ones (scored 0 on every metric).
    pub answerable: usize,
    /// no_answer ones (an empty result refuses).
    pub no_answer: usize,
    /// Their ids.
    pub ids: Vec<String>,
}

/// One run's results.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Its name.
    pub name: String,
    /// Its file.
    pub file: PathBuf,
    /// What it is for.
    pub role: Role,
    /// Rows read.
    pub rows: usize,
    /// Most hits of a query.
    pub depth: usize,
    /// Queries it does not name: empty results.
    pub missing: Missing,
    /// Rows naming ids the corpus does not have.
    pub unknown_ids: usize,
    /// Mean of every measure over the answerable queries.
    pub means: BTreeMap<Measure, f64>,
    /// Student t interval of each mean at 1 − α, clipped to [0, 1] (where every measure lies).
    pub intervals: BTreeMap<Measure, Interval>,
    /// Said when few of the top k are judged.
    pub judged_note: Option<String>,
    /// Means by type, difficulty and provenance.
    pub breakdowns: Vec<Breakdown>,
    /// How well the top-1 score tells answerable from no_answer queries.
    pub abstention: Option<Abstention>,
    /// Per-query scores (for per_query.tsv and the page).
    #[serde(skip)]
    pub scores: Scores,
    /// Top-1 score per collection query.
    #[serde(skip)]
    pub top1: Vec<Option<f64>>,
}

/// Everything an evaluation found: `eval.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// `qrelgen <version>`.
    pub tool: String,
    /// The settings.
    pub settings: SettingsReport,
    /// The judgments used.
    pub set: SetReport,
    /// Queries by class.
    pub queries: QueryCounts,
    /// Every run.
    pub runs: Vec<RunReport>,
    /// Paired comparisons.
    pub comparisons: Vec<Paired>,
    /// All pairs, corrected.
    pub multiple: Option<Multiple>,
    /// Layered evaluation over `--candidates`.
    pub layers: Vec<Layers>,
    /// Agreement with `--human-qrels`.
    pub human: Option<HumanAgreement>,
}

impl Evaluation {
    /// An evaluation of `runs`, before comparisons.
    #[must_use]
    pub fn new(
        settings: &Settings,
        measures: Vec<Measure>,
        collection: &Collection,
        runs: Vec<RunReport>,
    ) -> Self {
        let count = |c: QueryClass| collection.queries.iter().filter(|q| q.class == c).count();
        Self {
            tool: format!("qrelgen {}", env!("CARGO_PKG_VERSION")),
            settings: SettingsReport {
                cutoffs: settings.cutoffs.clone(),
                measures,
                gain: settings.gain,
                gain_description: settings.gain.describe(),
                ties: settings.ties,
                tie_breaking: settings.ties.describe(),
                level: settings.level,
                level_rule: (settings.level == Level::Doc).then_some(
                    "a document takes the best grade of its chunks and is judged when any of its chunks is",
                ),
                metric: settings.metric,
                rel_level: settings.rel_level,
                resamples: settings.stats.resamples,
                seed: settings.stats.seed,
                alpha: settings.stats.alpha,
                correction: settings.stats.correction,
                abstain_threshold: settings.abstain_threshold,
                effect: settings.stats.effect,
            },
            set: SetReport {
                folder: collection.sources.set.clone(),
                qrels: collection.sources.qrels.clone(),
                manifest_blake3: collection.sources.manifest_blake3.clone(),
            },
            queries: QueryCounts {
                total: collection.queries.len(),
                answerable: count(QueryClass::Answerable),
                no_answer: count(QueryClass::NoAnswer),
                unjudged: count(QueryClass::Unjudged),
            },
            runs,
            comparisons: Vec::new(),
            multiple: None,
            layers: Vec::new(),
            human: None,
        }
    }
}

/// The report of one run, from its scores.
#[must_use]
pub fn run_report(
    run: &Run,
    role: Role,
    scores: Scores,
    collection: &Collection,
    (answerable, no_answer): (&[usize], &[usize]),
    settings: &Settings,
) -> RunReport {
    let top1: Vec<Option<f64>> = run.rankings.iter().map(|hits| hits.first().map(|h| h.score)).collect();
    let pick = |qs: &[usize]| qs.iter().map(|&q| top1[q]).collect::<Vec<_>>();
    let abstention = abstain::abstention(&pick(answerable), &pick(no_answer), settings.abstain_threshold);
    let missing_of = |qs: &[usize]| qs.iter().filter(|&&q| !run.present[q]).count();
    let missing = Missing {
        answerable: missing_of(answerable),
        no_answer: missing_of(no_answer),
        ids: answerable
            .iter()
            .chain(no_answer)
            .filter(|&&q| !run.present[q])
            .map(|&q| collection.queries[q].id.clone())
            .collect(),
    };
    let means: BTreeMap<Measure, f64> = scores.measures.iter().copied().zip(scores.means(None)).collect();
    let intervals = (0..scores.measures.len())
        .map(|m| (scores.measures[m], stats::t_interval(&scores.column(m), settings.stats.alpha).clipped()))
        .collect();
    let judged = Measure::Judged(settings.k());
    let judged_note = means.get(&judged).filter(|&&v| v < JUDGED_LOW).map(|v| {
        format!(
            "only {:.0} % of the top {} is judged: unjudged documents count as not relevant, so scores are lower bounds; compare the condensed-list variants ndcg'@{} and bpref, which score judged documents only",
            v * 100.0,
            settings.k(),
            settings.k()
        )
    });
    RunReport {
        name: run.name.clone(),
        file: run.path.clone(),
        role,
        rows: run.rows,
        depth: run.depth(),
        missing,
        unknown_ids: run.unknown_ids,
        breakdowns: breakdown::breakdowns(&scores, &collection.queries),
        means,
        intervals,
        judged_note,
        abstention,
        scores,
        top1,
    }
}

/// The headline measures of the table and the page: at the compared measure's cut-off, recall
/// at the deepest cut-off, hit at the shallowest; only measures that were scored.
#[must_use]
pub fn headline(evaluation: &Evaluation, k: usize) -> Vec<Measure> {
    let shallowest = evaluation.settings.cutoffs.iter().copied().min().unwrap_or(1);
    let deepest = evaluation.settings.cutoffs.iter().copied().max().unwrap_or(k);
    let level = evaluation.settings.rel_level;
    let mut columns = vec![
        evaluation.settings.metric,
        Measure::Ndcg(k),
        Binary::Mrr(k).at(level),
        Binary::Recall(deepest).at(level),
        Binary::Map(None).at(level),
        Binary::Hit(shallowest).at(level),
        Binary::Precision(k).at(level),
        Measure::Judged(k),
        Measure::NdcgCondensed(k),
        Binary::Bpref.at(level),
    ];
    let mut seen = std::collections::HashSet::new();
    columns.retain(|m| evaluation.settings.measures.contains(m) && seen.insert(*m));
    columns
}

/// The compact table and findings printed on stdout.
#[must_use]
pub fn render_table(evaluation: &Evaluation, k: usize) -> String {
    let mut out = String::new();
    let q = evaluation.queries;
    let _ = writeln!(
        out,
        "{} queries: {} answerable (scored), {} no_answer (abstention){}",
        q.total,
        q.answerable,
        q.no_answer,
        if q.unjudged > 0 {
            format!(", {} without judgments (not scored)", q.unjudged)
        } else {
            String::new()
        }
    );
    let s = &evaluation.settings;
    let _ = writeln!(out, "nDCG with {}; {}", s.gain_description, s.tie_breaking);
    let columns = headline(evaluation, k);
    let width = evaluation.runs.iter().map(|r| r.name.chars().count()).max().unwrap_or(3).max(3);
    let _ = write!(out, "\n{:width$}  {:>7}", "run", "missing");
    for m in &columns {
        let _ = write!(out, " {:>10}", m.to_string());
    }
    out.push('\n');
    for run in &evaluation.runs {
        let _ = write!(out, "{:width$}  {:>7}", run.name, run.missing.ids.len());
        for m in &columns {
            let _ = write!(out, " {:>10.4}", run.means.get(m).copied().unwrap_or(0.0));
        }
        out.push('\n');
    }
    out.push('\n');
    for run in &evaluation.runs {
        run_notes(&mut out, run);
    }
    findings(&mut out, evaluation);
    out
}

fn run_notes(out: &mut String, run: &RunReport) {
    let m = &run.missing;
    if !m.ids.is_empty() {
        let listed: Vec<&str> = m.ids.iter().take(MISSING_LISTED).map(String::as_str).collect();
        let more = if m.ids.len() > MISSING_LISTED {
            format!(", … ({} in eval.json)", m.ids.len())
        } else {
            String::new()
        };
        let what = if m.ids.len() == 1 {
            "query has no results and counts as empty"
        } else {
            "queries have no results and count as empty"
        };
        let _ = writeln!(
            out,
            "{}: {} {what} ({} answerable, scored 0; {} no_answer, counted as refusals): {}{more}",
            run.name,
            m.ids.len(),
            m.answerable,
            m.no_answer,
            listed.join(", ")
        );
    }
    if run.unknown_ids > 0 {
        let _ = writeln!(
            out,
            "{}: {} rows name ids that are not in the corpus (not relevant)",
            run.name, run.unknown_ids
        );
    }
    if let Some(note) = &run.judged_note {
        let _ = writeln!(out, "{}: {note}", run.name);
    }
    if let Some(a) = &run.abstention {
        let how = match a.choice {
            abstain::ThresholdChoice::Given => "--abstain-threshold",
            abstain::ThresholdChoice::BestAccuracy => "best accuracy on these queries, optimistic",
        };
        let _ = writeln!(
            out,
            "{}: abstention from the top-1 score: AUROC {:.3}; at threshold {:.4} ({how}) it answers {:.1} % of no_answer queries and refuses {:.1} % of answerable ones (accuracy {:.3})",
            run.name,
            a.auroc,
            a.threshold,
            a.at_threshold.wrong_answers * 100.0,
            a.at_threshold.wrong_refusals * 100.0,
            a.accuracy
        );
    }
}

fn findings(out: &mut String, evaluation: &Evaluation) {
    for p in &evaluation.comparisons {
        let t = p.t_p.map_or_else(|| "no variance".to_owned(), |t| format!("{t:.4}"));
        let _ = writeln!(
            out,
            "{} vs {}: {} (bootstrap {} resamples; t-test p = {t}; {} wins, {} ties, {} losses)",
            p.run,
            p.baseline,
            p.verdict_text,
            evaluation.settings.resamples,
            p.wins_ties_losses[0],
            p.wins_ties_losses[1],
            p.wins_ties_losses[2]
        );
    }
    if let Some(m) = &evaluation.multiple {
        let correction = match m.correction {
            Correction::Tukey => "randomized Tukey HSD",
            Correction::Holm => "Holm-corrected randomization tests",
        };
        let found: Vec<String> =
            m.pairs.iter().filter(|p| p.significant).map(|p| format!("{}–{}", p.a, p.b)).collect();
        let _ = writeln!(
            out,
            "all pairs on {} ({correction}, α = {}): {} of {} pairs differ{}; discriminative power {:.2}",
            m.measure,
            m.alpha,
            found.len(),
            m.pairs.len(),
            if found.is_empty() { String::new() } else { format!(" ({})", found.join(", ")) },
            m.discriminative_power
        );
    }
    for l in &evaluation.layers {
        let _ = writeln!(
            out,
            "layers {} → {}: candidates' recall@{} {:.4} (the ceiling); {} queries lost at retrieval, {} at reranking (no relevant document in the top {}), {} fine",
            l.candidates,
            l.reranker,
            l.depth,
            l.candidate_recall,
            l.counts.retrieval,
            l.counts.rerank,
            l.k,
            l.counts.fine
        );
    }
    if let Some(h) = &evaluation.human {
        let _ = writeln!(
            out,
            "human judgments ({} queries) vs the set ({} queries) on {}: {}",
            h.human_queries, h.set_queries, h.measure, h.verdict
        );
    }
}

/// Writes `per_query.tsv`: one row per run and scored query (answerable: every measure;
/// no_answer: the top-1 score only).
///
/// # Errors
/// The writer's.
pub fn write_per_query(
    w: &mut dyn Write,
    evaluation: &Evaluation,
    collection: &Collection,
) -> std::io::Result<()> {
    let measures = &evaluation.settings.measures;
    write!(w, "run\tquery_id\tclass\ttype\tdifficulty\tprovenance\ttop1_score")?;
    for m in measures {
        write!(w, "\t{m}")?;
    }
    writeln!(w)?;
    for run in &evaluation.runs {
        let mut rows: Vec<(usize, Option<&[f64]>)> =
            run.scores.queries.iter().enumerate().map(|(i, &q)| (q, Some(run.scores.row(i)))).collect();
        rows.extend(
            (0..collection.queries.len())
                .filter(|&q| collection.queries[q].class == QueryClass::NoAnswer)
                .map(|q| (q, None)),
        );
        rows.sort_by_key(|(q, _)| *q);
        for (q, values) in rows {
            let info = &collection.queries[q];
            let class = if values.is_some() { "answerable" } else { "no_answer" };
            let label = |l: Option<&'static str>| l.unwrap_or("");
            let top1 = run.top1[q].map(|s| s.to_string()).unwrap_or_default();
            write!(
                w,
                "{}\t{}\t{class}\t{}\t{}\t{}\t{top1}",
                run.name,
                info.id,
                label(info.query_type.map(crate::record::QueryType::label)),
                label(info.difficulty.map(crate::record::Difficulty::label)),
                breakdown::provenance(info),
            )?;
            for i in 0..measures.len() {
                match values {
                    Some(v) => write!(w, "\t{:.6}", v[i])?,
                    None => write!(w, "\t")?,
                }
            }
            writeln!(w)?;
        }
    }
    Ok(())
}
