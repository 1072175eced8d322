//! Identifiers: newtypes derived from content, never random.
//!
//! Invariant: every id is non-empty and contains no whitespace and no `#`, so it can be written
//! to TREC and BEIR files unchanged.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Number of hex digits of a content hash kept in an id (48 bits).
const HASH_HEX_LEN: usize = 12;

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
                    Ok(Self(raw.to_owned()))
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A source document: its path relative to the corpus folder, or its JSONL `id`/`_id`.
    DocId
);
id_type!(
    /// A chunk: `<doc id>:<hash of doc id and chunk text>`, or the id given in pre-chunked input.
    ChunkId
);
id_type!(
    /// A generated query: `<type>-<hash of type, sources and text>`.
    QueryId
);

/// Why a user-supplied id cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidId {
    /// The id is empty.
    #[error("the id is empty")]
    Empty,
    /// The id contains a character that TREC or BEIR files cannot hold.
    #[error("the id {0:?} contains whitespace or '#'")]
    BadCharacter(String),
}

fn is_forbidden(c: char) -> bool {
    c.is_whitespace() || c == '#'
}

impl DocId {
    /// Builds a document id, replacing whitespace and `#` with `_`.
    #[must_use]
    pub fn sanitized(raw: &str) -> Self {
        let clean: String = raw.trim().chars().map(|c| if is_forbidden(c) { '_' } else { c }).collect();
        if clean.is_empty() { Self("_".to_owned()) } else { Self(clean) }
    }
}

impl ChunkId {
    /// An id taken from one that was already checked (a chunk list's copy of a `ChunkId`).
    pub(crate) fn from_checked(id: &str) -> Self {
        Self(id.to_owned())
    }

    /// Derives the id of a chunk from its document id and text.
    ///
    /// `occurrence` tells apart chunks of one document whose text is identical (0 for the first).
    #[must_use]
    pub fn derive(doc: &DocId, text: &str, occurrence: usize) -> Self {
        let hash = content_hash(&[doc.as_str(), text]);
        if occurrence == 0 {
            Self(format!("{doc}:{hash}"))
        } else {
            Self(format!("{doc}:{hash}-{occurrence}"))
        }
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
        assert_eq!(ChunkId::parse("doc-1_p3").map(|id| id.0), Ok("doc-1_p3".to_owned()));
    }

    #[test]
    fn query_ids_carry_their_type() {
        let sources = [ChunkId::parse("c1").unwrap()];
        let id = QueryId::derive("direct", &sources, "reset password");
        assert!(id.as_str().starts_with("direct-"));
        assert_ne!(id, QueryId::derive("paraphrase", &sources, "reset password"));
    }
}
