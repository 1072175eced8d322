//! What a refresh writes: [`NewVersion`] gathers the re-checked and new queries into the new
//! version's files (queries, qrels, review queue, pools, candidates, chunk map and changelog).

use super::map::{ChunkChange, ChunkMap};
use super::recheck::{QueryChange, Rechecked};
use super::{CHANGELOG, CHUNK_MAP, RefreshSummary, report};
use crate::build::rounds::Rounds;
use crate::error::{Error, Result};
use crate::id::{ChunkId, QueryId};
use crate::index::ChunkIndex;
use crate::output::layout::{
    CANDIDATES, CHUNK_GROUPS, NO_ANSWER, POOL_TSV, POOLED_TSV, QUERIES, QUEUE, REJECTS,
};
use crate::output::{self, Staging};
use crate::record::{Checked, Provenance, Qrel, QueryType, RefreshNote, ReviewItem};
use crate::review::set::read_all;
use crate::set::pooled::{pooled_text, read_pooled};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// What the refresh writes, from what it found.
pub(super) struct NewVersion<'a> {
    pub(super) map: &'a ChunkMap,
    pub(super) checked: &'a [Rechecked],
    pub(super) rounds: &'a Rounds,
    pub(super) index: &'a ChunkIndex,
    pub(super) language: crate::text::Language,
    /// The review queue of the version refreshed.
    pub(super) previous: &'a [ReviewItem],
    /// The version the refresh makes.
    pub(super) version: u32,
}

impl NewVersion<'_> {
    fn new_set(&self) -> impl Iterator<Item = &Checked> {
        self.rounds.judged.iter().filter(|j| j.in_set())
    }

    /// Every query of the new version as the new corpus sees it, in file order.
    fn in_set(&self) -> impl Iterator<Item = &Checked> {
        let old = self.checked.iter().filter(|c| c.line.is_some()).filter_map(|c| c.judged.as_ref());
        old.chain(self.new_set())
    }

    fn qrels(&self) -> Vec<Qrel> {
        let mut qrels: Vec<Qrel> = self.checked.iter().flat_map(|c| c.qrels.iter().cloned()).collect();
        qrels.extend(output::qrels(self.new_set()));
        qrels
    }

    /// Counts the new version's queries into `summary`: the new ones, the queries in the set (by
    /// type), and the share with a human label.
    pub(super) fn count(&self, summary: &mut RefreshSummary) {
        let new = self.new_set().count();
        if new > 0 {
            summary.queries.insert(QueryChange::New, new);
        }
        let kept = self.checked.iter().filter(|c| c.line.is_some());
        let types = kept.map(|c| c.query_type).chain(self.new_set().map(Checked::query_type));
        summary.by_type = types.fold(BTreeMap::new(), |mut by_type, t| {
            *by_type.entry(t).or_default() += 1;
            by_type
        });
        summary.in_set = summary.by_type.values().sum();
        summary.human_share = self.human_share();
    }

    fn human_share(&self) -> f64 {
        let human: HashSet<&QueryId> = self
            .checked
            .iter()
            .flat_map(|c| &c.qrels)
            .filter(|q| q.provenance == Provenance::Human)
            .map(|q| &q.query_id)
            .collect();
        let total = self.checked.iter().filter(|c| c.line.is_some()).count() + self.new_set().count();
        if total == 0 { 0.0 } else { human.len() as f64 / total as f64 }
    }

    /// The review queue: what changed first (`may_be_answerable`, then retargeted, relabelled,
    /// pool and new queries, by type within each), each with its [`RefreshNote`]; then the
    /// previous queue's items still in the set ([`NewVersion::carried`]). Returns it and the size of
    /// its changed part.
    fn queue(&self) -> Result<(Vec<ReviewItem>, usize)> {
        let note = |change, reason: &str, old_sources: &[ChunkId]| RefreshNote {
            version: self.version,
            change,
            reason: reason.to_owned(),
            old_sources: old_sources.to_vec(),
        };
        let mut changed: Vec<(QueryChange, QueryType, &Checked, RefreshNote)> = self
            .checked
            .iter()
            .filter(|c| c.change.queued())
            .filter_map(|c| {
                let j = c.judged.as_ref()?;
                Some((c.change, c.query_type, j, note(c.change, &c.reason, &c.old_sources)))
            })
            .collect();
        let new = QueryChange::New;
        changed.extend(self.new_set().map(|j| (new, j.query_type(), j, note(new, report::NEW_REASON, &[]))));
        changed.sort_by_key(|(change, t, _, _)| (*change, *t));
        let (records, notes): (Vec<&Checked>, Vec<RefreshNote>) =
            changed.into_iter().map(|(_, _, j, note)| (j, note)).unzip();
        let mut queue = crate::sample::review_items(&records, self.index)?;
        for (item, note) in queue.iter_mut().zip(notes) {
            item.refresh = Some(note);
        }
        let queued: HashSet<QueryId> = queue.iter().map(|i| i.query_id.clone()).collect();
        queue.extend(self.carried(&queued)?);
        Ok((queue, queued.len()))
    }

    /// The previous queue's items whose queries are still in the set and not `queued` again, in
    /// their order (a retired or rejected query's item goes): an item stays as it was when the
    /// query was kept and every chunk it shows is unchanged; otherwise it is made again from
    /// the query as the new corpus sees it (its rows and pool moved), keeping the machine status,
    /// reason and refresh note it was queued with.
    fn carried(&self, queued: &HashSet<QueryId>) -> Result<Vec<ReviewItem>> {
        let in_set: HashMap<&QueryId, &Rechecked> =
            self.checked.iter().filter(|c| c.line.is_some()).map(|c| (&c.id, c)).collect();
        let unchanged = |id: &ChunkId| self.map.get(id).is_none_or(|m| m.change == ChunkChange::Unchanged);
        let mut carried = Vec::new();
        for item in self.previous.iter().filter(|i| !queued.contains(&i.query_id)) {
            let Some(c) = in_set.get(&item.query_id) else { continue };
            let mut shown =
                item.sources.iter().map(|s| &s.chunk_id).chain(item.pool.iter().map(|p| &p.pooled.chunk_id));
            if c.change == QueryChange::Kept && shown.all(unchanged) {
                carried.push(item.clone());
                continue;
            }
            let Some(judged) = &c.judged else { continue };
            if let Some(mut made) = crate::sample::review_items(&[judged], self.index)?.pop() {
                (made.status, made.reason) = (item.status, item.reason);
                made.refresh.clone_from(&item.refresh);
                carried.push(made);
            }
        }
        Ok(carried)
    }

    /// Stages every file of the new version but the manifest; returns the size of the queue's
    /// changed part and of the whole queue.
    pub(super) fn stage(
        &self,
        staging: &Staging,
        set: &Path,
        candidates: &[Checked],
        groups: &crate::dedup::ChunkGroups,
    ) -> Result<(usize, usize)> {
        let new_lines: Vec<String> = self
            .new_set()
            .map(|j| serde_json::to_string(&output::query_line(j, self.language)))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::Output { path: staging.path(QUERIES), source: e.into() })?;
        let lines =
            self.checked.iter().filter_map(|c| c.line.as_deref()).chain(new_lines.iter().map(String::as_str));
        output::write_text(&staging.path(QUERIES), &lines.flat_map(|l| [l, "\n"]).collect::<String>())?;
        let qrels = self.qrels();
        output::write_qrels(|name| staging.path(name), &qrels)?;
        output::write_text(&staging.path(NO_ANSWER), &self.no_answer(&qrels))?;
        let (queue, changed) = self.queue()?;
        output::write_jsonl(&staging.path(QUEUE), &queue)?;
        let pools: Vec<&Checked> = self.in_set().collect();
        let pooled_by_runs = pools.iter().any(|j| j.verdict.pool.iter().any(|p| !p.pooled_by.is_empty()));
        // Rewritten whenever the set has one, so that it never lists the old corpus's pools.
        if pooled_by_runs || set.join(POOL_TSV).is_file() {
            output::write_pool(&staging.path(POOL_TSV), &pools)?;
        }
        let pooled = read_pooled(&set.join(POOLED_TSV))?;
        if !pooled.is_empty() {
            let ids: HashSet<&QueryId> = pools.iter().map(|j| &j.candidate.id).collect();
            output::write_text(
                &staging.path(POOLED_TSV),
                &pooled_text(&self.map.pooled(pooled, |q| ids.contains(q))),
            )?;
        }
        output::write_jsonl(&staging.path(CANDIDATES), self.candidates(candidates))?;
        let mut rejects: Vec<serde_json::Value> =
            if set.join(REJECTS).is_file() { read_all(&set.join(REJECTS))? } else { Vec::new() };
        rejects.extend(self.rounds.rejects.iter().filter_map(|r| serde_json::to_value(r).ok()));
        output::write_jsonl(&staging.path(REJECTS), &rejects)?;
        let chunk_groups =
            groups.groups().iter().map(|g| g.iter().map(|&c| self.index.chunk_id(c)).collect::<Vec<_>>());
        output::write_jsonl(&staging.path(CHUNK_GROUPS), chunk_groups)?;
        output::write_text(&staging.path(CHUNK_MAP), &self.map.tsv())?;
        output::write_jsonl(
            &staging.path(CHANGELOG),
            report::changelog(self.map, self.checked, self.new_set()),
        )?;
        Ok((changed, queue.len()))
    }

    fn no_answer(&self, qrels: &[Qrel]) -> String {
        let answered: HashSet<&QueryId> =
            qrels.iter().filter(|q| q.grade >= 1).map(|q| &q.query_id).collect();
        let ids = self
            .checked
            .iter()
            .filter(|c| c.line.is_some() && c.query_type == QueryType::NoAnswer)
            .map(|c| &c.id)
            .chain(self.new_set().filter(|j| j.query_type() == QueryType::NoAnswer).map(|j| &j.candidate.id));
        ids.filter(|id| !answered.contains(id)).flat_map(|id| [id.as_str(), "\n"]).collect()
    }

    /// The build's records with the changed queries' new ones, then the new candidates.
    fn candidates<'c>(&'c self, old: &'c [Checked]) -> impl Iterator<Item = &'c Checked> {
        let changed: HashMap<&QueryId, &Checked> = self
            .checked
            .iter()
            .filter(|c| {
                matches!(
                    c.change,
                    QueryChange::Relabelled | QueryChange::Retargeted | QueryChange::MayBeAnswerable
                )
            })
            .filter_map(|c| c.judged.as_ref().map(|j| (&j.candidate.id, j)))
            .collect();
        old.iter()
            .map(move |j| changed.get(&j.candidate.id).copied().unwrap_or(j))
            .chain(self.rounds.judged.iter())
    }
}
