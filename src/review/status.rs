//! What the review says about the set: reviewed and pending queue items per type, and the
//! estimated share of good queries per type and overall ([`super::estimate`]).
//!
//! An item is reviewed once a decision for it has been applied (the latest one counts); it is
//! good when that decision is `accept` (see [`Decision::is_good`]). Only queue items count: the
//! queue is the sample the estimate rests on.
//!
//! The queue draws a type's flagged queries before its kept ones, so within a type it is not a
//! simple random sample: the strata are (type, machine status) pairs, each a random sample of its
//! own, weighted by its size `N_{h,s}` in version 1. A type's share combines its flagged and kept
//! strata, the overall share all of them, both by [`estimate::stratified`] (MOVER).

use super::estimate::{self, Interval, Stratum};
use super::set::ReviewSet;
use super::{Decision, Judgment};
use crate::id::QueryId;
use crate::record::{QueryType, Status as MachineStatus};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// The review of the queries of one type and one machine status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusStratum {
    /// Kept or flagged by the machine.
    pub status: MachineStatus,
    /// Queries of this type and status in version 1: the stratum's weight.
    pub in_set: usize,
    /// Queue items of this type and status.
    pub queue: usize,
    /// Queue items with a decision.
    pub reviewed: usize,
    /// Reviewed items that are good.
    pub good_count: usize,
}

impl StatusStratum {
    fn stratum(&self) -> Stratum {
        Stratum { weight: self.in_set as f64, good: self.good_count, reviewed: self.reviewed }
    }
}

/// The review of one query type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeStatus {
    /// The type.
    #[serde(rename = "type")]
    pub query_type: QueryType,
    /// Queries of this type in the set as sampled (version 1).
    pub in_set: usize,
    /// Queue items of this type.
    pub queue: usize,
    /// Queue items with a decision.
    pub reviewed: usize,
    /// Reviewed items by decision.
    pub decisions: BTreeMap<Decision, usize>,
    /// Reviewed items the machine had flagged.
    pub flagged: usize,
    /// The type's flagged and kept queries, the strata of the estimate.
    pub strata: Vec<StatusStratum>,
    /// Share of good queries and its interval (the status strata combined); `None` until every
    /// stratum with queries has a reviewed item.
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

    /// Statuses with queries in the set but no reviewed item (the estimate waits for them).
    #[must_use]
    pub fn unreviewed(&self) -> Vec<MachineStatus> {
        self.strata.iter().filter(|s| s.in_set > 0 && s.reviewed == 0).map(|s| s.status).collect()
    }
}

/// The review of the whole set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReviewStatus {
    /// The version in the folder.
    pub version: u32,
    /// Per type, in report order.
    pub types: Vec<TypeStatus>,
    /// The stratified estimate over all (type, status) strata; `None` until each has a reviewed
    /// item.
    pub overall: Option<Interval>,
    /// Decisions applied to queries outside the queue (applied, but not part of the estimate).
    pub outside_queue: usize,
}

impl ReviewStatus {
    /// (type, status) strata with queries in the set but no reviewed item: the estimate waits
    /// for them.
    #[must_use]
    pub fn unreviewed_strata(&self) -> Vec<(QueryType, MachineStatus)> {
        self.types.iter().flat_map(|t| t.unreviewed().into_iter().map(|s| (t.query_type, s))).collect()
    }

    /// Reviewed items the machine had flagged.
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

/// The review status of `set`.
#[must_use]
pub fn status(set: &ReviewSet) -> ReviewStatus {
    let decided = latest_decisions(set.ledger.iter().map(|e| &e.judgment));
    let base = set.base.queries.iter().map(|q| (q.query_type, q.status));
    let queue = set.queue.iter().map(|i| (i.query_type, i.status, decided.get(&i.query_id).copied()));
    let (types, overall) = tally(base, queue);
    let in_queue: HashSet<&QueryId> = set.queue.iter().map(|i| &i.query_id).collect();
    ReviewStatus {
        version: set.version(),
        overall,
        outside_queue: decided.keys().filter(|q| !in_queue.contains(*q)).count(),
        types,
    }
}

/// The stratum of `key`, made empty if it is new.
fn stratum(
    strata: &mut BTreeMap<(QueryType, MachineStatus), StatusStratum>,
    key: (QueryType, MachineStatus),
) -> &mut StatusStratum {
    strata.entry(key).or_insert(StatusStratum {
        status: key.1,
        in_set: 0,
        queue: 0,
        reviewed: 0,
        good_count: 0,
    })
}

/// Per-type status and the overall estimate, from the (type, status) of every version-1 query and
/// the (type, status, latest decision) of every queue item.
fn tally(
    base: impl Iterator<Item = (QueryType, MachineStatus)>,
    queue: impl Iterator<Item = (QueryType, MachineStatus, Option<Decision>)>,
) -> (Vec<TypeStatus>, Option<Interval>) {
    let mut strata: BTreeMap<(QueryType, MachineStatus), StatusStratum> = BTreeMap::new();
    for key in base {
        stratum(&mut strata, key).in_set += 1;
    }
    let mut decisions: BTreeMap<QueryType, BTreeMap<Decision, usize>> = BTreeMap::new();
    for (t, s, decision) in queue {
        let st = stratum(&mut strata, (t, s));
        st.queue += 1;
        if let Some(d) = decision {
            st.reviewed += 1;
            st.good_count += usize::from(d.is_good());
            *decisions.entry(t).or_default().entry(d).or_default() += 1;
        }
    }
    let overall = estimate::stratified(&strata.values().map(StatusStratum::stratum).collect::<Vec<_>>());
    let mut types: BTreeMap<QueryType, TypeStatus> = BTreeMap::new();
    for ((t, _), s) in strata {
        let entry = types.entry(t).or_insert_with(|| TypeStatus {
            query_type: t,
            in_set: 0,
            queue: 0,
            reviewed: 0,
            decisions: decisions.remove(&t).unwrap_or_default(),
            flagged: 0,
            strata: Vec::new(),
            good: None,
        });
        entry.in_set += s.in_set;
        entry.queue += s.queue;
        entry.reviewed += s.reviewed;
        entry.flagged += if s.status == MachineStatus::Flagged { s.reviewed } else { 0 };
        entry.strata.push(s);
    }
    let mut types: Vec<TypeStatus> = types.into_values().collect();
    for t in &mut types {
        t.good = estimate::stratified(&t.strata.iter().map(StatusStratum::stratum).collect::<Vec<_>>());
    }
    (types, overall)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::estimate::tests::close;

    #[test]
    fn flagged_and_kept_queries_are_strata_of_their_own() {
        // direct: 10 flagged and 90 kept queries in the set. The queue drew the 10 flagged ones
        // first (4 good) and 10 of the kept ones (9 good).
        //   pooled as one sample: 13/20 = 0.65, biased towards the flagged queries;
        //   stratified: W_f = 10/100, W_k = 90/100: θ = 0.1 · 0.4 + 0.9 · 0.9 = 0.85
        //   Wilson(4, 10) = [0.168180, 0.687326], Wilson(9, 10) = [0.595850, 0.982124]
        //   L = 0.85 − √((0.1 · (0.4 − 0.168180))² + (0.9 · (0.9 − 0.595850))²)
        //     = 0.85 − √(0.000537404 + 0.0749309) = 0.85 − 0.274715 = 0.575285
        //   U = 0.85 + √((0.1 · (0.687326 − 0.4))² + (0.9 · (0.982124 − 0.9))²)
        //     = 0.85 + √(0.000825564 + 0.00546290) = 0.85 + 0.079300 = 0.929300
        let (d, flagged, kept) = (QueryType::Direct, MachineStatus::Flagged, MachineStatus::Kept);
        let base = std::iter::repeat_n((d, flagged), 10).chain(std::iter::repeat_n((d, kept), 90));
        let decided = |n, good| {
            (0..n).map(move |i| if i < good { Some(Decision::Accept) } else { Some(Decision::Reject) })
        };
        let queue = decided(10, 4)
            .map(|x| (d, flagged, x))
            .chain(decided(10, 9).map(|x| (d, kept, x)))
            .chain([(d, kept, None)]);
        let (types, overall) = tally(base, queue);
        let direct = &types[0];
        assert_eq!((direct.in_set, direct.queue, direct.reviewed, direct.flagged), (100, 21, 20, 10));
        assert_eq!(direct.good_count(), 13);
        let good = direct.good.unwrap_or_else(|| panic!("both strata reviewed"));
        close(good.estimate, 0.85);
        close(good.low, 0.575_285);
        close(good.high, 0.929_300);
        assert_eq!(overall, direct.good, "one type: the overall estimate is the type's");
    }

    #[test]
    fn an_unreviewed_status_leaves_the_estimate_open() {
        let (d, flagged, kept) = (QueryType::Direct, MachineStatus::Flagged, MachineStatus::Kept);
        let base = [(d, flagged), (d, flagged), (d, kept), (d, kept)].into_iter();
        let queue = [(d, flagged, Some(Decision::Accept)), (d, flagged, None)].into_iter();
        let (types, overall) = tally(base, queue);
        assert_eq!((types[0].good, overall), (None, None));
        assert_eq!(types[0].unreviewed(), [kept]);
    }
}
