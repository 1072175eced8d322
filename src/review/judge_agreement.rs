//! The machine judges checked by people: on the pooled pairs a machine graded (`qrels/pooled.tsv`,
//! graded by `judge` or `one_shot`) that a reviewer graded too (the review ledger), how often
//! they agree on "relevant" (Cohen's κ, with a large-sample interval) and how often a pair the
//! machine calls relevant is relevant to the reviewer (precision, with a Wilson interval).
//!
//! Relevant means what the qrels count: a reviewer's grade of 1 or more; the LLM judge's grade
//! through [`crate::judge::relevance`] (2 or more); the one-shot labeller's 1.

use super::agreement::cohen_kappa;
use super::estimate::{Interval, Z95, wilson};
use super::log::Entry;
use crate::error::Result;
use crate::id::{ChunkId, QueryId};
use crate::output::layout::{LEDGER, POOLED_TSV, REPORT_MD};
use crate::output::report::{LaterSection, with_section};
use crate::output::{self, Staging};
use crate::record::Provenance;
use crate::set::pooled::read_pooled;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// Below this κ (on at least [`POOR_MIN_PAIRS`] pairs) the judge is called poor.
pub const POOR_KAPPA: f64 = 0.4;
/// Pairs needed before a low κ is called poor.
pub const POOR_MIN_PAIRS: usize = 10;
/// A precision of "relevant" whose upper bound is below this is called poor.
pub const POOR_PRECISION: f64 = 0.8;

/// How the machine's grades of pooled pairs agree with the reviewers'.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeAgreement {
    /// Machine-graded pooled pairs a reviewer graded.
    pub pairs: usize,
    /// Cohen's κ on relevant / not relevant, with its 95 % interval.
    pub kappa: Option<Interval>,
    /// Of the pairs the machine called relevant, the share the reviewers did, with its Wilson
    /// 95 % interval.
    pub precision: Option<Interval>,
    /// Pairs the machine called relevant.
    pub machine_relevant: usize,
    /// Why the agreement is poor, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poor: Option<String>,
}

/// The agreement of the machine-graded pooled pairs of the set in `dir` with its reviewers;
/// `None` when no reviewer graded such a pair (or the set has no pools).
///
/// # Errors
/// [`crate::Error::Input`]/[`crate::Error::Malformed`] for an unreadable pooled file or ledger.
pub fn agreement(dir: &Path) -> Result<Option<JudgeAgreement>> {
    agreement_of(&dir.join(POOLED_TSV), &dir.join(LEDGER))
}

/// [`agreement`] of the pooled pairs in the file `pooled` with the review ledger `ledger`.
///
/// # Errors
/// As [`agreement`].
pub fn agreement_of(pooled: &Path, ledger: &Path) -> Result<Option<JudgeAgreement>> {
    let pooled = read_pooled(pooled)?;
    if pooled.is_empty() || !ledger.is_file() {
        return Ok(None);
    }
    let ledger: Vec<Entry> = super::set::read_all(ledger)?;
    let mut human: HashMap<(&QueryId, &ChunkId), u8> = HashMap::new();
    for entry in &ledger {
        for g in &entry.judgment.grades {
            human.insert((&entry.judgment.query_id, &g.chunk_id), g.grade);
        }
    }
    let pairs: Vec<(bool, bool)> = pooled
        .iter()
        .filter_map(|p| {
            let relevant = machine_relevant(p.grade?, p.graded_by.as_deref()?)?;
            Some((relevant, *human.get(&(&p.query, &p.chunk))? >= 1))
        })
        .collect();
    Ok(measure(&pairs))
}

/// Whether a machine grade counts as relevant; `None` for a grade no machine gave.
fn machine_relevant(grade: u8, by: &str) -> Option<bool> {
    match Provenance::from_label(by)? {
        Provenance::Judge => Some(crate::judge::relevance(grade) >= 1),
        Provenance::OneShot => Some(grade >= 1),
        _ => None,
    }
}

/// κ and precision of (machine relevant, human relevant) pairs; `None` without pairs.
#[must_use]
pub fn measure(pairs: &[(bool, bool)]) -> Option<JudgeAgreement> {
    let k = cohen_kappa(pairs)?;
    let n = pairs.len() as f64;
    // Cohen (1960): the standard error of κ, √(p_o(1 − p_o) / (n (1 − p_e)²)).
    let se = if 1.0 - k.expected <= f64::EPSILON {
        0.0
    } else {
        (k.observed * (1.0 - k.observed) / (n * (1.0 - k.expected).powi(2))).sqrt()
    };
    // κ is undefined when chance agreement is certain (every pair in one class).
    let kappa = k.kappa.map(|estimate| Interval {
        estimate,
        low: (estimate - Z95 * se).max(-1.0),
        high: (estimate + Z95 * se).min(1.0),
    });
    let machine_relevant = pairs.iter().filter(|(m, _)| *m).count();
    let agreed = pairs.iter().filter(|(m, h)| *m && *h).count();
    let precision = wilson(agreed, machine_relevant);
    let low_kappa = kappa.filter(|k| k.estimate < POOR_KAPPA);
    let poor = if let Some(low) = low_kappa.filter(|_| pairs.len() >= POOR_MIN_PAIRS) {
        Some(format!("κ {:.2} < {POOR_KAPPA} on {} pairs", low.estimate, pairs.len()))
    } else {
        precision.filter(|p| p.high < POOR_PRECISION).map(|p| {
            format!(
                "precision of relevant {:.2} (95 % up to {:.2} < {POOR_PRECISION}): many of its relevant labels are false",
                p.estimate, p.high
            )
        })
    };
    Some(JudgeAgreement { pairs: pairs.len(), kappa, precision, machine_relevant, poor })
}

/// The lines that say it, for `review status` and `eval`.
#[must_use]
pub fn render(a: &JudgeAgreement) -> String {
    let interval = |i: Option<Interval>| {
        i.map_or_else(|| "n/a".to_owned(), |i| format!("{:.2} [{:.2}, {:.2}]", i.estimate, i.low, i.high))
    };
    let mut text = format!(
        "machine grades of pooled pairs vs reviewers: {} pairs, κ {}, precision of relevant {} ({} called relevant)\n",
        a.pairs,
        interval(a.kappa),
        interval(a.precision),
        a.machine_relevant
    );
    if let Some(poor) = &a.poor {
        let _ = writeln!(
            text,
            "warning: the machine judge agrees poorly with the reviewers ({poor}); its labels decide comparisons: review more pooled pairs, or pool with another judge"
        );
    }
    text
}

/// Stages the set's `report.md` (in `dir`) with a section on the machine judges' agreement with
/// the reviewers, in place of an earlier one, for version `version` whose files are staged in
/// `staging` (its ledger, and its pooled pairs if it stages them). Nothing is staged while no
/// reviewer graded a machine-graded pooled pair, or when the set has no `report.md`.
///
/// # Errors
/// As [`agreement`]; [`crate::Error::Output`] when staging fails.
pub fn stage_report(dir: &Path, staging: &Staging, version: u32) -> Result<()> {
    let staged_or_live = |name: &str| {
        let staged = staging.staged_path(name);
        if staged.is_file() { staged } else { dir.join(name) }
    };
    let Some(agreement) = agreement_of(&staged_or_live(POOLED_TSV), &staged_or_live(LEDGER))? else {
        return Ok(());
    };
    let Ok(md) = fs_err::read_to_string(staged_or_live(REPORT_MD)) else { return Ok(()) };
    output::write_text(
        &staging.path(REPORT_MD),
        &with_section(&md, LaterSection::JudgeAgreement, &report_section(&agreement, version)),
    )
}

/// The section: what was compared, the figures, and the warning when the judge is poor.
fn report_section(a: &JudgeAgreement, version: u32) -> String {
    let mut section = format!(
        "Version {version} of the set: the pooled pairs a machine graded (the LLM judge or \
         the one-shot labeller) that reviewers graded too. Its labels decide comparisons between \
         runs; `review status` repeats these figures.\n\n"
    );
    for line in render(a).lines() {
        match line.strip_prefix("warning: ") {
            Some(warning) => {
                let _ = writeln!(section, "**Warning:** {warning}\n");
            }
            None => {
                let _ = writeln!(section, "{}\n", capitalised(line));
            }
        }
    }
    section
}

fn capitalised(line: &str) -> String {
    let mut chars = line.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::estimate::tests::close;

    fn pairs(spec: &[((bool, bool), usize)]) -> Vec<(bool, bool)> {
        spec.iter().flat_map(|&(p, n)| std::iter::repeat_n(p, n)).collect()
    }

    #[test]
    fn the_report_section_warns_only_when_the_judge_is_poor() {
        let good = measure(&pairs(&[((true, true), 8), ((false, false), 8)])).unwrap();
        let text = report_section(&good, 2);
        assert!(text.contains("Machine grades of pooled pairs vs reviewers: 16 pairs, κ 1.00"), "{text}");
        assert!(!text.contains("Warning"), "{text}");
        let poor = measure(&pairs(&[((true, false), 8), ((false, false), 8)])).unwrap();
        assert!(report_section(&poor, 2).contains("**Warning:** the machine judge agrees poorly"));
    }

    #[test]
    fn kappa_and_precision_by_hand() {
        // 4 both relevant, 4 both not, 1 each way: p_o = 0.8, p_e = 0.5, κ = 0.6,
        // SE = √(0.8 · 0.2 / (10 · 0.25)) = 0.25298, κ ± 1.96 SE = [0.1042, 1].
        let a = measure(&pairs(&[
            ((true, true), 4),
            ((false, false), 4),
            ((true, false), 1),
            ((false, true), 1),
        ]))
        .unwrap();
        let k = a.kappa.unwrap();
        close(k.estimate, 0.6);
        close(k.low, 0.6 - 1.959_963_984_540_054 * 0.252_982_212_813_470_5);
        close(k.high, 1.0);
        // Precision 4 of 5, Wilson: centre 0.66966, half-width 0.29413 → [0.3755, 0.9638].
        let p = a.precision.unwrap();
        close(p.estimate, 0.8);
        assert!((p.low - 0.3755).abs() < 1e-3 && (p.high - 0.9638).abs() < 1e-3, "{p:?}");
        assert_eq!(a.machine_relevant, 5);
        assert_eq!(a.poor, None, "κ 0.6 and an upper bound of 0.96 are not poor");
    }

    #[test]
    fn a_judge_that_calls_everything_relevant_is_poor() {
        // Relevant 10 times of 12 for the machine, 4 for the reviewers, agreeing on 6:
        // p_o = 0.5, p_e = 10/12 · 4/12 + 2/12 · 8/12 = 0.3889, κ = 0.1818.
        let a = measure(&pairs(&[((true, true), 4), ((true, false), 6), ((false, false), 2)])).unwrap();
        close(a.kappa.unwrap().estimate, (0.5 - 56.0 / 144.0) / (1.0 - 56.0 / 144.0));
        assert!(a.poor.as_deref().unwrap().starts_with("κ 0.18 < 0.4 on 12 pairs"), "{:?}", a.poor);
        // Few pairs: κ is not read, but a precision whose upper bound is low is.
        let few = measure(&pairs(&[((true, false), 4), ((true, true), 1)])).unwrap();
        assert!(few.poor.as_deref().unwrap().starts_with("precision of relevant 0.20"), "{:?}", few.poor);
        assert_eq!(measure(&[]), None);
    }

    proptest::proptest! {
        #[test]
        fn intervals_hold_their_estimates(pairs in proptest::collection::vec((proptest::bool::ANY, proptest::bool::ANY), 1..80)) {
            let a = measure(&pairs).unwrap();
            // κ is undefined exactly when both raters put every pair in the same one class.
            let undefined = pairs.iter().all(|p| p.0 == p.1 && *p == pairs[0]);
            proptest::prop_assert_eq!(a.kappa.is_none(), undefined);
            if let Some(k) = a.kappa {
                proptest::prop_assert!((-1.0..=1.0).contains(&k.low) && k.low <= k.estimate && k.estimate <= k.high && k.high <= 1.0);
            }
            if let Some(p) = a.precision {
                proptest::prop_assert!(0.0 <= p.low && p.low <= p.estimate && p.estimate <= p.high && p.high <= 1.0);
            }
            proptest::prop_assert_eq!(a.precision.is_some(), pairs.iter().any(|(m, _)| *m));
        }
    }

    #[test]
    fn relevance_follows_the_machine_that_graded() {
        assert_eq!(machine_relevant(1, "judge"), Some(false), "the judge's 1 is not relevant");
        assert_eq!(machine_relevant(2, "judge"), Some(true));
        assert_eq!(machine_relevant(1, "one_shot"), Some(true));
        assert_eq!(machine_relevant(3, "human"), None, "not a machine");
    }
}
