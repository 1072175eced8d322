//! Agreement between two reviewers who judged the same items: Cohen's kappa on their decisions
//! and on their grades, the list of disagreements, and the resolution of both into one set of
//! judgments under a policy.
//!
//! Kappa is unweighted: `κ = (p_o − p_e) / (1 − p_e)`, with `p_o` the share of items on which the
//! two agree and `p_e = Σ_k a_k · b_k` the agreement expected by chance from each reviewer's
//! share `a_k`, `b_k` of category `k`. It is computed over the items both judged (decisions: both
//! gave one; grades: both graded the same chunk of the same query). When both used one and the
//! same category throughout, `p_e = 1` and κ is taken as 1. Two edits with different texts are
//! listed as a disagreement too (kappa counts them as agreeing decisions).

use super::{Decision, Judgment};
use crate::error::{Error, Result};
use crate::id::{ChunkId, QueryId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// How two reviewers' judgments of the same query are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Policy {
    /// The more severe decision wins (reject > answerable > edit > accept); the lower grade wins.
    Strict,
    /// The less severe decision wins; the higher grade wins.
    Lenient,
}

impl Policy {
    /// The label used in flags and the manifest: serde's name.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }

    fn pick<T: Ord>(self, a: T, b: T) -> T {
        match self {
            Self::Strict => a.max(b),
            Self::Lenient => a.min(b),
        }
    }

    fn pick_grade(self, a: u8, b: u8) -> u8 {
        match self {
            Self::Strict => a.min(b),
            Self::Lenient => a.max(b),
        }
    }
}

/// Cohen's kappa over a set of paired ratings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Kappa {
    /// Items both rated.
    pub items: usize,
    /// Share of items rated alike (`p_o`).
    pub observed: f64,
    /// Agreement expected by chance (`p_e`).
    pub expected: f64,
    /// `(p_o − p_e) / (1 − p_e)`, in [−1, 1]; `None` when undefined (`p_e` = 1: both reviewers
    /// gave every item the same one rating, so agreement by chance is certain and κ is 0/0).
    pub kappa: Option<f64>,
}

/// Unweighted Cohen's kappa of paired ratings; `None` without pairs.
#[must_use]
pub fn cohen_kappa<T: Ord>(pairs: &[(T, T)]) -> Option<Kappa> {
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let mut first: BTreeMap<&T, f64> = BTreeMap::new();
    let mut second: BTreeMap<&T, f64> = BTreeMap::new();
    for (a, b) in pairs {
        *first.entry(a).or_default() += 1.0;
        *second.entry(b).or_default() += 1.0;
    }
    let observed = pairs.iter().filter(|(a, b)| a == b).count() as f64 / n;
    let expected: f64 = first.iter().map(|(k, a)| a / n * second.get(k).map_or(0.0, |b| b / n)).sum();
    let kappa =
        (1.0 - expected > f64::EPSILON).then(|| ((observed - expected) / (1.0 - expected)).clamp(-1.0, 1.0));
    Some(Kappa { items: pairs.len(), observed, expected, kappa })
}

/// Where two reviewers disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Disagreement {
    /// The query.
    pub query_id: QueryId,
    /// On what, and what each said.
    #[serde(flatten)]
    pub about: About,
}

/// What two reviewers disagree on, and what each said (first reviewer, second reviewer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "about", rename_all = "snake_case")]
pub enum About {
    /// The decision.
    Decision {
        /// The first reviewer's.
        first: Decision,
        /// The second reviewer's.
        second: Decision,
    },
    /// The grade of a chunk.
    Grade {
        /// The chunk.
        chunk_id: ChunkId,
        /// The first reviewer's.
        first: u8,
        /// The second reviewer's.
        second: u8,
    },
    /// Both edited the query, to different texts.
    EditedText {
        /// The first reviewer's.
        first: String,
        /// The second reviewer's.
        second: String,
    },
}

/// What two reviewers' judgments say about each other.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    /// The two reviewers, in the order they were first read.
    pub reviewers: [String; 2],
    /// Queries each judged.
    pub judged: [usize; 2],
    /// Kappa of the decisions (accept, edit, answerable, reject) on queries both decided.
    pub decisions: Option<Kappa>,
    /// Kappa of the grades (0–3) on chunks both graded.
    pub grades: Option<Kappa>,
    /// Every disagreement, decisions first, in query order.
    pub disagreements: Vec<Disagreement>,
}

/// The judgments of exactly two reviewers, split by reviewer.
///
/// # Errors
/// [`Error::Reviewers`] when the judgments come from fewer or more than two reviewers.
pub fn split(judgments: &[Judgment]) -> Result<[(String, Vec<&Judgment>); 2]> {
    let mut by: Vec<(String, Vec<&Judgment>)> = Vec::new();
    for j in judgments {
        match by.iter_mut().find(|(r, _)| *r == j.reviewer) {
            Some((_, list)) => list.push(j),
            None => by.push((j.reviewer.clone(), vec![j])),
        }
    }
    let found: Vec<String> = by.iter().map(|(r, _)| r.clone()).collect();
    <[_; 2]>::try_from(by).map_err(|_| Error::Reviewers { found })
}

/// Kappa and disagreements of two reviewers.
#[must_use]
pub fn agreement(first: (&str, &[&Judgment]), second: (&str, &[&Judgment])) -> Agreement {
    let theirs: HashMap<&QueryId, &Judgment> = second.1.iter().map(|j| (&j.query_id, *j)).collect();
    let mut decisions = Vec::new();
    let mut grades = Vec::new();
    let mut disagreements = Vec::new();
    let mut grade_disagreements = Vec::new();
    for a in first.1 {
        let Some(b) = theirs.get(&a.query_id) else { continue };
        if let (Some(x), Some(y)) = (a.decision, b.decision) {
            decisions.push((x, y));
            let about = if x == y { None } else { Some(About::Decision { first: x, second: y }) };
            let texts = (x == Decision::Edit && x == y && a.edited_text != b.edited_text).then(|| {
                (a.edited_text.clone().unwrap_or_default(), b.edited_text.clone().unwrap_or_default())
            });
            let about = about.or_else(|| texts.map(|(first, second)| About::EditedText { first, second }));
            if let Some(about) = about {
                disagreements.push(Disagreement { query_id: a.query_id.clone(), about });
            }
        }
        let their_grades: HashMap<&ChunkId, u8> = b.grades.iter().map(|g| (&g.chunk_id, g.grade)).collect();
        for g in &a.grades {
            let Some(&other) = their_grades.get(&g.chunk_id) else { continue };
            grades.push((g.grade, other));
            if g.grade != other {
                grade_disagreements.push(Disagreement {
                    query_id: a.query_id.clone(),
                    about: About::Grade { chunk_id: g.chunk_id.clone(), first: g.grade, second: other },
                });
            }
        }
    }
    disagreements.append(&mut grade_disagreements);
    Agreement {
        reviewers: [first.0.to_owned(), second.0.to_owned()],
        judged: [first.1.len(), second.1.len()],
        decisions: cohen_kappa(&decisions),
        grades: cohen_kappa(&grades),
        disagreements,
    }
}

/// One judgment per query from two reviewers' judgments. A query judged by one keeps that
/// judgment. Judged by both: when their decisions differ, the one `policy` picks wins whole
/// (reason, text and grades); when they agree (or one gave none), the first reviewer's reason and
/// text are kept and grades are merged, `policy` picking between two grades of the same chunk.
/// Merged judgments name both reviewers (`first+second`). A merged judgment can break a form
/// rule (both `answerable`, each answering chunk graded 0 by the other under `strict`): apply
/// checks resolved judgments by the same rules as a file's rows.
#[must_use]
pub fn resolve(first: &[&Judgment], second: &[&Judgment], policy: Policy) -> Vec<Judgment> {
    let theirs: HashMap<&QueryId, &Judgment> = second.iter().map(|j| (&j.query_id, *j)).collect();
    let mine: HashMap<&QueryId, &Judgment> = first.iter().map(|j| (&j.query_id, *j)).collect();
    let mut resolved: Vec<Judgment> = first
        .iter()
        .map(|a| theirs.get(&a.query_id).map_or_else(|| (*a).clone(), |b| merge(a, b, policy)))
        .collect();
    resolved.extend(second.iter().filter(|b| !mine.contains_key(&b.query_id)).map(|b| (*b).clone()));
    resolved
}

fn merge(a: &Judgment, b: &Judgment, policy: Policy) -> Judgment {
    let reviewer = format!("{}+{}", a.reviewer, b.reviewer);
    match (a.decision, b.decision) {
        (Some(x), Some(y)) if x != y => {
            let winner = if policy.pick(x, y) == x { a } else { b };
            Judgment { reviewer, ..winner.clone() }
        }
        _ => {
            let base = if a.decision.is_some() || b.decision.is_none() { a } else { b };
            let mut grades: BTreeMap<ChunkId, u8> =
                a.grades.iter().map(|g| (g.chunk_id.clone(), g.grade)).collect();
            for g in &b.grades {
                let grade =
                    grades.get(&g.chunk_id).map_or(g.grade, |&other| policy.pick_grade(other, g.grade));
                grades.insert(g.chunk_id.clone(), grade);
            }
            let grades =
                grades.into_iter().map(|(chunk_id, grade)| super::ChunkGrade { chunk_id, grade }).collect();
            Judgment { reviewer, grades, ..base.clone() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::{ChunkGrade, Decision};
    use proptest::prelude::*;

    #[test]
    fn kappa_worked_example() {
        // Ten queries; A accepts 7, B accepts 7; they agree on 6 accepts and 2 rejects.
        //   p_o = (6 + 2) / 10 = 0.8
        //   p_e = P(A acc)·P(B acc) + P(A rej)·P(B rej) = 0.7·0.7 + 0.3·0.3 = 0.49 + 0.09 = 0.58
        //   κ   = (0.8 − 0.58) / (1 − 0.58) = 0.22 / 0.42 = 0.523 809 5…
        let (acc, rej) = (Decision::Accept, Decision::Reject);
        let a = [acc, acc, acc, acc, acc, acc, acc, rej, rej, rej];
        let b = [acc, acc, acc, acc, acc, acc, rej, rej, rej, acc];
        let pairs: Vec<_> = a.into_iter().zip(b).collect();
        let k = cohen_kappa(&pairs).unwrap_or_else(|| panic!("no pairs"));
        assert!((k.observed - 0.8).abs() < 1e-12 && (k.expected - 0.58).abs() < 1e-12, "{k:?}");
        assert!((k.kappa.unwrap_or(f64::NAN) - 0.22 / 0.42).abs() < 1e-12, "{k:?}");
    }

    #[test]
    fn grade_kappa_worked_example() {
        // Six chunks graded by both: (3,3) (3,2) (2,2) (0,0) (1,0) (0,0).
        //   p_o = 4/6
        //   A: 3→2, 2→1, 1→1, 0→2;  B: 3→1, 2→2, 0→3  (out of 6)
        //   p_e = (2·1 + 1·2 + 1·0 + 2·3) / 36 = 10/36
        //   κ   = (4/6 − 10/36) / (1 − 10/36) = (24 − 10) / (36 − 10) = 14/26 = 0.538 461 5…
        let pairs = [(3u8, 3u8), (3, 2), (2, 2), (0, 0), (1, 0), (0, 0)];
        let k = cohen_kappa(&pairs).unwrap_or_else(|| panic!("no pairs"));
        assert!((k.kappa.unwrap_or(f64::NAN) - 14.0 / 26.0).abs() < 1e-12, "{k:?}");
        assert_eq!(cohen_kappa::<u8>(&[]), None);
        // Every item rated 1 by both: chance agreement is 1, κ = 0/0 is undefined, not 1.
        let same = cohen_kappa(&[(1u8, 1u8), (1, 1)]).unwrap_or_else(|| panic!("no pairs"));
        assert_eq!((same.kappa, same.observed, same.expected), (None, 1.0, 1.0));
        assert_eq!(cohen_kappa(&[(0u8, 1u8), (1, 0)]).and_then(|k| k.kappa), Some(-1.0));
        assert_eq!(cohen_kappa(&[(0u8, 0u8), (1, 1)]).and_then(|k| k.kappa), Some(1.0));
    }

    fn judgment(query: &str, reviewer: &str, decision: Option<Decision>, grades: &[(&str, u8)]) -> Judgment {
        Judgment {
            query_id: QueryId::parse(query).unwrap(),
            reviewer: reviewer.to_owned(),
            decision,
            reject_reason: (decision == Some(Decision::Reject)).then(|| format!("{reviewer} says no")),
            edited_text: None,
            grades: grades
                .iter()
                .map(|(c, g)| ChunkGrade { chunk_id: ChunkId::parse(c).unwrap(), grade: *g })
                .collect(),
        }
    }

    #[test]
    fn disagreements_are_listed_and_resolved_by_policy() {
        let (acc, rej) = (Some(Decision::Accept), Some(Decision::Reject));
        let ann = [
            judgment("q1", "ann", acc, &[("c1", 3), ("c2", 1)]),
            judgment("q2", "ann", acc, &[]),
            judgment("q3", "ann", acc, &[]),
        ];
        let bob = [
            judgment("q1", "bob", acc, &[("c1", 2)]),
            judgment("q2", "bob", rej, &[]),
            judgment("q4", "bob", rej, &[]),
        ];
        let (a, b): (Vec<&Judgment>, Vec<&Judgment>) = (ann.iter().collect(), bob.iter().collect());
        let report = agreement(("ann", &a), ("bob", &b));
        assert_eq!(report.decisions.map(|k| k.items), Some(2));
        let listed: Vec<(String, About)> =
            report.disagreements.iter().map(|d| (d.query_id.to_string(), d.about.clone())).collect();
        let c1 = ChunkId::parse("c1").unwrap();
        assert_eq!(
            listed,
            [
                ("q2".into(), About::Decision { first: Decision::Accept, second: Decision::Reject }),
                ("q1".into(), About::Grade { chunk_id: c1, first: 3, second: 2 })
            ]
        );
        let strict = resolve(&a, &b, Policy::Strict);
        let summary = |js: &[Judgment]| -> Vec<(String, Option<Decision>, Vec<u8>, String)> {
            js.iter()
                .map(|j| {
                    (
                        j.query_id.to_string(),
                        j.decision,
                        j.grades.iter().map(|g| g.grade).collect(),
                        j.reviewer.clone(),
                    )
                })
                .collect()
        };
        assert_eq!(
            summary(&strict),
            [
                ("q1".into(), acc, vec![2, 1], "ann+bob".into()),
                ("q2".into(), rej, vec![], "ann+bob".into()),
                ("q3".into(), acc, vec![], "ann".into()),
                ("q4".into(), rej, vec![], "bob".into())
            ]
        );
        assert_eq!(strict[1].reject_reason.as_deref(), Some("bob says no"));
        let lenient = resolve(&a, &b, Policy::Lenient);
        assert_eq!(
            summary(&lenient)[..2],
            [("q1".into(), acc, vec![3, 1], "ann+bob".into()), ("q2".into(), acc, vec![], "ann+bob".into())]
        );
    }

    #[test]
    fn two_different_edits_are_a_disagreement() {
        let edit = Some(Decision::Edit);
        let with_text = |reviewer: &str, text: &str| Judgment {
            edited_text: Some(text.to_owned()),
            ..judgment("q1", reviewer, edit, &[])
        };
        let (ann, bob) = ([with_text("ann", "how long")], [with_text("bob", "for how long")]);
        let (a, b): (Vec<&Judgment>, Vec<&Judgment>) = (ann.iter().collect(), bob.iter().collect());
        let report = agreement(("ann", &a), ("bob", &b));
        let decisions = report.decisions.unwrap_or_else(|| panic!("no decisions"));
        assert_eq!((decisions.observed, decisions.kappa), (1.0, None), "the decisions agree, κ undefined");
        assert_eq!(
            report.disagreements.iter().map(|d| d.about.clone()).collect::<Vec<_>>(),
            [About::EditedText { first: "how long".into(), second: "for how long".into() }]
        );
        let json = serde_json::to_value(&report.disagreements[0]).unwrap();
        assert_eq!(json["about"], "edited_text");
        assert_eq!(json["second"], "for how long");
    }

    #[test]
    fn two_reviewers_are_needed() {
        let one = [judgment("q1", "ann", None, &[("c1", 1)])];
        assert!(matches!(split(&one), Err(Error::Reviewers { found }) if found == ["ann"]));
    }

    proptest! {
        #[test]
        fn kappa_is_bounded_symmetric_and_one_for_identical_ratings(
            pairs in proptest::collection::vec((0u8..4, 0u8..4), 1..60)
        ) {
            let k = cohen_kappa(&pairs).unwrap_or_else(|| panic!("no pairs"));
            // Undefined exactly when chance agreement is certain: one rating on both sides.
            let one_rating = pairs.iter().all(|p| *p == pairs[0] && p.0 == p.1);
            prop_assert_eq!(k.kappa.is_none(), one_rating);
            let k = k.kappa.unwrap_or(0.0);
            prop_assert!((-1.0..=1.0).contains(&k), "{k}");
            let swapped: Vec<(u8, u8)> = pairs.iter().map(|&(a, b)| (b, a)).collect();
            let k2 = cohen_kappa(&swapped).unwrap_or_else(|| panic!("no pairs")).kappa.unwrap_or(0.0);
            prop_assert!((k - k2).abs() < 1e-9);
            let same: Vec<(u8, u8)> = pairs.iter().map(|&(a, _)| (a, a)).collect();
            let k3 = cohen_kappa(&same).unwrap_or_else(|| panic!("no pairs")).kappa;
            prop_assert!(k3.is_none_or(|k3| (k3 - 1.0).abs() < 1e-9), "{k3:?}");
        }
    }
}
