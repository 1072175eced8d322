//! qrelgen builds synthetic retrieval test sets: queries, relevance judgments (qrels) and a
//! review queue, from a corpus that has none.
//!
//! The pipeline, one module per stage: [`corpus`] → [`chunk`] → [`index`] → [`generate`] →
//! [`filter`] → [`sample`] → [`output`], run in order by [`build`]. Stages hand each other
//! the typed records of [`record`]. After the build, [`review`] takes the review queue to
//! annotators and their decisions back into new versions of the set; [`validate`] checks a set's
//! files; [`eval`] scores retrieval runs against a set. See `docs/ARCHITECTURE.md`.

pub mod build;
pub mod chunk;
mod codec;
pub mod config;
pub mod corpus;
pub mod dedup;
pub mod error;
pub mod eval;
pub mod filter;
pub mod generate;
pub mod html;
pub mod id;
pub mod index;
pub mod judge;
pub mod lines;
pub mod llm;
pub mod output;
pub mod pool;
pub mod progress;
pub mod record;
pub mod refresh;
pub mod review;
pub mod rng;
pub mod runs;
pub mod sample;
pub mod set;
#[cfg(test)]
mod testing;
pub mod text;
mod threads;
pub mod topics;
pub mod validate;

pub use config::BuildConfig;
pub use error::{Error, Result};
