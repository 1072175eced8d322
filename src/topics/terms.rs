//! Term statistics of the corpus: one pass over every chunk's stored text (analysed over the
//! threads, taken in chunk order) gives each term its document frequency, its collection
//! frequency and its most common written form, and each chunk its term counts.

use super::Result;
use super::space::scratch_error;
use crate::index::{Analyzer, ChunkIndex, IndexError};
use crate::threads;
use foldhash::{HashMap, HashMapExt as _};
use std::ops::Range;
use std::path::Path;

/// How the corpus uses one term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermUsage {
    /// Chunks that contain it.
    pub df: u32,
    /// Occurrences in the whole corpus.
    pub cf: u64,
    /// Its most common written form (lower-cased; ties: the first in sort order).
    pub surface: String,
}

/// Term statistics of the whole corpus.
#[derive(Debug, Default)]
pub struct CorpusTerms {
    pub(crate) chunks: usize,
    pub(crate) usage: HashMap<String, TermUsage>,
}

impl CorpusTerms {
    /// Number of chunks counted.
    #[must_use]
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// How the corpus uses `term` (an analyzed term), if it occurs.
    #[must_use]
    pub fn usage(&self, term: &str) -> Option<&TermUsage> {
        self.usage.get(term)
    }

    /// Residual IDF (Church & Gale 1995): the term's IDF minus the IDF a Poisson distribution
    /// with the same collection frequency predicts, in bits. Near 0 for words spread evenly over
    /// the chunks (function words, filler verbs, numbers), high for words that concentrate in a
    /// few chunks, as topical words do. 0 for an unknown term.
    #[must_use]
    pub fn residual_idf(&self, term: &str) -> f64 {
        let Some(usage) = self.usage.get(term) else { return 0.0 };
        residual_idf(f64::from(usage.df), usage.cf as f64, self.chunks as f64)
    }
}

/// Residual IDF of a term in `df` of `n` chunks with `cf` occurrences.
pub(super) fn residual_idf(df: f64, cf: f64, n: f64) -> f64 {
    if df <= 0.0 || n <= 0.0 {
        return 0.0;
    }
    let observed = -(df / n).log2();
    let poisson = -(1.0 - (-cf / n).exp()).log2();
    observed - poisson
}

/// The terms met so far: ids in order of first use, written forms, document and collection
/// frequencies; and what each analysing thread's own ids of terms and forms stand for.
#[derive(Default)]
pub(super) struct Vocabulary {
    pub(super) ids: HashMap<String, u32>,
    pub(super) names: Vec<String>,
    /// Written forms, in order of first use, and their ids.
    pub(super) forms: Vec<String>,
    pub(super) form_ids: HashMap<String, u32>,
    /// Per term: (form, occurrences), in order of first use.
    pub(super) surfaces: Vec<Vec<(u32, u32)>>,
    pub(super) df: Vec<u32>,
    pub(super) cf: Vec<u64>,
    /// Per analysing thread: its term and form ids' ids here (`u32::MAX`: a term not yet met
    /// in chunk order), and the names of its terms (each emptied once its term has an id here).
    pub(super) threads: Vec<ThreadIds>,
}

#[derive(Default)]
pub(super) struct ThreadIds {
    pub(super) terms: Vec<u32>,
    pub(super) names: Vec<String>,
    pub(super) forms: Vec<u32>,
}

impl Vocabulary {
    /// Counts the chunks of one analysed block, in order: their rows of (term, count), by
    /// term. A term's id is given where it is first used, chunk after chunk, word after word,
    /// as counting the tokens one by one would.
    pub(super) fn count(&mut self, block: Analysed) -> Vec<Vec<(u32, u32)>> {
        if self.threads.len() <= block.thread {
            self.threads.resize_with(block.thread + 1, ThreadIds::default);
        }
        let Self { ids, names, forms, form_ids, surfaces, df, cf, threads } = self;
        let own = &mut threads[block.thread];
        own.terms.resize(own.terms.len() + block.terms.len(), u32::MAX);
        own.names.extend(block.terms);
        for form in block.forms {
            let next = forms.len() as u32;
            let id = *form_ids.entry(form).or_insert_with_key(|form| {
                forms.push(form.clone());
                next
            });
            own.forms.push(id);
        }
        let mut rows = Vec::with_capacity(block.chunks.len());
        for pairs in block.chunks {
            let mut row: Vec<(u32, u32)> = Vec::with_capacity(pairs.len());
            for (local, form, count) in pairs {
                let mut id = own.terms[local as usize];
                if id == u32::MAX {
                    // Read once: the thread's copy of the name goes here.
                    let name = std::mem::take(&mut own.names[local as usize]);
                    id = if let Some(&id) = ids.get(&name) {
                        id
                    } else {
                        let id = names.len() as u32;
                        ids.insert(name.clone(), id);
                        names.push(name);
                        surfaces.push(Vec::new());
                        df.push(0);
                        cf.push(0);
                        id
                    };
                    own.terms[local as usize] = id;
                }
                let form = own.forms[form as usize];
                let counted = &mut surfaces[id as usize];
                match counted.iter_mut().find(|(f, _)| *f == form) {
                    Some((_, c)) => *c += count,
                    None => counted.push((form, count)),
                }
                row.push((id, count));
            }
            row.sort_unstable_by_key(|&(id, _)| id);
            row.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    kept.1 += later.1;
                }
                same
            });
            for &(term, tf) in &row {
                df[term as usize] += 1;
                cf[term as usize] += u64::from(tf);
            }
            rows.push(row);
        }
        rows
    }
}

/// A row of (term, count) from counts, by term.
pub(crate) fn sorted(counts: HashMap<u32, u32>) -> Vec<(u32, u32)> {
    let mut row: Vec<(u32, u32)> = counts.into_iter().collect();
    row.sort_unstable();
    row
}

/// Chunks a thread of [`analyse`] reads and analyses at a time.
pub(super) const ANALYSIS_BLOCK: usize = 256;

/// Written words an analysing thread remembers at most (about 2 MB a thread; a corpus of
/// technical English writes over 100,000): past it, it forgets them all and analyses each word
/// again when it comes back (its term and form keep their ids).
pub(super) const KNOWN_WORDS: usize = 1 << 15;

/// One block of chunks analysed by one thread, in that thread's own ids: the terms and written
/// forms it met first in this block (their ids follow on from its earlier blocks'), and each
/// chunk's (term, form, occurrences) in order of first occurrence.
pub(super) struct Analysed {
    pub(super) thread: usize,
    pub(super) terms: Vec<String>,
    pub(super) forms: Vec<String>,
    pub(super) chunks: Vec<Vec<(u32, u32, u32)>>,
}

/// Reads and analyses every chunk's title and text, on `threads` threads a block at a time
/// (block `b` on thread `b % threads`), and hands the blocks to `take` in chunk order (so that
/// only a few blocks are held at once).
pub(super) fn analyse(
    index: &ChunkIndex,
    threads: usize,
    take: impl FnMut(Analysed) -> Result<()>,
) -> Result<()> {
    analyse_knowing(index, threads, KNOWN_WORDS, take)
}

/// [`analyse`], each thread remembering at most `known_words` written words.
pub(super) fn analyse_knowing(
    index: &ChunkIndex,
    threads: usize,
    known_words: usize,
    mut take: impl FnMut(Analysed) -> Result<()>,
) -> Result<()> {
    let threads = threads.max(1);
    let blocks = index.len().div_ceil(ANALYSIS_BLOCK);
    let range = |block: usize| block * ANALYSIS_BLOCK..((block + 1) * ANALYSIS_BLOCK).min(index.len());
    if threads == 1 {
        let mut words = Words::new(index.analyzer(), 0, known_words);
        return (0..blocks).try_for_each(|block| take(words.block(index, range(block))?));
    }
    let start = |thread| {
        let mut words = Words::new(index.analyzer(), thread, known_words);
        move |block| words.block(index, range(block))
    };
    threads::blocks_in_order(blocks, threads, start, take, |panic| worker_lost(index.dir(), panic))
}

/// The error of an analysing thread that stopped without a block: it panicked with `panic`.
pub(super) fn worker_lost(dir: &Path, panic: &str) -> IndexError {
    scratch_error(dir, std::io::Error::other(format!("a thread analysing the chunks panicked: {panic}")))
}

/// One analysing thread's words: each distinct word analysed once, its term and written form
/// given this thread's own ids.
pub(super) struct Words<'a> {
    pub(super) analyzer: &'a Analyzer,
    pub(super) thread: usize,
    /// Word as written → (term, form), `None` for a word without a term; at most
    /// `known_most` of them.
    pub(super) known: HashMap<String, Option<(u32, u32)>>,
    pub(super) known_most: usize,
    pub(super) terms: HashMap<String, u32>,
    pub(super) forms: HashMap<String, u32>,
    /// Terms and forms met since the last block.
    pub(super) new_terms: Vec<String>,
    pub(super) new_forms: Vec<String>,
}

impl<'a> Words<'a> {
    pub(super) fn new(analyzer: &'a Analyzer, thread: usize, known_words: usize) -> Self {
        Self {
            analyzer,
            thread,
            known: HashMap::new(),
            known_most: known_words,
            terms: HashMap::new(),
            forms: HashMap::new(),
            new_terms: Vec::new(),
            new_forms: Vec::new(),
        }
    }

    /// The chunks at `positions`, analysed.
    pub(super) fn block(&mut self, index: &ChunkIndex, positions: Range<usize>) -> Result<Analysed> {
        let mut chunks = Vec::with_capacity(positions.len());
        let mut at: HashMap<(u32, u32), usize> = HashMap::new();
        for position in positions {
            let stored = index.stored(position)?;
            let mut pairs: Vec<(u32, u32, u32)> = Vec::new();
            at.clear();
            for text in [&stored.title, &stored.text] {
                for word in self.analyzer.words(text) {
                    let Some((term, form)) = self.word(word) else { continue };
                    match at.entry((term, form)) {
                        std::collections::hash_map::Entry::Occupied(e) => pairs[*e.get()].2 += 1,
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(pairs.len());
                            pairs.push((term, form, 1));
                        }
                    }
                }
            }
            chunks.push(pairs);
        }
        let terms = std::mem::take(&mut self.new_terms);
        let forms = std::mem::take(&mut self.new_forms);
        Ok(Analysed { thread: self.thread, terms, forms, chunks })
    }

    /// The term and written form (lower-cased) of `word`, as [`Analyzer::tokens`] makes
    /// them; `None` for a word without a term.
    pub(super) fn word(&mut self, word: &str) -> Option<(u32, u32)> {
        if let Some(&known) = self.known.get(word) {
            return known;
        }
        let ids = self.analyzer.term(word).map(|term| {
            let term = own_id(&mut self.terms, &mut self.new_terms, term);
            (term, own_id(&mut self.forms, &mut self.new_forms, word.to_lowercase()))
        });
        if self.known.len() >= self.known_most {
            // Cleared, not shrunk: the table keeps its size for the words to come.
            self.known.clear();
        }
        self.known.insert(word.to_owned(), ids);
        ids
    }
}

/// The id of `name` in `ids` (given in order of first use), a new one noted in `new`.
pub(super) fn own_id(ids: &mut HashMap<String, u32>, new: &mut Vec<String>, name: String) -> u32 {
    let next = ids.len() as u32;
    *ids.entry(name).or_insert_with_key(|name| {
        new.push(name.clone());
        next
    })
}

/// The most frequent form; ties go to the first in sort order.
pub(crate) fn most_common(forms: HashMap<String, u32>) -> String {
    let mut forms: Vec<(String, u32)> = forms.into_iter().collect();
    forms.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    forms.into_iter().next().map(|(form, _)| form).unwrap_or_default()
}
