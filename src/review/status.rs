//! What the review says about the set: reviewed and pending queue items per type, and the
//! estimated share of good queries per type and overall ([`super::estimate`]).
//!
//! An item is reviewed once a decision for it has been applied (the latest one counts); it is
//! good when that decision is `accept` (see [`Decision::is_good`]). Only queue items count: the
//! queue is the stratified sample the estimate rests on.

use super::estimate::{self, Interval, Stratum};
use super::set::ReviewSet;
use super::{Decision, Judgment};
use crate::id::QueryId;
use crate::record::{QueryType, Status as MachineStatus};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// The review of one query type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeStatus {
    /// The type.
    #[serde(rename = "type")]
    pub query_type: QueryType,
    /// Queries of this type in the set as sampled (version 1): the stratum's weight.
    pub in_set: usize,
    /// Queue items of this type.
    pub queue: usize,
    /// Queue items with a decision.
    pub reviewed: usize,
    /// Reviewed items by decision.
    pub decisions: BTreeMap<Decision, usize>,
    /// Reviewed items the machine had flagged.
    pub flagged: usize,
    /// Share of good queries and its Wilson interval; `None` before any review.
    pub good: Option<Interval>,
}

impl TypeStatus {
    /// Queue items still to review.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.queue - self.reviewed
    }

    /// Reviewed items that are good.
    #[must_use]
    pub fn good_count(&self) -> usize {
        self.decisions.iter().filter(|(d, _)| d.is_good()).map(|(_, n)| n).sum()
    }
}

/// The review of the whole set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReviewStatus {
    /// The version in the folder.
    pub version: u32,
    /// Per type, in report order.
    pub types: Vec<TypeStatus>,
    /// The stratified estimate over all types; `None` until every type has a reviewed item.
    pub overall: Option<Interval>,
    /// Decisions applied to queries outside the queue (applied, but not part of the estimate).
    pub outside_queue: usize,
}

impl ReviewStatus {
    /// Types in the set without a reviewed item (the overall estimate waits for them).
    #[must_use]
    pub fn unreviewed_types(&self) -> Vec<QueryType> {
        self.types.iter().filter(|t| t.in_set > 0 && t.reviewed == 0).map(|t| t.query_type).collect()
    }

    /// Reviewed items the machine had flagged (the queue draws them first).
    #[must_use]
    pub fn flagged_reviewed(&self) -> usize {
        self.types.iter().map(|t| t.flagged).sum()
    }
}

/// The latest decision applied to each query.
#[must_use]
pub fn latest_decisions<'a>(
    judgments: impl IntoIterator<Item = &'a Judgment>,
) -> HashMap<&'a QueryId, Decision> {
    judgments.into_iter().filter_map(|j| j.decision.map(|d| (&j.query_id, d))).collect()
}

fn entry(types: &mut BTreeMap<QueryType, TypeStatus>, t: QueryType) -> &mut TypeStatus {
    types.entry(t).or_insert_with(|| TypeStatus {
        query_type: t,
        in_set: 0,
        queue: 0,
        reviewed: 0,
        decisions: BTreeMap::new(),
        flagged: 0,
        good: None,
    })
}

/// The review status of `set`.
#[must_use]
pub fn status(set: &ReviewSet) -> ReviewStatus {
    let decided = latest_decisions(set.ledger.iter().map(|e| &e.judgment));
    let mut types: BTreeMap<QueryType, TypeStatus> = BTreeMap::new();
    for q in &set.base.queries {
        entry(&mut types, q.query_type).in_set += 1;
    }
    for item in &set.queue {
        let t = entry(&mut types, item.query_type);
        t.queue += 1;
        if let Some(&d) = decided.get(&item.query_id) {
            t.reviewed += 1;
            *t.decisions.entry(d).or_default() += 1;
            t.flagged += usize::from(item.status == MachineStatus::Flagged);
        }
    }
    let mut types: Vec<TypeStatus> = types.into_values().collect();
    for t in &mut types {
        t.good = estimate::wilson(t.good_count(), t.reviewed);
    }
    let strata: Vec<Stratum> = types
        .iter()
        .map(|t| Stratum { weight: t.in_set as f64, good: t.good_count(), reviewed: t.reviewed })
        .collect();
    let in_queue: std::collections::HashSet<&QueryId> = set.queue.iter().map(|i| &i.query_id).collect();
    ReviewStatus {
        version: set.version(),
        overall: estimate::stratified(&strata),
        outside_queue: decided.keys().filter(|q| !in_queue.contains(*q)).count(),
        types,
    }
}
