//! What the review says about the set: reviewed and pending queue items per type, and the
//! estimated share of good queries per type and overall ([`super::estimate`]).
//!
//! An item is reviewed once a decision for it has been applied since it was queued (the latest
//! one counts; see [`reviewed`]); it is good when that decision is `accept` (see
//! [`Decision::is_good`]). Only queue items count: the queue is the sample the estimate rests on.
//!
//! The queue draws a type's flagged queries before its kept ones, so within a type it is not a
//! simple random sample: the strata are (type, machine status) pairs, each a random sample of its
//! own, weighted by its size `N_{h,s}` in the base version (version 1, or what the last build or
//! refresh made). A refresh queues every query it changed, then carries the previous queue's
//! items: the queries it queued (items with a [`crate::record::RefreshNote`]) are strata of their
//! own, each wholly in the queue, and the carried items stay a sample of the rest. A type's share
//! combines its strata, the overall share all of them, both by [`estimate::stratified`] (MOVER).

use super::estimate::{self, Interval, Stratum};
use super::log::ReviewLog;
use super::set::ReviewSet;
use super::{Decision, Judgment};
use crate::id::QueryId;
use crate::record::{QueryType, Status as MachineStatus};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// The review of the queries of one type and one machine status, queued by a refresh or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusStratum {
    /// Kept or flagged by the machine.
    pub status: MachineStatus,
    /// Whether these are queries the refresh that made the base version changed and queued (all
    /// of them are in the queue).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub refreshed: bool,
    /// Queries of this type and status in the base version: the stratum's weight.
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

    /// `flagged direct`, or `flagged direct (queued by a refresh)`: its queries, for messages.
    #[must_use]
    pub fn name(&self, query_type: QueryType) -> String {
        let queued = if self.refreshed { " (queued by a refresh)" } else { "" };
        format!("{} {}{queued}", self.status.label(), query_type.label())
    }
}

/// The review of one query type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeStatus {
    /// The type.
    #[serde(rename = "type")]
    pub query_type: QueryType,
    /// Queries of this type in the base version.
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

    /// Strata with queries in the set but no reviewed item (the estimate waits for them).
    #[must_use]
    pub fn unreviewed(&self) -> Vec<&StatusStratum> {
        self.strata.iter().filter(|s| s.in_set > 0 && s.reviewed == 0).collect()
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
    /// Whether a refresh made the base version.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub refreshed: bool,
}

impl ReviewStatus {
    /// Strata with queries in the set but no reviewed item, with their type: the estimate waits
    /// for them.
    #[must_use]
    pub fn unreviewed_strata(&self) -> Vec<(QueryType, &StatusStratum)> {
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

/// The decision each queue item counts as reviewed with: the latest applied since it was
/// queued, that is since the refresh that queued it (the version its note names), else since
/// the last build. So decisions applied before a refresh still count for the items it carried
/// over, and not for the queries it changed and queued again.
#[must_use]
pub fn reviewed(set: &ReviewSet) -> HashMap<&QueryId, Decision> {
    let built = set.log().map_or(1, ReviewLog::built);
    let mut applied: HashMap<&QueryId, Vec<(u32, Decision)>> = HashMap::new();
    for entry in set.earlier_ledger.iter().chain(&set.ledger) {
        if let Some(decision) = entry.judgment.decision {
            applied.entry(&entry.judgment.query_id).or_default().push((entry.version, decision));
        }
    }
    set.queue
        .iter()
        .filter_map(|item| {
            let since = item.refresh.as_ref().map_or(built, |note| note.version);
            let (_, latest) = applied.get(&item.query_id)?.iter().rev().find(|(v, _)| *v > since)?;
            Some((&item.query_id, *latest))
        })
        .collect()
}

/// The review status of `set`. A queue item is counted in the stratum of its query in the base
/// version.
#[must_use]
pub fn status(set: &ReviewSet) -> ReviewStatus {
    let reviewed = reviewed(set);
    let queued_by_refresh: HashSet<&QueryId> =
        set.queue.iter().filter(|i| i.refresh.is_some()).map(|i| &i.query_id).collect();
    let in_base: HashMap<&QueryId, (QueryType, MachineStatus)> =
        set.base.queries.iter().map(|q| (&q.id, (q.query_type, q.status))).collect();
    let base = set.base.queries.iter().map(|q| (q.query_type, q.status, queued_by_refresh.contains(&q.id)));
    let queue = set.queue.iter().map(|i| {
        let (t, s) = in_base.get(&i.query_id).copied().unwrap_or((i.query_type, i.status));
        ((t, s, i.refresh.is_some()), reviewed.get(&i.query_id).copied())
    });
    let (types, overall) = tally(base, queue);
    let decided = latest_decisions(set.ledger.iter().map(|e| &e.judgment));
    let in_queue: HashSet<&QueryId> = set.queue.iter().map(|i| &i.query_id).collect();
    ReviewStatus {
        version: set.version(),
        overall,
        outside_queue: decided.keys().filter(|q| !in_queue.contains(*q)).count(),
        refreshed: set.log().is_some_and(ReviewLog::refreshed),
        types,
    }
}

/// A stratum: the queries' type and machine status, and whether a refresh queued them.
type Key = (QueryType, MachineStatus, bool);

/// The stratum of `key`, made empty if it is new.
fn stratum(strata: &mut BTreeMap<Key, StatusStratum>, key: Key) -> &mut StatusStratum {
    strata.entry(key).or_insert(StatusStratum {
        status: key.1,
        refreshed: key.2,
        in_set: 0,
        queue: 0,
        reviewed: 0,
        good_count: 0,
    })
}

/// Per-type status and the overall estimate, from the stratum of every query of the base version
/// and the stratum and counted decision of every queue item.
fn tally(
    base: impl Iterator<Item = Key>,
    queue: impl Iterator<Item = (Key, Option<Decision>)>,
) -> (Vec<TypeStatus>, Option<Interval>) {
    let mut strata: BTreeMap<Key, StatusStratum> = BTreeMap::new();
    for key in base {
        stratum(&mut strata, key).in_set += 1;
    }
    let mut decisions: BTreeMap<QueryType, BTreeMap<Decision, usize>> = BTreeMap::new();
    for (key, decision) in queue {
        let t = key.0;
        let st = stratum(&mut strata, key);
        st.queue += 1;
        if let Some(d) = decision {
            st.reviewed += 1;
            st.good_count += usize::from(d.is_good());
            *decisions.entry(t).or_default().entry(d).or_default() += 1;
        }
    }
    let overall = estimate::stratified(&strata.values().map(StatusStratum::stratum).collect::<Vec<_>>());
    let mut types: BTreeMap<QueryType, TypeStatus> = BTreeMap::new();
    for ((t, _, _), s) in strata {
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
        let base =
            std::iter::repeat_n((d, flagged, false), 10).chain(std::iter::repeat_n((d, kept, false), 90));
        let queue = decided(10, 4)
            .map(|x| ((d, flagged, false), x))
            .chain(decided(10, 9).map(|x| ((d, kept, false), x)))
            .chain([((d, kept, false), None)]);
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

    /// `n` decisions, the first `good` of them accepts and the rest rejections.
    fn decided(n: usize, good: usize) -> impl Iterator<Item = Option<Decision>> {
        (0..n).map(move |i| if i < good { Some(Decision::Accept) } else { Some(Decision::Reject) })
    }

    #[test]
    fn the_queries_a_refresh_queued_are_a_stratum_of_their_own() {
        // direct, all kept: 90 queries the refresh left, 10 of them in the queue carried from the
        // build's (9 good), and 10 it changed, all queued (4 good). Pooled as one kept stratum:
        // 13/20 = 0.65; as two, the figures of the flagged/kept example above: 0.85.
        let (d, kept) = (QueryType::Direct, MachineStatus::Kept);
        let base = std::iter::repeat_n((d, kept, false), 90).chain(std::iter::repeat_n((d, kept, true), 10));
        let queue =
            decided(10, 4).map(|x| ((d, kept, true), x)).chain(decided(10, 9).map(|x| ((d, kept, false), x)));
        let (types, overall) = tally(base, queue);
        let direct = &types[0];
        assert_eq!((direct.in_set, direct.queue, direct.reviewed, direct.flagged), (100, 20, 20, 0));
        let strata: Vec<(bool, usize, usize)> =
            direct.strata.iter().map(|s| (s.refreshed, s.in_set, s.queue)).collect();
        assert_eq!(strata, [(false, 90, 10), (true, 10, 10)]);
        let good = direct.good.unwrap_or_else(|| panic!("both strata reviewed"));
        close(good.estimate, 0.85);
        close(good.low, 0.575_285);
        close(good.high, 0.929_300);
        assert_eq!(overall, direct.good);
        assert_eq!(direct.strata[1].name(d), "kept direct (queued by a refresh)");
    }

    #[test]
    fn an_unreviewed_status_leaves_the_estimate_open() {
        let (d, flagged, kept) = (QueryType::Direct, MachineStatus::Flagged, MachineStatus::Kept);
        let base = [(d, flagged, false), (d, flagged, false), (d, kept, false), (d, kept, false)].into_iter();
        let queue = [((d, flagged, false), Some(Decision::Accept)), ((d, flagged, false), None)].into_iter();
        let (types, overall) = tally(base, queue);
        assert_eq!((types[0].good, overall), (None, None));
        let unreviewed: Vec<String> = types[0].unreviewed().iter().map(|s| s.name(d)).collect();
        assert_eq!(unreviewed, ["kept direct"]);
    }
}
