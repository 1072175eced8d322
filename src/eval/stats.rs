//! Statistics over per-query scores: intervals for means, paired tests of two systems, several
//! systems compared at once, and rank correlation of two system orderings.
//!
//! Input: per-query scores (one slice per system, the same queries in the same order). Output:
//! numbers. Invariants: every random draw comes from a seeded stream ([`crate::rng`]), so the
//! same inputs and seed give the same intervals and p-values; p-values of randomization tests
//! count the observed arrangement (`(hits + 1) / (resamples + 1)`), so they are never 0.

use crate::rng::Rng;
use rand::{Rng as _, RngCore as _};
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// z for 80 % power.
pub const Z_POWER_80: f64 = 0.841_621_233_572_914_3;

/// The confidence of an interval at significance level `alpha`, in percent, as outputs print it
/// (`95 %` for α = 0.05).
#[must_use]
pub fn confidence_percent(alpha: f64) -> String {
    let percent = (1.0 - alpha) * 100.0;
    let text = format!("{percent:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} %")
}

/// The standard normal quantile `z` with `P(Z ≤ z) = p`.
#[must_use]
pub fn normal_quantile(p: f64) -> f64 {
    statrs::distribution::Normal::new(0.0, 1.0).map_or(f64::NAN, |d| d.inverse_cdf(p))
}

/// A two-sided interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
}

impl Interval {
    /// Whether the interval holds `x`.
    #[must_use]
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }

    /// The interval within [0, 1], the range of every measure.
    #[must_use]
    pub fn clipped(self) -> Self {
        Self { low: self.low.clamp(0.0, 1.0), high: self.high.clamp(0.0, 1.0) }
    }
}

/// Mean of `xs` (0 for none).
#[must_use]
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 }
}

/// Sample standard deviation (n − 1; 0 below two values).
#[must_use]
pub fn std_dev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// The two-sided `1 − alpha` Student t interval of the mean of `xs`.
#[must_use]
pub fn t_interval(xs: &[f64], alpha: f64) -> Interval {
    let m = mean(xs);
    if xs.len() < 2 {
        return Interval { low: m, high: m };
    }
    let n = xs.len() as f64;
    let upper = 1.0 - alpha / 2.0;
    let t =
        StudentsT::new(0.0, 1.0, n - 1.0).map_or_else(|_| normal_quantile(upper), |d| d.inverse_cdf(upper));
    let half = t * std_dev(xs) / n.sqrt();
    Interval { low: m - half, high: m + half }
}

/// Paired differences `a[i] − b[i]`.
#[must_use]
pub fn differences(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

/// The two-sided `1 − alpha` percentile bootstrap interval of the mean of `xs` (queries drawn
/// with replacement, `resamples` times).
#[must_use]
pub fn bootstrap_interval(xs: &[f64], resamples: usize, alpha: f64, rng: &mut Rng) -> Interval {
    let n = xs.len();
    if n == 0 || resamples == 0 {
        let m = mean(xs);
        return Interval { low: m, high: m };
    }
    let mut means: Vec<f64> =
        (0..resamples).map(|_| (0..n).map(|_| xs[rng.random_range(0..n)]).sum::<f64>() / n as f64).collect();
    means.sort_unstable_by(f64::total_cmp);
    Interval { low: quantile(&means, alpha / 2.0), high: quantile(&means, 1.0 - alpha / 2.0) }
}

/// The `q` quantile of sorted values, interpolated linearly between order statistics.
#[must_use]
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
}

/// Two-sided paired randomization (sign-flip) test of mean difference 0: the share of
/// `resamples` random sign assignments whose mean is at least as far from 0 as the observed one.
#[must_use]
pub fn randomization_p(diffs: &[f64], resamples: usize, rng: &mut Rng) -> f64 {
    let observed = diffs.iter().sum::<f64>().abs();
    // Sums compared with a little slack, so that float noise never hides an equal arrangement.
    let slack = 1e-9 * (1.0 + observed);
    let mut at_least = 0usize;
    for _ in 0..resamples {
        let mut sum = 0.0;
        for chunk in diffs.chunks(64) {
            let bits = rng.next_u64();
            for (i, d) in chunk.iter().enumerate() {
                sum += if bits >> i & 1 == 1 { *d } else { -*d };
            }
        }
        at_least += usize::from(sum.abs() >= observed - slack);
    }
    (at_least + 1) as f64 / (resamples + 1) as f64
}

/// The paired t statistic of `diffs` and its two-sided p-value (`None` below two queries or with
/// no variance).
#[must_use]
pub fn paired_t(diffs: &[f64]) -> Option<(f64, f64)> {
    let n = diffs.len() as f64;
    let sd = std_dev(diffs);
    if diffs.len() < 2 || sd == 0.0 {
        return None;
    }
    let t = mean(diffs) / (sd / n.sqrt());
    let dist = StudentsT::new(0.0, 1.0, n - 1.0).ok()?;
    Some((t, 2.0 * (1.0 - dist.cdf(t.abs()))))
}

/// Queries needed to detect a mean difference of `effect` with a two-sided test at `alpha` and
/// 80 % power, given the standard deviation `sd` of per-query differences (normal
/// approximation: `((z_{1−α/2} + z_β) · sd / effect)²`).
#[must_use]
pub fn queries_needed(sd: f64, effect: f64, alpha: f64) -> Option<u64> {
    let z = normal_quantile(1.0 - alpha / 2.0);
    (effect.abs() > 0.0 && sd > 0.0).then(|| (((z + Z_POWER_80) * sd / effect.abs()).powi(2)).ceil() as u64)
}

/// Holm's step-down adjustment of p-values (same order as given).
#[must_use]
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![0.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

/// Randomized Tukey HSD (Carterette 2012): for every pair of systems, the share of `resamples`
/// arrangements (each query's scores shuffled among the systems) in which the largest minus
/// the smallest system mean is at least the pair's observed difference. `scores[s][q]`: system
/// s on query q. Returns p-values for the pairs (i, j), i < j, in that order.
#[must_use]
pub fn tukey_hsd(scores: &[&[f64]], resamples: usize, rng: &mut Rng) -> Vec<f64> {
    let systems = scores.len();
    let queries = scores.first().map_or(0, |s| s.len());
    let means: Vec<f64> = scores.iter().map(|s| mean(s)).collect();
    let pairs: Vec<(usize, usize)> =
        (0..systems).flat_map(|i| (i + 1..systems).map(move |j| (i, j))).collect();
    let observed: Vec<f64> = pairs.iter().map(|&(i, j)| (means[i] - means[j]).abs()).collect();
    let mut at_least = vec![0usize; pairs.len()];
    let mut row = vec![0.0; systems];
    let mut sums = vec![0.0; systems];
    for _ in 0..resamples {
        sums.fill(0.0);
        for q in 0..queries {
            for (v, system) in row.iter_mut().zip(scores) {
                *v = system[q];
            }
            for s in (1..systems).rev() {
                row.swap(s, rng.random_range(0..=s));
            }
            for (sum, v) in sums.iter_mut().zip(&row) {
                *sum += v;
            }
        }
        let (lo, hi) =
            sums.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        let range = (hi - lo) / queries.max(1) as f64;
        for (count, obs) in at_least.iter_mut().zip(&observed) {
            *count += usize::from(range >= obs - 1e-12);
        }
    }
    at_least.iter().map(|&c| (c + 1) as f64 / (resamples + 1) as f64).collect()
}

/// Kendall's τ-b between two scorings of the same items (ties handled; `None` when either has
/// every item tied or there are fewer than two items).
#[must_use]
pub fn kendall_tau(a: &[f64], b: &[f64]) -> Option<f64> {
    let (mut concordant, mut discordant, mut ties_a, mut ties_b) = (0i64, 0i64, 0i64, 0i64);
    for i in 0..a.len() {
        for j in i + 1..a.len() {
            let (x, y) = (sign(a[i] - a[j]), sign(b[i] - b[j]));
            match (x, y) {
                (0, 0) => {}
                (0, _) => ties_a += 1,
                (_, 0) => ties_b += 1,
                _ if x == y => concordant += 1,
                _ => discordant += 1,
            }
        }
    }
    let n_a = (concordant + discordant + ties_b) as f64;
    let n_b = (concordant + discordant + ties_a) as f64;
    (n_a > 0.0 && n_b > 0.0).then(|| (concordant - discordant) as f64 / (n_a * n_b).sqrt())
}

fn sign(x: f64) -> i8 {
    if x > 1e-12 {
        1
    } else if x < -1e-12 {
        -1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;
    use proptest::prelude::*;

    #[track_caller]
    fn close(actual: f64, expected: f64, tolerance: f64) {
        assert!((actual - expected).abs() <= tolerance, "{actual} != {expected} ± {tolerance}");
    }

    #[test]
    fn worked_examples_by_hand() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        close(mean(&xs), 2.5, 1e-12);
        close(std_dev(&xs), (5.0f64 / 3.0).sqrt(), 1e-12);
        // t(3) 97.5 % quantile = 3.182446; half width = 3.182446 · 1.290994 / 2.
        let ci = t_interval(&xs, 0.05);
        close(ci.high - 2.5, 3.182_446_305 * (5.0f64 / 3.0).sqrt() / 2.0, 1e-6);
        // Paired t: mean 2.5, sd 1.2910, t = 3.8730, df 3 → p = 0.030466 (scipy.stats.ttest_1samp).
        let (t, p) = paired_t(&xs).unwrap_or_default();
        close(t, 3.872_983_346, 1e-6);
        close(p, 0.030_466, 1e-5);
        // 0.1 ± sd 0.2 → ((1.96 + 0.8416) · 2)² = 31.4 → 32 queries.
        assert_eq!(queries_needed(0.2, 0.1, 0.05), Some(32));
        assert_eq!(queries_needed(0.0, 0.1, 0.05), None);
        // α = 0.01: ((2.5758 + 0.8416) · 2)² = 46.7 → 47 queries.
        assert_eq!(queries_needed(0.2, 0.1, 0.01), Some(47));
        // t(3) 99.5 % quantile = 5.840909 (scipy.stats.t.ppf).
        close(t_interval(&xs, 0.01).high - 2.5, 5.840_909_309 * (5.0f64 / 3.0).sqrt() / 2.0, 1e-6);
        assert_eq!(confidence_percent(0.05), "95 %");
        assert_eq!(confidence_percent(0.01), "99 %");
        assert_eq!(confidence_percent(0.1), "90 %");
        assert_eq!(confidence_percent(0.025), "97.5 %");
        close(quantile(&[0.0, 10.0], 0.25), 2.5, 1e-12);
    }

    #[test]
    fn holm_matches_a_hand_computed_example() {
        // Sorted 0.01, 0.02, 0.04 → 3·0.01, max(0.03, 2·0.02), max(0.04, 1·0.04).
        let adjusted = holm(&[0.04, 0.01, 0.02]);
        for (a, e) in adjusted.iter().zip([0.04, 0.03, 0.04]) {
            close(*a, e, 1e-12);
        }
        assert_eq!(holm(&[0.9, 0.3]), vec![0.9, 0.6]);
    }

    #[test]
    fn kendall_tau_counts_pairs() {
        close(kendall_tau(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]).unwrap_or_default(), 1.0, 1e-12);
        close(kendall_tau(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]).unwrap_or_default(), -1.0, 1e-12);
        // One discordant pair of three: (2 − 1) / 3.
        close(kendall_tau(&[1.0, 2.0, 3.0], &[1.0, 3.0, 2.0]).unwrap_or_default(), 1.0 / 3.0, 1e-12);
        // τ-b with a tie in b: C = 2, D = 0, ties_b = 1 → 2 / √(3 · 2).
        close(kendall_tau(&[1.0, 2.0, 3.0], &[1.0, 2.0, 2.0]).unwrap_or_default(), 2.0 / 6f64.sqrt(), 1e-12);
        assert_eq!(kendall_tau(&[1.0, 1.0], &[1.0, 2.0]), None);
    }

    #[test]
    fn a_clear_difference_is_found_and_none_is_not_invented() {
        let mut rng = stream(1, "test");
        let a: Vec<f64> = (0..200).map(|i| f64::from(i % 7) / 7.0).collect();
        let better: Vec<f64> = a.iter().map(|x| x + 0.05).collect();
        let diffs = differences(&better, &a);
        assert!(randomization_p(&diffs, 2000, &mut rng) < 0.001);
        let ci = bootstrap_interval(&diffs, 2000, 0.05, &mut rng);
        close(ci.low, 0.05, 1e-9);
        let noise: Vec<f64> = (0..200).map(|i| if i % 2 == 0 { 0.1 } else { -0.1 }).collect();
        assert!(randomization_p(&noise, 2000, &mut rng) > 0.5);
        assert!(bootstrap_interval(&noise, 2000, 0.05, &mut rng).contains(0.0));
    }

    #[test]
    fn tukey_hsd_separates_only_the_different_system() {
        let mut rng = stream(2, "test");
        let base: Vec<f64> = (0..100).map(|i| f64::from(i % 10) / 10.0).collect();
        let same: Vec<f64> = base.iter().rev().copied().collect();
        let better: Vec<f64> = base.iter().map(|x| (x + 0.3).min(1.0)).collect();
        let p = tukey_hsd(&[&base, &same, &better], 1000, &mut rng);
        assert!(p[0] > 0.5, "{p:?}");
        assert!(p[1] < 0.01 && p[2] < 0.01, "{p:?}");
    }

    #[test]
    fn seeded_streams_repeat() {
        let diffs = [0.1, -0.2, 0.3, 0.05];
        let run = |seed| {
            let mut rng = stream(seed, "test");
            (bootstrap_interval(&diffs, 500, 0.05, &mut rng), randomization_p(&diffs, 500, &mut rng))
        };
        assert_eq!(run(7), run(7));
    }

    proptest! {
        #[test]
        fn intervals_hold_the_mean_and_p_values_are_probabilities(
            xs in prop::collection::vec(-1.0f64..1.0, 2..40), seed in any::<u64>()
        ) {
            let mut rng = stream(seed, "test");
            let m = mean(&xs);
            let boot = bootstrap_interval(&xs, 200, 0.05, &mut rng);
            let narrow = bootstrap_interval(&xs, 200, 0.5, &mut stream(seed, "test"));
            let wide = bootstrap_interval(&xs, 200, 0.01, &mut stream(seed, "test"));
            prop_assert!(wide.low <= narrow.low && narrow.high <= wide.high, "a lower α widens the interval");
            prop_assert!(boot.low <= boot.high);
            prop_assert!(t_interval(&xs, 0.05).contains(m));
            let p = randomization_p(&xs, 200, &mut rng);
            prop_assert!(p > 0.0 && p <= 1.0);
            if let Some((_, p)) = paired_t(&xs) {
                prop_assert!((0.0..=1.0).contains(&p));
            }
            for p in holm(&[0.5, 0.01, 0.2]) {
                prop_assert!((0.0..=1.0).contains(&p));
            }
        }

        #[test]
        fn tau_is_symmetric_and_bounded(a in prop::collection::vec(0.0f64..1.0, 2..8), b in prop::collection::vec(0.0f64..1.0, 2..8)) {
            let n = a.len().min(b.len());
            if let Some(t) = kendall_tau(&a[..n], &b[..n]) {
                prop_assert!((-1.0 - 1e-12..=1.0 + 1e-12).contains(&t));
                prop_assert!((kendall_tau(&b[..n], &a[..n]).unwrap_or(f64::NAN) - t).abs() < 1e-12);
            }
        }
    }
}
