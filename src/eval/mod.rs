//! Evaluation: scores retrieval runs against a set (or any qrels), per query, by slice and by
//! layer, compares systems with paired statistics, measures abstention on no_answer queries,
//! and checks the set's ordering of systems against human judgments.
//!
//! Input: a [`Collection`] (queries, judgments, corpus ids) and [`Run`]s read against it.
//! Output: an [`Evaluation`] (everything, serialized as `eval.json`), from which `per_query.tsv`,
//! the stdout table and `eval.html` are written. Invariants: per-query scores are kept whole;
//! queries a run does not name count as empty results and are reported; no_answer queries are
//! scored for abstention, never dropped; every random draw is seeded; ties in a run break as in
//! trec_eval, or the run's own order decides (`--ties`), and every output says which.

pub mod abstain;
pub mod baseline;
mod breakdown;
pub mod collection;
pub mod compare;
pub mod corpus_run;
mod error;
pub mod files;
pub mod html;
pub mod human;
pub mod layers;
pub mod metrics;
pub mod pooling;
pub mod qrels;
pub mod report;
pub mod run;
pub mod score;
pub mod stats;
pub mod table;
pub mod unjudged;

pub use collection::{Collection, Level, LooseFiles, QueryClass};
pub use compare::{Correction, StatSettings};
pub use error::{EvalError, Problem, Result};
pub use metrics::{Binary, Gain, Measure, Persistence};
pub use report::{Evaluation, RunReport};
pub use run::{Run, Ties};

use score::Scores;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Below this mean Judged@k (k: the compared measure's cut-off) a run's scores rest on few
/// judgments and the outputs say so.
pub const JUDGED_LOW: f64 = 0.5;

/// The effective settings of an evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Rank cut-offs of the metrics.
    pub cutoffs: Vec<usize>,
    /// nDCG gain.
    pub gain: Gain,
    /// How a run's hits are ordered (the runs are read with it).
    pub ties: Ties,
    /// Chunk or document ids.
    pub level: Level,
    /// The measure runs are compared, ranked and layered on.
    pub metric: Measure,
    /// The relevance level of the standard set's binary measures (`--rel-level`; 1: grade 1 or
    /// more is relevant).
    pub rel_level: u8,
    /// Measures scored besides the standard set (`--measures`).
    pub extra: Vec<Measure>,
    /// Resamples, seed, α, correction.
    pub stats: StatSettings,
    /// `--abstain-threshold`; `None`: the threshold with the best accuracy.
    pub abstain_threshold: Option<f64>,
}

impl Settings {
    /// The measures scored: the standard set, then `--measures`, then the compared one, each
    /// once.
    #[must_use]
    pub fn measures(&self) -> Vec<Measure> {
        let mut all = Measure::standard(&self.cutoffs, self.rel_level);
        for m in self.extra.iter().chain([&self.metric]) {
            if !all.contains(m) {
                all.push(*m);
            }
        }
        all
    }

    /// The cut-off of the compared measure (10 for one without, as MAP and bpref).
    #[must_use]
    pub fn k(&self) -> usize {
        self.metric.cutoff().unwrap_or(10)
    }
}

/// What a run is for in this evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A run to score (`--run`).
    Run,
    /// The run the others are compared with (`--baseline`).
    Baseline,
    /// The first stage the runs rerank (`--candidates`).
    Candidates,
}

/// The runs of an evaluation, read against its collection.
#[derive(Debug)]
pub struct Inputs {
    /// The judged collection.
    pub collection: Collection,
    /// Every run with its role: `--run`s first, then the baseline and the candidates.
    pub runs: Vec<(Run, Role)>,
}

/// Scores every run and compares them.
#[must_use]
pub fn evaluate(inputs: &Inputs, settings: &Settings) -> Evaluation {
    let collection = &inputs.collection;
    let measures = settings.measures();
    let class = |c: QueryClass| -> Vec<usize> {
        (0..collection.queries.len()).filter(|&q| collection.queries[q].class == c).collect()
    };
    let (answerable, no_answer) = (class(QueryClass::Answerable), class(QueryClass::NoAnswer));
    let runs: Vec<RunReport> = inputs
        .runs
        .iter()
        .map(|(run, role)| {
            let scores = Scores::of(run, &collection.qrels, &answerable, &measures, settings.gain);
            report::run_report(run, *role, scores, collection, (&answerable, &no_answer), settings)
        })
        .collect();
    let mut evaluation = Evaluation::new(settings, measures, collection, runs);
    evaluation.comparisons = comparisons(inputs, &evaluation.runs, settings);
    evaluation.multiple = multiple(&evaluation.runs, settings);
    evaluation.layers = layered(inputs, &answerable, settings);
    evaluation.human = human(inputs, &evaluation.runs, settings);
    evaluation
}

/// Each run against the baseline; without one, the first run against the second when there are
/// exactly two.
fn comparisons(inputs: &Inputs, runs: &[RunReport], settings: &Settings) -> Vec<compare::Paired> {
    let metric = settings.metric;
    let scores = |r: &RunReport| r.scores.of_measure(metric);
    let baseline = inputs.runs.iter().position(|(_, role)| *role == Role::Baseline);
    let pairs: Vec<(usize, usize)> = match baseline {
        Some(b) => (0..runs.len()).filter(|&i| inputs.runs[i].1 == Role::Run).map(|i| (i, b)).collect(),
        None if runs.len() == 2 => vec![(0, 1)],
        None => Vec::new(),
    };
    let mut compared: Vec<compare::Paired> = pairs
        .into_iter()
        .map(|(a, b)| {
            let names = (runs[a].name.as_str(), runs[b].name.as_str());
            compare::paired(names, metric, &scores(&runs[a]), &scores(&runs[b]), &settings.stats)
        })
        .collect();
    compare::correct(&mut compared);
    compared
}

/// All pairs, corrected, when there are at least two runs.
fn multiple(runs: &[RunReport], settings: &Settings) -> Option<compare::Multiple> {
    (runs.len() >= 2).then(|| {
        let all: Vec<(&str, Vec<f64>)> =
            runs.iter().map(|r| (r.name.as_str(), r.scores.of_measure(settings.metric))).collect();
        compare::all_pairs(settings.metric, &all, &settings.stats)
    })
}

/// Each `--run` layered over the candidates, if there are candidates.
fn layered(inputs: &Inputs, answerable: &[usize], settings: &Settings) -> Vec<layers::Layers> {
    let Some((candidates, _)) = inputs.runs.iter().find(|(_, role)| *role == Role::Candidates) else {
        return Vec::new();
    };
    let ids: Vec<&str> = inputs.collection.queries.iter().map(|q| q.id.as_str()).collect();
    inputs
        .runs
        .iter()
        .filter(|(_, role)| *role == Role::Run)
        .map(|(run, _)| {
            layers::layers(candidates, run, &inputs.collection.qrels, answerable, &ids, settings.k())
        })
        .collect()
}

/// Agreement with human judgments, if there are some.
fn human(inputs: &Inputs, runs: &[RunReport], settings: &Settings) -> Option<human::HumanAgreement> {
    let qrels = inputs.collection.human.as_ref()?;
    let queries: Vec<usize> = (0..inputs.collection.queries.len()).filter(|&q| qrels.answerable(q)).collect();
    let metric = [settings.metric];
    let human: Vec<Vec<f64>> = inputs
        .runs
        .iter()
        .map(|(run, _)| Scores::of(run, qrels, &queries, &metric, settings.gain).column(0))
        .collect();
    let set: Vec<Vec<f64>> = runs.iter().map(|r| r.scores.of_measure(settings.metric)).collect();
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    Some(human::agreement(settings.metric, &names, &set, &human, &settings.stats))
}

/// The name of each run in outputs: its file stem, made unique with `-2`, `-3` …
#[must_use]
pub fn run_names(paths: &[PathBuf]) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    paths
        .iter()
        .map(|p| {
            let stem = p.file_stem().map_or_else(|| "run".to_owned(), |s| s.to_string_lossy().into_owned());
            let n = seen.entry(stem.clone()).or_insert(0);
            *n += 1;
            if *n == 1 { stem } else { format!("{stem}-{n}") }
        })
        .collect()
}
