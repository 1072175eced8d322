//! Means broken down by query type, by measured difficulty and by provenance (human-reviewed or
//! machine-only), each slice with its query count.

use super::collection::QueryInfo;
use super::metrics::Measure;
use super::score::Scores;
use serde::Serialize;
use std::collections::BTreeMap;

/// The means of one slice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slice {
    /// The slice, e.g. `direct` or `hard`.
    pub value: String,
    /// Queries in it.
    pub queries: usize,
    /// Mean of every measure.
    pub means: BTreeMap<Measure, f64>,
}

/// The slices of one attribute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Breakdown {
    /// `type`, `difficulty` or `provenance`.
    pub by: &'static str,
    /// Its slices, in report order.
    pub slices: Vec<Slice>,
}

/// The three breakdowns of a run's scores.
#[must_use]
pub fn breakdowns(scores: &Scores, queries: &[QueryInfo]) -> Vec<Breakdown> {
    let by_type = |q: &QueryInfo| q.query_type.map_or_else(|| "unknown".to_owned(), |t| t.label().to_owned());
    let by_difficulty =
        |q: &QueryInfo| q.difficulty.map_or_else(|| "unknown".to_owned(), |d| d.label().to_owned());
    let by_provenance = |q: &QueryInfo| provenance(q).to_owned();
    [
        ("type", &by_type as &dyn Fn(&QueryInfo) -> String),
        ("difficulty", &by_difficulty),
        ("provenance", &by_provenance),
    ]
    .into_iter()
    .map(|(by, key)| Breakdown { by, slices: slices(scores, queries, key) })
    .collect()
}

/// A query's provenance as outputs name it: human-reviewed, machine-only, or unknown (queries
/// qrelgen did not write).
#[must_use]
pub fn provenance(q: &QueryInfo) -> &'static str {
    match q.reviewed {
        Some(true) => "human-reviewed",
        Some(false) => "machine-only",
        None => "unknown",
    }
}

fn slices(scores: &Scores, queries: &[QueryInfo], key: &dyn Fn(&QueryInfo) -> String) -> Vec<Slice> {
    let mut rows: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, &q) in scores.queries.iter().enumerate() {
        rows.entry(key(&queries[q])).or_default().push(i);
    }
    let order = |value: &str| {
        let known = [
            "direct",
            "paraphrase",
            "multi_hop",
            "no_answer",
            "easy",
            "medium",
            "hard",
            "human-reviewed",
            "machine-only",
            "unknown",
        ];
        known.iter().position(|k| *k == value).unwrap_or(known.len())
    };
    let mut slices: Vec<Slice> = rows
        .into_iter()
        .map(|(value, rows)| {
            let means = scores.measures.iter().copied().zip(scores.means(Some(&rows))).collect();
            Slice { value, queries: rows.len(), means }
        })
        .collect();
    slices.sort_by_key(|s| order(&s.value));
    slices
}
