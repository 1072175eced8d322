//! The share of good queries in the set, estimated from the reviewed stratified sample.
//!
//! Strata are query types, weighted by their share `W_h = N_h / N` of the set as it was sampled
//! (version 1). In stratum `h`, `x_h` of `n_h` reviewed items are good: `p_h = x_h / n_h`, with
//! the Wilson score interval `[l_h, u_h]` at 95 % (`z = 1.96`):
//!
//! ```text
//! centre = (p + z²/2n) / (1 + z²/n),  half-width = z / (1 + z²/n) · √(p(1 − p)/n + z²/4n²)
//! ```
//!
//! The set's share is `θ = Σ W_h p_h`, and its interval combines the strata's Wilson intervals by
//! the method of variance estimates recovery (MOVER; Zou & Donner 2008, Newcombe 2013):
//!
//! ```text
//! L = θ − √(Σ W_h² (p_h − l_h)²),   U = θ + √(Σ W_h² (u_h − p_h)²)
//! ```
//!
//! Like Wilson's, the interval stays inside [0, 1], is asymmetric near the bounds, contains `θ`
//! and narrows as the strata grow. No finite-population correction is applied, so the interval is
//! conservative when the sample is a large share of its stratum.

use serde::Serialize;

/// z for a two-sided 95 % interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// A proportion and its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// The point estimate.
    pub estimate: f64,
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

/// The Wilson score interval of `good` successes in `n` trials; `None` when `n` is 0.
#[must_use]
pub fn wilson(good: usize, n: usize) -> Option<Interval> {
    if n == 0 {
        return None;
    }
    let (n, p) = (n as f64, good.min(n) as f64 / n as f64);
    let z2 = Z95 * Z95;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = Z95 / denominator * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(Interval { estimate: p, low: (centre - half).clamp(0.0, p), high: (centre + half).clamp(p, 1.0) })
}

/// One stratum: its weight (any positive scale, e.g. its size) and its reviewed sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stratum {
    /// Its size in the population.
    pub weight: f64,
    /// Good items among the reviewed ones.
    pub good: usize,
    /// Reviewed items.
    pub reviewed: usize,
}

/// The stratified estimate and its MOVER interval over the strata with a positive weight;
/// `None` when there is none, or one of them has no reviewed item.
#[must_use]
pub fn stratified(strata: &[Stratum]) -> Option<Interval> {
    let weighted: Vec<&Stratum> = strata.iter().filter(|s| s.weight > 0.0).collect();
    let total: f64 = weighted.iter().map(|s| s.weight).sum();
    if weighted.is_empty() {
        return None;
    }
    let (mut estimate, mut below, mut above) = (0.0, 0.0, 0.0);
    for s in weighted {
        let w = s.weight / total;
        let i = wilson(s.good, s.reviewed)?;
        estimate += w * i.estimate;
        below += (w * (i.estimate - i.low)).powi(2);
        above += (w * (i.high - i.estimate)).powi(2);
    }
    let estimate = estimate.clamp(0.0, 1.0);
    Some(Interval {
        estimate,
        low: (estimate - below.sqrt()).clamp(0.0, estimate),
        high: (estimate + above.sqrt()).clamp(estimate, 1.0),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Asserts `got` equals `expected` to six decimals (the worked examples' precision).
    #[track_caller]
    pub(crate) fn close(got: f64, expected: f64) {
        assert!((got - expected).abs() < 1e-6, "{got} ≠ {expected}");
    }

    #[test]
    fn wilson_worked_examples() {
        // 18 of 20: p = 0.9, z² = 3.8415; centre = (0.9 + 0.09604) / 1.19207 = 0.83555;
        // half = 1.95996 / 1.19207 · √(0.0045 + 0.0024009) = 1.64418 · 0.083072 = 0.13658.
        let i = wilson(18, 20).unwrap_or_else(|| panic!("n > 0"));
        close(i.low, 0.698_966);
        close(i.high, 0.972_134);
        // 5 of 10: symmetric around 0.5.
        let i = wilson(5, 10).unwrap_or_else(|| panic!("n > 0"));
        close(i.low, 0.236_593);
        close(i.high, 0.763_407);
        // All good: the upper bound is 1, the lower one is not.
        let i = wilson(20, 20).unwrap_or_else(|| panic!("n > 0"));
        close(i.high, 1.0);
        close(i.low, 0.838_875);
        assert_eq!(wilson(0, 0), None);
    }

    #[test]
    fn stratified_worked_example() {
        // direct: 60 % of the set, 18 of 20 good; no_answer: 40 %, 5 of 10 good.
        //   θ = 0.6 · 0.9 + 0.4 · 0.5 = 0.74
        //   L = 0.74 − √(0.36 · (0.9 − 0.698966)² + 0.16 · (0.5 − 0.236593)²)
        //     = 0.74 − √(0.36 · 0.0404145 + 0.16 · 0.0693832) = 0.74 − √0.0256505 = 0.579842
        //   U = 0.74 + √(0.36 · (0.972134 − 0.9)² + 0.16 · (0.763407 − 0.5)²)
        //     = 0.74 + √(0.36 · 0.0052032 + 0.16 · 0.0693832) = 0.74 + √0.0129745 = 0.853906
        let strata = [
            Stratum { weight: 60.0, good: 18, reviewed: 20 },
            Stratum { weight: 40.0, good: 5, reviewed: 10 },
        ];
        let i = stratified(&strata).unwrap_or_else(|| panic!("every stratum reviewed"));
        close(i.estimate, 0.74);
        close(i.low, 0.579_842);
        close(i.high, 0.853_906);
    }

    #[test]
    fn a_stratum_without_reviews_leaves_the_estimate_open() {
        let strata = [
            Stratum { weight: 60.0, good: 18, reviewed: 20 },
            Stratum { weight: 40.0, good: 0, reviewed: 0 },
        ];
        assert_eq!(stratified(&strata), None);
        let empty_stratum = [strata[0], Stratum { weight: 0.0, good: 0, reviewed: 0 }];
        assert!(stratified(&empty_stratum).is_some(), "a type with no queries does not count");
    }

    fn strata() -> impl Strategy<Value = Vec<(u32, usize, usize)>> {
        proptest::collection::vec((1u32..500, 1usize..60, 0usize..=100), 1..5)
            .prop_map(|v| v.into_iter().map(|(w, n, pct)| (w, n, n * pct / 100)).collect())
    }

    fn build(strata: &[(u32, usize, usize)], scale: usize) -> Vec<Stratum> {
        strata
            .iter()
            .map(|&(w, n, good)| Stratum { weight: f64::from(w), good: good * scale, reviewed: n * scale })
            .collect()
    }

    proptest! {
        #[test]
        fn intervals_hold_the_estimate_and_narrow_with_more_reviews(strata in strata()) {
            let small = stratified(&build(&strata, 1)).unwrap_or_else(|| panic!("reviewed"));
            let large = stratified(&build(&strata, 4)).unwrap_or_else(|| panic!("reviewed"));
            for i in [small, large] {
                prop_assert!(0.0 <= i.low && i.low <= i.estimate && i.estimate <= i.high && i.high <= 1.0, "{i:?}");
            }
            prop_assert!((small.estimate - large.estimate).abs() < 1e-9);
            prop_assert!(large.high - large.low < small.high - small.low, "{small:?} {large:?}");
            for &(_, n, good) in &strata {
                let w = wilson(good, n).unwrap_or_else(|| panic!("n > 0"));
                let w4 = wilson(good * 4, n * 4).unwrap_or_else(|| panic!("n > 0"));
                prop_assert!(w.low <= w.estimate && w.estimate <= w.high);
                prop_assert!(w4.high - w4.low < w.high - w.low);
            }
        }
    }
}
