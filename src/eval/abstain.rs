//! Abstention: how well a run's top-1 score tells answerable queries from no_answer ones.
//!
//! Input: each query's top-1 score (`None`: the run returned nothing, which always refuses).
//! Output: AUROC (the chance that an answerable query outscores a no_answer one, ties counted
//! half) and, at a threshold (given, or the one that maximises accuracy on these same
//! queries, which flatters the run), the share of no_answer queries the run would answer and
//! of answerable queries it would refuse. A query is answered when its top-1 score is at least
//! the threshold.

use serde::Serialize;

/// Points of the abstention curve kept for the page.
const CURVE_POINTS: usize = 200;

/// How the threshold was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThresholdChoice {
    /// `--abstain-threshold`.
    Given,
    /// The one with the best accuracy on these queries (optimistic: tuned on the test queries).
    BestAccuracy,
}

/// The errors at one threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Answer when the top-1 score is at least this.
    pub threshold: f64,
    /// Share of no_answer queries answered.
    pub wrong_answers: f64,
    /// Share of answerable queries refused.
    pub wrong_refusals: f64,
}

/// A run's abstention figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Abstention {
    /// Answerable queries.
    pub answerable: usize,
    /// no_answer queries.
    pub no_answer: usize,
    /// Area under the ROC curve of the top-1 score.
    pub auroc: f64,
    /// The threshold reported, and how it was chosen.
    pub threshold: f64,
    /// How it was chosen.
    pub choice: ThresholdChoice,
    /// Errors at that threshold.
    pub at_threshold: Point,
    /// Share of all queries handled right at that threshold.
    pub accuracy: f64,
    /// The curve: errors at thresholds from low to high (at most a few hundred points).
    pub curve: Vec<Point>,
}

/// The abstention figures, or `None` without queries of both kinds.
#[must_use]
pub fn abstention(
    answerable: &[Option<f64>],
    no_answer: &[Option<f64>],
    given: Option<f64>,
) -> Option<Abstention> {
    if answerable.is_empty() || no_answer.is_empty() {
        return None;
    }
    let score = |s: &Option<f64>| s.unwrap_or(f64::NEG_INFINITY);
    let pos: Vec<f64> = answerable.iter().map(score).collect();
    let neg: Vec<f64> = no_answer.iter().map(score).collect();
    let mut thresholds: Vec<f64> = pos.iter().chain(&neg).copied().filter(|s| s.is_finite()).collect();
    thresholds.push(f64::INFINITY);
    thresholds.sort_unstable_by(f64::total_cmp);
    thresholds.dedup();
    let at = |t: f64| point(&pos, &neg, t);
    let accuracy = |p: &Point| {
        let right = (1.0 - p.wrong_refusals) * pos.len() as f64 + (1.0 - p.wrong_answers) * neg.len() as f64;
        right / (pos.len() + neg.len()) as f64
    };
    let best = || {
        let best = thresholds.iter().copied().map(at).fold(None::<Point>, |best, p| match best {
            Some(b) if accuracy(&b) >= accuracy(&p) => Some(b),
            _ => Some(p),
        });
        best.map_or(f64::INFINITY, |p| p.threshold)
    };
    let (threshold, choice) =
        given.map_or_else(|| (best(), ThresholdChoice::BestAccuracy), |t| (t, ThresholdChoice::Given));
    let chosen = at(threshold);
    let step = thresholds.len().div_ceil(CURVE_POINTS).max(1);
    let curve = thresholds.iter().step_by(step).copied().filter(|t| t.is_finite()).map(at).collect();
    Some(Abstention {
        answerable: pos.len(),
        no_answer: neg.len(),
        auroc: auroc(&pos, &neg),
        threshold,
        choice,
        at_threshold: chosen,
        accuracy: accuracy(&chosen),
        curve,
    })
}

fn point(pos: &[f64], neg: &[f64], threshold: f64) -> Point {
    let share =
        |xs: &[f64], f: &dyn Fn(f64) -> bool| xs.iter().filter(|&&x| f(x)).count() as f64 / xs.len() as f64;
    Point {
        threshold,
        wrong_answers: share(neg, &|s| s >= threshold),
        wrong_refusals: share(pos, &|s| s < threshold),
    }
}

/// Mann–Whitney AUROC: P(positive > negative) + ½ P(tie), by average ranks.
fn auroc(pos: &[f64], neg: &[f64]) -> f64 {
    let mut all: Vec<(f64, bool)> =
        pos.iter().map(|&s| (s, true)).chain(neg.iter().map(|&s| (s, false))).collect();
    all.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < all.len() {
        let j = all[i..].iter().position(|x| x.0.total_cmp(&all[i].0).is_ne()).map_or(all.len(), |d| i + d);
        let average = (i + 1 + j) as f64 / 2.0;
        rank_sum += average * all[i..j].iter().filter(|x| x.1).count() as f64;
        i = j;
    }
    let (n, m) = (pos.len() as f64, neg.len() as f64);
    (rank_sum - n * (n + 1.0) / 2.0) / (n * m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn worked_example_by_hand() {
        // Answerable 3, 2, 1; no_answer 2, 0 and one empty result.
        let a = abstention(&[Some(3.0), Some(2.0), Some(1.0)], &[Some(2.0), Some(0.0), None], None)
            .unwrap_or_else(|| panic!("both kinds"));
        // Pairs (a > n): 3 beats all 3; 2 ties 2 and beats 2; 1 beats 2 → (3 + 2.5 + 2) / 9.
        assert!((a.auroc - 7.5 / 9.0).abs() < 1e-12);
        // Best accuracy at threshold 1: all answerable answered, no_answer 2 answered → 5/6;
        // threshold 3 gets 1 + 3 = 4/6.
        assert_eq!((a.threshold, a.choice), (1.0, ThresholdChoice::BestAccuracy));
        assert!((a.accuracy - 5.0 / 6.0).abs() < 1e-12);
        assert!((a.at_threshold.wrong_answers - 1.0 / 3.0).abs() < 1e-12);
        assert!(a.at_threshold.wrong_refusals.abs() < 1e-12);
        let given = abstention(&[Some(3.0), Some(2.0), Some(1.0)], &[Some(2.0), Some(0.0), None], Some(2.5))
            .unwrap_or_else(|| panic!("both kinds"));
        assert_eq!(given.choice, ThresholdChoice::Given);
        assert!((given.at_threshold.wrong_refusals - 2.0 / 3.0).abs() < 1e-12);
        assert!(abstention(&[Some(1.0)], &[], None).is_none());
    }

    proptest! {
        #[test]
        fn auroc_is_a_probability_and_flips_with_the_classes(
            pos in prop::collection::vec(prop::option::of(0.0f64..10.0), 1..20),
            neg in prop::collection::vec(prop::option::of(0.0f64..10.0), 1..20),
        ) {
            let a = abstention(&pos, &neg, None).map_or(f64::NAN, |a| a.auroc);
            let b = abstention(&neg, &pos, None).map_or(f64::NAN, |a| a.auroc);
            prop_assert!((0.0..=1.0).contains(&a));
            prop_assert!((a + b - 1.0).abs() < 1e-9);
        }
    }
}
