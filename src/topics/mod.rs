//! Corpus-wide term statistics and a latent topic space over the chunks.
//!
//! One pass over every chunk's stored text gives each term its document frequency, its
//! collection frequency and its most common written form, and each chunk a weighted term
//! vector. Latent semantic analysis (Deerwester et al. 1990) reduces those vectors to
//! [`DIMENSIONS`] dimensions by a randomized truncated SVD (Halko, Martinsson & Tropp 2011):
//! chunks about the same topic end up close even when they share few words, because the
//! space is built from which words occur together across the whole corpus.
//!
//! Used by the offline generator: residual IDF ([`CorpusTerms::residual_idf`], Church & Gale
//! 1995) tells topical words from words spread evenly like function words, the common written
//! form is the one a query uses, and [`TopicSpace::neighbours`] finds the chunks that share a
//! source's topic (its co-relevant chunks). Everything here is deterministic: sorted walks, a
//! fixed random stream, arithmetic in a fixed order (reading and analysing the chunks is spread
//! over threads, its results taken in chunk order; the neighbour scan is split over threads, each
//! cosine summed as a plain dot product is and the parts merged in one total order).

mod fit;
mod fold;
mod linalg;
mod space;
mod terms;
#[cfg(test)]
mod tests;

pub use space::{Probe, TopicSpace};
pub use terms::{CorpusTerms, TermUsage};

use crate::index::{ChunkIndex, IndexError};
use fit::{PROJECTION_BLOCK, Projection, RowFile};
use foldhash::HashMap;
use terms::{Vocabulary, analyse, most_common};

type Result<T> = std::result::Result<T, IndexError>;

/// Dimensions of the topic space: the 50–100 that LSA studies found best on small test
/// collections (Deerwester et al. 1990; Dumais 1991), at the low end so the space stays topical.
pub const DIMENSIONS: usize = 50;

/// At most this many chunks are used to fit the space; the rest are projected into it.
const FIT_SAMPLE: usize = 20_000;

/// What projects a chunk into the topic space: the vocabulary the space was fitted on, the
/// term weights (document frequencies over `n` chunks) and the fitted projection.
#[derive(Debug)]
pub(super) struct Basis {
    pub(super) ids: HashMap<String, u32>,
    pub(super) names: Vec<String>,
    pub(super) df: Vec<u32>,
    pub(super) n: usize,
    pub(super) projection: Projection,
}

/// The corpus's term statistics and topic space, from one pass over the chunk texts.
#[derive(Debug, Default)]
pub struct CorpusModel {
    /// Term statistics.
    pub terms: CorpusTerms,
    /// The topic space.
    pub space: TopicSpace,
    /// What projects a chunk into the space (to fold new chunks in later, `fold.rs`); `None`
    /// when the space is empty.
    pub(super) basis: Option<Basis>,
}

impl CorpusModel {
    /// Reads every chunk of `index` once and builds both; above the fit sample's size, every
    /// chunk's counts wait in a scratch file (`RowFile`) until the fit, then are projected
    /// from it.
    ///
    /// The topic space keeps its vectors in a scratch file in the index folder (see
    /// [`TopicSpace`]).
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when a chunk text cannot be read, [`IndexError::Scratch`] when
    /// the space's or the counts' scratch file cannot be made, written or read back whole.
    pub fn build(index: &ChunkIndex) -> Result<Self> {
        let n = index.len();
        let threads = index.threads();
        let step = n.div_ceil(FIT_SAMPLE).max(1);
        let mut vocabulary = Vocabulary::default();
        let mut sample: Vec<Vec<(u32, u32)>> = Vec::new();
        // Above the fit sample's size, every chunk's counts wait in a scratch file for the fit.
        let mut rows = if step > 1 { Some(RowFile::create(index.dir())?) } else { None };
        let mut chunk = 0;
        analyse(index, threads, |block| {
            for counts in vocabulary.count(block) {
                if let Some(rows) = &mut rows {
                    rows.write(&counts)?;
                }
                if chunk % step == 0 {
                    sample.push(counts);
                }
                chunk += 1;
            }
            Ok(())
        })?;
        let Vocabulary { ids, names, forms, form_ids, surfaces, df, cf, threads: counted_on } = vocabulary;
        // Not held through the fit: only the counting needs them.
        drop((form_ids, counted_on));
        let usage = names
            .iter()
            .zip(surfaces)
            .enumerate()
            .map(|(id, (name, counted))| {
                let counted = counted.into_iter().map(|(form, count)| (forms[form as usize].clone(), count));
                (name.clone(), TermUsage { df: df[id], cf: cf[id], surface: most_common(counted.collect()) })
            })
            .collect();
        drop(forms);
        let terms = CorpusTerms { chunks: n, usage };
        let Some(projection) = Projection::fit(&sample, &df, n, names.len(), DIMENSIONS, threads) else {
            return Ok(Self { terms, space: TopicSpace::default(), basis: None });
        };
        let mut space = TopicSpace::in_folder(projection.dim, n, threads, index.dir());
        let project = |rows: &[Vec<(u32, u32)>], space: &mut TopicSpace| -> Result<()> {
            projection.project_all(rows, &df, n, threads).iter().try_for_each(|vector| space.push(vector))
        };
        match rows {
            // The sample is every chunk's counts, in chunk order.
            None => sample.chunks(PROJECTION_BLOCK).try_for_each(|rows| project(rows, &mut space))?,
            Some(rows) => {
                drop(sample);
                let mut rows = rows.read_back()?;
                let mut read = 0;
                loop {
                    let block = rows.next_block(PROJECTION_BLOCK)?;
                    if block.is_empty() {
                        break;
                    }
                    read += block.len();
                    project(&block, &mut space)?;
                }
                if read != n {
                    return Err(rows.damaged("fewer rows than chunks"));
                }
            }
        }
        let basis = Some(Basis { ids, names, df, n, projection });
        Ok(Self { terms, space, basis })
    }
}
