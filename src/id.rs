//! Identifiers: newtypes derived from content, never random.
//!
//! Invariant: every id is non-empty and contains no whitespace and no `#`, so it can be written
//! to TREC and BEIR files unchanged.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::Arc;

/// Number of hex digits of a content hash kept in an id (48 bits).
const HASH_HEX_LEN: usize = 12;

/// What every id type has, given its `as_str` and its `owned` constructor: checked parsing and
/// display.
macro_rules! id_common {
    ($name:ident) => {
        impl $name {
            /// Accepts an id as written in an input file, or says why it cannot be used.
            ///
            /// # Errors
            /// [`InvalidId`] when the id is empty or contains whitespace or `#`.
            pub fn parse(raw: &str) -> Result<Self, InvalidId> {
                if raw.is_empty() {
                    Err(InvalidId::Empty)
                } else if raw.chars().any(is_forbidden) {
                    Err(InvalidId::BadCharacter(raw.to_owned()))
                } else {
                    Ok(Self::owned(raw.to_owned()))
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// An id type holding its own `String`.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id as written in output files.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }

            fn owned(text: String) -> Self {
                Self(text)
            }
        }

        id_common!($name);
    };
}

id_type!(
    /// A source document: its path relative to the corpus folder, or its JSONL `id`/`_id`.
    DocId
);
id_type!(
    /// A generated query: `<type>-<hash of type, sources and text>`.
    QueryId
);

/// A chunk: `<doc id>:<hash of doc id and chunk text>`, or the id given in pre-chunked input.
///
/// An id handed out by the chunk list shares the list's id text instead of holding a copy, so
/// the thousands of ids that candidates, pools and topics hold cost no allocation each. Equality,
/// hashing, ordering, display, debug output and serde all go by [`ChunkId::as_str`]: a shared id
/// and an owned one of the same text are the same id.
#[derive(Clone)]
pub struct ChunkId(ChunkText);

/// Where a [`ChunkId`]'s text is.
#[derive(Clone)]
enum ChunkText {
    /// Its own copy.
    Owned(Box<str>),
    /// A range of a text shared with other ids (the chunk list's ids, one after the other).
    Shared { text: Arc<String>, start: u32, end: u32 },
}

impl ChunkId {
    /// The id as written in output files.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            ChunkText::Owned(text) => text,
            ChunkText::Shared { text, start, end } => &text[*start as usize..*end as usize],
        }
    }

    /// The id that is `text`, an id already checked, in its own copy.
    pub(crate) fn owned(text: String) -> Self {
        Self(ChunkText::Owned(text.into_boxed_str()))
    }

    /// The id that is `range` of `text`, an id already checked (a chunk list's copy of a
    /// `ChunkId`), sharing `text` rather than copying it.
    ///
    /// # Panics
    /// If `range` is not a range of whole characters of `text`.
    pub(crate) fn shared(text: Arc<String>, range: Range<u32>) -> Self {
        assert!(
            text.get(range.start as usize..range.end as usize).is_some(),
            "an id's range {range:?} lies outside its text of {} bytes or splits a character",
            text.len()
        );
        Self(ChunkText::Shared { text, start: range.start, end: range.end })
    }

    /// Derives the id of a chunk from its document id and text.
    ///
    /// `occurrence` tells apart chunks of one document whose text is identical (0 for the first).
    #[must_use]
    pub fn derive(doc: &DocId, text: &str, occurrence: usize) -> Self {
        let hash = content_hash(&[doc.as_str(), text]);
        if occurrence == 0 {
            Self::owned(format!("{doc}:{hash}"))
        } else {
            Self::owned(format!("{doc}:{hash}-{occurrence}"))
        }
    }
}

id_common!(ChunkId);

impl PartialEq for ChunkId {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ChunkId {}

impl Hash for ChunkId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for ChunkId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ChunkId {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ChunkId").field(&self.as_str()).finish()
    }
}

impl Serialize for ChunkId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ChunkId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::owned)
    }
}

/// Why a user-supplied id cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidId {
    /// The id is empty.
    #[error("the id is empty")]
    Empty,
    /// The id contains a character that TREC or BEIR files cannot hold.
    #[error("the id {0:?} contains whitespace, a control character, '#' or '`'")]
    BadCharacter(String),
}

/// What no id may hold: whitespace (tabs and line breaks end a TREC or TSV field), `#`, control
/// characters (NUL and the like) and backticks (they end a Markdown code span).
fn is_forbidden(c: char) -> bool {
    c.is_whitespace() || c.is_control() || c == '#' || c == '`'
}

impl DocId {
    /// Builds a document id, replacing whitespace and `#` with `_`.
    #[must_use]
    pub fn sanitized(raw: &str) -> Self {
        let clean: String = raw.trim().chars().map(|c| if is_forbidden(c) { '_' } else { c }).collect();
        if clean.is_empty() { Self("_".to_owned()) } else { Self(clean) }
    }
}

impl DocId {
    /// The id of a document whose input names it `raw` (a JSONL `id`): `raw` itself when it can
    /// be written to every output; else its [`DocId::sanitized`] form followed by `-` and 8 hex
    /// digits of its hash, so that two different ids never become one (`a b` and `a_b`).
    ///
    /// # Errors
    /// [`InvalidId::Empty`] for an empty or whitespace-only id: nothing is left to name it by.
    pub fn from_input(raw: &str) -> Result<Self, InvalidId> {
        if raw.trim().is_empty() {
            return Err(InvalidId::Empty);
        }
        if !raw.chars().any(is_forbidden) {
            return Ok(Self(raw.to_owned()));
        }
        let hash = content_hash(&[raw]);
        Ok(Self(format!("{}-{}", Self::sanitized(raw), &hash[..8])))
    }
}

impl QueryId {
    /// Derives a query id from its type label, source chunk ids and text.
    #[must_use]
    pub fn derive(type_label: &str, sources: &[ChunkId], text: &str) -> Self {
        let mut parts = vec![type_label, text];
        parts.extend(sources.iter().map(ChunkId::as_str));
        Self(format!("{type_label}-{}", content_hash(&parts)))
    }
}

/// An incremental hash over many strings, each length-prefixed (so `["ab","c"]` and
/// `["a","bc"]` differ).
#[derive(Debug, Default, Clone)]
pub struct ContentHasher(blake3::Hasher);

impl ContentHasher {
    /// Adds strings to the hash.
    pub fn update(&mut self, parts: &[&str]) {
        for part in parts {
            self.0.update(&(part.len() as u64).to_le_bytes());
            self.0.update(part.as_bytes());
        }
    }

    /// The full hash, as 64 hex digits.
    #[must_use]
    pub fn finish(&self) -> String {
        self.0.finalize().to_hex().to_string()
    }
}

/// A [`ContentHasher`] for a long stream of small strings (every chunk of a corpus): the
/// length-prefixed parts are gathered into a buffer that is hashed 64 KiB at a
/// time, as BLAKE3 hashes large inputs several blocks at once where small ones go one block at
/// a time. The hash is [`ContentHasher`]'s of the same parts.
#[derive(Debug, Default)]
pub struct StreamHasher {
    hasher: blake3::Hasher,
    buffer: Vec<u8>,
}

/// Bytes a [`StreamHasher`] gathers before hashing them.
const STREAM_BUFFER: usize = 64 << 10;

impl StreamHasher {
    /// Adds strings to the hash.
    pub fn update(&mut self, parts: &[&str]) {
        for part in parts {
            self.buffer.extend_from_slice(&(part.len() as u64).to_le_bytes());
            if part.len() >= STREAM_BUFFER {
                self.flush();
                self.hasher.update(part.as_bytes());
            } else {
                self.buffer.extend_from_slice(part.as_bytes());
            }
        }
        if self.buffer.len() >= STREAM_BUFFER {
            self.flush();
        }
    }

    fn flush(&mut self) {
        self.hasher.update(&self.buffer);
        self.buffer.clear();
    }

    /// The full hash, as 64 hex digits.
    #[must_use]
    pub fn finish(&self) -> String {
        let mut hasher = self.hasher.clone();
        hasher.update(&self.buffer);
        hasher.finalize().to_hex().to_string()
    }
}

/// A short, stable hex hash of several strings.
#[must_use]
pub fn content_hash(parts: &[&str]) -> String {
    let mut hasher = ContentHasher::default();
    hasher.update(parts);
    let mut hex = hasher.finish();
    hex.truncate(HASH_HEX_LEN);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_sanitized(raw: &str, expected: &str) {
        assert_eq!(DocId::sanitized(raw).as_str(), expected);
    }

    #[test]
    fn doc_ids_lose_whitespace_and_hash() {
        check_sanitized("guides/billing.md", "guides/billing.md");
        check_sanitized("my file#2.txt", "my_file_2.txt");
        check_sanitized("  tab\there ", "tab_here");
        check_sanitized("   ", "_");
    }

    #[test]
    fn input_ids_are_kept_renamed_apart_or_refused() {
        assert_eq!(DocId::from_input("guides/a.md").map(|d| d.to_string()), Ok("guides/a.md".to_owned()));
        for empty in ["", "   ", "\t\n"] {
            assert_eq!(DocId::from_input(empty), Err(InvalidId::Empty), "{empty:?}");
        }
        let renamed = DocId::from_input("a b").unwrap();
        assert!(renamed.as_str().starts_with("a_b-") && renamed.as_str().len() == 12, "{renamed}");
        assert_ne!(DocId::from_input("a\tb").unwrap(), renamed);
        assert_ne!(DocId::from_input("a_b").unwrap(), renamed);
        for bad in ["a\0b", "x`y", "tab\there", "new\nline", "bell\u{7}"] {
            let id = DocId::from_input(bad).unwrap();
            assert!(ChunkId::parse(id.as_str()).is_ok(), "{bad:?} → {id}");
            assert!(ChunkId::parse(bad).is_err(), "{bad:?} is refused as it is");
        }
    }

    proptest::proptest! {
        /// Two different input ids never become one id, and every id they become can be written
        /// to TREC, BEIR, Markdown and HTML as it is (no character any of them must escape).
        #[test]
        fn distinct_input_ids_stay_distinct_and_writable(a in "\\PC{0,6}|[ \t\n\0`#_a]{0,4}", b in "\\PC{0,6}|[ \t\n\0`#_a]{0,4}") {
            let (ida, idb) = (DocId::from_input(&a), DocId::from_input(&b));
            if let (Ok(ida), Ok(idb)) = (&ida, &idb) {
                proptest::prop_assert_eq!(a == b, ida == idb, "{:?} {:?} → {} {}", a, b, ida, idb);
            }
            for id in [ida, idb].into_iter().flatten() {
                proptest::prop_assert!(!id.as_str().is_empty());
                proptest::prop_assert!(ChunkId::parse(id.as_str()).is_ok(), "{:?}", id);
                proptest::prop_assert!(!id.as_str().chars().any(|c| c.is_control() || c.is_whitespace() || c == '`'));
            }
            proptest::prop_assert_eq!(DocId::from_input(&a).is_err(), a.trim().is_empty());
        }
    }

    #[test]
    fn a_stream_hash_is_the_content_hash_of_the_same_parts() {
        let long = "x".repeat(STREAM_BUFFER + 3);
        let parts: Vec<String> =
            (0..5000).map(|i| format!("part {i}")).chain([long, String::new(), "é".into()]).collect();
        let (mut content, mut stream) = (ContentHasher::default(), StreamHasher::default());
        assert_eq!(stream.finish(), content.finish(), "nothing added");
        for pair in parts.chunks(2) {
            let pair: Vec<&str> = pair.iter().map(String::as_str).collect();
            content.update(&pair);
            stream.update(&pair);
        }
        assert_eq!(stream.finish(), content.finish());
        let mut other = StreamHasher::default();
        other.update(&["part 0part 1"]);
        assert_ne!(other.finish(), content.finish(), "the parts are length-prefixed");
    }

    #[test]
    fn chunk_ids_are_stable_and_content_derived() {
        let doc = DocId::sanitized("a.md");
        let id = ChunkId::derive(&doc, "Some text.", 0);
        // Fixed value: a change here changes every chunk id users have stored.
        assert_eq!(id.as_str(), "a.md:".to_owned() + &content_hash(&["a.md", "Some text."]));
        assert_eq!(id, ChunkId::derive(&doc, "Some text.", 0));
        assert_ne!(id, ChunkId::derive(&doc, "Other text.", 0));
        assert_ne!(id, ChunkId::derive(&DocId::sanitized("b.md"), "Some text.", 0));
        assert!(ChunkId::derive(&doc, "Some text.", 2).as_str().ends_with("-2"));
    }

    #[test]
    fn content_hash_is_length_prefixed_and_pinned() {
        assert_ne!(content_hash(&["ab", "c"]), content_hash(&["a", "bc"]));
        assert_eq!(content_hash(&["x"]).len(), HASH_HEX_LEN);
        // Pinned so that a dependency or code change cannot silently rename every id.
        assert_eq!(content_hash(&["a.md", "Some text."]), pinned_hash());
    }

    fn pinned_hash() -> &'static str {
        "239c3ffb4433"
    }

    #[test]
    fn parse_rejects_unwritable_ids() {
        assert_eq!(ChunkId::parse(""), Err(InvalidId::Empty));
        assert!(matches!(ChunkId::parse("a b"), Err(InvalidId::BadCharacter(_))));
        assert!(matches!(ChunkId::parse("a#b"), Err(InvalidId::BadCharacter(_))));
        assert_eq!(ChunkId::parse("doc-1_p3").map(|id| id.as_str().to_owned()), Ok("doc-1_p3".to_owned()));
    }

    #[test]
    fn a_shared_id_is_the_owned_id_of_its_text() {
        use std::hash::BuildHasher as _;
        let text = Arc::new("a.md:1b.md:22".to_owned());
        let first = ChunkId::shared(Arc::clone(&text), 0..6);
        let shared = ChunkId::shared(Arc::clone(&text), 6..13);
        let owned = ChunkId::parse("b.md:22").unwrap();
        assert_eq!((first.as_str(), shared.as_str()), ("a.md:1", "b.md:22"));
        assert_eq!(shared, owned);
        assert_ne!(first, owned);
        let state = std::collections::hash_map::RandomState::new();
        assert_eq!(state.hash_one(&shared), state.hash_one(&owned));
        assert_eq!(state.hash_one(&shared), state.hash_one("b.md:22".to_owned()), "hashed as a String is");
        assert_eq!((first.cmp(&owned), owned.cmp(&first)), (Ordering::Less, Ordering::Greater));
        assert_eq!(shared.cmp(&owned), Ordering::Equal);
        let mut mixed = [owned.clone(), ChunkId::parse("a.md:0").unwrap(), first.clone(), shared.clone()];
        mixed.sort();
        let sorted: Vec<&str> = mixed.iter().map(ChunkId::as_str).collect();
        assert_eq!(sorted, ["a.md:0", "a.md:1", "b.md:22", "b.md:22"]);
        assert_eq!(shared.to_string(), "b.md:22");
        assert_eq!(format!("{shared:?}"), format!("{owned:?}"));
        assert_eq!(format!("{shared:?}"), r#"ChunkId("b.md:22")"#);
        assert_eq!(serde_json::to_string(&[&shared, &owned]).unwrap(), r#"["b.md:22","b.md:22"]"#);
        let back: ChunkId = serde_json::from_str(r#""b.md:22""#).unwrap();
        assert_eq!(back, shared);
    }

    #[test]
    #[should_panic(expected = "outside its text")]
    fn a_shared_id_must_lie_in_its_text() {
        let _ = ChunkId::shared(Arc::new("abc".to_owned()), 1..4);
    }

    #[test]
    fn query_ids_carry_their_type() {
        let sources = [ChunkId::parse("c1").unwrap()];
        let id = QueryId::derive("direct", &sources, "reset password");
        assert!(id.as_str().starts_with("direct-"));
        assert_ne!(id, QueryId::derive("paraphrase", &sources, "reset password"));
    }
}
