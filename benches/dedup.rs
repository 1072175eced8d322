//! Near-duplicate control at scale: `cargo bench --bench dedup [-- QUERIES]` (default 20,000).
//! Queries are 3–8 words from a 5,000-word vocabulary, one in ten a reworded copy of an earlier
//! one (a word swapped for another); prints the wall time and how many were caught.

use qrelgen::dedup::Dedup;
use qrelgen::id::QueryId;
use rand::{Rng, SeedableRng};
use std::time::Instant;

fn main() {
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let vocabulary: Vec<String> = (0..5_000).map(|i| format!("w{i}x")).collect();
    let mut queries: Vec<String> = Vec::with_capacity(n);
    for i in 0..n {
        if i > 0 && rng.random_bool(0.1) {
            let mut words: Vec<String> =
                queries[rng.random_range(0..i)].split(' ').map(str::to_owned).collect();
            words.push(vocabulary[rng.random_range(0..vocabulary.len())].clone());
            queries.push(words.join(" "));
        } else {
            let len = rng.random_range(3..=8);
            let words: Vec<&str> =
                (0..len).map(|_| vocabulary[rng.random_range(0..vocabulary.len())].as_str()).collect();
            queries.push(words.join(" "));
        }
    }
    let started = Instant::now();
    let mut dedup = Dedup::new(0.8);
    let caught = queries
        .iter()
        .enumerate()
        .filter(|(i, q)| dedup.check_and_keep(&QueryId::derive("direct", &[], &i.to_string()), q).is_some())
        .count();
    let elapsed = started.elapsed();
    println!(
        "dedup: {n} queries in {:.3} s ({:.0} queries/s), {caught} near-duplicates removed",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64()
    );
}
