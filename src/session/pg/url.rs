//! The `--storage postgres://…` URL and its parameters.

use std::fmt;

use super::DEFAULT_TABLE;

/// How session content is laid out in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One row per file, the reference's schema.
    Rows,
    /// One row per append in `<table>_chunks` (not readable by the
    /// reference).
    Chunks,
}

/// A parsed `--storage postgres://…` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    /// The connection string without our own parameters.
    pub conn: String,
    /// The table the sessions are stored in (`table=`; a plain SQL name).
    pub table: String,
    /// The path prefix of the rows shown (ends with `/` unless empty).
    pub prefix: Option<String>,
    /// How a file's bytes are stored (`layout=`).
    pub layout: Layout,
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection string may hold a password.
        f.debug_struct("PgUrl")
            .field("table", &self.table)
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

/// True for a table name the reference accepts (it is inlined in SQL).
pub(crate) fn valid_table_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        // Room for the `_blobs` / `_chunks` suffixes in 63 bytes.
        && name.len() <= 56
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad percent escape in {s:?}"))?;
                out.push(hex);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8 once decoded"))
}

impl PgUrl {
    /// Parses `postgres://…` or `postgresql://…` with our parameters
    /// `table`, `prefix` and `layout` (`rows` or `chunks`) taken out of the
    /// query string; the rest is the connection string.
    pub fn parse(url: &str) -> Result<PgUrl, String> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err("the storage URL must start with postgres:// or postgresql://".into());
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut table = DEFAULT_TABLE.to_string();
        let mut prefix = None;
        let mut layout = Layout::Rows;
        let mut keep = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "table" => table = percent_decode(value)?,
                "prefix" => {
                    let mut p = percent_decode(value)?;
                    if !p.is_empty() && !p.ends_with('/') {
                        p.push('/');
                    }
                    prefix = Some(p);
                }
                "layout" => {
                    layout = match percent_decode(value)?.as_str() {
                        "rows" => Layout::Rows,
                        "chunks" => Layout::Chunks,
                        other => return Err(format!("unknown layout {other:?} (rows or chunks)")),
                    }
                }
                _ => keep.push(pair),
            }
        }
        if !valid_table_name(&table) {
            return Err(format!(
                "table name {table:?}: letters, digits and _ only, not starting with a digit, \
                 at most 56 characters"
            ));
        }
        let conn = if keep.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", keep.join("&"))
        };
        Ok(PgUrl {
            conn,
            table,
            prefix,
            layout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parameters_are_ours_and_the_rest_is_the_connection() {
        let u = PgUrl::parse(
            "postgres://me@/db?host=/tmp/x&table=t1&prefix=%2Fsrv%2Fns&layout=chunks&sslmode=disable",
        )
        .unwrap();
        assert_eq!(u.conn, "postgres://me@/db?host=/tmp/x&sslmode=disable");
        assert_eq!(u.table, "t1");
        assert_eq!(u.prefix.as_deref(), Some("/srv/ns/"));
        assert_eq!(u.layout, Layout::Chunks);
        let d = PgUrl::parse("postgresql://h/db").unwrap();
        assert_eq!(d.table, DEFAULT_TABLE);
        assert_eq!(d.prefix, None);
        assert_eq!(d.layout, Layout::Rows);
    }

    #[test]
    fn bad_urls_are_refused() {
        assert!(PgUrl::parse("mysql://h/db").is_err());
        assert!(PgUrl::parse("postgres://h/db?table=a;drop").is_err());
        assert!(PgUrl::parse("postgres://h/db?table=1a").is_err());
        assert!(PgUrl::parse("postgres://h/db?layout=columns").is_err());
        assert!(PgUrl::parse("postgres://h/db?prefix=%zz").is_err());
        assert!(
            !format!("{:?}", PgUrl::parse("postgres://u:secret@h/db").unwrap()).contains("secret")
        );
    }
}
