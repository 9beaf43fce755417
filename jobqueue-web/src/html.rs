//! HTML building blocks: escaping, the page layout, small formatters.

use std::fmt::Write;

use jobqueue::JobStatus;

/// Text made safe for HTML content and quoted attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a value for a URL's path segment or query (everything but unreserved
/// characters), so it can neither end the value nor the attribute.
pub(crate) fn url(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The page around `body`. `base` is where the dashboard is mounted (`/jobs`, or empty).
pub(crate) fn page(
    base: &str,
    title: &str,
    active: &str,
    notice: Option<&str>,
    body: &str,
) -> String {
    let nav = [
        ("", "Overview"),
        ("/jobs", "Jobs"),
        ("/kinds", "Kinds"),
        ("/workers", "Workers"),
        ("/periodic", "Periodic"),
    ]
    .iter()
    .map(|(path, label)| {
        let class = if *label == active {
            " class=\"active\""
        } else {
            ""
        };
        let href = if base.is_empty() && path.is_empty() {
            "/".to_owned()
        } else {
            format!("{base}{path}")
        };
        format!("<a href=\"{}\"{class}>{label}</a>", esc(&href))
    })
    .collect::<String>();
    let notice = notice
        .filter(|n| !n.is_empty())
        .map(|n| format!("<div class=\"notice\" role=\"status\">{}</div>", esc(n)))
        .unwrap_or_default();
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · jobqueue</title>\
         <link rel=\"stylesheet\" href=\"{b}/assets/style.css\">\
         <script src=\"{b}/assets/dashboard.js\" defer></script></head>\
         <body><header><span class=\"brand\">jobqueue</span><nav>{nav}</nav></header>\
         <main>{notice}<h1>{title}</h1>{body}</main></body></html>",
        title = esc(title),
        b = esc(base),
    )
}

/// A status as a coloured label.
pub(crate) fn badge(status: JobStatus) -> String {
    format!("<span class=\"badge {0}\">{0}</span>", status.as_str())
}

/// Seconds as a short age: `42s`, `3m 5s`, `2h 10m`, `3d 4h`.
pub(crate) fn age(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// A database time (UTC) for a table cell.
pub(crate) fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    format!("<time>{}</time>", t.format("%Y-%m-%d %H:%M:%S"))
}

/// A POST form with one button, carrying the anti-forgery token.
pub(crate) fn action(
    base: &str,
    path: &str,
    csrf: &str,
    label: &str,
    class: &str,
    fields: &[(&str, &str)],
) -> String {
    let hidden: String = fields
        .iter()
        .map(|(k, v)| {
            format!(
                "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
                esc(k),
                esc(v)
            )
        })
        .collect();
    format!(
        "<form method=\"post\" action=\"{}{}\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">{hidden}<button type=\"submit\" class=\"{}\">{}</button></form>",
        esc(base),
        esc(path),
        esc(csrf),
        esc(class),
        esc(label)
    )
}
