//! The fit of the topic space: chunks' term counts weighted, a randomized truncated SVD of the
//! fit sample (Halko, Martinsson & Tropp 2011), the projection of every chunk into the space,
//! and the scratch file that holds every chunk's counts until the fit when the corpus is large.

use super::Result;
use super::linalg::{Row, gram, orthonormalize, symmetric_eigen, times};
use super::space::scratch_error;
use crate::index::IndexError;
use crate::rng::stream;
use crate::threads;
use rand::Rng as _;
use std::path::Path;

/// Extra random directions of the randomized SVD (Halko et al.: 5–10 suffice).
pub(super) const OVERSAMPLING: usize = 10;

/// Power iterations of the randomized SVD (sharpens the spectrum of slowly decaying text data).
pub(super) const POWER_ITERATIONS: usize = 2;

/// Chunks projected at a time (split over the threads), and read back at a time from a
/// [`RowFile`].
pub(super) const PROJECTION_BLOCK: usize = 4_096;

/// Every chunk's row of term counts, in chunk order, in an unnamed scratch file in the index
/// folder (disk and page cache, not the process's heap; about 3 bytes a term of a chunk): each
/// row its length, then each term as the difference from the one before and its count, all
/// LEB128 varints.
pub(super) struct RowFile {
    pub(super) out: std::io::BufWriter<std::fs::File>,
    pub(super) dir: std::path::PathBuf,
}

/// A [`RowFile`] read back from its start.
pub(super) struct RowReader {
    pub(super) input: std::io::BufReader<std::fs::File>,
    pub(super) dir: std::path::PathBuf,
}

impl RowFile {
    pub(super) fn create(dir: &Path) -> Result<Self> {
        let file = tempfile::tempfile_in(dir).map_err(|source| scratch_error(dir, source))?;
        Ok(Self { out: std::io::BufWriter::new(file), dir: dir.to_owned() })
    }

    pub(super) fn write(&mut self, row: &[(u32, u32)]) -> Result<()> {
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

    pub(super) fn read_back(self) -> Result<RowReader> {
        use std::io::Seek as _;
        let Self { out, dir } = self;
        let mut file = out.into_inner().map_err(|e| scratch_error(&dir, e.into_error()))?;
        file.rewind().map_err(|e| scratch_error(&dir, e))?;
        Ok(RowReader { input: std::io::BufReader::new(file), dir })
    }
}

impl RowReader {
    /// The next `most` rows (fewer at the end, none past it).
    pub(super) fn next_block(&mut self, most: usize) -> Result<Vec<Vec<(u32, u32)>>> {
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
    pub(super) fn varint(&mut self, may_end: bool) -> Result<Option<u32>> {
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
    pub(super) fn damaged(&self, what: &str) -> IndexError {
        scratch_error(&self.dir, std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned()))
    }
}

/// Appends `value` as an LEB128 varint.
pub(super) fn varint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A chunk's row of term counts weighted: log-scaled tf × smoothed idf over `n` chunks, of unit
/// length; terms in a single chunk are left out (they relate the chunk to no other). Weighted
/// one row at a time, so that only the fit sample is ever held weighted.
pub(super) fn weighted(row: &[(u32, u32)], df: &[u32], n: f64) -> Row {
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
pub(crate) struct Projection {
    pub(crate) dim: usize,
    pub(crate) v: Vec<f64>,
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
    pub(super) fn fit(
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
    pub(super) fn project_all(
        &self,
        rows: &[Vec<(u32, u32)>],
        df: &[u32],
        n: usize,
        threads: usize,
    ) -> Vec<Vec<f32>> {
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
    pub(crate) fn project(&self, row: &[(u32, u32)], df: &[u32], n: usize) -> Vec<f32> {
        let projected = times(&[&weighted(row, df, n as f64)], &self.v, self.dim);
        let norm = projected.iter().map(|x| x * x).sum::<f64>().sqrt();
        projected.iter().map(|x| if norm > 1e-12 { (x / norm) as f32 } else { 0.0 }).collect()
    }
}

/// The terms a weighted sample uses, ascending: the fit's rows.
pub(super) struct UsedTerms {
    pub(super) terms: Vec<u32>,
    /// Each vocabulary term's row among `terms` (`u32::MAX` for an unused one).
    pub(super) rows: Vec<u32>,
}

impl UsedTerms {
    pub(super) fn of(sample: &[Row], vocabulary: usize) -> Self {
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
    pub(super) fn compact(&self, row: Row) -> Row {
        row.into_iter().map(|(term, w)| (self.rows[term as usize], w)).collect()
    }

    /// The rows of the random test matrix Ω (vocabulary × `width` signs, one stream over the
    /// whole vocabulary) of the used terms.
    pub(super) fn omega(&self, width: usize) -> Vec<f64> {
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
pub(super) const PARALLEL_ROWS: usize = if cfg!(test) { 16 } else { 1_024 };

/// [`times`] split over `threads` threads by rows (each row's sums as on one).
pub(super) fn times_on(rows: &[&Row], dense: &[f64], width: usize, threads: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows.len() * width];
    threads::in_parts(&mut out, width, threads, 2 * PARALLEL_ROWS, |part, values| {
        values.copy_from_slice(&times(&rows[part], dense, width));
    });
    out
}

/// [`transposed_times`] split over `threads` threads by terms: each thread walks every row for
/// its own terms, so each term's sum runs over the rows in order, as on one thread.
pub(super) fn transposed_times_on(
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
