//! The database part of a server URL.

/// `url` with its database part (if any) replaced by `database`, keeping any `?options`.
pub(crate) fn url_with_database(url: &str, database: &str) -> String {
    let (server, query) = split_database(url);
    format!("{server}/{database}{query}")
}

/// `url` without its database part (if any), keeping any `?options`: the server alone, for
/// statements on the server (`CREATE DATABASE`, `DROP DATABASE`), so that a database the
/// URL names need not exist.
pub(crate) fn url_without_database(url: &str) -> String {
    let (server, query) = split_database(url);
    format!("{server}{query}")
}

/// `url` as the part before its database (scheme and authority) and its `?options` (with
/// the `?`, or empty); the database part between them is left out.
pub(crate) fn split_database(url: &str) -> (&str, &str) {
    let (base, query) = match url.find('?') {
        Some(i) => url.split_at(i),
        None => (url, ""),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority..].find('/') {
        Some(i) => &base[..authority + i],
        None => base,
    };
    (server, query)
}
