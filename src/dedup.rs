//! Near-duplicate control: no two queries in the set may be more alike than a threshold; and
//! near-identical chunks are grouped, so that every copy of a source is relevant.
//!
//! Queries are compared as sets of shingles: Latin words after normalisation (NFKC, lower case,
//! punctuation dropped) and, for Chinese, overlapping character pairs, so `重置密码` and
//! `密码重置` are close while word order alone never hides a copy. Candidates are found with
//! MinHash and locality-sensitive hashing (not by comparing every pair), then confirmed by their
//! exact Jaccard similarity. Invariant: the first query of a near-duplicate group survives and
//! every later one is reported with the survivor's id.

use crate::id::QueryId;
use crate::text::is_cjk;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use unicode_normalization::UnicodeNormalization;

/// Hash functions in a signature.
pub(crate) const HASHES: usize = 64;
/// LSH bands of chunk signatures (rows per band = `HASHES / BANDS`): a pair at Jaccard 0.9
/// is a candidate with probability 1 − (1 − 0.9⁴)¹⁶ ≈ 1. Query dedup picks its rows per
/// threshold ([`lsh_rows`]).
const BANDS: usize = 16;
const ROWS: usize = HASHES / BANDS;

/// The queries kept so far and their LSH buckets.
#[derive(Debug)]
pub struct Dedup {
    threshold: f64,
    /// Signature rows per LSH band, chosen for the threshold.
    rows: usize,
    kept: Vec<(QueryId, HashSet<u64>)>,
    buckets: HashMap<(usize, u64), Vec<usize>>,
}

/// A pair exactly at the threshold becomes an LSH candidate with at least this probability.
const LSH_RECALL: f64 = 0.999;

impl Dedup {
    /// A control that rejects a query whose Jaccard similarity to a kept one is at least
    /// `threshold` (1.0: exact copies after normalisation only).
    #[must_use]
    pub fn new(threshold: f64) -> Self {
        Self { threshold, rows: lsh_rows(threshold), kept: Vec::new(), buckets: HashMap::new() }
    }

    /// The kept query that `text` duplicates, if any; otherwise keeps `text` under `id`.
    pub fn check_and_keep(&mut self, id: &QueryId, text: &str) -> Option<QueryId> {
        let shingles = shingles(text);
        let signature = signature(&shingles);
        let rows = self.rows;
        let keys: Vec<(usize, u64)> = (0..HASHES / rows)
            .map(|b| (b, band_hash(signature[b * rows..(b + 1) * rows].iter().copied())))
            .collect();
        let mut seen = HashSet::new();
        for key in &keys {
            for &other in self.buckets.get(key).map_or(&[][..], Vec::as_slice) {
                if seen.insert(other) && jaccard(&shingles, &self.kept[other].1) >= self.threshold {
                    return Some(self.kept[other].0.clone());
                }
            }
        }
        let position = self.kept.len();
        self.kept.push((id.clone(), shingles));
        for key in keys {
            self.buckets.entry(key).or_default().push(position);
        }
        None
    }
}

/// The shingles of a query: normalised Latin words and CJK character pairs (a lone CJK
/// character stands for itself).
#[must_use]
fn shingles(text: &str) -> HashSet<u64> {
    units(text).into_iter().collect()
}

/// A text's units, in order: normalised Latin words and CJK character pairs, hashed.
fn units(text: &str) -> Vec<u64> {
    // Most text is already in NFKC: the quick check spares normalising it again.
    let normal: String = match unicode_normalization::is_nfkc_quick(text.chars()) {
        unicode_normalization::IsNormalized::Yes => text.chars().flat_map(char::to_lowercase).collect(),
        _ => text.nfkc().flat_map(char::to_lowercase).collect(),
    };
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk_run: Vec<char> = Vec::new();
    let flush_word = |word: &mut String, out: &mut Vec<u64>| {
        if !word.is_empty() {
            out.push(hash_str(word));
            word.clear();
        }
    };
    let flush_cjk = |run: &mut Vec<char>, out: &mut Vec<u64>| {
        match run.len() {
            0 => {}
            1 => out.push(hash_str(&run[0].to_string())),
            _ => out.extend(run.windows(2).map(|pair| hash_str(&pair.iter().collect::<String>()))),
        }
        run.clear();
    };
    for c in normal.chars() {
        if is_cjk(c) {
            flush_word(&mut word, &mut out);
            cjk_run.push(c);
        } else if c.is_alphanumeric() {
            flush_cjk(&mut cjk_run, &mut out);
            word.push(c);
        } else {
            flush_word(&mut word, &mut out);
            flush_cjk(&mut cjk_run, &mut out);
        }
    }
    flush_word(&mut word, &mut out);
    flush_cjk(&mut cjk_run, &mut out);
    out
}

/// Jaccard similarity of two shingle sets (1.0 for two empty sets).
#[must_use]
fn jaccard(a: &HashSet<u64>, b: &HashSet<u64>) -> f64 {
    let union = a.union(b).count();
    if union == 0 { 1.0 } else { a.intersection(b).count() as f64 / union as f64 }
}

/// FNV-1a, finished with [`mix`]: fast, and stable across builds and platforms.
fn hash_str(s: &str) -> u64 {
    mix(s.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)))
}

/// Units per chunk shingle: chunks are compared by runs of three words (or CJK pairs), so two
/// chunks on one topic do not look alike merely for sharing their vocabulary.
const CHUNK_SHINGLE: usize = 3;

/// Groups of near-identical chunks (boilerplate, copied sections, versions of a page), found
/// while the corpus is read. A query written from one member has every member as relevant.
///
/// Chunks are long, so their signatures use one-permutation hashing (one hash per shingle,
/// split into `HASHES` bins, empty bins filled from their neighbour) rather than a hash per
/// shingle and slot; LSH keeps, per band, the first chunk seen with each band value. Only
/// those band entries keep their signatures: a later chunk is compared with them alone, so a
/// grouped chunk's signature (or one whose band values were all taken) is dropped at once.
#[derive(Debug, Default)]
pub struct ChunkGroups {
    threshold: f64,
    /// Chunks added so far.
    added: usize,
    /// The band entries: each one's chunk position and signature.
    entries: Vec<(u32, [u32; HASHES])>,
    /// Per band: band value → the first ungrouped chunk with it (its number in `entries`).
    bands: Vec<foldhash::HashMap<u32, u32>>,
    /// Group number of each chunk added ([`NO_GROUP`] for one in no group of two or more): 4
    /// bytes a chunk, whatever share of the corpus is copied.
    group_of: Vec<u32>,
    groups: Vec<Vec<usize>>,
}

impl ChunkGroups {
    /// No chunks yet; chunks at least `threshold` alike (estimated Jaccard of their 3-word
    /// shingles) will share a group.
    #[must_use]
    pub fn new(threshold: f64) -> Self {
        Self { threshold, bands: vec![foldhash::HashMap::default(); BANDS], ..Self::default() }
    }

    /// Adds the next chunk (its position is the number of chunks added before it).
    pub fn add(&mut self, text: &str) {
        self.add_signature(chunk_signature(text).as_ref());
    }

    /// Adds the next chunk by its [`chunk_signature`] (kept from an earlier run: the groups are
    /// those [`ChunkGroups::add`] of its text makes).
    pub fn add_signature(&mut self, signature: Option<&Signature>) {
        let position = self.added;
        self.added += 1;
        self.group_of.push(NO_GROUP);
        let Some(&signature) = signature else { return };
        #[expect(clippy::cast_possible_truncation, reason = "a band value needs 32 bits only")]
        let keys: [u32; BANDS] = std::array::from_fn(|b| {
            band_hash(signature[b * ROWS..(b + 1) * ROWS].iter().map(|&h| u64::from(h))) as u32
        });
        let twin = (0..BANDS)
            .filter_map(|b| self.bands[b].get(&keys[b]).map(|&e| &self.entries[e as usize]))
            .find(|(_, other)| similarity(other, &signature) >= self.threshold)
            .map(|&(other, _)| other as usize);
        if let Some(twin) = twin {
            if self.group_of[twin] == NO_GROUP {
                self.group_of[twin] = self.groups.len() as u32;
                self.groups.push(vec![twin]);
            }
            let group = self.group_of[twin];
            self.groups[group as usize].push(position);
            self.group_of[position] = group;
            // A member is never a band entry: its group's first chunk stands for it.
            return;
        }
        let (Ok(position), Ok(entry)) = (u32::try_from(position), u32::try_from(self.entries.len())) else {
            return;
        };
        let mut entered = false;
        for (band, key) in self.bands.iter_mut().zip(keys) {
            if let Entry::Vacant(slot) = band.entry(key) {
                slot.insert(entry);
                entered = true;
            }
        }
        if entered {
            self.entries.push((position, signature));
        }
    }

    /// Frees what only [`ChunkGroups::add`] needs (the band entries' signatures and the band
    /// tables, about 400 bytes per entry) once every chunk is added; the groups stay.
    ///
    /// # Panics
    /// [`ChunkGroups::add`] does after this.
    pub fn seal(&mut self) {
        self.entries = Vec::new();
        self.bands = Vec::new();
    }

    /// The near-identical copies of a chunk (without the chunk itself), in corpus order.
    pub fn copies(&self, position: usize) -> impl Iterator<Item = usize> + '_ {
        let group = match self.group_of.get(position) {
            Some(&g) if g != NO_GROUP => self.groups[g as usize].as_slice(),
            _ => &[],
        };
        group.iter().copied().filter(move |&m| m != position)
    }

    /// Every group of two or more chunks, in corpus order of their first member.
    #[must_use]
    pub fn groups(&self) -> &[Vec<usize>] {
        &self.groups
    }
}

/// [`ChunkGroups`]'s group number of a chunk in no group.
const NO_GROUP: u32 = u32::MAX;

/// A chunk's signature: `HASHES` one-permutation `MinHash` slots of its 3-unit shingles.
pub type Signature = [u32; HASHES];

/// The signature [`ChunkGroups`] compares a chunk text by; `None` for a text without shingles
/// (never grouped). It depends on the text alone.
#[must_use]
pub fn chunk_signature(text: &str) -> Option<Signature> {
    let units = units(text);
    if units.len() < CHUNK_SHINGLE {
        one_permutation(units.iter().copied())
    } else {
        one_permutation(units.windows(CHUNK_SHINGLE).map(|w| w.iter().fold(0, |h, u| mix(h ^ u))))
    }
}

/// Estimated Jaccard similarity of two chunks: the share of signature slots that agree.
fn similarity(a: &[u32; HASHES], b: &[u32; HASHES]) -> f64 {
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / HASHES as f64
}

/// MinHash: for each of [`HASHES`] seeded mixes, the smallest mixed shingle.
fn signature(shingles: &HashSet<u64>) -> [u64; HASHES] {
    let mut signature = [u64::MAX; HASHES];
    for &shingle in shingles {
        for (i, slot) in signature.iter_mut().enumerate() {
            *slot = (*slot).min(mix(shingle ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        }
    }
    signature
}

/// The most rows per band (a divisor of [`HASHES`]) that still make a pair at `threshold` a
/// candidate with probability [`LSH_RECALL`]: 1 − (1 − t^r)^(64/r). Fewer rows mean more
/// candidates to confirm, so the fewest that suffice for high thresholds, more bands for low ones
/// (0.8 → 4 rows, 0.5 → 2, 0.3 → 1).
fn lsh_rows(threshold: f64) -> usize {
    [8, 4, 2]
        .into_iter()
        .find(|&rows| {
            let bands = (HASHES / rows) as f64;
            let exponent = i32::try_from(rows).unwrap_or(i32::MAX);
            1.0 - (1.0 - threshold.powi(exponent)).powf(bands) >= LSH_RECALL
        })
        .unwrap_or(1)
}

/// One-permutation MinHash: each shingle hashed once; its top bits pick one of [`HASHES`]
/// bins, which keeps the smallest rest. An empty bin takes the value of the next non-empty one
/// (circularly), mixed with the distance, so that two texts agree on it about as often as on a
/// full bin. `None` for no shingles.
fn one_permutation(shingles: impl Iterator<Item = u64>) -> Option<[u32; HASHES]> {
    const BIN_BITS: u32 = HASHES.trailing_zeros();
    let mut bins = [u64::MAX; HASHES];
    for shingle in shingles {
        let h = mix(shingle);
        let bin = usize::try_from(h >> (64 - BIN_BITS)).unwrap_or(0);
        bins[bin] = bins[bin].min(h & (u64::MAX >> BIN_BITS));
    }
    if bins.iter().all(|&b| b == u64::MAX) {
        return None;
    }
    let mut signature = [0u32; HASHES];
    for (i, slot) in signature.iter_mut().enumerate() {
        let (distance, value) =
            (0..HASHES).map(|d| (d, bins[(i + d) % HASHES])).find(|(_, v)| *v != u64::MAX)?;
        #[expect(clippy::cast_possible_truncation, reason = "32 bits of a mixed value")]
        let folded = mix(value ^ (distance as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) as u32;
        *slot = folded;
    }
    Some(signature)
}

/// SplitMix64's finaliser: a fast, well-spread 64-bit mix.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn band_hash(rows: impl IntoIterator<Item = u64>) -> u64 {
    rows.into_iter().fold(0xCBF2_9CE4_8422_2325, |h, r| mix(h ^ r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(n: usize) -> QueryId {
        QueryId::derive("direct", &[], &n.to_string())
    }

    #[test]
    fn near_duplicates_collapse_onto_the_first() {
        let mut dedup = Dedup::new(0.8);
        assert_eq!(dedup.check_and_keep(&id(1), "How do I reset my password?"), None);
        assert_eq!(dedup.check_and_keep(&id(2), "how do I RESET my password"), Some(id(1)));
        assert_eq!(dedup.check_and_keep(&id(3), "my password: how do I reset?"), Some(id(1)));
        assert_eq!(dedup.check_and_keep(&id(4), "How do I reset my recovery key?"), None);
        assert_eq!(dedup.check_and_keep(&id(5), "如何重置我的密码"), None);
        assert_eq!(dedup.check_and_keep(&id(6), "如何重置我的密码？"), Some(id(5)));
        assert_eq!(dedup.check_and_keep(&id(7), "如何找回恢复密钥"), None);
    }

    #[test]
    fn bands_follow_the_threshold() {
        assert_eq!((lsh_rows(0.9), lsh_rows(0.8), lsh_rows(0.5), lsh_rows(0.3)), (4, 4, 2, 1));
        // At 0.5, two queries sharing half their words collapse (4 of 8 shingles shared).
        let mut dedup = Dedup::new(0.5);
        assert_eq!(dedup.check_and_keep(&id(1), "alpha beta gamma delta epsilon zeta"), None);
        assert_eq!(dedup.check_and_keep(&id(2), "alpha beta gamma delta eta theta"), Some(id(1)));
    }

    #[test]
    fn chinese_is_shingled_by_character_pairs() {
        // 重置密码 → 重置 置密 密码; 密码重置 → 密码 码重 重置: 2 of 4 shared.
        let j = jaccard(&shingles("重置密码"), &shingles("密码重置"));
        assert!((j - 0.5).abs() < 1e-9, "{j}");
        assert_eq!(shingles("Reset, PASSWORD!"), shingles("reset password"));
        assert_eq!(shingles("ＨＳ４０１２"), shingles("hs4012"));
    }

    #[test]
    fn near_identical_chunks_share_a_group_and_topical_ones_do_not() {
        let base = "To reset a workspace password open Settings, choose Security and press Reset. \
                    The new password must have twelve characters and is required on every device.";
        let mut groups = ChunkGroups::new(0.8);
        groups.add(base);
        groups.add("Bandwidth limits slow the upload of large files; raise them under Settings.");
        groups.add(&format!("{base} "));
        groups.add(&base.replace("every device", "every computer"));
        groups.add("To reset a workspace recovery key open Settings, choose Keys and press Rotate.");
        assert_eq!(groups.groups(), [vec![0, 2, 3]]);
        assert_eq!(groups.copies(2).collect::<Vec<_>>(), [0, 3]);
        assert_eq!(groups.copies(1).count(), 0);
        // Only the chunks that stand in the band tables keep a signature: not the copies.
        assert_eq!(groups.entries.iter().map(|e| e.0).collect::<Vec<_>>(), [0, 1, 4]);
        groups.seal();
        assert!(groups.entries.is_empty() && groups.bands.is_empty());
        assert_eq!(groups.groups(), [vec![0, 2, 3]]);
        assert_eq!(groups.copies(3).collect::<Vec<_>>(), [0, 2]);
    }

    proptest! {
        /// Against a naive oracle: every rejection is really at or over the threshold against
        /// its survivor (sound), and no two survivors are identical after normalisation (LSH
        /// never misses those; pairs between 0.8 and 1 are caught with probability ≥ 99.98 %).
        #[test]
        fn matches_the_pairwise_oracle(texts in proptest::collection::vec("[a-e]{1,3}( [a-e]{1,3}){0,4}", 1..40)) {
            let mut dedup = Dedup::new(0.8);
            let mut kept: Vec<(QueryId, &String)> = Vec::new();
            for (n, text) in texts.iter().enumerate() {
                match dedup.check_and_keep(&id(n), text) {
                    Some(survivor) => {
                        let original = kept.iter().find(|(k, _)| *k == survivor).map(|(_, t)| *t);
                        prop_assert!(original.is_some_and(|o| jaccard(&shingles(o), &shingles(text)) >= 0.8));
                    }
                    None => kept.push((id(n), text)),
                }
            }
            for (i, (_, a)) in kept.iter().enumerate() {
                for (_, b) in &kept[i + 1..] {
                    prop_assert_ne!(shingles(a), shingles(b), "{:?} and {:?} both kept", a, b);
                }
            }
        }
    }
}
