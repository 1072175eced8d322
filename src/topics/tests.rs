//! The corpus model's tests: term statistics, the fitted space and its neighbours, the scratch
//! files, and the linear algebra.

use super::fit::*;
use super::linalg::*;
use super::space::*;
use super::terms::*;
use super::*;
use crate::index::{from_chunks, test_chunks};
use crate::rng::stream;
use foldhash::HashMapExt as _;
use rand::Rng as _;

/// The rows projected into the space fitted on every `step`-th of them (as
/// [`CorpusModel::build`] does in two passes): for tests.
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
                assert_eq!(bits(&got), bits(&expected), "{chunks} chunks, seed {seed}, {threads} threads");
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
) -> (Vec<String>, Vec<u32>, Vec<u64>, Vec<std::collections::BTreeMap<String, u32>>, Vec<Vec<(u32, u32)>>) {
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
    let words =
        ["Kidney", "kidneys", "infections", "INFECTION", "renal", "the", "of", "配额已满时", "暂停", "sync"];
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
            .map(|counted| counted.iter().map(|&(f, c)| (vocabulary.forms[f as usize].clone(), c)).collect())
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
fn plain_neighbours(vectors: &[f32], dim: usize, chunk: usize, min: f32, cap: usize) -> Vec<(usize, f32)> {
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
            assert!(most_held <= SPILL_BLOCKS * dim * LANES, "{most_held} values held, budget {budget:?}");
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
                let bits = |n: &[(usize, f32)]| n.iter().map(|&(c, x)| (c, x.to_bits())).collect::<Vec<_>>();
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
                [(f32::MIN, 3), (0.5, 51), (0.2, 0)].map(|(min_cosine, cap)| Probe { chunk, min_cosine, cap })
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
        assert!(written == expected, "vectors written chunk after chunk, threads {threads} {in_folder:?}");
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
