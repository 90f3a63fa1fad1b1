//! Changes of rows: LISTEN on the trigger's channel, and the stat of a
//! session row.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{db_error, hash64, not_found, time_of, PgStorage};
use crate::session::storage::FileStat;

/// Delivers the paths of changed rows (LISTEN on the trigger's channel)
/// until dropped.
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Closed when the thread ends.
    ended: std::sync::mpsc::Receiver<()>,
}

/// How long dropping a [`Listener`] waits for its thread, which may be
/// connecting again to a server that does not answer; after that the
/// thread is left to end on its own (the process may be exiting).
const STOP_WAIT: Duration = Duration::from_secs(2);

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The thread checks `stop` every 200 ms unless it is connecting.
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = self.ended.recv_timeout(STOP_WAIT)
        {
            log::warn!("PostgreSQL notifications: the listener is still connecting; not waiting");
            return;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl PgStorage {
    /// True when the prefix holds namespaces: session rows two levels
    /// below it (`<ns>/<project>/<file>.jsonl`) and none one level below
    /// (`<project>/<file>.jsonl`, which makes it a plain prefix).
    pub fn namespaced(&self) -> io::Result<bool> {
        let p = Self::dir_prefix(&self.inner.prefix);
        let from = i32::try_from(p.chars().count() + 1).unwrap_or(i32::MAX);
        let sql = format!(
            "SELECT coalesce(bool_or(d = 2), false), coalesce(bool_or(d = 3), false) FROM \
             (SELECT array_length(string_to_array(substr(path, $2), '/'), 1) AS d FROM {} \
             WHERE starts_with(path, $1) AND right(path, 6) = '.jsonl') x",
            self.inner.sql.files()
        );
        let row = self.with_client(|c| c.query_one(&sql, &[&p, &from]))?;
        let (projects, namespaces): (bool, bool) = (row.get(0), row.get(1));
        Ok(namespaces && !projects)
    }

    /// LISTENs on [`channel`](Self::channel) with a connection of its own
    /// and calls `on_change` with the file path of every row a
    /// notification names (rows outside the prefix are skipped). Nothing
    /// arrives until a trigger is installed (`sessionfs pg
    /// install-trigger`); a lost connection is made again.
    pub fn listen(&self, on_change: Box<dyn Fn(&Path) + Send>) -> io::Result<Listener> {
        use postgres::fallible_iterator::FallibleIterator;
        let listen = format!("LISTEN {}", self.channel());
        let mut client = self.new_client()?;
        client.batch_execute(&listen).map_err(db_error)?;
        let stop = Arc::new(AtomicBool::new(false));
        let storage = self.clone();
        let stopped = stop.clone();
        let (end_tx, ended) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("sessionfs-listen".into())
            .spawn(move || {
                // Dropped (closing `ended`) when the thread ends.
                let _end = end_tx;
                let mut client = Some(client);
                while !stopped.load(Ordering::Relaxed) {
                    let Some(c) = client.as_mut() else {
                        std::thread::sleep(Duration::from_secs(1));
                        client = storage
                            .new_client()
                            .ok()
                            .and_then(|mut c| c.batch_execute(&listen).ok().map(|()| c));
                        continue;
                    };
                    let mut lost = false;
                    {
                        let mut notes = c.notifications();
                        let mut it = notes.timeout_iter(Duration::from_millis(200));
                        loop {
                            match it.next() {
                                Ok(Some(n)) => {
                                    if let Some(path) = storage.path_of_row(n.payload()) {
                                        on_change(&path);
                                    }
                                }
                                Ok(None) => break,
                                Err(e) => {
                                    log::warn!("PostgreSQL notifications: {e}; connecting again");
                                    lost = true;
                                    break;
                                }
                            }
                        }
                    }
                    if lost {
                        client = None;
                    }
                }
            })?;
        Ok(Listener {
            stop,
            thread: Some(thread),
            ended,
        })
    }

    pub(super) fn stat_session(&self, path: &Path, key: &str) -> io::Result<FileStat> {
        if !self.is_root(key) {
            if let Some((size, mtime, identity)) = self.row_stat(key)? {
                // A mirror of another content (rewritten or shrunk) is
                // dropped.
                let stale = self.inner.mirrors.lock().get(key).is_some_and(|m| {
                    let mut m = m.lock();
                    let stale = m.len > size || m.identity.is_some_and(|i| i != identity);
                    m.identity = Some(identity);
                    stale
                });
                if stale {
                    self.forget_mirror(key);
                }
                return Ok(FileStat {
                    size,
                    mtime: time_of(mtime),
                    identity: (hash64(&key), identity),
                    is_dir: false,
                    is_file: true,
                    is_symlink: false,
                    owner: None,
                });
            }
        }
        let mtime = self.dir_mtime(key)?;
        if mtime.is_none() && !self.is_root(key) {
            return Err(not_found(path));
        }
        Ok(FileStat {
            size: 0,
            mtime: time_of(mtime.unwrap_or(0)),
            identity: (hash64(&key), 0),
            is_dir: true,
            is_file: false,
            is_symlink: false,
            owner: None,
        })
    }
}
