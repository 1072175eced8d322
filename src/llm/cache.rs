//! The reply cache: every successful reply is stored in SQLite before it is used, so a rerun
//! after a crash never pays twice for a call that already succeeded.

use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A stored reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedReply {
    /// The message content.
    pub content: String,
    /// Why generation stopped (`stop`, `length`, …).
    pub finish_reason: Option<String>,
    /// Prompt tokens, from the server's `usage`.
    pub prompt_tokens: u64,
    /// Completion tokens, from the server's `usage`.
    pub completion_tokens: u64,
    /// Attempts of this call abandoned on a timeout before this reply (the server may have
    /// billed them).
    pub abandoned: u64,
}

/// How a stored reply came: what it is priced at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// An online call.
    Online,
    /// A batch (at the batch price).
    Batch,
}

/// A cache file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("reply cache {path}: {source}")]
pub struct CacheError {
    path: PathBuf,
    #[source]
    source: rusqlite::Error,
}

/// The batch tables, made by [`Cache::open`] once per connection (the cache owns them;
/// `batch/records.rs` reads and writes them): the batches submitted or imported, the lines (cache keys)
/// of each, the replies that came through one (which [`Cache::get`] reads with each reply, for
/// the batch price), and the calls exported to a request file.
const BATCH_TABLES: &str = "
    CREATE TABLE IF NOT EXISTS batches (
        id TEXT PRIMARY KEY, stage TEXT NOT NULL, status TEXT NOT NULL,
        total INTEGER NOT NULL DEFAULT 0, completed INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0, imported INTEGER NOT NULL DEFAULT 0,
        created INTEGER NOT NULL DEFAULT 0, creator TEXT);
    CREATE TABLE IF NOT EXISTS batch_lines (batch TEXT NOT NULL, key TEXT NOT NULL,
        PRIMARY KEY (batch, key));
    CREATE INDEX IF NOT EXISTS batch_lines_key ON batch_lines (key);
    CREATE TABLE IF NOT EXISTS batch_replies (key TEXT PRIMARY KEY, batch TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS exported (key TEXT PRIMARY KEY, file TEXT NOT NULL);";

/// The cache, safe to share between tasks.
pub struct Cache {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl Cache {
    /// Opens (or creates) the cache at `path`.
    ///
    /// # Errors
    /// [`CacheError`] if the file cannot be opened or is not a qrelgen cache.
    pub fn open(path: &Path) -> Result<Self, CacheError> {
        let err = |source| CacheError { path: path.to_owned(), source };
        let conn = Connection::open(path).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(30)).map_err(err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS replies (
                 key TEXT PRIMARY KEY,
                 content TEXT NOT NULL,
                 finish_reason TEXT,
                 prompt_tokens INTEGER NOT NULL,
                 completion_tokens INTEGER NOT NULL,
                 abandoned INTEGER NOT NULL DEFAULT 0
             );",
        )
        .map_err(err)?;
        conn.execute_batch(BATCH_TABLES).map_err(err)?;
        // Caches written before a column existed get it (replies: 0 abandoned attempts; batch
        // records: no creator named).
        for (table, column, declaration) in
            [("replies", "abandoned", "INTEGER NOT NULL DEFAULT 0"), ("batches", "creator", "TEXT")]
        {
            add_missing_column(&conn, table, column, declaration).map_err(err)?;
        }
        Ok(Self { path: path.to_owned(), conn: Mutex::new(conn) })
    }

    /// Runs `query` on the connection.
    pub(super) fn with<T>(
        &self,
        query: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, CacheError> {
        let conn = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        query(&conn).map_err(|source| CacheError { path: self.path.clone(), source })
    }

    /// The reply stored under `key`, and how it came.
    ///
    /// # Errors
    /// [`CacheError`] when SQLite fails.
    pub fn get(&self, key: &str) -> Result<Option<(CachedReply, Via)>, CacheError> {
        let conn = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        conn.query_row(
            "SELECT content, finish_reason, prompt_tokens, completion_tokens, abandoned, \
             EXISTS (SELECT 1 FROM batch_replies WHERE batch_replies.key = replies.key) \
             FROM replies WHERE key = ?1",
            params![key],
            |row| {
                let reply = CachedReply {
                    content: row.get(0)?,
                    finish_reason: row.get(1)?,
                    prompt_tokens: row.get::<_, i64>(2)?.unsigned_abs(),
                    completion_tokens: row.get::<_, i64>(3)?.unsigned_abs(),
                    abandoned: row.get::<_, i64>(4)?.unsigned_abs(),
                };
                Ok((reply, if row.get::<_, bool>(5)? { Via::Batch } else { Via::Online }))
            },
        )
        .optional()
        .map_err(|source| CacheError { path: self.path.clone(), source })
    }

    /// Whether a reply is stored under `key` (an error is an error, never "no").
    ///
    /// # Errors
    /// [`CacheError`] when SQLite fails.
    pub fn contains(&self, key: &str) -> Result<bool, CacheError> {
        self.with(|c| {
            c.query_row("SELECT EXISTS (SELECT 1 FROM replies WHERE key = ?1)", params![key], |r| r.get(0))
        })
    }

    /// Stores a reply under `key` (durably, before it is used).
    ///
    /// # Errors
    /// [`CacheError`] when SQLite fails.
    pub fn put(&self, key: &str, reply: &CachedReply) -> Result<(), CacheError> {
        self.with(|c| insert_reply(c, key, reply))
    }
}

/// Writes a reply under `key` on `conn` (inside the caller's transaction, if any).
pub(super) fn insert_reply(conn: &Connection, key: &str, reply: &CachedReply) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT OR REPLACE INTO replies \
         (key, content, finish_reason, prompt_tokens, completion_tokens, abandoned) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            key,
            reply.content,
            reply.finish_reason,
            i64::try_from(reply.prompt_tokens).unwrap_or(i64::MAX),
            i64::try_from(reply.completion_tokens).unwrap_or(i64::MAX),
            i64::try_from(reply.abandoned).unwrap_or(i64::MAX)
        ],
    )
    .map(drop)
}

/// Adds `column` to `table` unless it has it.
fn add_missing_column(
    conn: &Connection,
    table: &str,
    column: &str,
    declaration: &str,
) -> rusqlite::Result<()> {
    let present: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
        params![table, column],
        |r| r.get(0),
    )?;
    if present == 0 {
        conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {declaration};"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.sqlite");
        let reply = CachedReply {
            content: "{\"queries\":[]}".into(),
            finish_reason: Some("stop".into()),
            prompt_tokens: 12,
            completion_tokens: 3,
            abandoned: 1,
        };
        {
            let cache = Cache::open(&path).unwrap();
            assert_eq!(cache.get("k").unwrap(), None);
            cache.put("k", &reply).unwrap();
        }
        let cache = Cache::open(&path).unwrap();
        assert_eq!(cache.get("k").unwrap(), Some((reply, Via::Online)));
    }

    #[test]
    fn a_cache_from_before_abandoned_counts_is_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.sqlite");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE replies (key TEXT PRIMARY KEY, content TEXT NOT NULL, finish_reason TEXT,
                   prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL);
                 INSERT INTO replies VALUES ('old', 'x', 'stop', 5, 6);",
            )
            .unwrap();
        }
        let cache = Cache::open(&path).unwrap();
        let old = cache.get("old").unwrap();
        assert_eq!(old.map(|(r, via)| (r.prompt_tokens, r.abandoned, via)), Some((5, 0, Via::Online)));
    }

    #[test]
    fn batch_records_from_before_their_creator_was_named_are_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.sqlite");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE batches (id TEXT PRIMARY KEY, stage TEXT NOT NULL, status TEXT NOT NULL,
                   total INTEGER NOT NULL DEFAULT 0, completed INTEGER NOT NULL DEFAULT 0,
                   failed INTEGER NOT NULL DEFAULT 0, imported INTEGER NOT NULL DEFAULT 0,
                   created INTEGER NOT NULL DEFAULT 0);
                 INSERT INTO batches (id, stage, status) VALUES ('file-1', 'generate', 'creating');",
            )
            .unwrap();
        }
        let cache = Cache::open(&path).unwrap();
        let creator =
            cache.with(|c| c.query_row("SELECT creator FROM batches", [], |r| r.get::<_, Option<String>>(0)));
        assert_eq!(creator.unwrap(), None, "an old record names no creator: it is waited for as before");
        assert_eq!(cache.batches().unwrap().len(), 1);
    }

    #[test]
    fn a_file_that_is_not_sqlite_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.sqlite");
        fs_err::write(&path, "not a database, just text that is long enough to be a header")
            .unwrap_or_default();
        assert!(Cache::open(&path).is_err());
    }
}
