//! Per-query scores of a run: every measure on every scored query, kept whole (means are taken
//! from them, never instead of them).

use super::collection::QrelSet;
use super::metrics::{self, Gain, Label, Measure};
use super::run::Run;

/// A run's scores: one row per query, one column per measure.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// The measures, in column order.
    pub measures: Vec<Measure>,
    /// The queries scored (collection positions), in row order.
    pub queries: Vec<usize>,
    values: Vec<f64>,
}

impl Scores {
    /// Scores `run` on `queries` under `qrels`.
    #[must_use]
    pub fn of(run: &Run, qrels: &QrelSet, queries: &[usize], measures: &[Measure], gain: Gain) -> Self {
        let mut values = Vec::with_capacity(queries.len() * measures.len());
        let mut labels = Vec::new();
        for &q in queries {
            labels.clear();
            labels.extend(
                run.rankings[q]
                    .iter()
                    .map(|h| qrels.grade(q, run.doc(h)).map_or(Label::Unjudged, Label::Judged)),
            );
            values.extend(metrics::score(&labels, &qrels.judgments[q], measures, gain));
        }
        Self { measures: measures.to_vec(), queries: queries.to_vec(), values }
    }

    /// The column of `measure`, if it was scored.
    #[must_use]
    pub fn position(&self, measure: Measure) -> Option<usize> {
        self.measures.iter().position(|&m| m == measure)
    }

    /// The scores of column `m`, in query order.
    #[must_use]
    pub fn column(&self, m: usize) -> Vec<f64> {
        let width = self.measures.len();
        (0..self.queries.len()).map(|i| self.values[i * width + m]).collect()
    }

    /// The scores of `measure`, in query order (empty if it was not scored).
    #[must_use]
    pub fn of_measure(&self, measure: Measure) -> Vec<f64> {
        self.position(measure).map(|m| self.column(m)).unwrap_or_default()
    }

    /// Row `i`: every measure on the i-th query.
    #[must_use]
    pub fn row(&self, i: usize) -> &[f64] {
        let width = self.measures.len();
        &self.values[i * width..(i + 1) * width]
    }

    /// The mean of every measure over the rows `rows` (all rows: `None`).
    #[must_use]
    pub fn means(&self, rows: Option<&[usize]>) -> Vec<f64> {
        let width = self.measures.len();
        let mut sums = vec![0.0; width];
        let mut n = 0usize;
        let mut add = |i: usize| {
            for (s, v) in sums.iter_mut().zip(self.row(i)) {
                *s += v;
            }
            n += 1;
        };
        match rows {
            Some(rows) => rows.iter().copied().for_each(&mut add),
            None => (0..self.queries.len()).for_each(&mut add),
        }
        sums.into_iter().map(|s| if n == 0 { 0.0 } else { s / n as f64 }).collect()
    }
}
