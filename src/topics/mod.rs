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

mod fold;

use crate::index::{Analyzer, ChunkIndex, IndexError, read_at, write_at};
use crate::rng::stream;
use crate::threads;
use foldhash::{HashMap, HashMapExt as _};
use rand::Rng as _;
use std::ops::Range;
use std::path::Path;

type Result<T> = std::result::Result<T, IndexError>;

/// Dimensions of the topic space: the 50–100 that LSA studies found best on small test
/// collections (Deerwester et al. 1990; Dumais 1991), at the low end so the space stays topical.
pub const DIMENSIONS: usize = 50;
/// Extra random directions of the randomized SVD (Halko et al.: 5–10 suffice).
const OVERSAMPLING: usize = 10;
/// Power iterations of the randomized SVD (sharpens the spectrum of slowly decaying text data).
const POWER_ITERATIONS: usize = 2;
/// At most this many chunks are used to fit the space; the rest are projected into it.
const FIT_SAMPLE: usize = 20_000;

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
    pub(super) chunks: usize,
    pub(super) usage: HashMap<String, TermUsage>,
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
fn residual_idf(df: f64, cf: f64, n: f64) -> f64 {
    if df <= 0.0 || n <= 0.0 {
        return 0.0;
    }
    let observed = -(df / n).log2();
    let poisson = -(1.0 - (-cf / n).exp()).log2();
    observed - poisson
}

/// Chunks whose vectors [`TopicSpace`] stores side by side: a block's cosines with one vector
/// are computed together, one lane per chunk (16 `f32`s: four SSE registers, two AVX ones).
const LANES: usize = 16;
/// Below this many chunks [`TopicSpace::neighbours`] scans on one thread.
const PARALLEL_SCAN: usize = 8_192;
/// Bytes of vectors a space with a scratch file keeps in memory before it writes them there
/// (about 168,000 chunks of 50 dimensions): a smaller space is scanned in memory, a larger one
/// from the file, which costs the scan a copy out of the page cache.
const IN_MEMORY_BYTES: usize = 32 << 20;
/// Blocks a space with a scratch file writes there at a time once it spills, and reads at a
/// time when it scans (64 blocks of 50 dimensions: 200 KiB, within a core's cache).
const SPILL_BLOCKS: usize = 64;
/// Candidates one scan of [`TopicSpace::neighbours_of`] may keep per thread, counted as each
/// probe's cap (at least 512, as `Best` keeps up to twice that): 64 probes of a small cap (about
/// 1 MiB a thread), fewer of a larger one, a probe of a cap above it alone.
const SCAN_BUDGET: usize = 64 * 512;
/// Probes in one scan at most (when their caps are small).
#[cfg(test)]
const PROBES_PER_SCAN: usize = SCAN_BUDGET / 512;

/// The chunks in a latent topic space: one unit vector per chunk (all zeros for a chunk with
/// no term shared with another chunk).
///
/// The vectors are stored in blocks of `LANES` chunks, dimension by dimension, so that a scan
/// computes sixteen cosines at once; each is summed dimension by dimension from -0.0, as
/// `Iterator::sum` does, so it has the same bits as the plain dot product.
///
/// A space made `TopicSpace::in_folder` that outgrows `IN_MEMORY_BYTES` keeps its blocks in
/// a scratch file there (unnamed, gone when the space is dropped) and only the last few in
/// memory: a scan reads the file a few blocks at a time, so the vectors sit in the kernel's page
/// cache, not in the process's memory (88 MB for 441,000 chunks).
#[derive(Debug, Default)]
pub struct TopicSpace {
    dim: usize,
    chunks: usize,
    /// Blocks `spilled..`: block `b`, dimension `d`, lane `l` at
    /// `((b - spilled) * dim + d) * LANES + l`; the last block padded with zero vectors.
    blocks: Vec<f32>,
    /// Blocks written to the scratch file (0 without one), in the same layout, little-endian.
    spilled: usize,
    scratch: Option<Scratch>,
    threads: usize,
}

/// The scratch file of a [`TopicSpace`] (made when it first spills), and the folder it is in.
#[derive(Debug)]
struct Scratch {
    file: Option<std::fs::File>,
    dir: std::path::PathBuf,
    /// Bytes of blocks kept in memory before the first are written to the file.
    budget: usize,
}

/// A scan's buffers for blocks read from the scratch file.
#[derive(Default)]
struct ReadBuffer {
    bytes: Vec<u8>,
    values: Vec<f32>,
}

impl TopicSpace {
    /// An empty space of `dim` dimensions for `capacity` chunks, held in memory, scanned with
    /// `threads` threads.
    pub(super) fn empty(dim: usize, capacity: usize, threads: usize) -> Self {
        let blocks = Vec::with_capacity(capacity.div_ceil(LANES) * dim * LANES);
        Self { dim, blocks, threads: threads.max(1), ..Self::default() }
    }

    /// An empty space of `dim` dimensions that keeps its vectors in a scratch file in `dir`
    /// once they outgrow `IN_MEMORY_BYTES` (the file is made then), scanned with `threads`
    /// threads.
    pub(super) fn in_folder(dim: usize, capacity: usize, threads: usize, dir: &Path) -> Self {
        if dim == 0 {
            // A corpus without a shared term has no topics: nothing to keep, nothing to spill.
            return Self::empty(dim, capacity, threads);
        }
        Self::spilling_past(IN_MEMORY_BYTES, dim, capacity, threads, dir)
    }

    /// [`TopicSpace::in_folder`], spilling once its blocks take `budget` bytes; a space whose
    /// `capacity` is past the budget spills from the start, `SPILL_BLOCKS` at a time (holding
    /// the budget first would only add it to the build's peak: all but the last blocks go to the
    /// file either way).
    fn spilling_past(budget: usize, dim: usize, capacity: usize, threads: usize, dir: &Path) -> Self {
        let whole = capacity.div_ceil(LANES) * dim * LANES;
        let budget = if whole * 4 > budget { budget.min(SPILL_BLOCKS * dim * LANES * 4) } else { budget };
        let held = whole.min((budget / 4).div_ceil(dim * LANES) * dim * LANES);
        let blocks = Vec::with_capacity(held);
        let scratch = Some(Scratch { file: None, dir: dir.to_owned(), budget });
        Self { dim, blocks, scratch, threads: threads.max(1), ..Self::default() }
    }

    /// Adds the next chunk's vector (`dim` values).
    ///
    /// # Errors
    /// [`IndexError::Scratch`] when the scratch file cannot be made or written.
    pub(super) fn push(&mut self, vector: &[f32]) -> Result<()> {
        let (block, lane) = (self.chunks / LANES, self.chunks % LANES);
        let width = self.block_len();
        if lane == 0 {
            let held = block - self.spilled;
            if let Some(scratch) = &mut self.scratch
                && held > 0
                && if self.spilled == 0 { held * width * 4 >= scratch.budget } else { held == SPILL_BLOCKS }
            {
                let file = match &mut scratch.file {
                    Some(file) => file,
                    None => scratch.file.insert(
                        tempfile::tempfile_in(&scratch.dir).map_err(|e| scratch_error(&scratch.dir, e))?,
                    ),
                };
                let bytes: Vec<u8> = self.blocks.iter().flat_map(|x| x.to_le_bytes()).collect();
                let offset = (self.spilled * width * 4) as u64;
                write_at(file, &bytes, offset).map_err(|e| scratch_error(&scratch.dir, e))?;
                self.spilled = block;
                // A new buffer: the first spill's held the whole budget.
                self.blocks = Vec::with_capacity(SPILL_BLOCKS * self.block_len());
            }
            self.blocks.resize(self.blocks.len() + self.block_len(), 0.0);
        }
        let local = block - self.spilled;
        for (d, &x) in vector.iter().enumerate() {
            self.blocks[(local * self.dim + d) * LANES + lane] = x;
        }
        self.chunks += 1;
        Ok(())
    }

    /// Values in a block.
    fn block_len(&self) -> usize {
        self.dim * LANES
    }

    /// Number of chunks.
    pub(super) fn chunks(&self) -> usize {
        self.chunks
    }

    /// Number of dimensions (fewer than `DIMENSIONS` for a tiny corpus).
    #[must_use]
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of chunks in the space.
    #[must_use]
    pub fn len(&self) -> usize {
        self.chunks
    }

    /// Whether the space holds no chunk.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.chunks == 0
    }

    /// Cosine similarity of two chunks in the space (0 with a chunk past the last: its vector
    /// is empty).
    ///
    /// # Errors
    /// [`IndexError::Scratch`] when the scratch file cannot be read.
    pub fn cosine(&self, a: usize, b: usize) -> Result<f32> {
        Ok(dot(&self.vector(a)?, &self.vector(b)?))
    }

    /// The vector of `chunk` (empty past the last chunk).
    ///
    /// # Errors
    /// [`IndexError::Scratch`] when the scratch file cannot be read.
    pub(super) fn vector(&self, chunk: usize) -> Result<Vec<f32>> {
        if chunk >= self.chunks {
            return Ok(Vec::new());
        }
        let (block, lane) = (chunk / LANES, chunk % LANES);
        let mut buffer = ReadBuffer::default();
        let values = self.blocks(block..block + 1, &mut buffer)?;
        Ok((0..self.dim).map(|d| values[d * LANES + lane]).collect())
    }

    /// Blocks `range`, borrowed from memory or read into `buffer`.
    fn blocks<'s>(&'s self, range: Range<usize>, buffer: &'s mut ReadBuffer) -> Result<&'s [f32]> {
        let width = self.block_len();
        let Some((scratch, file)) = self
            .scratch
            .as_ref()
            .and_then(|s| Some((s, s.file.as_ref()?)))
            .filter(|_| range.start < self.spilled)
        else {
            let local = range.start - self.spilled..range.end - self.spilled;
            return Ok(&self.blocks[local.start * width..local.end * width]);
        };
        let from_file = range.start..range.end.min(self.spilled);
        buffer.bytes.resize(from_file.len() * width * 4, 0);
        read_at(file, &mut buffer.bytes, (from_file.start * width * 4) as u64)
            .map_err(|e| scratch_error(&scratch.dir, e))?;
        let tail = range.end.saturating_sub(self.spilled) * width;
        buffer.values.resize(from_file.len() * width + tail, 0.0);
        let (read, held) = buffer.values.split_at_mut(from_file.len() * width);
        for (value, bytes) in read.iter_mut().zip(buffer.bytes.as_chunks::<4>().0) {
            *value = f32::from_le_bytes(*bytes);
        }
        held.copy_from_slice(&self.blocks[..tail]);
        Ok(&buffer.values)
    }

    /// Writes every chunk's vector, chunk after chunk, each value little-endian (the corpus
    /// model file's layout).
    pub(super) fn write_vectors(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        if self.dim == 0 {
            return Ok(());
        }
        let blocks = self.chunks.div_ceil(LANES);
        let mut buffer = ReadBuffer::default();
        for from in (0..blocks).step_by(SPILL_BLOCKS) {
            let values =
                self.blocks(from..(from + SPILL_BLOCKS).min(blocks), &mut buffer).map_err(|e| match e {
                    IndexError::Scratch { source, .. } => source,
                    other => std::io::Error::other(other),
                })?;
            for (block, columns) in values.chunks_exact(self.block_len()).enumerate() {
                for lane in 0..LANES.min(self.chunks - (from + block) * LANES) {
                    for d in 0..self.dim {
                        out.write_all(&columns[d * LANES + lane].to_le_bytes())?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The chunks whose cosine with `chunk` is at least `min_cosine`, most similar first (ties
    /// by position), at most `cap`, `chunk` itself left out.
    ///
    /// An exact scan of every chunk, sixteen at a time and split over the space's threads, each
    /// keeping only its best `cap` as it goes.
    ///
    /// # Errors
    /// [`IndexError::Scratch`] when the scratch file cannot be read.
    pub fn neighbours(&self, chunk: usize, min_cosine: f32, cap: usize) -> Result<Vec<(usize, f32)>> {
        let mut found = self.neighbours_of(&[Probe { chunk, min_cosine, cap }])?;
        Ok(found.pop().unwrap_or_default())
    }

    /// [`TopicSpace::neighbours`] of each probe, the same chunks and bits, in order: one scan
    /// reads each block of the space (from the scratch file, when it spilled) once for a group
    /// of probes whose caps (at least 512 each) add up to `SCAN_BUDGET` at most (one probe
    /// alone when its cap is larger), which bounds what a scan keeps whatever `--topic-labels`.
    ///
    /// # Errors
    /// [`IndexError::Scratch`] when the scratch file cannot be read.
    pub fn neighbours_of(&self, probes: &[Probe]) -> Result<Vec<Vec<(usize, f32)>>> {
        let mut found = Vec::with_capacity(probes.len());
        let mut rest = probes;
        while !rest.is_empty() {
            let (group, after) = rest.split_at(scan_size(rest));
            found.extend(self.scan(group)?);
            rest = after;
        }
        Ok(found)
    }

    /// One scan of the space for `probes`.
    fn scan(&self, probes: &[Probe]) -> Result<Vec<Vec<(usize, f32)>>> {
        let mut found = vec![Vec::new(); probes.len()];
        // The probes that can have neighbours, with their own vectors.
        let mut active: Vec<(usize, Vec<f32>)> = Vec::new();
        for (at, probe) in probes.iter().enumerate() {
            let own = self.vector(probe.chunk)?;
            if probe.cap > 0 && own.iter().any(|&x| x != 0.0) {
                active.push((at, own));
            }
        }
        if active.is_empty() {
            return Ok(found);
        }
        let blocks = self.chunks.div_ceil(LANES);
        let threads = if self.chunks < PARALLEL_SCAN { 1 } else { self.threads };
        let per_thread = blocks.div_ceil(threads);
        let active = &active;
        let part = |from: usize| -> Result<Vec<Vec<(usize, f32)>>> {
            let mut best: Vec<Best> = active.iter().map(|&(at, _)| Best::new(probes[at].cap)).collect();
            let mut buffer = ReadBuffer::default();
            let to = (from + per_thread).min(blocks);
            for start in (from..to).step_by(SPILL_BLOCKS) {
                let end = (start + SPILL_BLOCKS).min(to);
                let values = self.blocks(start..end, &mut buffer)?;
                for (block, columns) in (start..end).zip(values.chunks_exact(self.block_len())) {
                    for ((at, own), best) in active.iter().zip(&mut best) {
                        let Probe { chunk, min_cosine, .. } = probes[*at];
                        for (lane, &cosine) in block_cosines(own, columns).iter().enumerate() {
                            let other = block * LANES + lane;
                            if other != chunk && other < self.chunks && cosine >= min_cosine {
                                best.offer(other, cosine);
                            }
                        }
                    }
                }
            }
            Ok(best.into_iter().map(Best::into_sorted).collect())
        };
        let parts: Vec<Vec<Vec<(usize, f32)>>> = if threads == 1 {
            vec![part(0)?]
        } else {
            std::thread::scope(|scope| {
                let parts: Vec<_> = (0..blocks)
                    .step_by(per_thread.max(1))
                    .map(|from| scope.spawn(move || part(from)))
                    .collect();
                parts.into_iter().map(threads::join).collect::<Result<Vec<_>>>()
            })?
        };
        for (i, &(at, _)) in active.iter().enumerate() {
            let mut near: Vec<(usize, f32)> = parts.iter().flat_map(|p| p[i].iter().copied()).collect();
            near.sort_by(closer);
            near.truncate(probes[at].cap);
            found[at] = near;
        }
        Ok(found)
    }
}

/// What [`TopicSpace::neighbours_of`] looks for: the chunks whose cosine with `chunk` is at
/// least `min_cosine`, at most `cap`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    /// The chunk whose neighbours are wanted.
    pub chunk: usize,
    /// The lowest cosine a neighbour may have.
    pub min_cosine: f32,
    /// The most neighbours wanted.
    pub cap: usize,
}

/// The cosines of `own` with the sixteen chunks of a block (`columns`, dimension by dimension).
fn block_cosines(own: &[f32], columns: &[f32]) -> [f32; LANES] {
    let mut sums = [-0.0f32; LANES];
    for (&x, column) in own.iter().zip(columns.chunks_exact(LANES)) {
        for (sum, &y) in sums.iter_mut().zip(column) {
            *sum += x * y;
        }
    }
    sums
}

fn scratch_error(dir: &Path, source: std::io::Error) -> IndexError {
    IndexError::Scratch { path: dir.to_owned(), source }
}

/// The order of neighbours: most similar first, ties by position.
fn closer(a: &(usize, f32), b: &(usize, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// How many of `probes` (at least one, if any) go in the next scan: as many as fit in
/// `SCAN_BUDGET`, each counted by its cap, at least 512.
fn scan_size(probes: &[Probe]) -> usize {
    let mut spent = 0usize;
    let fit = probes
        .iter()
        .take_while(|probe| {
            spent = spent.saturating_add(probe.cap.max(512));
            spent <= SCAN_BUDGET
        })
        .count();
    fit.max(1).min(probes.len())
}

/// The best `cap` neighbours offered so far, offered in ascending position.
struct Best {
    cap: usize,
    kept: Vec<(usize, f32)>,
    /// Once `cap` are kept: the cosine a later (higher) position must beat.
    floor: Option<f32>,
}

impl Best {
    fn new(cap: usize) -> Self {
        Self { cap, kept: Vec::new(), floor: None }
    }

    fn offer(&mut self, chunk: usize, cosine: f32) {
        // Positions only grow, so a cosine equal to the floor loses to the one kept.
        if self.floor.is_some_and(|floor| cosine.total_cmp(&floor).is_le()) {
            return;
        }
        self.kept.push((chunk, cosine));
        if self.kept.len() >= 2 * self.cap.max(512) {
            self.shrink();
        }
    }

    /// Keeps the best `cap` and raises the floor to the worst of them.
    fn shrink(&mut self) {
        if self.kept.len() > self.cap {
            self.kept.select_nth_unstable_by(self.cap - 1, closer);
            self.kept.truncate(self.cap);
            self.floor = self.kept.iter().map(|k| k.1).min_by(f32::total_cmp);
        }
    }

    fn into_sorted(mut self) -> Vec<(usize, f32)> {
        self.shrink();
        self.kept.sort_by(closer);
        self.kept
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

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

/// Chunks projected at a time (split over the threads), and read back at a time from a
/// [`RowFile`].
const PROJECTION_BLOCK: usize = 4_096;

/// Every chunk's row of term counts, in chunk order, in an unnamed scratch file in the index
/// folder (disk and page cache, not the process's heap; about 3 bytes a term of a chunk): each
/// row its length, then each term as the difference from the one before and its count, all
/// LEB128 varints.
struct RowFile {
    out: std::io::BufWriter<std::fs::File>,
    dir: std::path::PathBuf,
}

/// A [`RowFile`] read back from its start.
struct RowReader {
    input: std::io::BufReader<std::fs::File>,
    dir: std::path::PathBuf,
}

impl RowFile {
    fn create(dir: &Path) -> Result<Self> {
        let file = tempfile::tempfile_in(dir).map_err(|source| scratch_error(dir, source))?;
        Ok(Self { out: std::io::BufWriter::new(file), dir: dir.to_owned() })
    }

    fn write(&mut self, row: &[(u32, u32)]) -> Result<()> {
        let mut bytes = Vec::with_capacity(4 + row.len() * 3);
        varint(&mut bytes, row.len() as u32);
        let mut last = 0;
        for &(term, count) in row {
            varint(&mut bytes, term - last);
            varint(&mut bytes, count);
            last = term;
        }
        std::io::Write::write_all(&mut self.out, &bytes).map_err(|e| scratch_error(&self.dir, e))
    }

    fn read_back(self) -> Result<RowReader> {
        use std::io::Seek as _;
        let Self { out, dir } = self;
        let mut file = out.into_inner().map_err(|e| scratch_error(&dir, e.into_error()))?;
        file.rewind().map_err(|e| scratch_error(&dir, e))?;
        Ok(RowReader { input: std::io::BufReader::new(file), dir })
    }
}

impl RowReader {
    /// The next `most` rows (fewer at the end, none past it).
    fn next_block(&mut self, most: usize) -> Result<Vec<Vec<(u32, u32)>>> {
        let mut rows = Vec::new();
        while rows.len() < most {
            let Some(len) = self.varint(true)? else { break };
            let mut row = Vec::with_capacity((len as usize).min(4_096));
            let mut term = 0u32;
            for _ in 0..len {
                let step = self.varint(false)?.unwrap_or_default();
                term = term.checked_add(step).ok_or_else(|| self.damaged("a term id past u32"))?;
                row.push((term, self.varint(false)?.unwrap_or_default()));
            }
            rows.push(row);
        }
        Ok(rows)
    }

    /// The next varint; `None` at the end of the file where `may_end`.
    fn varint(&mut self, may_end: bool) -> Result<Option<u32>> {
        use std::io::Read as _;
        let (mut value, mut shift) = (0u32, 0);
        loop {
            let mut byte = [0u8];
            match self.input.read_exact(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && may_end && shift == 0 => {
                    return Ok(None);
                }
                Err(e) => return Err(scratch_error(&self.dir, e)),
                Ok(()) => {}
            }
            value |= u32::from(byte[0] & 0x7f) << shift;
            if byte[0] & 0x80 == 0 {
                return Ok(Some(value));
            }
            shift += 7;
            if shift >= u32::BITS {
                return Err(self.damaged("a number longer than 5 bytes"));
            }
        }
    }

    /// The error for a scratch file that does not hold what was written.
    fn damaged(&self, what: &str) -> IndexError {
        scratch_error(&self.dir, std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned()))
    }
}

/// Appends `value` as an LEB128 varint.
fn varint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The terms met so far: ids in order of first use, written forms, document and collection
/// frequencies; and what each analysing thread's own ids of terms and forms stand for.
#[derive(Default)]
struct Vocabulary {
    ids: HashMap<String, u32>,
    names: Vec<String>,
    /// Written forms, in order of first use, and their ids.
    forms: Vec<String>,
    form_ids: HashMap<String, u32>,
    /// Per term: (form, occurrences), in order of first use.
    surfaces: Vec<Vec<(u32, u32)>>,
    df: Vec<u32>,
    cf: Vec<u64>,
    /// Per analysing thread: its term and form ids' ids here (`u32::MAX`: a term not yet met
    /// in chunk order), and the names of its terms (each emptied once its term has an id here).
    threads: Vec<ThreadIds>,
}

#[derive(Default)]
struct ThreadIds {
    terms: Vec<u32>,
    names: Vec<String>,
    forms: Vec<u32>,
}

impl Vocabulary {
    /// Counts the chunks of one analysed block, in order: their rows of (term, count), by
    /// term. A term's id is given where it is first used, chunk after chunk, word after word,
    /// as counting the tokens one by one would.
    fn count(&mut self, block: Analysed) -> Vec<Vec<(u32, u32)>> {
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
pub(super) fn sorted(counts: HashMap<u32, u32>) -> Vec<(u32, u32)> {
    let mut row: Vec<(u32, u32)> = counts.into_iter().collect();
    row.sort_unstable();
    row
}

/// Chunks a thread of [`analyse`] reads and analyses at a time.
const ANALYSIS_BLOCK: usize = 256;
/// Written words an analysing thread remembers at most (about 2 MB a thread; a corpus of
/// technical English writes over 100,000): past it, it forgets them all and analyses each word
/// again when it comes back (its term and form keep their ids).
const KNOWN_WORDS: usize = 1 << 15;

/// One block of chunks analysed by one thread, in that thread's own ids: the terms and written
/// forms it met first in this block (their ids follow on from its earlier blocks'), and each
/// chunk's (term, form, occurrences) in order of first occurrence.
struct Analysed {
    thread: usize,
    terms: Vec<String>,
    forms: Vec<String>,
    chunks: Vec<Vec<(u32, u32, u32)>>,
}

/// Reads and analyses every chunk's title and text, on `threads` threads a block at a time
/// (block `b` on thread `b % threads`), and hands the blocks to `take` in chunk order (so that
/// only a few blocks are held at once).
fn analyse(index: &ChunkIndex, threads: usize, take: impl FnMut(Analysed) -> Result<()>) -> Result<()> {
    analyse_knowing(index, threads, KNOWN_WORDS, take)
}

/// [`analyse`], each thread remembering at most `known_words` written words.
fn analyse_knowing(
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
fn worker_lost(dir: &Path, panic: &str) -> IndexError {
    scratch_error(dir, std::io::Error::other(format!("a thread analysing the chunks panicked: {panic}")))
}

/// One analysing thread's words: each distinct word analysed once, its term and written form
/// given this thread's own ids.
struct Words<'a> {
    analyzer: &'a Analyzer,
    thread: usize,
    /// Word as written → (term, form), `None` for a word without a term; at most
    /// `known_most` of them.
    known: HashMap<String, Option<(u32, u32)>>,
    known_most: usize,
    terms: HashMap<String, u32>,
    forms: HashMap<String, u32>,
    /// Terms and forms met since the last block.
    new_terms: Vec<String>,
    new_forms: Vec<String>,
}

impl<'a> Words<'a> {
    fn new(analyzer: &'a Analyzer, thread: usize, known_words: usize) -> Self {
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
    fn block(&mut self, index: &ChunkIndex, positions: Range<usize>) -> Result<Analysed> {
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
    fn word(&mut self, word: &str) -> Option<(u32, u32)> {
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
fn own_id(ids: &mut HashMap<String, u32>, new: &mut Vec<String>, name: String) -> u32 {
    let next = ids.len() as u32;
    *ids.entry(name).or_insert_with_key(|name| {
        new.push(name.clone());
        next
    })
}

/// The most frequent form; ties go to the first in sort order.
pub(super) fn most_common(forms: HashMap<String, u32>) -> String {
    let mut forms: Vec<(String, u32)> = forms.into_iter().collect();
    forms.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    forms.into_iter().next().map(|(form, _)| form).unwrap_or_default()
}

/// A sparse row: (term, weight), by term.
type Row = Vec<(u32, f64)>;

/// A chunk's row of term counts weighted: log-scaled tf × smoothed idf over `n` chunks, of unit
/// length; terms in a single chunk are left out (they relate the chunk to no other). Weighted
/// one row at a time, so that only the fit sample is ever held weighted.
fn weighted(row: &[(u32, u32)], df: &[u32], n: f64) -> Row {
    let mut weighted: Row = row
        .iter()
        .filter(|(term, _)| df[*term as usize] >= 2)
        .map(|&(term, tf)| {
            let idf = ((1.0 + n) / (1.0 + f64::from(df[term as usize]))).ln() + 1.0;
            (term, (1.0 + f64::from(tf).ln()) * idf)
        })
        .collect();
    let norm = weighted.iter().map(|(_, w)| w * w).sum::<f64>().sqrt();
    if norm > 0.0 {
        for (_, w) in &mut weighted {
            *w /= norm;
        }
    }
    weighted
}

/// The map from weighted term counts to the topic space: the top right singular vectors of the
/// matrix of a sample of the rows (a randomized truncated SVD), vocabulary × `dim`, row-major.
#[derive(Debug)]
pub(super) struct Projection {
    pub(super) dim: usize,
    pub(super) v: Vec<f64>,
}

impl Projection {
    /// Fits the top `wanted` singular vectors of `sample` (term counts of chunks of a corpus of
    /// `n`, weighted by [`weighted`]) on `threads` threads; `None` when the sample spans nothing.
    ///
    /// Only the terms the weighted sample uses have nonzero rows in Aᵀ Y and B (fewer than half
    /// the vocabulary: a term in one chunk, or in no sampled chunk, has none), so the fit works
    /// on those rows alone, in term order, and its results are the whole vocabulary's bit for
    /// bit (see [`orthonormalize`]; the zero rows of V are filled in as the whole arithmetic makes
    /// them). Each product is split over the threads by rows, each value summed in the same order.
    fn fit(
        sample: &[Vec<(u32, u32)>],
        df: &[u32],
        n: usize,
        vocabulary: usize,
        wanted: usize,
        threads: usize,
    ) -> Option<Self> {
        let sample: Vec<Row> = sample.iter().map(|row| weighted(row, df, n as f64)).collect();
        let width = (wanted + OVERSAMPLING).min(sample.len()).min(vocabulary);
        if width == 0 {
            return None;
        }
        let used = UsedTerms::of(&sample, vocabulary);
        let terms = used.terms.len();
        let b = {
            let fit: Vec<Row> = sample.into_iter().map(|row| used.compact(row)).collect();
            let fit: Vec<&Row> = fit.iter().collect();
            let zero_rows = terms < vocabulary;
            // Y = A Ω, then power iterations Y = A (Aᵀ Y), orthonormalized in between.
            let mut y = times_on(&fit, &used.omega(width), width, threads);
            for _ in 0..POWER_ITERATIONS {
                orthonormalize(&mut y, width, false);
                let mut z = transposed_times_on(&fit, &y, terms, width, threads);
                orthonormalize(&mut z, width, zero_rows);
                y = times_on(&fit, &z, width, threads);
            }
            orthonormalize(&mut y, width, false);
            // B = Qᵀ A (stored transposed, terms × width); the sample and Q go with this block,
            // before V is made.
            transposed_times_on(&fit, &y, terms, width, threads)
        };
        // B Bᵀ = W Λ Wᵀ; V = Bᵀ W Λ^-½.
        let (values, vectors) = symmetric_eigen(&gram(&b, width), width);
        let top = values.first().copied().unwrap_or(0.0);
        let kept: Vec<usize> =
            (0..width.min(wanted)).filter(|&c| values[c] > top * 1e-12 && values[c] > 0.0).collect();
        let dim = kept.len();
        if dim == 0 {
            // No term shared by two chunks: a space without dimensions.
            return Some(Self { dim, v: Vec::new() });
        }
        // A row of V from a row of B (a zero row of B gives the same row for every unused term).
        let v_row = |bt: &[f64], out: &mut [f64]| {
            for (k, &c) in kept.iter().enumerate() {
                let sigma = values[c].sqrt();
                out[k] = (0..width).map(|a| bt[a] * vectors[a * width + c]).sum::<f64>() / sigma;
            }
        };
        let mut unused = vec![0.0; dim];
        v_row(&vec![0.0; width], &mut unused);
        // Filled row by row over the whole vocabulary (no compact copy beside it).
        let mut v = vec![0.0; vocabulary * dim];
        threads::in_parts(&mut v, dim, threads, 2 * PARALLEL_ROWS, |rows, out| {
            for (t, target) in rows.zip(out.chunks_exact_mut(dim)) {
                match used.rows[t] {
                    u32::MAX => target.copy_from_slice(&unused),
                    row => v_row(&b[row as usize * width..(row as usize + 1) * width], target),
                }
            }
        });
        Some(Self { dim, v })
    }

    /// [`Projection::project`] of each of `rows`, in order, split over `threads` threads.
    fn project_all(&self, rows: &[Vec<(u32, u32)>], df: &[u32], n: usize, threads: usize) -> Vec<Vec<f32>> {
        let per_thread = rows.len().div_ceil(threads.max(1)).max(1);
        if threads <= 1 || rows.len() < 2 * PARALLEL_ROWS {
            return rows.iter().map(|row| self.project(row, df, n)).collect();
        }
        std::thread::scope(|scope| {
            let parts: Vec<_> = rows
                .chunks(per_thread)
                .map(|part| {
                    scope.spawn(move || part.iter().map(|row| self.project(row, df, n)).collect::<Vec<_>>())
                })
                .collect();
            parts.into_iter().flat_map(threads::join).collect()
        })
    }

    /// A chunk's row of term counts, weighted, projected and of unit length (all zeros when it
    /// projects to nothing).
    pub(super) fn project(&self, row: &[(u32, u32)], df: &[u32], n: usize) -> Vec<f32> {
        let projected = times(&[&weighted(row, df, n as f64)], &self.v, self.dim);
        let norm = projected.iter().map(|x| x * x).sum::<f64>().sqrt();
        projected.iter().map(|x| if norm > 1e-12 { (x / norm) as f32 } else { 0.0 }).collect()
    }
}

/// The terms a weighted sample uses, ascending: the fit's rows.
struct UsedTerms {
    terms: Vec<u32>,
    /// Each vocabulary term's row among `terms` (`u32::MAX` for an unused one).
    rows: Vec<u32>,
}

impl UsedTerms {
    fn of(sample: &[Row], vocabulary: usize) -> Self {
        let mut rows = vec![u32::MAX; vocabulary];
        sample.iter().flatten().for_each(|&(term, _)| rows[term as usize] = 0);
        let mut terms = Vec::new();
        for (term, row) in rows.iter_mut().enumerate() {
            if *row == 0 {
                *row = terms.len() as u32;
                terms.push(term as u32);
            }
        }
        Self { terms, rows }
    }

    /// `row` with each term replaced by its row (the order stays: rows follow term order).
    fn compact(&self, row: Row) -> Row {
        row.into_iter().map(|(term, w)| (self.rows[term as usize], w)).collect()
    }

    /// The rows of the random test matrix Ω (vocabulary × `width` signs, one stream over the
    /// whole vocabulary) of the used terms.
    fn omega(&self, width: usize) -> Vec<f64> {
        let mut rng = stream(0, "topics/omega");
        let mut omega = Vec::with_capacity(self.terms.len() * width);
        for &row in &self.rows {
            for _ in 0..width {
                let sign = if rng.random::<bool>() { 1.0 } else { -1.0 };
                if row != u32::MAX {
                    omega.push(sign);
                }
            }
        }
        omega
    }
}

/// Below twice this many rows a product is not split over threads (fewer in tests, so that
/// small ones are split).
const PARALLEL_ROWS: usize = if cfg!(test) { 16 } else { 1_024 };

/// [`times`] split over `threads` threads by rows (each row's sums as on one).
fn times_on(rows: &[&Row], dense: &[f64], width: usize, threads: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows.len() * width];
    threads::in_parts(&mut out, width, threads, 2 * PARALLEL_ROWS, |part, values| {
        values.copy_from_slice(&times(&rows[part], dense, width));
    });
    out
}

/// [`transposed_times`] split over `threads` threads by terms: each thread walks every row for
/// its own terms, so each term's sum runs over the rows in order, as on one thread.
fn transposed_times_on(
    rows: &[&Row],
    dense: &[f64],
    vocabulary: usize,
    width: usize,
    threads: usize,
) -> Vec<f64> {
    let mut out = vec![0.0; vocabulary * width];
    threads::in_parts(&mut out, width, threads, 2 * PARALLEL_ROWS, |terms, values| {
        let (from, to) = (terms.start as u32, terms.end as u32);
        for (i, row) in rows.iter().enumerate() {
            let source = &dense[i * width..(i + 1) * width];
            let start = row.partition_point(|&(term, _)| term < from);
            for &(term, w) in row[start..].iter().take_while(|&&(term, _)| term < to) {
                let at = (term - from) as usize * width;
                values[at..at + width].iter_mut().zip(source).for_each(|(t, s)| *t += w * s);
            }
        }
    });
    out
}

/// The rows projected into the space fitted on every `step`-th of them (as
/// [`CorpusModel::build`] does in two passes): for tests.
#[cfg(test)]
fn topic_space(rows: &[Vec<(u32, u32)>], df: &[u32], vocabulary: usize, wanted: usize) -> TopicSpace {
    let step = rows.len().div_ceil(FIT_SAMPLE).max(1);
    let sample: Vec<Vec<(u32, u32)>> = rows.iter().step_by(step).cloned().collect();
    let Some(projection) = Projection::fit(&sample, df, rows.len(), vocabulary, wanted, 1) else {
        return TopicSpace::default();
    };
    let mut space = TopicSpace::empty(projection.dim, rows.len(), 1);
    for row in rows {
        space.push(&projection.project(row, df, rows.len())).unwrap();
    }
    space
}

/// Sparse rows × a dense (vocabulary × width) matrix: rows.len() × width, row-major.
fn times(rows: &[&Row], dense: &[f64], width: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows.len() * width];
    for (i, row) in rows.iter().enumerate() {
        let target = &mut out[i * width..(i + 1) * width];
        for &(term, w) in *row {
            let source = &dense[term as usize * width..(term as usize + 1) * width];
            target.iter_mut().zip(source).for_each(|(t, s)| *t += w * s);
        }
    }
    out
}

/// Makes the columns of a row-major (n × width) matrix orthonormal (modified Gram–Schmidt,
/// twice for stability, on the columns copied out contiguously); a column that depends on the
/// earlier ones becomes zero.
///
/// `zero_rows`: `m` is the nonzero rows of a taller matrix whose other rows are +0.0 (they stay
/// so, and each adds a +0.0 to a column product). Adding +0.0 to a sum changes it only from -0.0
/// to +0.0, so each product then gets one `+ 0.0`, and the result is the taller matrix's
/// nonzero rows bit for bit.
fn orthonormalize(m: &mut [f64], width: usize, zero_rows: bool) {
    let n = m.len() / width.max(1);
    let mut columns: Vec<Vec<f64>> =
        (0..width).map(|j| (0..n).map(|row| m[row * width + j]).collect()).collect();
    for j in 0..width {
        let (done, rest) = columns.split_at_mut(j);
        let column = &mut rest[0];
        for _ in 0..2 {
            for earlier in done.iter() {
                let mut r: f64 = earlier.iter().zip(column.iter()).map(|(a, b)| a * b).sum();
                if zero_rows {
                    r += 0.0;
                }
                column.iter_mut().zip(earlier).for_each(|(c, e)| *c -= r * e);
            }
        }
        let norm = column.iter().map(|x| x * x).sum::<f64>().sqrt();
        let scale = if norm > 1e-10 { 1.0 / norm } else { 0.0 };
        for x in column.iter_mut() {
            *x *= scale;
        }
    }
    for (j, column) in columns.iter().enumerate() {
        for (row, x) in column.iter().enumerate() {
            m[row * width + j] = *x;
        }
    }
}

/// Bᵀ B of a row-major (vocabulary × width) matrix: width × width.
fn gram(b: &[f64], width: usize) -> Vec<f64> {
    let mut g = vec![0.0; width * width];
    for row in b.chunks_exact(width) {
        for a in 0..width {
            for c in a..width {
                g[a * width + c] += row[a] * row[c];
            }
        }
    }
    for a in 0..width {
        for c in 0..a {
            g[a * width + c] = g[c * width + a];
        }
    }
    g
}

/// Eigenvalues (descending) and eigenvectors (columns of a row-major matrix, in the same
/// order) of a symmetric matrix, by cyclic Jacobi rotations.
fn symmetric_eigen(matrix: &[f64], size: usize) -> (Vec<f64>, Vec<f64>) {
    let mut work = matrix.to_vec();
    let mut rotations = vec![0.0; size * size];
    (0..size).for_each(|i| rotations[i * size + i] = 1.0);
    let scale: f64 = work.iter().map(|x| x * x).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
    for _ in 0..100 {
        let off: f64 = (0..size)
            .flat_map(|p| (0..size).filter(move |&q| q != p).map(move |q| (p, q)))
            .map(|(p, q)| work[p * size + q].powi(2))
            .sum();
        if off.sqrt() <= 1e-13 * scale {
            break;
        }
        for p in 0..size {
            for q in p + 1..size {
                let apq = work[p * size + q];
                if apq.abs() <= f64::MIN_POSITIVE {
                    continue;
                }
                let theta = (work[q * size + q] - work[p * size + p]) / (2.0 * apq);
                let direction = if theta >= 0.0 { 1.0 } else { -1.0 };
                let tan = direction / (theta.abs() + theta.mul_add(theta, 1.0).sqrt());
                let cos = 1.0 / tan.mul_add(tan, 1.0).sqrt();
                let sin = tan * cos;
                rotate_columns(&mut work, size, (p, q), (cos, sin));
                rotate_rows(&mut work, size, (p, q), (cos, sin));
                rotate_columns(&mut rotations, size, (p, q), (cos, sin));
            }
        }
    }
    let mut order: Vec<usize> = (0..size).collect();
    order.sort_by(|&x, &y| work[y * size + y].total_cmp(&work[x * size + x]).then(x.cmp(&y)));
    let values = order.iter().map(|&i| work[i * size + i]).collect();
    let mut vectors = vec![0.0; size * size];
    for (new, &old) in order.iter().enumerate() {
        (0..size).for_each(|k| vectors[k * size + new] = rotations[k * size + old]);
    }
    (values, vectors)
}

/// Columns `p` and `q` of a row-major square matrix, rotated by the angle with this cosine and
/// sine.
fn rotate_columns(m: &mut [f64], size: usize, (p, q): (usize, usize), (cos, sin): (f64, f64)) {
    for k in 0..size {
        let (kp, kq) = (m[k * size + p], m[k * size + q]);
        m[k * size + p] = cos * kp - sin * kq;
        m[k * size + q] = sin * kp + cos * kq;
    }
}

/// Rows `p` and `q` of a row-major square matrix, rotated likewise.
fn rotate_rows(m: &mut [f64], size: usize, (p, q): (usize, usize), (cos, sin): (f64, f64)) {
    for k in 0..size {
        let (pk, qk) = (m[p * size + k], m[q * size + k]);
        m[p * size + k] = cos * pk - sin * qk;
        m[q * size + k] = sin * pk + cos * qk;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{from_chunks, test_chunks};

    #[test]
    fn residual_idf_is_low_for_evenly_spread_terms_and_high_for_bursty_ones() {
        // 100 chunks, 50 occurrences. A Poisson with mean 0.5 puts a word in 39 % of the
        // chunks (IDF 1.3456 bits): spread over 50 chunks the word is even less concentrated
        // (IDF 1, residual −0.3456); packed into 5 chunks it is bursty (IDF 4.3219, residual
        // 2.9763).
        let spread = residual_idf(50.0, 50.0, 100.0);
        let bursty = residual_idf(5.0, 50.0, 100.0);
        assert!((spread + 0.3456).abs() < 1e-3, "{spread}");
        assert!((bursty - 2.9763).abs() < 1e-3, "{bursty}");
        assert!(residual_idf(0.0, 0.0, 100.0).abs() < f64::EPSILON);
    }

    /// Transposed sparse rows × a dense (rows × width) matrix: vocabulary × width, row-major.
    fn transposed_times(rows: &[&Row], dense: &[f64], vocabulary: usize, width: usize) -> Vec<f64> {
        let mut out = vec![0.0; vocabulary * width];
        for (i, row) in rows.iter().enumerate() {
            let source = &dense[i * width..(i + 1) * width];
            for &(term, w) in *row {
                let target = &mut out[term as usize * width..(term as usize + 1) * width];
                target.iter_mut().zip(source).for_each(|(t, s)| *t += w * s);
            }
        }
        out
    }

    /// The fit as it ran over the whole vocabulary, on one thread (the reference).
    fn fit_over_the_whole_vocabulary(
        sample: &[Vec<(u32, u32)>],
        df: &[u32],
        n: usize,
        vocabulary: usize,
        wanted: usize,
    ) -> Option<Projection> {
        let sample: Vec<Row> = sample.iter().map(|row| weighted(row, df, n as f64)).collect();
        let fit: Vec<&Row> = sample.iter().collect();
        let width = (wanted + OVERSAMPLING).min(fit.len()).min(vocabulary);
        if width == 0 {
            return None;
        }
        let mut rng = stream(0, "topics/omega");
        let omega: Vec<f64> =
            (0..vocabulary * width).map(|_| if rng.random::<bool>() { 1.0 } else { -1.0 }).collect();
        let mut y = times(&fit, &omega, width);
        for _ in 0..POWER_ITERATIONS {
            orthonormalize(&mut y, width, false);
            let mut z = transposed_times(&fit, &y, vocabulary, width);
            orthonormalize(&mut z, width, false);
            y = times(&fit, &z, width);
        }
        orthonormalize(&mut y, width, false);
        let b = transposed_times(&fit, &y, vocabulary, width);
        let (values, vectors) = symmetric_eigen(&gram(&b, width), width);
        let top = values.first().copied().unwrap_or(0.0);
        let kept: Vec<usize> =
            (0..width.min(wanted)).filter(|&c| values[c] > top * 1e-12 && values[c] > 0.0).collect();
        let dim = kept.len();
        let mut v = vec![0.0; vocabulary * dim];
        for t in 0..vocabulary {
            let bt = &b[t * width..(t + 1) * width];
            for (k, &c) in kept.iter().enumerate() {
                let sigma = values[c].sqrt();
                v[t * dim + k] = (0..width).map(|a| bt[a] * vectors[a * width + c]).sum::<f64>() / sigma;
            }
        }
        Some(Projection { dim, v })
    }

    /// Random sparse count rows over `vocabulary` terms, Zipf-like (many terms in one chunk or
    /// none), and their document frequencies.
    fn random_rows(chunks: usize, vocabulary: u32, seed: u64) -> (Vec<Vec<(u32, u32)>>, Vec<u32>) {
        let mut rng = stream(seed, "topics/test-rows");
        let mut df = vec![0; vocabulary as usize];
        let rows: Vec<Vec<(u32, u32)>> = (0..chunks)
            .map(|_| {
                let mut counts: HashMap<u32, u32> = HashMap::new();
                for _ in 0..rng.random_range(0..12) {
                    let rank: f64 = rng.random_range(0.0..1.0);
                    let term = (f64::from(vocabulary).powf(rank) as u32).min(vocabulary - 1);
                    *counts.entry(term).or_default() += 1;
                }
                let row = sorted(counts);
                for &(term, _) in &row {
                    df[term as usize] += 1;
                }
                row
            })
            .collect();
        (rows, df)
    }

    #[test]
    fn the_fit_on_the_used_terms_is_the_whole_vocabularys_bit_for_bit_on_any_threads() {
        // Samples from tiny (more directions than the rank: dependent columns, exact zeros) to
        // past the threads' split, with most of the vocabulary unused or in one chunk.
        for (chunks, vocabulary, wanted) in
            [(3, 5, 50), (6, 8, 2), (40, 30, 50), (300, 2_000, 50), (3_000, 20_000, 50)]
        {
            for seed in 0..3 {
                let (rows, df) = random_rows(chunks, vocabulary, seed);
                let n = chunks * 3;
                let expected = fit_over_the_whole_vocabulary(&rows, &df, n, vocabulary as usize, wanted);
                for threads in [1, 2, 3] {
                    let got = Projection::fit(&rows, &df, n, vocabulary as usize, wanted, threads);
                    let bits = |p: &Option<Projection>| {
                        p.as_ref().map(|p| (p.dim, p.v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()))
                    };
                    assert_eq!(
                        bits(&got),
                        bits(&expected),
                        "{chunks} chunks, seed {seed}, {threads} threads"
                    );
                }
                if chunks > 100 {
                    let used = UsedTerms::of(
                        &rows.iter().map(|r| weighted(r, &df, n as f64)).collect::<Vec<_>>(),
                        vocabulary as usize,
                    );
                    assert!(
                        2 * used.terms.len() < vocabulary as usize,
                        "most rows are zero: {}",
                        used.terms.len()
                    );
                }
            }
        }
    }

    #[test]
    fn a_sample_without_a_shared_term_fits_a_space_without_dimensions() {
        // Every term in one chunk only: no weight survives, so no direction either.
        let rows = vec![vec![(0, 1)], vec![(1, 2)], vec![(2, 1)]];
        let df = vec![1, 1, 1];
        let expected = fit_over_the_whole_vocabulary(&rows, &df, 3, 3, 50).map(|p| (p.dim, p.v.len()));
        assert_eq!(expected, Some((0, 0)));
        for threads in [1, 2] {
            let got = Projection::fit(&rows, &df, 3, 3, 50, threads).map(|p| (p.dim, p.v.len()));
            assert_eq!(got, expected, "{threads} threads");
        }
    }

    #[test]
    fn a_damaged_row_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        for bytes in
            [&[1u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01][..], &[2, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 1, 1][..]]
        {
            let mut file = RowFile::create(dir.path()).unwrap();
            std::io::Write::write_all(&mut file.out, bytes).unwrap();
            let mut rows = file.read_back().unwrap();
            let err = rows.next_block(10).unwrap_err();
            assert!(
                matches!(&err, IndexError::Scratch { source, .. } if source.kind() == std::io::ErrorKind::InvalidData),
                "{err}"
            );
        }
    }

    /// The counting the corpus pass did before: token after token, each analysed in full.
    #[allow(clippy::type_complexity)]
    fn token_by_token(
        index: &ChunkIndex,
    ) -> (Vec<String>, Vec<u32>, Vec<u64>, Vec<std::collections::BTreeMap<String, u32>>, Vec<Vec<(u32, u32)>>)
    {
        let (mut ids, mut names, mut df, mut cf) = (HashMap::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut surfaces, mut rows) = (Vec::new(), Vec::new());
        for position in 0..index.len() {
            let stored = index.stored(position).unwrap();
            let mut counts: HashMap<u32, u32> = HashMap::new();
            for token in index.analyzer().chunk_tokens(&stored.title, &stored.text) {
                let id = *ids.entry(token.term.clone()).or_insert_with(|| {
                    names.push(token.term.clone());
                    surfaces.push(std::collections::BTreeMap::new());
                    df.push(0);
                    cf.push(0);
                    names.len() as u32 - 1
                });
                *counts.entry(id).or_default() += 1;
                *surfaces[id as usize].entry(token.surface).or_default() += 1;
            }
            let row = sorted(counts);
            for &(term, tf) in &row {
                df[term as usize] += 1;
                cf[term as usize] += u64::from(tf);
            }
            rows.push(row);
        }
        (names, df, cf, surfaces, rows)
    }

    #[test]
    fn each_word_analysed_once_per_thread_counts_as_token_by_token_on_any_threads() {
        // 700 chunks (three blocks) with titles, repeated words in several forms and cases,
        // stop words and words without a term, and Chinese.
        let words = [
            "Kidney",
            "kidneys",
            "infections",
            "INFECTION",
            "renal",
            "the",
            "of",
            "配额已满时",
            "暂停",
            "sync",
        ];
        let texts: Vec<String> = (0..700)
            .map(|c| (0..=c % 13).map(|w| words[(c * 7 + w * w) % words.len()]).collect::<Vec<_>>().join(" "))
            .map(|t| format!("{t} word{} tail{}", t.len() % 9, t.len() % 4))
            .collect();
        let mut chunks = test_chunks(&texts.iter().map(String::as_str).collect::<Vec<_>>());
        chunks.iter_mut().step_by(3).for_each(|c| c.title = format!("Renal Syncing {}", c.text.len() % 5));
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = from_chunks(dir.path(), &chunks);
        let expected = token_by_token(&index);
        // Each thread remembering a word or two only (forgetting all every few words), or all.
        for (threads, known_words) in [1, 2, 3].into_iter().flat_map(|t| [(t, 1), (t, 3), (t, KNOWN_WORDS)]) {
            let mut vocabulary = Vocabulary::default();
            let (mut rows, mut from_threads) = (Vec::new(), std::collections::BTreeSet::new());
            analyse_knowing(&index, threads, known_words, |block| {
                from_threads.insert(block.thread);
                rows.extend(vocabulary.count(block));
                Ok(())
            })
            .unwrap();
            assert_eq!(from_threads.len(), threads, "blocks analysed on every thread");
            let surfaces: Vec<std::collections::BTreeMap<String, u32>> = vocabulary
                .surfaces
                .iter()
                .map(|counted| {
                    counted.iter().map(|&(f, c)| (vocabulary.forms[f as usize].clone(), c)).collect()
                })
                .collect();
            let got = (vocabulary.names, vocabulary.df, vocabulary.cf, surfaces, rows);
            assert_eq!(got, expected, "{threads} threads, {known_words} words known");
        }
    }

    #[test]
    fn a_thread_remembers_at_most_its_bound_of_written_words_and_analyses_the_same() {
        // 900 distinct written words (300 chunks of three), most of them met once.
        let texts: Vec<String> =
            (0..300).map(|c| format!("Kidney{c} renal{} RENAL{} the sync{c}", c % 7, c % 7)).collect();
        let dir = tempfile::tempdir().unwrap();
        let (index, _) =
            from_chunks(dir.path(), &test_chunks(&texts.iter().map(String::as_str).collect::<Vec<_>>()));
        let analysed = |known_words| {
            let mut words = Words::new(index.analyzer(), 0, known_words);
            let Analysed { terms, forms, chunks, .. } = words.block(&index, 0..index.len()).unwrap();
            ((terms, forms, chunks), words.known.len())
        };
        let (all, remembered) = analysed(usize::MAX);
        assert!(remembered > 600, "{remembered} words remembered without a bound");
        for known_words in [1, 5, 100] {
            let (got, remembered) = analysed(known_words);
            assert!(remembered <= known_words, "{remembered} words remembered, bound {known_words}");
            assert_eq!(got, all, "bound {known_words}");
        }
    }

    #[test]
    fn rows_read_back_from_the_scratch_file_are_the_rows_written() {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<Vec<(u32, u32)>> = (0..1_000u32)
            .map(|c| (0..c % 7).map(|k| (k * 300_007 + c, 1 + (c * k) % 200_000)).collect())
            .chain([vec![(u32::MAX - 1, u32::MAX)], vec![]])
            .collect();
        let mut file = RowFile::create(dir.path()).unwrap();
        for row in &rows {
            file.write(row).unwrap();
        }
        let mut read = file.read_back().unwrap();
        let mut back = Vec::new();
        loop {
            let block = read.next_block(300).unwrap();
            if block.is_empty() {
                break;
            }
            assert!(block.len() == 300 || back.len() + block.len() == rows.len(), "blocks of 300");
            back.extend(block);
        }
        assert_eq!(back, rows);
    }

    #[test]
    fn jacobi_finds_the_eigenpairs_of_a_small_symmetric_matrix() {
        // [[2, 1], [1, 2]]: eigenvalues 3 and 1, eigenvectors (1, 1)/√2 and (1, −1)/√2.
        let (values, vectors) = symmetric_eigen(&[2.0, 1.0, 1.0, 2.0], 2);
        assert!((values[0] - 3.0).abs() < 1e-12 && (values[1] - 1.0).abs() < 1e-12, "{values:?}");
        let half = std::f64::consts::FRAC_1_SQRT_2;
        assert!((vectors[0].abs() - half).abs() < 1e-12 && (vectors[2].abs() - half).abs() < 1e-12);
        assert!((vectors[0] * vectors[2]) > 0.0, "first eigenvector has equal signs: {vectors:?}");
    }

    #[test]
    fn orthonormalize_makes_unit_orthogonal_columns() {
        let mut m = vec![3.0, 1.0, 4.0, 1.0, 0.0, 2.0];
        orthonormalize(&mut m, 2, false);
        let col = |j: usize| [m[j], m[2 + j], m[4 + j]];
        let (a, b) = (col(0), col(1));
        let d = |x: [f64; 3], y: [f64; 3]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
        assert!((d(a, a) - 1.0).abs() < 1e-12 && (d(b, b) - 1.0).abs() < 1e-12 && d(a, b).abs() < 1e-12);
    }

    #[test]
    fn chunks_on_one_topic_are_close_even_without_a_shared_word() {
        // Terms 0–3 are one topic, 4–7 another. Chunks 0 and 2 share no term, but chunk 1
        // links their words: two dimensions put them together and apart from the other topic.
        let raw: [&[(u32, u32)]; 6] = [
            &[(0, 1), (1, 1)],
            &[(0, 1), (1, 1), (2, 1), (3, 1)],
            &[(2, 1), (3, 1)],
            &[(4, 1), (5, 1)],
            &[(4, 1), (5, 1), (6, 1), (7, 1)],
            &[(6, 1), (7, 1)],
        ];
        let rows: Vec<Vec<(u32, u32)>> = raw.iter().map(|r| r.to_vec()).collect();
        let space = topic_space(&rows, &[2; 8], 8, 2);
        assert_eq!(space.dim(), 2);
        let cosine = |a, b| space.cosine(a, b).unwrap();
        assert!(cosine(0, 2) > 0.9, "{}", cosine(0, 2));
        assert!(cosine(0, 3).abs() < 0.1, "{}", cosine(0, 3));
        let near: Vec<usize> = space.neighbours(0, 0.5, 10).unwrap().into_iter().map(|(c, _)| c).collect();
        assert_eq!(near, [1, 2]);
        assert_eq!(space.neighbours(0, 0.5, 1).unwrap().len(), 1, "capped");
    }

    /// The neighbours by a plain scan: every chunk's dot product, filtered, sorted, capped.
    fn plain_neighbours(
        vectors: &[f32],
        dim: usize,
        chunk: usize,
        min: f32,
        cap: usize,
    ) -> Vec<(usize, f32)> {
        let own = &vectors[chunk * dim..(chunk + 1) * dim];
        if own.iter().all(|&x| x == 0.0) {
            return Vec::new();
        }
        let mut near: Vec<(usize, f32)> = vectors
            .chunks_exact(dim)
            .enumerate()
            .filter(|&(other, _)| other != chunk)
            .map(|(other, v)| (other, dot(own, v)))
            .filter(|&(_, cosine)| cosine >= min)
            .collect();
        near.sort_by(closer);
        near.truncate(cap);
        near
    }

    #[test]
    fn a_space_without_dimensions_in_a_folder_is_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut space = TopicSpace::in_folder(0, 3, 2, dir.path());
        space.push(&[]).unwrap();
        assert_eq!((space.dim(), space.chunks()), (0, 1));
        assert!(space.neighbours(0, 0.5, 3).unwrap().is_empty());
        let mut written = Vec::new();
        space.write_vectors(&mut written).unwrap();
        assert!(written.is_empty(), "no values to write");
    }

    #[test]
    fn the_blocked_scan_finds_what_a_plain_scan_finds_bit_for_bit() {
        // 9,000 chunks (past the parallel threshold, and many spilled blocks of a space in a
        // folder) of 7 dimensions, a third of them copies of a few vectors (ties far longer
        // than any cap) and some all zeros.
        let dim = 7;
        let mut rng = stream(3, "topics/test");
        let mut vectors = Vec::new();
        for chunk in 0..9_000 {
            let v: Vec<f32> = match chunk % 3 {
                0 => (0..dim).map(|d| [0.5, -0.25, 0.125][(chunk / 3 + d) % 3]).collect(),
                _ if chunk % 97 == 0 => vec![0.0; dim],
                _ => (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect(),
            };
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            vectors.extend(v.iter().map(|x| if norm > 0.0 { x / norm } else { 0.0 }));
        }
        let dir = tempfile::tempdir().unwrap();
        // Held in memory; in a folder, spilling at once, after 100 blocks, and never.
        let block_bytes = dim * LANES * 4;
        let spaces = [None, Some(0), Some(100 * block_bytes), Some(IN_MEMORY_BYTES)];
        for (threads, budget) in [1, 2, 3].into_iter().flat_map(|t| spaces.map(|b| (t, b))) {
            let mut space = match budget {
                None => TopicSpace::empty(dim, 9_000, threads),
                Some(budget) => TopicSpace::spilling_past(budget, dim, 9_000, threads, dir.path()),
            };
            let mut most_held = 0;
            for v in vectors.chunks_exact(dim) {
                space.push(v).unwrap();
                most_held = most_held.max(space.blocks.len());
            }
            let spills = budget.is_some_and(|b| b < IN_MEMORY_BYTES);
            if spills {
                // Past its budget, a space never holds more than one spill's blocks.
                assert!(
                    most_held <= SPILL_BLOCKS * dim * LANES,
                    "{most_held} values held, budget {budget:?}"
                );
            }
            assert_eq!(space.spilled > 0, spills, "budget {budget:?}");
            // The scratch file is made when the space first spills, not before.
            let made = space.scratch.as_ref().is_some_and(|s| s.file.is_some());
            assert_eq!(made, spills, "scratch file, budget {budget:?}");
            if spills {
                assert!(space.blocks.capacity() <= SPILL_BLOCKS * dim * LANES, "only the last blocks held");
            }
            let in_folder = budget;
            for chunk in [0, 1, 2, 97, 4_500, 8_999] {
                for (min, cap) in [(f32::MIN, 3), (0.5, 51), (0.9, 2_000), (-1.0, 10_000), (0.2, 0)] {
                    let expected = plain_neighbours(&vectors, dim, chunk, min, cap);
                    let got = space.neighbours(chunk, min, cap).unwrap();
                    let bits =
                        |n: &[(usize, f32)]| n.iter().map(|&(c, x)| (c, x.to_bits())).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&expected),
                        "threads {threads} in folder {in_folder:?} chunk {chunk} min {min} cap {cap}"
                    );
                }
            }
            // Many probes in one call (more than one scan's worth, repeats and an empty cap
            // among them) find what each finds alone.
            let probes: Vec<Probe> = (0..9_000)
                .step_by(97)
                .flat_map(|chunk| {
                    [(f32::MIN, 3), (0.5, 51), (0.2, 0)].map(|(min_cosine, cap)| Probe {
                        chunk,
                        min_cosine,
                        cap,
                    })
                })
                .chain([Probe { chunk: 3, min_cosine: 0.9, cap: 2_000 }; 2])
                .chain([Probe { chunk: 5, min_cosine: -1.0, cap: 100_000 }])
                .chain([Probe { chunk: 8, min_cosine: 0.5, cap: 51 }])
                .collect();
            assert!(probes.len() > 2 * PROBES_PER_SCAN);
            let together = space.neighbours_of(&probes).unwrap();
            assert_eq!(together.len(), probes.len());
            for (probe, got) in probes.iter().zip(&together) {
                let expected = plain_neighbours(&vectors, dim, probe.chunk, probe.min_cosine, probe.cap);
                let bits = |n: &[(usize, f32)]| n.iter().map(|&(c, x)| (c, x.to_bits())).collect::<Vec<_>>();
                assert_eq!(bits(got), bits(&expected), "threads {threads} {in_folder:?} {probe:?}");
            }
            let cosine = space.cosine(3, 6).unwrap();
            assert_eq!(cosine.to_bits(), dot(&vectors[21..28], &vectors[42..49]).to_bits());
            let mut written = Vec::new();
            space.write_vectors(&mut written).unwrap();
            let expected: Vec<u8> = vectors.iter().flat_map(|x| x.to_le_bytes()).collect();
            assert!(
                written == expected,
                "vectors written chunk after chunk, threads {threads} {in_folder:?}"
            );
        }
    }

    #[test]
    fn a_scan_takes_probes_up_to_a_budget_of_their_caps() {
        let probes = |caps: &[usize]| -> Vec<Probe> {
            caps.iter().map(|&cap| Probe { chunk: 0, min_cosine: 0.0, cap }).collect()
        };
        assert_eq!(scan_size(&probes(&[3; 100])), PROBES_PER_SCAN, "small caps count as 512");
        assert_eq!(scan_size(&probes(&[100_000, 3, 3])), 1, "a huge cap is scanned alone");
        assert_eq!(scan_size(&probes(&[3, 3, 100_000])), 2, "and not with the probes before it");
        assert_eq!(scan_size(&probes(&[8_192; 10])), 4);
        assert_eq!(scan_size(&probes(&[0])), 1);
        assert_eq!(scan_size(&[]), 0);
    }

    #[test]
    fn the_corpus_pass_counts_terms_and_their_written_forms() {
        let texts = ["Kidney infections", "kidney infection and renal infections", "guitar"];
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = from_chunks(dir.path(), &test_chunks(&texts));
        let model = CorpusModel::build(&index).unwrap();
        assert_eq!(model.terms.chunks(), 3);
        let infection = model.terms.usage("infect").cloned();
        assert_eq!(infection, Some(TermUsage { df: 2, cf: 3, surface: "infections".into() }));
        assert_eq!(model.terms.usage("kidney").map(|u| (u.df, u.cf)), Some((2, 2)));
        assert!(model.terms.usage("and").is_none(), "stop words are not terms");
        assert!(
            model.space.neighbours(2, 0.1, 5).unwrap().is_empty(),
            "a chunk sharing no term has no neighbour"
        );
    }

    #[test]
    fn the_common_written_form_wins() {
        let mut forms = HashMap::new();
        forms.insert("infections".to_owned(), 3);
        forms.insert("infection".to_owned(), 5);
        forms.insert("infect".to_owned(), 5);
        assert_eq!(most_common(forms), "infect");
    }
}
