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
            // Bidi overrides and isolates would reorder what follows them (`send_<U+202E>liame` shows as `send_email`): shown as a visible mark instead.
            '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => out.push('\u{FFFD}'),
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
        ("/audit", "Audit"),
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
         <body><header><span class=\"brand\">jobqueue</span><nav>{nav}</nav>\
         <form method=\"get\" action=\"{b}/search\" class=\"search\" role=\"search\">\
         <input type=\"search\" name=\"q\" placeholder=\"Job id or task key\" \
         aria-label=\"Find a job by id or task key\" autocomplete=\"off\">\
         <button type=\"submit\">Find</button></form></header>\
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

/// A time as how long ago it is (or how far ahead), with the UTC time as its title: "3 min
/// ago", "in 2 h". `now` is the database's clock, which wrote the time.
pub(crate) fn time_ago(
    t: &chrono::DateTime<chrono::Utc>,
    now: &chrono::DateTime<chrono::Utc>,
) -> String {
    let secs = (*now - *t).num_seconds();
    let words = |s: i64| match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86399 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86400),
    };
    let rel = match secs {
        -4..=4 => "just now".to_owned(),
        s if s > 0 => format!("{} ago", words(s)),
        s => format!("in {}", words(-s)),
    };
    format!(
        "<time datetime=\"{}\" title=\"{} UTC\">{rel}</time>",
        t.format("%Y-%m-%dT%H:%M:%S%.6fZ"),
        t.format("%Y-%m-%d %H:%M:%S")
    )
}

/// `n` with thousands separators: `12,345`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
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
