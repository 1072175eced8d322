//! Layered evaluation: a first-stage run (`--candidates`) and a reranked run of the same
//! queries. The first stage's Recall@N (N: its depth) is the ceiling of the reranker; each
//! answerable query the reranker fails (no relevant document in its top k) is attributed to a
//! layer: *retrieval* when no relevant document was among the candidates, *rerank* when one
//! was but the reranker did not put it in its top k.

use super::collection::QrelSet;
use super::run::Run;
use serde::Serialize;

/// Where each answerable query stands.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct LayerCounts {
    /// No relevant document among the candidates.
    pub retrieval: usize,
    /// A relevant candidate, pushed out of the reranker's top k.
    pub rerank: usize,
    /// A relevant document in the reranker's top k.
    pub fine: usize,
}

/// The layers of one reranked run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layers {
    /// The first-stage run.
    pub candidates: String,
    /// Its depth (most hits of a query).
    pub depth: usize,
    /// Its mean recall at that depth: the reranker's ceiling.
    pub candidate_recall: f64,
    /// The reranked run.
    pub reranker: String,
    /// The cut-off a query must have a relevant document within.
    pub k: usize,
    /// Queries per layer.
    pub counts: LayerCounts,
    /// The queries lost at retrieval.
    pub retrieval_failures: Vec<String>,
    /// The queries lost at reranking.
    pub rerank_failures: Vec<String>,
}

/// Attributes the failures of `reranked` on `queries` (answerable, collection positions).
#[must_use]
pub fn layers(
    candidates: &Run,
    reranked: &Run,
    qrels: &QrelSet,
    queries: &[usize],
    ids: &[&str],
    k: usize,
) -> Layers {
    let relevant = |run: &Run, q: usize, depth: usize| {
        run.rankings[q]
            .iter()
            .take(depth)
            .filter(|h| qrels.grade(q, run.doc(h)).is_some_and(|g| g >= 1))
            .count()
    };
    let depth = candidates.depth();
    let mut counts = LayerCounts::default();
    let (mut retrieval_failures, mut rerank_failures) = (Vec::new(), Vec::new());
    let mut recall_sum = 0.0;
    for &q in queries {
        let found = relevant(candidates, q, depth);
        recall_sum += found as f64 / qrels.judgments[q].relevant.max(1) as f64;
        if relevant(reranked, q, k) > 0 {
            counts.fine += 1;
        } else if found == 0 {
            counts.retrieval += 1;
            retrieval_failures.push(ids[q].to_owned());
        } else {
            counts.rerank += 1;
            rerank_failures.push(ids[q].to_owned());
        }
    }
    Layers {
        candidates: candidates.name.clone(),
        depth,
        candidate_recall: if queries.is_empty() { 0.0 } else { recall_sum / queries.len() as f64 },
        reranker: reranked.name.clone(),
        k,
        counts,
        retrieval_failures,
        rerank_failures,
    }
}
