//! The index's own errors: tantivy's, and the folder's. The crate's [`crate::Error`] wraps them
//! whole, so the index never reaches up for it.

use std::path::PathBuf;

/// A failure of the index in `path`; the underlying error is kept as the source.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// tantivy failed.
    #[error("search index in {path}")]
    Tantivy {
        /// The index folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: tantivy::TantivyError,
    },
    /// The index on disk does not hold the chunks it was built for.
    #[error(
        "search index in {path}: the index does not hold the {chunks} chunks it was built for; delete {path} and rerun"
    )]
    Mismatch {
        /// The index folder.
        path: PathBuf,
        /// The chunks it should hold.
        chunks: usize,
    },
    /// The index folder (or its fingerprint file) cannot be written.
    #[error("cannot write {path}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The topic space's scratch file in the index folder cannot be made, written or read.
    #[error("cannot use the topic space's scratch file in {path}")]
    Scratch {
        /// The index folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Shorthand for results with [`IndexError`].
pub type Result<T, E = IndexError> = std::result::Result<T, E>;
