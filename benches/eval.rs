//! Paired statistics at scale: `cargo bench --bench eval [-- QUERIES [RESAMPLES]]` (default
//! 10,000 queries, 10,000 resamples). Times the paired bootstrap interval, the randomization
//! test and randomized Tukey HSD over three systems on per-query scores in [0, 1].

use qrelgen::eval::stats;
use qrelgen::rng;
use rand::Rng;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1).filter_map(|a| a.parse::<usize>().ok());
    let queries = args.next().unwrap_or(10_000);
    let resamples = args.next().unwrap_or(10_000);
    let mut draw = rng::stream(1, "bench");
    let base: Vec<f64> = (0..queries).map(|_| draw.random::<f64>()).collect();
    let better: Vec<f64> = base.iter().map(|x| (x + draw.random_range(-0.1..0.12)).clamp(0.0, 1.0)).collect();
    let other: Vec<f64> = base.iter().map(|x| (x + draw.random_range(-0.1..0.1)).clamp(0.0, 1.0)).collect();
    let diffs = stats::differences(&better, &base);
    let time = |label: &str, f: &mut dyn FnMut() -> String| {
        let started = Instant::now();
        let result = f();
        println!("{label}: {:.3} s ({result})", started.elapsed().as_secs_f64());
    };
    time(&format!("paired bootstrap, {resamples} resamples, {queries} queries"), &mut || {
        let ci = stats::bootstrap_interval(&diffs, resamples, 0.05, &mut rng::stream(2, "bench"));
        format!("[{:.4}, {:.4}]", ci.low, ci.high)
    });
    time(&format!("randomization test, {resamples} resamples, {queries} queries"), &mut || {
        format!("p = {:.4}", stats::randomization_p(&diffs, resamples, &mut rng::stream(3, "bench")))
    });
    time(&format!("randomized Tukey HSD, 3 systems, {resamples} resamples, {queries} queries"), &mut || {
        let p = stats::tukey_hsd(&[&base, &better, &other], resamples, &mut rng::stream(4, "bench"));
        format!("p = {p:.4?}")
    });
}
