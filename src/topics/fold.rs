//! The corpus model kept with the index, and new chunks folded into it.
//!
//! A build saves its [`CorpusModel`] (term statistics, the basis of the topic space and every
//! chunk's vector) in the index folder. A refresh loads it and, instead of refitting the space
//! over the whole new corpus, folds the corpus's changes in (LSA folding-in, Deerwester et al.
//! 1990; Berry, Dumais & O'Brien 1995):
//!
//! - a chunk the old corpus had (same id, title and text) keeps its vector, bit for bit; one
//!   whose title or text changed under its id is treated as deleted and new;
//! - a new chunk is projected with the build's basis and the build's term weights, so it lands
//!   where the build's projection would have put it (a term the build did not know adds
//!   nothing to its vector);
//! - term statistics (document and collection frequency) are updated exactly: a deleted
//!   chunk's counts leave them, a new chunk's join them, so they are what a rebuild counts; a
//!   term's most common written form stays the build's (a new term takes the new chunks').
//!
//! What differs from a rebuild: the basis is the build's, fitted on the old corpus, so the
//! vectors are not those a refit on the new corpus would give. Folding a few percent of a
//! corpus in barely moves its topics; a build refits.
//!
//! The saved file names the chunk list and analyzer it belongs to (the index's stamp); one
//! for another list, or unreadable, is ignored and the model is rebuilt.

use super::fit::Projection;
use super::terms::{most_common, sorted};
use super::{Basis, CorpusModel, CorpusTerms, Result, TermUsage, TopicSpace};
use crate::codec::Decoder;
use crate::index::{ChunkIndex, IndexError, OldChunk, Unchanged, WordTerms};
use foldhash::{HashMap, HashMapExt as _};
use std::io::Write as _;
use std::path::Path;

/// The file in the index folder that holds the saved model.
const MODEL_FILE: &str = "qrelgen-corpus-model";
/// The first bytes of that file (the format's version).
const MAGIC: &[u8] = b"qrelgen-corpus-model v1\n";

impl CorpusModel {
    /// Saves the model of `index`'s chunks beside it, in its folder, and returns it without its
    /// basis (only folding needs that, so it is not held while the model is used).
    ///
    /// # Errors
    /// [`IndexError::Write`] when the file cannot be written.
    pub fn save_beside(mut self, index: &ChunkIndex) -> Result<Self> {
        self.save_in(index.dir(), &index.own_stamp())?;
        self.basis = None;
        Ok(self)
    }

    fn save_in(&self, dir: &Path, stamp: &str) -> Result<()> {
        let path = dir.join(MODEL_FILE);
        let partial = dir.join(format!("{MODEL_FILE}.partial"));
        let error = |source| IndexError::Write { path: path.clone(), source };
        let file = fs_err::File::create(&partial).map_err(error)?;
        let mut out = Encoder(std::io::BufWriter::new(file));
        self.encode(&mut out, stamp).and_then(|()| out.0.flush()).map_err(error)?;
        drop(out);
        fs_err::rename(&partial, &path).map_err(error)
    }

    /// The model saved in the index folder `dir` for `stamp`, its space scanned with `threads`
    /// threads; `None` when there is none, it is for another chunk list or analyzer, or it
    /// cannot be read (then the model is rebuilt).
    #[must_use]
    pub fn load(dir: &Path, stamp: &str, threads: usize) -> Option<Self> {
        let bytes = fs_err::read(dir.join(MODEL_FILE)).ok()?;
        decode(&bytes, stamp, threads)
    }

    /// The model of the corpus `index` holds, from this model of an earlier corpus whose
    /// chunks were `old` (in their positions): kept chunks keep their vectors, new ones are
    /// folded in, term statistics follow exactly (see the module docs). `unchanged`, from an
    /// update of the index in place, tells which chunks are `old`'s as they were; without it
    /// (a rebuilt index), each chunk that kept an old id is compared with its stored text. A
    /// model without a basis (an empty space), or with another number of chunks than `old`, is
    /// rebuilt (the caller loads it by the stamp of `old`'s index, see [`CorpusModel::load`]).
    ///
    /// # Errors
    /// [`IndexError::Tantivy`] when a chunk text cannot be read.
    pub fn fold_in(
        self,
        old: &[OldChunk<'_>],
        index: &ChunkIndex,
        unchanged: Option<&Unchanged>,
    ) -> Result<Self> {
        let Self { mut terms, space: old_space, basis } = self;
        let Some(basis) = basis.filter(|_| old_space.chunks() == old.len()) else {
            return Self::build(index);
        };
        let was: HashMap<&str, usize> = old.iter().enumerate().map(|(at, c)| (c.id.as_str(), at)).collect();
        let mut words = WordTerms::new(index.analyzer());
        for gone in old.iter().filter(|c| index.position(c.id).is_none()) {
            forget(&mut terms, &term_counts(&mut words, gone.title, gone.text));
        }
        let mut space = TopicSpace::empty(basis.projection.dim, index.len(), index.threads());
        let mut new_forms: HashMap<String, HashMap<String, u32>> = HashMap::new();
        for position in 0..index.len() {
            let mut stored = None;
            if let Some(&at) = was.get(index.chunk_id_str(position)) {
                let before = old[at];
                let same = if let Some(unchanged) = unchanged {
                    unchanged.at(position)
                } else {
                    let now = index.stored(position)?;
                    let same = before.title == now.title && before.text == now.text;
                    stored = Some(now);
                    same
                };
                if same {
                    space.push(&old_space.vector(at)?)?;
                    continue;
                }
                // The same id with another title or text: its old counts go, it is folded in anew.
                forget(&mut terms, &term_counts(&mut words, before.title, before.text));
            }
            let stored = match stored {
                Some(stored) => stored,
                None => index.stored(position)?,
            };
            let (tf, forms) = counts(&mut words, &stored.title, &stored.text);
            for (term, surfaces) in forms {
                if terms.usage.contains_key(&term) && !new_forms.contains_key(&term) {
                    continue;
                }
                let kept = new_forms.entry(term).or_default();
                for (surface, n) in surfaces {
                    *kept.entry(surface).or_default() += n;
                }
            }
            let row: HashMap<u32, u32> =
                tf.iter().filter_map(|(term, &n)| Some((*basis.ids.get(term)?, n))).collect();
            space.push(&basis.projection.project(&sorted(row), &basis.df, basis.n))?;
            learn(&mut terms, &tf);
        }
        for (term, forms) in new_forms {
            if let Some(usage) = terms.usage.get_mut(&term) {
                usage.surface = most_common(forms);
            }
        }
        terms.chunks = index.len();
        Ok(Self { terms, space, basis: Some(basis) })
    }

    fn encode(&self, out: &mut Encoder<impl std::io::Write>, stamp: &str) -> std::io::Result<()> {
        out.0.write_all(MAGIC)?;
        out.text(stamp)?;
        out.number(self.terms.chunks as u64)?;
        let mut usage: Vec<(&String, &TermUsage)> = self.terms.usage.iter().collect();
        usage.sort_unstable_by_key(|(term, _)| *term);
        out.number(usage.len() as u64)?;
        for (term, u) in usage {
            out.text(term)?;
            out.number(u64::from(u.df))?;
            out.number(u.cf)?;
            out.text(&u.surface)?;
        }
        let Some(basis) = &self.basis else { return Ok(()) };
        out.number(basis.n as u64)?;
        out.number(basis.projection.dim as u64)?;
        out.number(basis.names.len() as u64)?;
        for (name, &df) in basis.names.iter().zip(&basis.df) {
            out.text(name)?;
            out.number(u64::from(df))?;
        }
        basis.projection.v.iter().try_for_each(|x| out.0.write_all(&x.to_le_bytes()))?;
        out.number(self.space.chunks() as u64)?;
        self.space.write_vectors(&mut out.0)
    }
}

/// Each term's count in `tokens`, and the counts of its written forms.
type Counts = (HashMap<String, u32>, HashMap<String, HashMap<String, u32>>);

/// The counts of a chunk's title and text, analysed by `words`.
fn counts(words: &mut WordTerms<'_>, title: &str, text: &str) -> Counts {
    let (mut tf, mut forms): Counts = (HashMap::new(), HashMap::new());
    for part in [title, text] {
        words.each(part, |term, word| {
            let surface = lowercase(word);
            if let (Some(n), Some(written)) = (tf.get_mut(term), forms.get_mut(term)) {
                *n += 1;
                match written.get_mut(surface.as_ref()) {
                    Some(n) => *n += 1,
                    None => drop(written.insert(surface.into_owned(), 1)),
                }
            } else {
                tf.insert(term.to_owned(), 1);
                forms.insert(term.to_owned(), HashMap::from_iter([(surface.into_owned(), 1)]));
            }
        });
    }
    (tf, forms)
}

/// `word`, lower-cased (without a copy when it is already).
fn lowercase(word: &str) -> std::borrow::Cow<'_, str> {
    if word.is_ascii() && !word.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Borrowed(word)
    } else {
        std::borrow::Cow::Owned(word.to_lowercase())
    }
}

/// Each term's count in a chunk's title and text, analysed by `words`.
fn term_counts(words: &mut WordTerms<'_>, title: &str, text: &str) -> HashMap<String, u32> {
    let mut tf: HashMap<String, u32> = HashMap::new();
    for part in [title, text] {
        words.each(part, |term, _| match tf.get_mut(term) {
            Some(n) => *n += 1,
            None => drop(tf.insert(term.to_owned(), 1)),
        });
    }
    tf
}

/// A deleted chunk's counts leave the statistics (a term no chunk has any more goes).
fn forget(terms: &mut CorpusTerms, tf: &HashMap<String, u32>) {
    for (term, &n) in tf {
        if let Some(usage) = terms.usage.get_mut(term) {
            usage.df = usage.df.saturating_sub(1);
            usage.cf = usage.cf.saturating_sub(u64::from(n));
            if usage.df == 0 {
                terms.usage.remove(term);
            }
        }
    }
}

/// A new chunk's counts join the statistics.
fn learn(terms: &mut CorpusTerms, tf: &HashMap<String, u32>) {
    for (term, &n) in tf {
        let usage = terms.usage.entry(term.clone()).or_insert_with(|| TermUsage {
            df: 0,
            cf: 0,
            surface: String::new(),
        });
        usage.df += 1;
        usage.cf += u64::from(n);
    }
}

/// The saved model's bytes: little-endian numbers, length-prefixed UTF-8 texts.
struct Encoder<W>(W);

impl<W: std::io::Write> Encoder<W> {
    fn number(&mut self, n: u64) -> std::io::Result<()> {
        self.0.write_all(&n.to_le_bytes())
    }

    fn text(&mut self, text: &str) -> std::io::Result<()> {
        self.number(text.len() as u64)?;
        self.0.write_all(text.as_bytes())
    }
}

fn decode(bytes: &[u8], stamp: &str, threads: usize) -> Option<CorpusModel> {
    let mut input = Decoder::new(bytes);
    if input.take(MAGIC.len())? != MAGIC || input.text()? != stamp {
        return None;
    }
    let chunks = input.size()?;
    let terms = input.size()?;
    // An entry takes at least four numbers (32 bytes): a corrupt count reserves no more.
    let mut usage = HashMap::with_capacity(terms.min(input.rest().len() / 32));
    for _ in 0..terms {
        let term = input.text()?.to_owned();
        let (df, cf, surface) = (input.small()?, input.number()?, input.text()?.to_owned());
        usage.insert(term, TermUsage { df, cf, surface });
    }
    let terms = CorpusTerms { chunks, usage };
    if input.rest().is_empty() {
        return Some(CorpusModel { terms, space: TopicSpace::default(), basis: None });
    }
    let (n, dim, vocabulary) = (input.size()?, input.size()?, input.size()?);
    let mut ids = HashMap::with_capacity(vocabulary.min(input.rest().len() / 16));
    let (mut names, mut df) = (Vec::new(), Vec::new());
    for id in 0..u32::try_from(vocabulary).ok()? {
        let name = input.text()?.to_owned();
        ids.insert(name.clone(), id);
        names.push(name);
        df.push(input.small()?);
    }
    let v =
        input.values(vocabulary.checked_mul(dim)?, 8, |b| Some(f64::from_le_bytes(b.try_into().ok()?)))?;
    let vectors = input.size()?;
    let values = input.take(vectors.checked_mul(dim)?.checked_mul(4)?)?;
    if !input.rest().is_empty() || dim == 0 {
        return None;
    }
    // Straight into the space, a vector at a time: the file's bytes are the only other copy.
    let mut space = TopicSpace::empty(dim, vectors, threads);
    let mut vector = vec![0.0; dim];
    for bytes in values.chunks_exact(4 * dim) {
        for (x, b) in vector.iter_mut().zip(bytes.chunks_exact(4)) {
            *x = f32::from_le_bytes(b.try_into().ok()?);
        }
        space.push(&vector).ok()?;
    }
    let basis = Basis { ids, names, df, n, projection: Projection { dim, v } };
    Some(CorpusModel { terms, space, basis: Some(basis) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ChunkId;
    use crate::index::{from_chunks, test_chunks};
    use crate::record::Chunk;

    const TEXTS: [&str; 8] = [
        "kidney infections and renal failure in adults",
        "renal failure treated by dialysis of the kidney",
        "dialysis clinics and kidney transplant waiting lists",
        "guitar strings and tuning pegs",
        "tuning a guitar by ear with harmonics",
        "harmonics of guitar strings and frets",
        "transplant of a kidney after renal failure",
        "frets and pegs on an old guitar",
    ];

    fn old_chunks(chunks: &[Chunk]) -> Vec<OldChunk<'_>> {
        chunks.iter().map(OldChunk::from).collect()
    }

    fn bits(space: &TopicSpace) -> Vec<Vec<u32>> {
        (0..space.chunks()).map(|c| space.vector(c).unwrap().iter().map(|x| x.to_bits()).collect()).collect()
    }

    fn usage(terms: &CorpusTerms) -> Vec<(String, u32, u64)> {
        let mut usage: Vec<_> = terms.usage.iter().map(|(t, u)| (t.clone(), u.df, u.cf)).collect();
        usage.sort();
        usage
    }

    #[test]
    fn folding_the_same_corpus_in_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let chunks = test_chunks(&TEXTS);
        let (index, _) = from_chunks(dir.path(), &chunks);
        let built = CorpusModel::build(&index).unwrap();
        let (space, terms) = (bits(&built.space), usage(&built.terms));
        let folded = built.fold_in(&old_chunks(&chunks), &index, None).unwrap();
        assert_eq!(bits(&folded.space), space);
        assert_eq!(usage(&folded.terms), terms);
    }

    #[test]
    fn statistics_follow_the_new_corpus_exactly_and_new_chunks_land_where_the_basis_puts_them() {
        let dir = tempfile::tempdir().unwrap();
        let old = test_chunks(&TEXTS);
        let (old_index, _) = from_chunks(&dir.path().join("old"), &old);
        let built = CorpusModel::build(&old_index).unwrap();
        let old_bits = bits(&built.space);
        // Chunk 3 deleted; a copy of chunk 0's text under a new id and a chunk with a new word.
        let mut new: Vec<Chunk> = old.iter().filter(|c| c.id.as_str() != "c3").cloned().collect();
        let mut copy = old[0].clone();
        copy.id = ChunkId::parse("copy").unwrap();
        let mut fresh = old[4].clone();
        fresh.id = ChunkId::parse("fresh").unwrap();
        fresh.text = "tuning a ukulele by ear".to_owned();
        new.extend([copy, fresh]);
        let (index, _) = from_chunks(&dir.path().join("new"), &new);
        let folded = built.fold_in(&old_chunks(&old), &index, None).unwrap();
        let rebuilt = CorpusModel::build(&index).unwrap();
        assert_eq!(usage(&folded.terms), usage(&rebuilt.terms), "df and cf are a rebuild's");
        assert_eq!(folded.terms.chunks(), new.len());
        assert_eq!(folded.terms.usage("ukulel").map(|u| u.surface.as_str()), Some("ukulele"));
        let now = bits(&folded.space);
        assert_eq!(now.len(), new.len());
        // Kept chunks keep their vectors; the copy lands on the chunk it copies.
        assert_eq!(now[0], old_bits[0]);
        assert_eq!(now[3], old_bits[4], "old chunk 4 is at position 3 now");
        assert_eq!(now[7], old_bits[0]);
        assert!(folded.space.neighbours(7, 0.99, 3).unwrap().iter().any(|&(c, _)| c == 0));
    }

    #[test]
    fn a_saved_model_loads_for_its_own_stamp_only() {
        let dir = tempfile::tempdir().unwrap();
        let chunks = test_chunks(&TEXTS);
        let (index, _) = from_chunks(&dir.path().join("index"), &chunks);
        let built = CorpusModel::build(&index).unwrap();
        built.save_in(dir.path(), "stamp\n").unwrap();
        let loaded = CorpusModel::load(dir.path(), "stamp\n", 2).unwrap();
        assert_eq!(bits(&loaded.space), bits(&built.space));
        assert_eq!(usage(&loaded.terms), usage(&built.terms));
        assert!(CorpusModel::load(dir.path(), "another\n", 2).is_none());
        let path = dir.path().join(MODEL_FILE);
        let bytes = fs_err::read(&path).unwrap();
        fs_err::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        assert!(CorpusModel::load(dir.path(), "stamp\n", 2).is_none(), "a cut file is not read");
    }

    #[test]
    fn a_chunk_whose_title_or_text_changed_under_its_id_is_folded_in_anew() {
        let dir = tempfile::tempdir().unwrap();
        let old = test_chunks(&TEXTS);
        let (old_index, _) = from_chunks(&dir.path().join("old"), &old);
        let built = CorpusModel::build(&old_index).unwrap();
        let old_bits = bits(&built.space);
        let mut new = old.clone();
        new[1].text = "tuning a ukulele by ear".to_owned();
        new[5].title = "kidney dialysis".to_owned();
        let (index, _) = from_chunks(&dir.path().join("new"), &new);
        let basis = built.basis.as_ref().unwrap();
        let projected = |chunk: &Chunk| {
            let mut tf: HashMap<String, u32> = HashMap::new();
            for token in index.analyzer().chunk_tokens(&chunk.title, &chunk.text) {
                *tf.entry(token.term).or_default() += 1;
            }
            let row: HashMap<u32, u32> =
                tf.iter().filter_map(|(t, &n)| Some((*basis.ids.get(t)?, n))).collect();
            basis.projection.project(&sorted(row), &basis.df, basis.n).iter().map(|x| x.to_bits()).collect()
        };
        let (one, five): (Vec<u32>, Vec<u32>) = (projected(&new[1]), projected(&new[5]));
        let folded = built.fold_in(&old_chunks(&old), &index, None).unwrap();
        let rebuilt = CorpusModel::build(&index).unwrap();
        assert_eq!(usage(&folded.terms), usage(&rebuilt.terms), "df and cf are a rebuild's");
        let now = bits(&folded.space);
        assert_eq!(now[0], old_bits[0]);
        assert_eq!(now[1], one);
        assert_eq!(now[5], five);
        assert_ne!(now[5], old_bits[5]);
    }
}
