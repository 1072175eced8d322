//! The topic space: one unit vector per chunk, stored in blocks of [`LANES`] chunks (in memory,
//! or past a size in a scratch file in the index folder), and the scans that find a chunk's
//! neighbours by cosine.

use super::Result;
use crate::index::{IndexError, read_at, write_at};
use crate::threads;
use std::ops::Range;
use std::path::Path;

/// Chunks whose vectors [`TopicSpace`] stores side by side: a block's cosines with one vector
/// are computed together, one lane per chunk (16 `f32`s: four SSE registers, two AVX ones).
pub(super) const LANES: usize = 16;

/// Below this many chunks [`TopicSpace::neighbours`] scans on one thread.
pub(super) const PARALLEL_SCAN: usize = 8_192;

/// Bytes of vectors a space with a scratch file keeps in memory before it writes them there
/// (about 168,000 chunks of 50 dimensions): a smaller space is scanned in memory, a larger one
/// from the file, which costs the scan a copy out of the page cache.
pub(super) const IN_MEMORY_BYTES: usize = 32 << 20;

/// Blocks a space with a scratch file writes there at a time once it spills, and reads at a
/// time when it scans (64 blocks of 50 dimensions: 200 KiB, within a core's cache).
pub(super) const SPILL_BLOCKS: usize = 64;

/// Candidates one scan of [`TopicSpace::neighbours_of`] may keep per thread, counted as each
/// probe's cap (at least 512, as `Best` keeps up to twice that): 64 probes of a small cap (about
/// 1 MiB a thread), fewer of a larger one, a probe of a cap above it alone.
pub(super) const SCAN_BUDGET: usize = 64 * 512;

/// Probes in one scan at most (when their caps are small).
#[cfg(test)]
pub(super) const PROBES_PER_SCAN: usize = SCAN_BUDGET / 512;

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
    pub(super) dim: usize,
    pub(super) chunks: usize,
    /// Blocks `spilled..`: block `b`, dimension `d`, lane `l` at
    /// `((b - spilled) * dim + d) * LANES + l`; the last block padded with zero vectors.
    pub(super) blocks: Vec<f32>,
    /// Blocks written to the scratch file (0 without one), in the same layout, little-endian.
    pub(super) spilled: usize,
    pub(super) scratch: Option<Scratch>,
    pub(super) threads: usize,
}

/// The scratch file of a [`TopicSpace`] (made when it first spills), and the folder it is in.
#[derive(Debug)]
pub(super) struct Scratch {
    pub(super) file: Option<std::fs::File>,
    pub(super) dir: std::path::PathBuf,
    /// Bytes of blocks kept in memory before the first are written to the file.
    pub(super) budget: usize,
}

/// A scan's buffers for blocks read from the scratch file.
#[derive(Default)]
pub(super) struct ReadBuffer {
    pub(super) bytes: Vec<u8>,
    pub(super) values: Vec<f32>,
}

impl TopicSpace {
    /// An empty space of `dim` dimensions for `capacity` chunks, held in memory, scanned with
    /// `threads` threads.
    pub(crate) fn empty(dim: usize, capacity: usize, threads: usize) -> Self {
        let blocks = Vec::with_capacity(capacity.div_ceil(LANES) * dim * LANES);
        Self { dim, blocks, threads: threads.max(1), ..Self::default() }
    }

    /// An empty space of `dim` dimensions that keeps its vectors in a scratch file in `dir`
    /// once they outgrow `IN_MEMORY_BYTES` (the file is made then), scanned with `threads`
    /// threads.
    pub(crate) fn in_folder(dim: usize, capacity: usize, threads: usize, dir: &Path) -> Self {
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
    pub(super) fn spilling_past(
        budget: usize,
        dim: usize,
        capacity: usize,
        threads: usize,
        dir: &Path,
    ) -> Self {
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
    pub(crate) fn push(&mut self, vector: &[f32]) -> Result<()> {
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
    pub(super) fn block_len(&self) -> usize {
        self.dim * LANES
    }

    /// Number of chunks.
    pub(crate) fn chunks(&self) -> usize {
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
    pub(crate) fn vector(&self, chunk: usize) -> Result<Vec<f32>> {
        if chunk >= self.chunks {
            return Ok(Vec::new());
        }
        let (block, lane) = (chunk / LANES, chunk % LANES);
        let mut buffer = ReadBuffer::default();
        let values = self.blocks(block..block + 1, &mut buffer)?;
        Ok((0..self.dim).map(|d| values[d * LANES + lane]).collect())
    }

    /// Blocks `range`, borrowed from memory or read into `buffer`.
    pub(super) fn blocks<'s>(&'s self, range: Range<usize>, buffer: &'s mut ReadBuffer) -> Result<&'s [f32]> {
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
    pub(crate) fn write_vectors(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
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
    pub(super) fn scan(&self, probes: &[Probe]) -> Result<Vec<Vec<(usize, f32)>>> {
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
pub(super) fn block_cosines(own: &[f32], columns: &[f32]) -> [f32; LANES] {
    let mut sums = [-0.0f32; LANES];
    for (&x, column) in own.iter().zip(columns.chunks_exact(LANES)) {
        for (sum, &y) in sums.iter_mut().zip(column) {
            *sum += x * y;
        }
    }
    sums
}

pub(super) fn scratch_error(dir: &Path, source: std::io::Error) -> IndexError {
    IndexError::Scratch { path: dir.to_owned(), source }
}

/// The order of neighbours: most similar first, ties by position.
pub(super) fn closer(a: &(usize, f32), b: &(usize, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// How many of `probes` (at least one, if any) go in the next scan: as many as fit in
/// `SCAN_BUDGET`, each counted by its cap, at least 512.
pub(super) fn scan_size(probes: &[Probe]) -> usize {
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
pub(super) struct Best {
    pub(super) cap: usize,
    pub(super) kept: Vec<(usize, f32)>,
    /// Once `cap` are kept: the cosine a later (higher) position must beat.
    pub(super) floor: Option<f32>,
}

impl Best {
    pub(super) fn new(cap: usize) -> Self {
        Self { cap, kept: Vec::new(), floor: None }
    }

    pub(super) fn offer(&mut self, chunk: usize, cosine: f32) {
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
    pub(super) fn shrink(&mut self) {
        if self.kept.len() > self.cap {
            self.kept.select_nth_unstable_by(self.cap - 1, closer);
            self.kept.truncate(self.cap);
            self.floor = self.kept.iter().map(|k| k.1).min_by(f32::total_cmp);
        }
    }

    pub(super) fn into_sorted(mut self) -> Vec<(usize, f32)> {
        self.shrink();
        self.kept.sort_by(closer);
        self.kept
    }
}

pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
