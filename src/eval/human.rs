//! Does the set rank systems as human judgments do? Each run's mean under the set's qrels and
//! under human qrels, Kendall's τ between the two orderings with a bootstrap interval (queries
//! of both sides drawn with replacement), and whether the top system is the same.

use super::compare::StatSettings;
use super::metrics::Measure;
use super::stats::{self, Interval};
use crate::rng;
use rand::Rng as _;
use serde::Serialize;

/// One run's means under both qrels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunMeans {
    /// The run.
    pub run: String,
    /// Mean under the set's qrels.
    pub set: f64,
    /// Mean under the human qrels.
    pub human: f64,
}

/// The agreement of the set with human judgments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HumanAgreement {
    /// The measure.
    pub measure: Measure,
    /// Answerable queries under the set's qrels.
    pub set_queries: usize,
    /// Answerable queries under the human qrels.
    pub human_queries: usize,
    /// Each run's means.
    pub runs: Vec<RunMeans>,
    /// Kendall's τ-b between the two orderings (`None` with fewer than two runs or all tied).
    pub tau: Option<f64>,
    /// Its percentile bootstrap interval at `1 − α`.
    pub interval: Option<Interval>,
    /// The best run under the set's qrels.
    pub top_set: String,
    /// The best run under the human qrels.
    pub top_human: String,
    /// Whether the two name the same run.
    pub top_agrees: bool,
    /// The finding in words.
    pub verdict: String,
}

/// Compares orderings: `set[r]` and `human[r]` are run r's per-query scores under each qrels.
#[must_use]
pub fn agreement(
    measure: Measure,
    names: &[&str],
    set: &[Vec<f64>],
    human: &[Vec<f64>],
    stats: &StatSettings,
) -> HumanAgreement {
    let set_means: Vec<f64> = set.iter().map(|s| stats::mean(s)).collect();
    let human_means: Vec<f64> = human.iter().map(|s| stats::mean(s)).collect();
    let tau = stats::kendall_tau(&set_means, &human_means);
    let interval = tau.map(|_| bootstrap_tau(set, human, stats));
    let best = |means: &[f64]| {
        let at = means.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i);
        names.get(at).copied().unwrap_or_default().to_owned()
    };
    let (top_set, top_human) = (best(&set_means), best(&human_means));
    let top_agrees = top_set == top_human;
    let runs = names
        .iter()
        .zip(set_means.iter().zip(&human_means))
        .map(|(n, (&s, &h))| RunMeans { run: (*n).to_owned(), set: s, human: h })
        .collect();
    let verdict = words(tau, interval, stats.alpha, (&top_set, &top_human));
    HumanAgreement {
        measure,
        set_queries: set.first().map_or(0, Vec::len),
        human_queries: human.first().map_or(0, Vec::len),
        runs,
        tau,
        interval,
        top_set,
        top_human,
        top_agrees,
        verdict,
    }
}

fn words(
    tau: Option<f64>,
    interval: Option<Interval>,
    alpha: f64,
    (top_set, top_human): (&str, &str),
) -> String {
    let top = if top_set == top_human {
        format!("both put {top_set} on top")
    } else {
        format!("the set puts {top_set} on top, the human judgments {top_human}")
    };
    match (tau, interval) {
        (Some(t), Some(i)) => {
            format!(
                "Kendall's τ = {t:.3} [{:.3}, {:.3}] ({} bootstrap interval) between the orderings; {top}",
                i.low,
                i.high,
                stats::confidence_percent(alpha)
            )
        }
        _ => format!("τ needs two runs that the qrels tell apart; {top}"),
    }
}

/// τ of the means of queries drawn with replacement, on both sides independently.
fn bootstrap_tau(set: &[Vec<f64>], human: &[Vec<f64>], settings: &StatSettings) -> Interval {
    let mut rng = rng::stream(settings.seed, "eval/human-tau");
    let draw = |scores: &[Vec<f64>], rng: &mut rng::Rng| -> Vec<f64> {
        let n = scores.first().map_or(0, Vec::len);
        if n == 0 {
            return vec![0.0; scores.len()];
        }
        let picks: Vec<usize> = (0..n).map(|_| rng.random_range(0..n)).collect();
        scores.iter().map(|s| picks.iter().map(|&i| s[i]).sum::<f64>() / n as f64).collect()
    };
    let mut taus: Vec<f64> = (0..settings.resamples)
        .filter_map(|_| {
            let (a, b) = (draw(set, &mut rng), draw(human, &mut rng));
            stats::kendall_tau(&a, &b)
        })
        .collect();
    taus.sort_unstable_by(f64::total_cmp);
    let alpha = settings.alpha;
    Interval { low: stats::quantile(&taus, alpha / 2.0), high: stats::quantile(&taus, 1.0 - alpha / 2.0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> StatSettings {
        StatSettings {
            resamples: 200,
            seed: 1,
            alpha: 0.05,
            effect: None,
            correction: super::super::Correction::Holm,
        }
    }

    #[test]
    fn agreeing_and_disagreeing_orderings() {
        let names = ["a", "b", "c"];
        let set = vec![vec![0.2; 30], vec![0.5; 30], vec![0.8; 30]];
        let human = vec![vec![0.1; 20], vec![0.4; 20], vec![0.9; 20]];
        let same = agreement(Measure::Ndcg(10), &names, &set, &human, &settings());
        assert_eq!(same.tau, Some(1.0));
        assert!(same.top_agrees);
        assert_eq!(same.interval, Some(Interval { low: 1.0, high: 1.0 }));
        assert!(same.verdict.contains("both put c on top"), "{}", same.verdict);
        assert!(same.verdict.contains("(95 % bootstrap interval)"), "{}", same.verdict);
        let at_99 =
            agreement(Measure::Ndcg(10), &names, &set, &human, &StatSettings { alpha: 0.01, ..settings() });
        assert!(at_99.verdict.contains("(99 % bootstrap interval)"), "{}", at_99.verdict);
        let reversed: Vec<Vec<f64>> = human.iter().rev().cloned().collect();
        let other = agreement(Measure::Ndcg(10), &names, &set, &reversed, &settings());
        assert_eq!(other.tau, Some(-1.0));
        assert!(!other.top_agrees);
        assert_eq!((other.set_queries, other.human_queries), (30, 20));
    }
}
