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

/// The verdict of a paired comparison. Outputs put it in words with [`Paired::words`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// The two runs score the same on every query.
    Identical,
    /// One run is better: the bootstrap interval excludes 0 and the (corrected) randomization
    /// test passes α.
    Better {
        /// The better run.
        better: String,
        /// The other.
        worse: String,
    },
    /// No difference detected.
    NotDetected {
        /// Why not.
        reason: NotDetected,
    },
}

/// Why a paired comparison detected no difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotDetected {
    /// The bootstrap interval of the mean difference contains 0.
    IntervalContainsZero,
    /// The interval excludes 0 but the (corrected) randomization test does not pass α.
    TestNotSignificant,
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
    /// Significance level of the test and the interval.
    pub alpha: f64,
    /// Paired percentile bootstrap interval of the mean difference (run − baseline) at 1 − α.
    pub interval: Interval,
    /// Two-sided paired randomization test (the pair's one stream, shared with all pairs).
    pub randomization_p: f64,
    /// The randomization p-value corrected (Holm) over the comparisons with the baseline; the
    /// same as `randomization_p` when there is one comparison.
    pub adjusted_p: f64,
    /// Comparisons the correction is over.
    pub comparisons: usize,
    /// Paired t statistic (none without variance).
    pub t: Option<f64>,
    /// Its two-sided p-value.
    pub t_p: Option<f64>,
    /// Standard deviation of the per-query differences.
    pub sd: f64,
    /// The difference the sample size is planned for.
    pub effect: f64,
    /// Queries needed to detect `effect` (at α, 80 % power).
    pub queries_needed: Option<u64>,
    /// Queries where the run wins, ties, loses.
    pub wins_ties_losses: [usize; 3],
    /// The verdict.
    pub verdict: Verdict,
    /// The verdict in words.
    pub verdict_text: String,
    /// Per-query differences, in query order (for the page; not in eval.json).
    #[serde(skip)]
    pub differences: Vec<f64>,
}

/// Compares `run` with `baseline` (per-query scores on the same queries). The randomization test
/// and then the bootstrap draw from the pair's one stream (`pair_stream`).
#[must_use]
pub fn paired(
    names: (&str, &str),
    measure: Measure,
    run: &[f64],
    baseline: &[f64],
    settings: &StatSettings,
) -> Paired {
    let diffs = stats::differences(run, baseline);
    let mut rng = pair_stream(settings.seed, names);
    let randomization_p = stats::randomization_p(&diffs, settings.resamples, &mut rng);
    let interval = stats::bootstrap_interval(&diffs, settings.resamples, settings.alpha, &mut rng);
    let t = stats::paired_t(&diffs);
    let difference = stats::mean(&diffs);
    let sd = stats::std_dev(&diffs);
    let effect = settings.effect.unwrap_or(difference.abs());
    let wins = diffs.iter().filter(|&&d| d > 1e-12).count();
    let losses = diffs.iter().filter(|&&d| d < -1e-12).count();
    let mut paired = Paired {
        run: names.0.to_owned(),
        baseline: names.1.to_owned(),
        measure,
        queries: diffs.len(),
        mean: stats::mean(run),
        baseline_mean: stats::mean(baseline),
        difference,
        alpha: settings.alpha,
        interval,
        randomization_p,
        adjusted_p: randomization_p,
        comparisons: 1,
        t: t.map(|(t, _)| t),
        t_p: t.map(|(_, p)| p),
        sd,
        effect,
        queries_needed: stats::queries_needed(sd, effect, settings.alpha),
        wins_ties_losses: [wins, diffs.len() - wins - losses, losses],
        verdict: Verdict::Identical,
        verdict_text: String::new(),
        differences: diffs,
    };
    paired.decide();
    paired
}

/// Corrects the randomization p-values of comparisons with one baseline (Holm) and decides
/// their verdicts again.
pub fn correct(comparisons: &mut [Paired]) {
    let adjusted = stats::holm(&comparisons.iter().map(|p| p.randomization_p).collect::<Vec<_>>());
    let n = comparisons.len();
    for (p, adjusted) in comparisons.iter_mut().zip(adjusted) {
        p.adjusted_p = adjusted;
        p.comparisons = n;
        p.decide();
    }
}

/// The one random stream of a pair of runs, whichever way round they are named: every draw of
/// the pair's tests comes from it, so a pair has one randomization p-value wherever it is shown.
fn pair_stream(seed: u64, (a, b): (&str, &str)) -> Rng {
    let (first, second) = if a <= b { (a, b) } else { (b, a) };
    rng::stream(seed, &format!("eval/pair/{first}/{second}"))
}

impl Paired {
    fn decide(&mut self) {
        self.verdict = if self.sd == 0.0 && self.difference == 0.0 {
            Verdict::Identical
        } else if self.interval.contains(0.0) {
            Verdict::NotDetected { reason: NotDetected::IntervalContainsZero }
        } else if self.adjusted_p >= self.alpha {
            Verdict::NotDetected { reason: NotDetected::TestNotSignificant }
        } else if self.difference > 0.0 {
            Verdict::Better { better: self.run.clone(), worse: self.baseline.clone() }
        } else {
            Verdict::Better { better: self.baseline.clone(), worse: self.run.clone() }
        };
        self.verdict_text = self.words();
    }

    /// The verdict in words: a difference is always stated as the first-named run minus the
    /// second, with its interval the same way round.
    #[must_use]
    pub fn words(&self) -> String {
        let m = self.measure;
        let level = stats::confidence_percent(self.alpha);
        let p = self.p_text();
        match &self.verdict {
            Verdict::Identical => {
                format!("no difference: {} and {} score the same {m} on every query", self.run, self.baseline)
            }
            Verdict::Better { better, worse } => {
                let (d, i) = if *better == self.run {
                    (self.difference, self.interval)
                } else {
                    (-self.difference, Interval { low: -self.interval.high, high: -self.interval.low })
                };
                format!(
                    "{better} is better than {worse} on {m}: {better} − {worse} = {d:+.4} [{:+.4}, {:+.4}] ({level} bootstrap interval), {p}",
                    i.low, i.high
                )
            }
            Verdict::NotDetected { reason } => {
                let needed = self.queries_needed.map_or_else(
                    || "the observed variance gives no estimate of the queries needed".to_owned(),
                    |n| format!("about {n} queries would be needed to detect a difference of {:.4} (α = {}, 80 % power, from the observed variance)", self.effect, self.alpha),
                );
                let why = match reason {
                    NotDetected::IntervalContainsZero => "the interval contains 0".to_owned(),
                    NotDetected::TestNotSignificant => {
                        format!("the randomization test is not significant ({p})")
                    }
                };
                format!(
                    "no difference detected on {m} ({} − {} = {:+.4} [{:+.4}, {:+.4}], {level} bootstrap interval): {why}; {needed}",
                    self.run, self.baseline, self.difference, self.interval.low, self.interval.high
                )
            }
        }
    }

    fn p_text(&self) -> String {
        if self.comparisons > 1 {
            format!(
                "randomization p = {:.4}, Holm-corrected over {} comparisons with {}: {:.4}",
                self.randomization_p, self.comparisons, self.baseline, self.adjusted_p
            )
        } else {
            format!("randomization p = {:.4}", self.randomization_p)
        }
    }
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
            let mut rng = pair_stream(settings.seed, (runs[i].0, runs[j].0));
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
        assert!(
            win.verdict_text.starts_with(
                "new is better than old on ndcg@10: new − old = +0.1000 [+0.1000, +0.1000] (95 % bootstrap interval)"
            ),
            "{}",
            win.verdict_text
        );
        assert_eq!(win.verdict, Verdict::Better { better: "new".into(), worse: "old".into() });
        assert_eq!(win.wins_ties_losses, [60, 0, 0]);
        let noisy: Vec<f64> =
            base.iter().enumerate().map(|(i, x)| if i % 2 == 0 { x + 0.05 } else { x - 0.05 }).collect();
        let tie = paired(("new", "old"), Measure::Ndcg(10), &noisy, &base, &settings());
        assert!(tie.verdict_text.starts_with("no difference detected on ndcg@10"), "{}", tie.verdict_text);
        assert!(tie.verdict_text.contains("the interval contains 0"), "{}", tie.verdict_text);
        assert_eq!(tie.verdict, Verdict::NotDetected { reason: NotDetected::IntervalContainsZero });
        let same = paired(("a", "b"), Measure::Ndcg(10), &base, &base, &settings());
        assert!(
            same.verdict_text.starts_with("no difference: a and b score the same"),
            "{}",
            same.verdict_text
        );
        assert_eq!(same.verdict, Verdict::Identical);
    }

    #[test]
    fn a_worse_run_makes_the_baseline_better_with_the_sign_and_interval_agreeing() {
        let base: Vec<f64> = (0..60).map(|i| 0.5 + f64::from(i % 5) / 10.0).collect();
        let worse: Vec<f64> =
            base.iter().enumerate().map(|(i, x)| x - 0.4 - f64::from(i as u8 % 3) / 100.0).collect();
        let p = paired(("worse", "bm25"), Measure::Ndcg(10), &worse, &base, &settings());
        assert!(p.difference < 0.0 && p.interval.high < 0.0, "{p:?}");
        assert_eq!(p.verdict, Verdict::Better { better: "bm25".into(), worse: "worse".into() });
        let text = &p.verdict_text;
        let expected = format!(
            "bm25 is better than worse on ndcg@10: bm25 − worse = {:+.4} [{:+.4}, {:+.4}]",
            -p.difference, -p.interval.high, -p.interval.low
        );
        assert!(text.starts_with(&expected), "{text}\nexpected {expected}");
        assert!(-p.interval.high <= -p.difference && -p.difference <= -p.interval.low);
    }

    #[test]
    fn a_pair_has_one_randomization_p_value_whichever_way_round() {
        let a: Vec<f64> = (0..50).map(|i| f64::from(i % 7) / 7.0).collect();
        let b: Vec<f64> = a.iter().enumerate().map(|(i, x)| if i % 3 == 0 { x + 0.2 } else { *x }).collect();
        let stats = StatSettings { correction: Correction::Holm, ..settings() };
        let ab = paired(("a", "b"), Measure::Ndcg(10), &a, &b, &stats);
        let ba = paired(("b", "a"), Measure::Ndcg(10), &b, &a, &stats);
        let all = all_pairs(Measure::Ndcg(10), &[("b", b.clone()), ("a", a.clone())], &stats);
        assert_eq!(ab.randomization_p.to_bits(), ba.randomization_p.to_bits());
        assert_eq!(all.pairs[0].p.to_bits(), ab.randomization_p.to_bits());
        assert!((ab.interval.low + ba.interval.high).abs() < 1e-12, "{ab:?} {ba:?}");
    }

    #[test]
    fn alpha_sets_the_interval_the_test_and_the_words() {
        let base: Vec<f64> = (0..40).map(|i| f64::from(i % 5) / 5.0).collect();
        let run: Vec<f64> =
            base.iter().enumerate().map(|(i, x)| x + if i % 4 == 0 { -0.05 } else { 0.06 }).collect();
        let at =
            |alpha| paired(("a", "b"), Measure::Ndcg(10), &run, &base, &StatSettings { alpha, ..settings() });
        let (wide, narrow) = (at(0.01), at(0.2));
        assert!(wide.interval.low < narrow.interval.low && narrow.interval.high < wide.interval.high);
        assert!(wide.verdict_text.contains("(99 % bootstrap interval)"), "{}", wide.verdict_text);
        assert!(narrow.verdict_text.contains("(80 % bootstrap interval)"), "{}", narrow.verdict_text);
        assert_eq!(wide.queries_needed, stats::queries_needed(wide.sd, wide.effect, 0.01));
    }

    #[test]
    fn comparisons_with_one_baseline_are_holm_corrected_and_say_so() {
        let base: Vec<f64> = (0..60).map(|i| f64::from(i % 5) / 5.0).collect();
        let better: Vec<f64> = base.iter().map(|x| x + 0.1).collect();
        let mut pairs = vec![
            paired(("x", "base"), Measure::Ndcg(10), &better, &base, &settings()),
            paired(("y", "base"), Measure::Ndcg(10), &base, &base, &settings()),
        ];
        correct(&mut pairs);
        assert!((pairs[0].adjusted_p - (2.0 * pairs[0].randomization_p).min(1.0)).abs() < 1e-15);
        assert!(
            pairs[0].verdict_text.contains("Holm-corrected over 2 comparisons with base"),
            "{}",
            pairs[0].verdict_text
        );
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
        assert_eq!(p.queries_needed, stats::queries_needed(p.sd, 0.05, 0.05));
        assert!(
            p.verdict_text.contains(&format!("about {} queries", p.queries_needed.unwrap_or(0))),
            "{}",
            p.verdict_text
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
