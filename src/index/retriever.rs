//! The boundary the round trip searches through: a [`Retriever`] answers a query's analyzed
//! terms with the top chunks by BM25. The tantivy [`ChunkIndex`] is the one built-in engine;
//! past one machine (see `docs/SCALE.md`), the user's Elasticsearch or OpenSearch cluster can
//! take its place behind the same trait (BM25 is the same model).

use super::{ChunkIndex, Hit, IndexError};

/// A retriever's answer.
type Result<T> = std::result::Result<T, IndexError>;

/// A BM25 engine over the chunks, addressed by their positions in the chunk list; `Sync`,
/// because the round trip searches it from `--threads` threads at once.
pub trait Retriever: Sync {
    /// The top `limit` chunks for already-analyzed `terms` (each counted once), best first;
    /// equal scores are ordered by chunk position, so results are deterministic.
    ///
    /// # Errors
    /// When the engine fails.
    fn search_terms(&self, terms: &[String], limit: usize) -> Result<Vec<Hit>>;
}

impl Retriever for ChunkIndex {
    fn search_terms(&self, terms: &[String], limit: usize) -> Result<Vec<Hit>> {
        ChunkIndex::search_terms(self, terms, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{from_chunks, test_chunks};

    #[test]
    fn tantivy_behind_the_trait_answers_as_the_index_does() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let texts =
            ["quota exceeded when storage is full", "sharing links expire", "storage quota per workspace"];
        let (index, _) = from_chunks(dir.path(), &test_chunks(&texts));
        let retriever: &dyn Retriever = &index;
        let queries: Vec<Vec<String>> =
            ["storage quota", "links"].iter().map(|q| index.analyzer().terms(q)).collect();
        let many: Vec<Vec<Hit>> = queries
            .iter()
            .map(|terms| retriever.search_terms(terms, 2).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        for (terms, hits) in queries.iter().zip(&many) {
            let direct = index.search_terms(terms, 2).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                hits.iter().map(|h| (h.chunk, h.score)).collect::<Vec<_>>(),
                direct.iter().map(|h| (h.chunk, h.score)).collect::<Vec<_>>()
            );
        }
        assert_eq!(many[1].first().map(|h| h.chunk), Some(1));
    }
}
