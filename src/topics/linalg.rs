//! The linear algebra of the fit: sparse rows times dense matrices, orthonormalization
//! (modified Gram–Schmidt), Gram matrices and the eigen decomposition of a small symmetric
//! matrix (Jacobi rotations), each in a fixed order of arithmetic.

/// A sparse row: (term, weight), by term.
pub(super) type Row = Vec<(u32, f64)>;

/// Sparse rows × a dense (vocabulary × width) matrix: rows.len() × width, row-major.
pub(super) fn times(rows: &[&Row], dense: &[f64], width: usize) -> Vec<f64> {
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
pub(super) fn orthonormalize(m: &mut [f64], width: usize, zero_rows: bool) {
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
pub(super) fn gram(b: &[f64], width: usize) -> Vec<f64> {
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
pub(super) fn symmetric_eigen(matrix: &[f64], size: usize) -> (Vec<f64>, Vec<f64>) {
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
pub(super) fn rotate_columns(m: &mut [f64], size: usize, (p, q): (usize, usize), (cos, sin): (f64, f64)) {
    for k in 0..size {
        let (kp, kq) = (m[k * size + p], m[k * size + q]);
        m[k * size + p] = cos * kp - sin * kq;
        m[k * size + q] = sin * kp + cos * kq;
    }
}

/// Rows `p` and `q` of a row-major square matrix, rotated likewise.
pub(super) fn rotate_rows(m: &mut [f64], size: usize, (p, q): (usize, usize), (cos, sin): (f64, f64)) {
    for k in 0..size {
        let (pk, qk) = (m[p * size + k], m[q * size + k]);
        m[p * size + k] = cos * pk - sin * qk;
        m[q * size + k] = sin * pk + cos * qk;
    }
}
