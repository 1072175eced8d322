//! Refresh stage 1: which chunk of the new corpus each old chunk became.
//!
//! Chunk ids come from the document id and the text, so an unchanged chunk keeps its id. The
//! rest are matched, cheapest first: the same text under another document (moved), then by
//! 3-token shingles (words; each CJK character a token): an old chunk that holds two or more new
//! chunks (each at least [`PART_MIN`] inside it, together covering that share of it) was split;
//! one with a new chunk at least [`PART_MIN`] alike (Jaccard) was edited; one that lies that much inside a new chunk was merged into
//! it (edited, when no other old chunk joined that one); one at least [`EDIT_MIN`] alike to a new
//! chunk was edited too; any other was deleted. New chunks nothing maps to were added.

use crate::id::{ChunkId, QueryId};
use crate::set::pooled::PooledPair;
use crate::text::is_cjk;
use foldhash::{HashMap, HashMapExt as _, HashSet};
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};

/// An edited chunk shares at least this share of its shingles (Jaccard) with its new version.
pub const EDIT_MIN: f64 = 0.5;
/// A part of a split (or a merged chunk) lies at least this much inside the other chunk.
pub const PART_MIN: f64 = 0.8;

/// What happened to a chunk between two corpora.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum ChunkChange {
    /// Same id, so same document and text.
    Unchanged,
    /// The same text under another document (a renamed file).
    Moved,
    /// Edited in place: a new chunk at least [`EDIT_MIN`] alike.
    Edited,
    /// Cut into two or more new chunks.
    Split,
    /// Joined with others into one new chunk.
    Merged,
    /// Nothing in the new corpus resembles it.
    Deleted,
    /// A new chunk nothing old maps to.
    Added,
}

impl ChunkChange {
    /// The label in `refresh/chunk_map.tsv` and the changelog.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// A chunk's id, title and text, as either corpus has it.
#[derive(Debug, Clone)]
pub struct Piece {
    /// The chunk id.
    pub id: ChunkId,
    /// Its document's title.
    pub title: String,
    /// Its text.
    pub text: String,
}

impl From<crate::record::Chunk> for Piece {
    fn from(chunk: crate::record::Chunk) -> Self {
        Self { id: chunk.id, title: chunk.title, text: chunk.text }
    }
}

/// What the map reads of a chunk of either corpus: its id and text.
pub trait Mapped {
    /// The chunk id.
    fn id(&self) -> &ChunkId;
    /// Its text.
    fn text(&self) -> &str;
}

impl Mapped for Piece {
    fn id(&self) -> &ChunkId {
        &self.id
    }

    fn text(&self) -> &str {
        &self.text
    }
}

impl Mapped for crate::record::Chunk {
    fn id(&self) -> &ChunkId {
        &self.id
    }

    fn text(&self) -> &str {
        &self.text
    }
}

/// What one old chunk became: its change and the new chunks, each with its similarity
/// (1 for unchanged and moved; Jaccard for edited; containment for split and merged).
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    /// The old chunk.
    pub old: ChunkId,
    /// What happened to it.
    pub change: ChunkChange,
    /// The new chunks it became (empty when deleted), best first.
    pub targets: Vec<(ChunkId, f64)>,
}

/// The mapping of a whole corpus: every old chunk in corpus order, then the added chunks.
#[derive(Debug, Clone, Default)]
pub struct ChunkMap {
    /// One per old chunk, in the old corpus's order.
    pub old: Vec<Mapping>,
    /// New chunks nothing maps to, in the new corpus's order.
    pub added: Vec<ChunkId>,
    by_id: HashMap<ChunkId, usize>,
}

impl ChunkMap {
    /// Matches `old` against `new` (see the module docs).
    #[must_use]
    pub fn build<O: Mapped, N: Mapped>(old: &[O], new: &[N]) -> Self {
        let new_at: HashMap<&ChunkId, usize> = new.iter().enumerate().map(|(i, p)| (p.id(), i)).collect();
        let mut used = vec![false; new.len()];
        let mut mapped: Vec<Option<Mapping>> = vec![None; old.len()];
        for (i, o) in old.iter().enumerate() {
            if let Some(&j) = new_at.get(o.id()) {
                used[j] = true;
                mapped[i] = Some(one(o, ChunkChange::Unchanged, new[j].id(), 1.0));
            }
        }
        let mut by_text: HashMap<&str, Vec<usize>> = HashMap::new();
        for (j, n) in new.iter().enumerate().filter(|(j, _)| !used[*j]) {
            by_text.entry(n.text()).or_default().push(j);
        }
        for (i, o) in old.iter().enumerate() {
            if mapped[i].is_some() {
                continue;
            }
            let same = by_text.get(o.text()).and_then(|js| js.iter().copied().find(|&j| !used[j]));
            if let Some(j) = same {
                used[j] = true;
                mapped[i] = Some(one(o, ChunkChange::Moved, new[j].id(), 1.0));
            }
        }
        let open: Vec<usize> = (0..new.len()).filter(|&j| !used[j]).collect();
        let shingled: HashMap<usize, HashSet<u64>> =
            open.iter().map(|&j| (j, shingles(new[j].text()))).collect();
        let mut postings: HashMap<u64, Vec<usize>> = HashMap::new();
        for &j in &open {
            for &s in &shingled[&j] {
                postings.entry(s).or_default().push(j);
            }
        }
        let mut merged_jaccard: HashMap<usize, f64> = HashMap::new();
        for (i, o) in old.iter().enumerate() {
            if mapped[i].is_none() {
                let (m, jaccard) = match_edited(o, new, &shingled, &postings);
                if let Some(jaccard) = jaccard {
                    merged_jaccard.insert(i, jaccard);
                }
                for (id, _) in &m.targets {
                    if let Some(&j) = new_at.get(id) {
                        used[j] = true;
                    }
                }
                mapped[i] = Some(m);
            }
        }
        let mut old: Vec<Mapping> = mapped.into_iter().flatten().collect();
        // A chunk "merged" into a new one no other old chunk joined was edited (text added).
        let mut joined: HashMap<ChunkId, usize> = HashMap::new();
        for m in old.iter().filter(|m| m.change == ChunkChange::Merged) {
            *joined.entry(m.targets[0].0.clone()).or_default() += 1;
        }
        for (i, m) in old.iter_mut().enumerate() {
            if m.change == ChunkChange::Merged && joined[&m.targets[0].0] == 1 {
                m.change = ChunkChange::Edited;
                m.targets[0].1 = merged_jaccard.get(&i).copied().unwrap_or(m.targets[0].1);
            }
        }
        let added = (0..new.len()).filter(|&j| !used[j]).map(|j| new[j].id().clone()).collect();
        let by_id = old.iter().enumerate().map(|(i, m)| (m.old.clone(), i)).collect();
        Self { old, added, by_id }
    }

    /// What the old chunk `id` became; `None` for an id the old corpus did not have.
    #[must_use]
    pub fn get(&self, id: &ChunkId) -> Option<&Mapping> {
        self.by_id.get(id).map(|&i| &self.old[i])
    }

    /// The new chunks that are new material, for which new queries are written: the added ones,
    /// and those an old chunk became by an edit that left less than [`PART_MIN`] of it alike
    /// (rewritten, more than a touch-up).
    #[must_use]
    pub fn fresh(&self) -> HashSet<&ChunkId> {
        let rewritten = self.old.iter().filter(|m| m.change == ChunkChange::Edited).flat_map(|m| &m.targets);
        let rewritten = rewritten.filter(|(_, similarity)| *similarity < PART_MIN).map(|(id, _)| id);
        self.added.iter().chain(rewritten).collect()
    }

    /// Whether the new corpus is the old one: every chunk unchanged, none added.
    #[must_use]
    pub fn is_identity(&self) -> bool {
        self.added.is_empty() && self.old.iter().all(|m| m.change == ChunkChange::Unchanged)
    }

    /// Old chunks per change, and the added ones.
    #[must_use]
    pub fn counts(&self) -> std::collections::BTreeMap<ChunkChange, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for m in &self.old {
            *counts.entry(m.change).or_default() += 1;
        }
        if !self.added.is_empty() {
            counts.insert(ChunkChange::Added, self.added.len());
        }
        counts
    }

    /// The pooled pairs (`qrels/pooled.tsv`) in the new corpus: each pair of a query `keep`
    /// holds follows its chunk. Unchanged and moved chunks keep their grade (same text); the
    /// chunks an edit, split or merge made are pooled unjudged (their text changed; the next
    /// `qrelgen pool` grades them); a deleted chunk's pairs go. The runs and ranks stay as the
    /// run files gave them. Pairs that meet on one new chunk become one, the runs of both.
    #[must_use]
    pub fn pooled(&self, pairs: Vec<PooledPair>, keep: impl Fn(&QueryId) -> bool) -> Vec<PooledPair> {
        let mut out: Vec<PooledPair> = Vec::new();
        let mut at: HashMap<(QueryId, ChunkId), usize> = HashMap::new();
        for pair in pairs.into_iter().filter(|p| keep(&p.query)).flat_map(|p| self.follow(p)) {
            let key = (pair.query.clone(), pair.chunk.clone());
            if let Some(&i) = at.get(&key) {
                out[i].absorb(pair);
            } else {
                at.insert(key, out.len());
                out.push(pair);
            }
        }
        out
    }

    /// `pair` on each chunk its chunk became: graded as before where the text stayed the same,
    /// unjudged where it changed; none when the chunk was deleted.
    fn follow(&self, pair: PooledPair) -> Vec<PooledPair> {
        let Some(mapping) = self.get(&pair.chunk) else { return Vec::new() };
        let same_text = matches!(mapping.change, ChunkChange::Unchanged | ChunkChange::Moved);
        let (grade, graded_by) = if same_text { (pair.grade, pair.graded_by) } else { (None, None) };
        let targets = mapping.targets.iter().map(|(target, _)| target.clone());
        targets
            .map(|chunk| PooledPair {
                query: pair.query.clone(),
                chunk,
                grade,
                graded_by: graded_by.clone(),
                runs: pair.runs.clone(),
            })
            .collect()
    }

    /// `refresh/chunk_map.tsv`: `old-id new-id change similarity`, a row per old chunk and
    /// target (`-` for none), then one per added chunk.
    #[must_use]
    pub fn tsv(&self) -> String {
        let mut out = String::from("old-id\tnew-id\tchange\tsimilarity\n");
        for m in &self.old {
            if m.targets.is_empty() {
                let _ = writeln!(out, "{}\t-\t{}\t0.000", m.old, m.change.label());
            }
            for (id, similarity) in &m.targets {
                let _ = writeln!(out, "{}\t{id}\t{}\t{similarity:.3}", m.old, m.change.label());
            }
        }
        for id in &self.added {
            let _ = writeln!(out, "-\t{id}\tadded\t0.000");
        }
        out
    }
}

fn one(old: &impl Mapped, change: ChunkChange, new: &ChunkId, similarity: f64) -> Mapping {
    Mapping { old: old.id().clone(), change, targets: vec![(new.clone(), similarity)] }
}

/// Edited, split, merged or deleted, by the shingles `old` shares with the new chunks left; for a
/// merge, also the Jaccard similarity (in case no other chunk joined it: then it was edited).
fn match_edited(
    old: &impl Mapped,
    new: &[impl Mapped],
    shingled: &HashMap<usize, HashSet<u64>>,
    postings: &HashMap<u64, Vec<usize>>,
) -> (Mapping, Option<f64>) {
    let mine = shingles(old.text());
    let mut shared: HashMap<usize, usize> = HashMap::new();
    for s in &mine {
        for &j in postings.get(s).into_iter().flatten() {
            *shared.entry(j).or_default() += 1;
        }
    }
    // (new chunk, Jaccard, share of it inside the old one, share of the old one inside it, shared)
    let mut overlaps: Vec<(usize, f64, f64, f64, usize)> = shared
        .into_iter()
        .map(|(j, both)| {
            let theirs = shingled[&j].len();
            let (both_f, mine_f, theirs_f) = (both as f64, mine.len() as f64, theirs as f64);
            (j, both_f / (mine_f + theirs_f - both_f), both_f / theirs_f, both_f / mine_f, both)
        })
        .collect();
    // Best first, ties by corpus order, so the mapping never depends on hash order.
    overlaps.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let target = |j: usize, similarity: f64| (new[j].id().clone(), similarity);
    let mapping = |change, targets| Mapping { old: old.id().clone(), change, targets };
    // Two or more new chunks that lie inside the old one: a split, its biggest share first.
    let mut parts: Vec<&(usize, f64, f64, f64, usize)> =
        overlaps.iter().filter(|o| o.2 >= PART_MIN).collect();
    if parts.len() >= 2 && parts.iter().map(|o| o.3).sum::<f64>() >= PART_MIN {
        parts.sort_by(|a, b| b.4.cmp(&a.4).then(a.0.cmp(&b.0)));
        return (mapping(ChunkChange::Split, parts.into_iter().map(|o| target(o.0, o.2)).collect()), None);
    }
    let best = overlaps.first().copied();
    if let Some((j, jaccard, ..)) = best.filter(|o| o.1 >= PART_MIN) {
        return (mapping(ChunkChange::Edited, vec![target(j, jaccard)]), None);
    }
    let into =
        overlaps.iter().filter(|o| o.3 >= PART_MIN).max_by(|a, b| a.3.total_cmp(&b.3).then(b.0.cmp(&a.0)));
    if let Some(&(j, jaccard, _, inside, _)) = into {
        return (mapping(ChunkChange::Merged, vec![target(j, inside)]), Some(jaccard));
    }
    match best.filter(|o| o.1 >= EDIT_MIN) {
        Some((j, jaccard, ..)) => (mapping(ChunkChange::Edited, vec![target(j, jaccard)]), None),
        None => (mapping(ChunkChange::Deleted, Vec::new()), None),
    }
}

/// The hashed 3-token shingles of `text`: words lowercased, each CJK character a token; a text
/// of fewer than 3 tokens is one shingle.
#[must_use]
pub fn shingles(text: &str) -> HashSet<u64> {
    let mut tokens: Vec<String> = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if is_cjk(c) || !c.is_alphanumeric() {
            if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
            if is_cjk(c) {
                tokens.push(c.to_string());
            }
        } else {
            word.extend(c.to_lowercase());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    let hash = |window: &[String]| {
        let mut h = DefaultHasher::new();
        window.hash(&mut h);
        h.finish()
    };
    if tokens.len() < 3 {
        return std::iter::once(hash(&tokens)).collect();
    }
    tokens.windows(3).map(hash).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(id: &str, text: &str) -> Piece {
        let id = ChunkId::parse(id).unwrap_or_else(|e| panic!("{e}"));
        Piece { id, title: String::new(), text: text.to_owned() }
    }

    const A: &str = "The audit log records who did what in your workspace: sign-ins, sharing, permission changes and admin actions.";
    const B: &str = "Links expire after thirty days unless an administrator sets a shorter expiry for the whole workspace.";

    #[test]
    fn pooled_pairs_follow_their_chunks_and_keep_grades_only_on_the_same_text() {
        let old = [
            piece("a.md:1", A),
            piece("b.md:2", B),
            piece("c.md:3", "Gone forever, never to be seen again."),
        ];
        let edited = A.replace("admin actions", "administrator actions and exports");
        let new = [piece("a.md:9", &edited), piece("renamed.md:2", B)];
        let map = ChunkMap::build(&old, &new);
        let pair = |query: &str, chunk: &str, grade: Option<u8>, runs: &[(&str, u32)]| {
            let mut pair = crate::set::pooled::tests::pair(query, chunk, grade, runs);
            pair.graded_by = grade.map(|_| "judge".to_owned());
            pair
        };
        let pooled = vec![
            pair("q1", "a.md:1", Some(3), &[("dense", 1)]),
            pair("q1", "b.md:2", Some(0), &[("bm25", 3)]),
            pair("q1", "c.md:3", Some(2), &[("bm25", 1)]),
            pair("q2", "b.md:2", Some(2), &[("dense", 2)]),
            pair("q1", "gone.md:7", None, &[("dense", 9)]),
        ];
        let remapped = map.pooled(pooled, |q| q.as_str() == "q1");
        let mut unjudged = pair("q1", "a.md:9", None, &[("dense", 1)]);
        unjudged.graded_by = None;
        assert_eq!(remapped, [unjudged, pair("q1", "renamed.md:2", Some(0), &[("bm25", 3)])]);
    }

    #[test]
    fn unchanged_moved_edited_deleted_added() {
        let old = [
            piece("a.md:1", A),
            piece("b.md:2", B),
            piece("c.md:3", "Gone forever, never to be seen again."),
        ];
        let edited = A.replace("admin actions", "administrator actions and exports");
        let new = [
            piece("a.md:9", &edited),
            piece("renamed.md:2", B),
            piece("d.md:4", "A brand new page about something else entirely."),
        ];
        let map = ChunkMap::build(&old, &new);
        let changes: Vec<ChunkChange> = map.old.iter().map(|m| m.change).collect();
        assert_eq!(changes, [ChunkChange::Edited, ChunkChange::Moved, ChunkChange::Deleted]);
        assert_eq!(map.old[0].targets[0].0.as_str(), "a.md:9");
        assert!(map.old[0].targets[0].1 >= EDIT_MIN && map.old[0].targets[0].1 < 1.0);
        assert_eq!(map.old[1].targets, [(new[1].id.clone(), 1.0)]);
        assert_eq!(map.added, [new[2].id.clone()]);
        assert!(!map.is_identity());
    }

    #[test]
    fn added_and_rewritten_chunks_are_fresh_and_touched_up_ones_not() {
        let touched = A.replace("admin actions.", "admin activity.");
        let history = "Shared folders keep every version of a file for thirty days, and owners can restore \
                       any earlier version from the history panel in the web console at any time.";
        // About half of its 3-word shingles new (Jaccard 0.53).
        let rewritten = "Shared folders keep every version of a file for thirty days, and owners can restore \
                         any earlier version from the history panel; admins may extend the window to a full \
                         year for compliance.";
        let old = [piece("a.md:1", A), piece("b.md:2", history), piece("c.md:3", B)];
        let new = [
            piece("a.md:7", &touched),
            piece("b.md:8", rewritten),
            piece("c.md:3", B),
            piece("d.md:9", "Brand new."),
        ];
        let map = ChunkMap::build(&old, &new);
        let changes: Vec<(ChunkChange, f64)> =
            map.old.iter().map(|m| (m.change, m.targets.first().map_or(0.0, |t| t.1))).collect();
        assert!(changes[0].0 == ChunkChange::Edited && changes[0].1 >= PART_MIN, "{changes:?}");
        assert!(changes[1].0 == ChunkChange::Edited && changes[1].1 < PART_MIN, "{changes:?}");
        let fresh: Vec<&str> = {
            let mut fresh: Vec<&str> = map.fresh().into_iter().map(ChunkId::as_str).collect();
            fresh.sort_unstable();
            fresh
        };
        assert_eq!(fresh, ["b.md:8", "d.md:9"]);
    }

    #[test]
    fn split_and_merged() {
        let whole = format!("{A} {B}");
        let old = [piece("x.md:1", &whole)];
        let new = [piece("x.md:2", A), piece("x.md:3", B)];
        let map = ChunkMap::build(&old, &new);
        assert_eq!(map.old[0].change, ChunkChange::Split);
        assert_eq!(map.old[0].targets.len(), 2);
        let map = ChunkMap::build(&new, &old);
        assert!(map.old.iter().all(|m| m.change == ChunkChange::Merged), "{:?}", map.old);
        assert!(map.added.is_empty());
    }

    #[test]
    fn same_corpus_is_identity() {
        let old = [piece("a.md:1", A), piece("b.md:2", B)];
        let map = ChunkMap::build(&old, &old);
        assert!(map.is_identity());
        assert_eq!(map.tsv().lines().count(), 3);
    }

    proptest::proptest! {
        /// The same corpus maps onto itself unchanged; the same texts under other ids are moved,
        /// each to its own text.
        #[test]
        fn same_texts_are_unchanged_or_moved(texts in proptest::collection::vec("[a-z]{1,6}( [a-z]{1,6}){0,12}", 1..12)) {
            let old: Vec<Piece> = texts.iter().enumerate().map(|(i, t)| piece(&format!("a.md:{i}"), t)).collect();
            let map = ChunkMap::build(&old, &old);
            proptest::prop_assert!(map.is_identity());
            let renamed: Vec<Piece> = texts.iter().enumerate().map(|(i, t)| piece(&format!("b.md:{i}"), t)).collect();
            let map = ChunkMap::build(&old, &renamed);
            proptest::prop_assert!(map.added.is_empty());
            for m in &map.old {
                proptest::prop_assert_eq!(m.change, ChunkChange::Moved);
                let at = renamed.iter().position(|p| p.id == m.targets[0].0).unwrap_or(usize::MAX);
                let old_text = &old.iter().find(|p| p.id == m.old).map(|p| p.text.clone());
                proptest::prop_assert_eq!(Some(renamed[at].text.clone()), old_text.clone());
            }
        }
    }

    #[test]
    fn chinese_is_shingled_by_character() {
        assert_eq!(shingles("同步文件夹").len(), 3);
        assert_eq!(shingles("one two").len(), 1);
    }

    #[test]
    fn labels_are_serdes_names() {
        crate::testing::labels_are_serde_names(ChunkChange::label);
    }
}
