//! Comparing systems on the same queries: a paired comparison of two runs (bootstrap interval,
//! randomization test, t-test, a verdict in words), and all pairs of several runs with a
//! multiple-comparison correction and the set's discriminative power.

use super::metrics::Measure;
use super::stats::{self, Interval};
use crate::rng::{self, Rng};
use serde::Serialize;

/// How p-values of all pairs are corrected for testing many pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Correction {
    /// Holm's step-down correction of the pairwise randomization tests (never below a pair's
    /// own p-value).
    #[default]
    Holm,
    /// Randomized Tukey HSD (Carterette 2012): one randomization over all systems, whose
    /// p-values can fall below a pair's own test when the other systems are alike.
    Tukey,
}

/// Settings of the statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StatSettings {
    /// Bootstrap and randomization resamples.
    pub resamples: usize,
    /// Seed of every draw.
    pub seed: u64,
    /// Significance level.
    pub alpha: f64,
    /// The difference to plan the sample size for (`None`: the observed one).
    pub effect: Option<f64>,
    /// The multiple-comparison correction.
    pub correction: Correction,
}

/// Two runs compared on one measure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Paired {
    /// The run compared.
    pub run: String,
    /// The run it is compared against.
    pub baseline: String,
    /// The measure.
    pub measure: Measure,
    /// Queries compared.
    pub queries: usize,
    /// Mean of the run.
    pub mean: f64,
    /// Mean of the baseline.
    pub baseline_mean: f64,
    /// Mean of the per-query differences (run − baseline).
    pub difference: f64,
    /// Paired bootstrap 95 % interval of the mean difference.
    pub interval: Interval,
    /// Two-sided paired randomization test.
    pub randomization_p: f64,
    /// Paired t statistic (none without variance).
    pub t: Option<f64>,
    /// Its two-sided p-value.
    pub t_p: Option<f64>,
    /// Standard deviation of the per-query differences.
    pub sd: f64,
    /// The difference the sample size is planned for.
    pub effect: f64,
    /// Queries needed to detect `effect` (α = 0.05, 80 % power).
    pub queries_needed: Option<u64>,
    /// Queries where the run wins, ties, loses.
    pub wins_ties_losses: [usize; 3],
    /// The verdict in words.
    pub verdict: String,
    /// Per-query differences, sorted (for the page; not in eval.json).
    #[serde(skip)]
    pub sorted_differences: Vec<f64>,
}

/// Compares `run` with `baseline` (per-query scores on the same queries).
#[must_use]
pub fn paired(
    names: (&str, &str),
    measure: Measure,
    run: &[f64],
    baseline: &[f64],
    settings: &StatSettings,
) -> Paired {
    let diffs = stats::differences(run, baseline);
    let mut rng = stream(settings.seed, "paired", names);
    let interval = stats::bootstrap_interval(&diffs, settings.resamples, &mut rng);
    let randomization_p = stats::randomization_p(&diffs, settings.resamples, &mut rng);
    let t = stats::paired_t(&diffs);
    let difference = stats::mean(&diffs);
    let sd = stats::std_dev(&diffs);
    let effect = settings.effect.unwrap_or(difference.abs());
    let queries_needed = stats::queries_needed(sd, effect);
    let wins = diffs.iter().filter(|&&d| d > 1e-12).count();
    let losses = diffs.iter().filter(|&&d| d < -1e-12).count();
    let mut sorted_differences = diffs.clone();
    sorted_differences.sort_unstable_by(f64::total_cmp);
    let mut paired = Paired {
        run: names.0.to_owned(),
        baseline: names.1.to_owned(),
        measure,
        queries: diffs.len(),
        mean: stats::mean(run),
        baseline_mean: stats::mean(baseline),
        difference,
        interval,
        randomization_p,
        t: t.map(|(t, _)| t),
        t_p: t.map(|(_, p)| p),
        sd,
        effect,
        queries_needed,
        wins_ties_losses: [wins, diffs.len() - wins - losses, losses],
        verdict: String::new(),
        sorted_differences,
    };
    paired.verdict = verdict(&paired, settings.alpha);
    paired
}

fn stream(seed: u64, purpose: &str, names: (&str, &str)) -> Rng {
    rng::stream(seed, &format!("eval/{purpose}/{}/{}", names.0, names.1))
}

/// The verdict of a paired comparison, in words.
fn verdict(p: &Paired, alpha: f64) -> String {
    let m = p.measure;
    let interval = format!("[{:+.4}, {:+.4}]", p.interval.low, p.interval.high);
    if p.sd == 0.0 && p.difference == 0.0 {
        return format!("no difference: {} and {} score the same {m} on every query", p.run, p.baseline);
    }
    if !p.interval.contains(0.0) && p.randomization_p < alpha {
        let (better, worse) = if p.difference > 0.0 { (&p.run, &p.baseline) } else { (&p.baseline, &p.run) };
        return format!(
            "{better} is better than {worse} on {m}: {:+.4} {interval}, randomization p = {:.4}",
            p.difference.abs(),
            p.randomization_p
        );
    }
    let needed = p.queries_needed.map_or_else(
        || "the observed variance gives no estimate of the queries needed".to_owned(),
        |n| format!("about {n} queries would be needed to detect a difference of {:.4} (α = 0.05, 80 % power, from the observed variance)", p.effect),
    );
    let why = if p.interval.contains(0.0) {
        "the interval contains 0"
    } else {
        "the randomization test is not significant"
    };
    format!("no difference detected on {m} ({:+.4} {interval}): {why}; {needed}", p.difference)
}

/// One pair of runs among several.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairRow {
    /// First run.
    pub a: String,
    /// Second run.
    pub b: String,
    /// Mean of a − mean of b.
    pub difference: f64,
    /// The uncorrected paired randomization p-value.
    pub p: f64,
    /// The corrected p-value.
    pub adjusted_p: f64,
    /// Whether the corrected p-value is below α.
    pub significant: bool,
}

/// All pairs of several runs, corrected, and the share found different.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Multiple {
    /// The measure.
    pub measure: Measure,
    /// The correction applied.
    pub correction: Correction,
    /// Significance level.
    pub alpha: f64,
    /// Every pair.
    pub pairs: Vec<PairRow>,
    /// Share of pairs found different at α: the discriminative power of the set.
    pub discriminative_power: f64,
}

/// Compares every pair of `runs` (name, per-query scores on the same queries).
#[must_use]
pub fn all_pairs(measure: Measure, runs: &[(&str, Vec<f64>)], settings: &StatSettings) -> Multiple {
    let mut pairs = Vec::new();
    for i in 0..runs.len() {
        for j in i + 1..runs.len() {
            let diffs = stats::differences(&runs[i].1, &runs[j].1);
            let mut rng = stream(settings.seed, "pairs", (runs[i].0, runs[j].0));
            let p = stats::randomization_p(&diffs, settings.resamples, &mut rng);
            pairs.push(PairRow {
                a: runs[i].0.to_owned(),
                b: runs[j].0.to_owned(),
                difference: stats::mean(&diffs),
                p,
                adjusted_p: p,
                significant: false,
            });
        }
    }
    let adjusted = match settings.correction {
        Correction::Holm => stats::holm(&pairs.iter().map(|p| p.p).collect::<Vec<_>>()),
        Correction::Tukey => {
            let scores: Vec<&[f64]> = runs.iter().map(|r| r.1.as_slice()).collect();
            stats::tukey_hsd(&scores, settings.resamples, &mut rng::stream(settings.seed, "eval/tukey"))
        }
    };
    for (pair, p) in pairs.iter_mut().zip(adjusted) {
        pair.adjusted_p = p;
        pair.significant = p < settings.alpha;
    }
    let found = pairs.iter().filter(|p| p.significant).count();
    let discriminative_power = if pairs.is_empty() { 0.0 } else { found as f64 / pairs.len() as f64 };
    Multiple { measure, correction: settings.correction, alpha: settings.alpha, pairs, discriminative_power }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> StatSettings {
        StatSettings { resamples: 2000, seed: 3, alpha: 0.05, effect: None, correction: Correction::Tukey }
    }

    #[test]
    fn a_clear_win_and_a_tie_in_words() {
        let base: Vec<f64> = (0..60).map(|i| f64::from(i % 5) / 5.0).collect();
        let better: Vec<f64> = base.iter().map(|x| x + 0.1).collect();
        let win = paired(("new", "old"), Measure::Ndcg(10), &better, &base, &settings());
        assert!(win.verdict.starts_with("new is better than old on ndcg@10: +0.1000"), "{}", win.verdict);
        assert_eq!(win.wins_ties_losses, [60, 0, 0]);
        let noisy: Vec<f64> =
            base.iter().enumerate().map(|(i, x)| if i % 2 == 0 { x + 0.05 } else { x - 0.05 }).collect();
        let tie = paired(("new", "old"), Measure::Ndcg(10), &noisy, &base, &settings());
        assert!(tie.verdict.starts_with("no difference detected on ndcg@10"), "{}", tie.verdict);
        assert!(tie.verdict.contains("the interval contains 0"), "{}", tie.verdict);
        let same = paired(("a", "b"), Measure::Ndcg(10), &base, &base, &settings());
        assert!(same.verdict.starts_with("no difference: a and b score the same"), "{}", same.verdict);
    }

    #[test]
    fn the_sample_size_comes_from_the_observed_variance() {
        let base = vec![0.5; 40];
        let run: Vec<f64> = (0..40).map(|i| if i % 2 == 0 { 0.6 } else { 0.42 }).collect();
        let p = paired(
            ("a", "b"),
            Measure::Mrr(10),
            &run,
            &base,
            &StatSettings { effect: Some(0.05), ..settings() },
        );
        // Differences ±: +0.1 and −0.08 → sd ≈ 0.0912; ((1.96 + 0.8416) · 0.0912 / 0.05)² ≈ 26.1.
        assert_eq!(p.queries_needed, stats::queries_needed(p.sd, 0.05));
        assert!(
            p.verdict.contains(&format!("about {} queries", p.queries_needed.unwrap_or(0))),
            "{}",
            p.verdict
        );
    }

    #[test]
    fn discriminative_power_counts_pairs_found_different() {
        let a: Vec<f64> = (0..80).map(|i| f64::from(i % 4) / 4.0).collect();
        let b: Vec<f64> = a.iter().rev().copied().collect();
        let c: Vec<f64> = a.iter().map(|x| x + 0.3).collect();
        for correction in [Correction::Tukey, Correction::Holm] {
            let m = all_pairs(
                Measure::Ndcg(10),
                &[("a", a.clone()), ("b", b.clone()), ("c", c.clone())],
                &StatSettings { correction, ..settings() },
            );
            let found: Vec<bool> = m.pairs.iter().map(|p| p.significant).collect();
            assert_eq!(found, [false, true, true], "{correction:?}: {m:?}");
            assert!((m.discriminative_power - 2.0 / 3.0).abs() < 1e-12);
        }
    }
}
