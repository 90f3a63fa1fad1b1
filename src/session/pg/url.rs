//! The `--storage postgres://…` URL and its parameters.

use std::fmt;
use std::time::Duration;

use super::conn::DEFAULT_ANSWER_TIMEOUT;
use super::tls::Verify;
use super::DEFAULT_TABLE;

/// The longest table name: every name made from it fits PostgreSQL's 63
/// bytes, the longest being the chunks layout's trigger function
/// `<table>_chunks_notify` (also `<table>_blobs`, `<table>_chunks`, the
/// channel `<table>_changes`, `<table>_notify`, the `_pkey` indexes).
pub(crate) const MAX_TABLE_NAME: usize = 63 - "_chunks_notify".len();

/// PostgreSQL's reserved key words (SQL Key Words, "reserved" and
/// "reserved (can be function or type)"): not usable as a plain table
/// name.
const RESERVED: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "binary",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "group",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "natural",
    "not",
    "notnull",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "outer",
    "overlaps",
    "placing",
    "primary",
    "references",
    "returning",
    "right",
    "select",
    "session_user",
    "similar",
    "some",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
];

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
    /// How long a statement waits for the server's answer (`timeout=`
    /// seconds; `None` for `timeout=0`: for ever).
    pub timeout: Option<Duration>,
    /// What is checked of the server's certificate (`sslmode=verify-ca`
    /// and `verify-full`; the connection string then says `require`).
    pub verify: Verify,
    /// The trusted roots for `verify` (`sslrootcert=`, a PEM file).
    pub root_cert: Option<String>,
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection string may hold a password.
        f.debug_struct("PgUrl")
            .field("table", &self.table)
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .field("timeout", &self.timeout)
            .field("verify", &self.verify)
            .finish_non_exhaustive()
    }
}

/// True for a table name we accept (it is inlined in SQL unquoted): a
/// plain identifier, no reserved key word, short enough for every name
/// made from it ([`MAX_TABLE_NAME`]).
pub(crate) fn valid_table_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= MAX_TABLE_NAME
        && !is_reserved(name)
}

fn is_reserved(name: &str) -> bool {
    RESERVED.iter().any(|w| w.eq_ignore_ascii_case(name))
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
        let mut timeout = Some(DEFAULT_ANSWER_TIMEOUT);
        let mut verify = Verify::Nothing;
        let mut root_cert = None;
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
                "timeout" => {
                    let v = percent_decode(value)?;
                    let secs: f64 = v
                        .parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s <= 1e9)
                        .ok_or_else(|| format!("timeout={v:?}: seconds expected (0: no limit)"))?;
                    timeout = (secs > 0.0).then(|| Duration::from_secs_f64(secs));
                }
                // The checking modes are ours (the driver knows only
                // disable, prefer and require).
                "sslmode" if matches!(value, "verify-ca" | "verify-full") => {
                    verify = if value == "verify-ca" {
                        Verify::Chain
                    } else {
                        Verify::Full
                    };
                    keep.push("sslmode=require");
                }
                "sslrootcert" => root_cert = Some(percent_decode(value)?),
                _ => keep.push(pair),
            }
        }
        if !valid_table_name(&table) {
            return Err(if is_reserved(&table) {
                format!("table name {table:?} is a reserved word in SQL: choose another")
            } else {
                format!(
                    "table name {table:?}: letters, digits and _ only, not starting with a \
                     digit, at most {MAX_TABLE_NAME} characters (the names made from it, like \
                     {table}_chunks_notify, must fit PostgreSQL's 63)"
                )
            });
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
            timeout,
            verify,
            root_cert,
        })
    }

    /// True when the URL holds a password (in its user part or as
    /// `password=`).
    pub fn has_password(url: &str) -> bool {
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, q),
            None => (rest, ""),
        };
        let authority = authority.split('/').next().unwrap_or_default();
        let in_user = authority
            .rsplit_once('@')
            .is_some_and(|(user, _)| user.contains(':'));
        in_user
            || query
                .split('&')
                .any(|p| p.split_once('=').is_some_and(|(k, _)| k == "password"))
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
        assert!(PgUrl::parse("postgres://h/db?timeout=soon").is_err());
        let reserved = PgUrl::parse("postgres://h/db?table=user").unwrap_err();
        assert!(reserved.contains("reserved"), "{reserved}");
        assert!(PgUrl::parse("postgres://h/db?table=User").is_err());
        assert!(
            !format!("{:?}", PgUrl::parse("postgres://u:secret@h/db").unwrap()).contains("secret")
        );
    }
}
