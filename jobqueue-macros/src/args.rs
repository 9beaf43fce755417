//! The options of `#[job(...)]`: parsed with `syn::meta::parser`, each value checked here so
//! that a bad option fails the build instead of the worker's start-up.

use proc_macro2::{Group, TokenStream};
use syn::parse::Parser;
use syn::{Expr, ExprLit, ExprUnary, Lit, LitStr, Token, UnOp};

use crate::diagnostics::Errors;
use jobqueue_spec::backoff::{self, BackoffSpec};
use jobqueue_spec::cron::{self, CronError};
use jobqueue_spec::duration::{self, Millis};
use jobqueue_spec::queue::{self, QueueNameError, MAX_QUEUE_CHARS};

/// Every option, with the example its error messages show.
const OPTIONS: [(&str, &str); 18] = [
    ("name", r#"name = "export_order""#),
    ("queue", r#"queue = "exports""#),
    ("max_attempts", "max_attempts = 5"),
    ("lease", r#"lease = "30s""#),
    ("timeout", r#"timeout = "10m""#),
    ("priority", "priority = -10"),
    ("key", r#"key = "export:{order_id}""#),
    ("backoff", r#"backoff = "exponential(1s, 1h)""#),
    ("cron", r#"cron = "0 */5 * * * *""#),
    ("overlap", "overlap = true"),
    ("unique", r#"unique = "while_active""#),
    ("unique_for", r#"unique_for = "1h""#),
    ("max_snoozes", "max_snoozes = 1000"),
    // Limits.
    ("concurrency", "concurrency = 2"),
    (
        "concurrency_key",
        r#"concurrency_key = "account:{account_id}""#,
    ),
    ("rate_limit", r#"rate_limit = "100/1m""#),
    ("rate_key", r#"rate_key = "provider:{provider}""#),
    ("crate", r#"crate = "jobqueue""#),
];

/// The highest concurrency limit, and the most starts per rate window (slot rows per key).
const MAX_SLOTS: u32 = 1000;

/// The longest kind name, in bytes (the `kind` column).
const MAX_NAME_BYTES: usize = 128;

/// The options as written; `None` means the runtime's default.
#[derive(Default)]
pub(crate) struct JobArgs {
    pub(crate) name: Option<LitStr>,
    pub(crate) queue: Option<LitStr>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) lease: Option<Millis>,
    pub(crate) timeout: Option<Millis>,
    pub(crate) priority: Option<i16>,
    pub(crate) key: Option<KeyTemplate>,
    pub(crate) backoff: Option<BackoffSpec>,
    pub(crate) cron: Option<LitStr>,
    pub(crate) overlap: Option<syn::LitBool>,
    pub(crate) unique: Option<Unique>,
    pub(crate) max_snoozes: Option<u32>,
    // Limits: `concurrency` jobs of one key at once, `rate_limit` starts per window.
    pub(crate) concurrency: Option<u32>,
    pub(crate) concurrency_key: Option<KeyTemplate>,
    pub(crate) rate_limit: Option<(u32, Millis)>,
    pub(crate) rate_key: Option<KeyTemplate>,
    pub(crate) krate: Option<syn::Path>,
}

/// How long a task key blocks another enqueue: `unique = "..."` or `unique_for = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unique {
    UntilPruned,
    WhileActive,
    For(Millis),
}

/// A `key` template: fixed text and `{argument}` placeholders.
pub(crate) struct KeyTemplate {
    pub(crate) lit: LitStr,
    pub(crate) segments: Vec<Segment>,
}

/// One piece of a [`KeyTemplate`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Text copied into the key as it is (escaped braces already unescaped).
    Text(String),
    /// The `Display` of the argument of that name (`r#` already removed).
    Arg(String),
}

/// Parses the attribute's arguments. Mistakes go to `errors`, and parsing goes on past each
/// one that leaves the syntax intact, so that one build reports them all.
pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> JobArgs {
    let mut args = JobArgs::default();
    let mut seen: Vec<&'static str> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        // Read the value first so that parsing can go on after an unknown option.
        let value: Option<Expr> = if meta.input.peek(Token![=]) {
            Some(meta.value()?.parse()?)
        } else {
            if meta.input.peek(syn::token::Paren) {
                meta.input.parse::<Group>()?;
            }
            None
        };
        let known = meta
            .path
            .get_ident()
            .and_then(|ident| OPTIONS.iter().find(|(name, _)| ident == name));
        let Some(&(option, example)) = known else {
            let written = quote::ToTokens::to_token_stream(&meta.path)
                .to_string()
                .replace(' ', "");
            let names: Vec<String> = OPTIONS.iter().map(|(n, _)| format!("`{n}`")).collect();
            let guess = OPTIONS
                .iter()
                .find(|(name, _)| edit_distance(name, &written) <= 2)
                .map(|(name, _)| format!(" (did you mean `{name}`?)"))
                .unwrap_or_default();
            errors.push_spanned(
                &meta.path,
                format!(
                    "unknown option `{written}`{guess}; the options are {}",
                    names.join(", ")
                ),
            );
            return Ok(());
        };
        if seen.contains(&option) {
            errors.push_spanned(
                &meta.path,
                format!("`{option}` is given twice; keep one of them"),
            );
            return Ok(());
        }
        seen.push(option);
        let Some(value) = value else {
            errors.push_spanned(&meta.path, format!("`{option}` needs a value: `{example}`"));
            return Ok(());
        };
        if let Err(e) = args.set(option, example, &value) {
            errors.push(e);
        }
        Ok(())
    });
    if let Err(e) = parser.parse2(tokens) {
        errors.push(e);
    }
    if let (Some(overlap), None) = (&args.overlap, &args.cron) {
        errors.push_spanned(
            overlap,
            "`overlap` is an option of periodic jobs; add a schedule (`cron = \"0 */5 * * * *\"`) or remove it",
        );
    }
    args.check_limits(errors);
    args
}

impl JobArgs {
    /// A limit's key without its limit is a mistake the build reports.
    fn check_limits(&self, errors: &mut Errors) {
        if let (Some(key), None) = (&self.concurrency_key, self.concurrency) {
            errors.push_spanned(
                &key.lit,
                "`concurrency_key` names the key of a concurrency limit; add the limit (`concurrency = 2`) or remove it",
            );
        }
        if let (Some(key), None) = (&self.rate_key, self.rate_limit) {
            errors.push_spanned(
                &key.lit,
                "`rate_key` names the key of a rate limit; add the limit (`rate_limit = \"100/1m\"`) or remove it",
            );
        }
    }

    fn set(&mut self, option: &str, example: &str, value: &Expr) -> syn::Result<()> {
        match option {
            "name" => {
                let lit = string(option, example, value)?;
                let len = lit.value().len();
                if len == 0 || len > MAX_NAME_BYTES {
                    return Err(syn::Error::new_spanned(
                        &lit,
                        format!("`name` must be 1 to {MAX_NAME_BYTES} bytes long, not {len}"),
                    ));
                }
                self.name = Some(lit);
            }
            "queue" => {
                let lit = string(option, example, value)?;
                check_queue(&lit.value()).map_err(|e| syn::Error::new_spanned(&lit, e))?;
                self.queue = Some(lit);
            }
            "max_attempts" => {
                let n = integer(option, example, value)?;
                if n < 1 {
                    return Err(syn::Error::new_spanned(
                        value,
                        "`max_attempts` must be at least 1: it counts every run, the first one included",
                    ));
                }
                let n = u32::try_from(n).map_err(|_| {
                    syn::Error::new_spanned(
                        value,
                        format!("`max_attempts` must be at most {}", u32::MAX),
                    )
                })?;
                self.max_attempts = Some(n);
            }
            "max_snoozes" => {
                let n = integer(option, example, value)?;
                let n = u32::try_from(n).map_err(|_| {
                    syn::Error::new_spanned(
                        value,
                        format!("`max_snoozes` must be 0 to {}", u32::MAX),
                    )
                })?;
                self.max_snoozes = Some(n);
            }
            "lease" => {
                let d = duration(option, example, value)?;
                if d < Millis::SECOND {
                    return Err(syn::Error::new_spanned(
                        value,
                        format!("`lease` must be at least 1s, not {d}"),
                    ));
                }
                self.lease = Some(d);
            }
            "timeout" => {
                let d = duration(option, example, value)?;
                if d == Millis(0) {
                    return Err(syn::Error::new_spanned(
                        value,
                        "`timeout` must be longer than 0s; leave the option out for no time limit",
                    ));
                }
                self.timeout = Some(d);
            }
            "priority" => {
                let n = integer(option, example, value)?;
                let n = i16::try_from(n).map_err(|_| {
                    syn::Error::new_spanned(
                        value,
                        format!(
                            "`priority` must be between {} and {} (lower runs first)",
                            i16::MIN,
                            i16::MAX
                        ),
                    )
                })?;
                self.priority = Some(n);
            }
            "key" => {
                let lit = string(option, example, value)?;
                let segments = parse_template(&lit.value()).map_err(|e| {
                    syn::Error::new_spanned(&lit, format!("invalid `key` template: {e}"))
                })?;
                self.key = Some(KeyTemplate { lit, segments });
            }
            "backoff" => {
                let lit = string(option, example, value)?;
                let spec = backoff::parse(&lit.value()).map_err(|e| {
                    syn::Error::new_spanned(&lit, format!("invalid `backoff`: {e}"))
                })?;
                self.backoff = Some(spec);
            }
            "cron" => {
                let lit = string(option, example, value)?;
                check_cron(&lit.value()).map_err(|e| syn::Error::new_spanned(&lit, e))?;
                self.cron = Some(lit);
            }
            "overlap" => match value {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(lit),
                    ..
                }) => self.overlap = Some(lit.clone()),
                _ => {
                    return Err(syn::Error::new_spanned(
                        value,
                        format!("`overlap` takes `true` or `false`: `{example}`"),
                    ))
                }
            },
            "unique" | "unique_for" => {
                if self.unique.is_some() {
                    return Err(syn::Error::new_spanned(
                        value,
                        "`unique` and `unique_for` both say how long a key blocks; keep one of them",
                    ));
                }
                self.unique = Some(if option == "unique" {
                    let lit = string(option, example, value)?;
                    match lit.value().as_str() {
                        "until_pruned" => Unique::UntilPruned,
                        "while_active" => Unique::WhileActive,
                        other => {
                            return Err(syn::Error::new_spanned(
                                &lit,
                                format!(
                                    "unknown `unique` policy {other:?}; write `unique = \"until_pruned\"` (the default) or `unique = \"while_active\"`, or `unique_for = \"1h\"` for a period"
                                ),
                            ))
                        }
                    }
                } else {
                    let d = duration(option, example, value)?;
                    if d == Millis(0) {
                        return Err(syn::Error::new_spanned(
                            value,
                            "`unique_for` must be longer than 0s; write `unique = \"while_active\"` to free the key when the job ends",
                        ));
                    }
                    Unique::For(d)
                });
            }
            "concurrency" => {
                let n = integer(option, example, value)?;
                let n = u32::try_from(n)
                    .ok()
                    .filter(|n| (1..=MAX_SLOTS).contains(n))
                    .ok_or_else(|| {
                        syn::Error::new_spanned(
                            value,
                            format!("`concurrency` is how many jobs of one key may run at once: 1 to {MAX_SLOTS}"),
                        )
                    })?;
                self.concurrency = Some(n);
            }
            "concurrency_key" | "rate_key" => {
                let lit = string(option, example, value)?;
                let segments = parse_template(&lit.value()).map_err(|e| {
                    syn::Error::new_spanned(&lit, format!("invalid `{option}` template: {e}"))
                })?;
                let template = Some(KeyTemplate { lit, segments });
                if option == "rate_key" {
                    self.rate_key = template;
                } else {
                    self.concurrency_key = template;
                }
            }
            "rate_limit" => {
                let lit = string(option, example, value)?;
                let rate = parse_rate(&lit.value()).map_err(|e| {
                    syn::Error::new_spanned(
                        &lit,
                        format!("invalid `rate_limit`: {e}; write starts per window: `{example}`"),
                    )
                })?;
                self.rate_limit = Some(rate);
            }
            "crate" => {
                let lit = string(option, example, value)?;
                let path = lit.parse::<syn::Path>().map_err(|_| {
                    syn::Error::new_spanned(
                        &lit,
                        format!("`crate` takes the path of the jobqueue crate: `{example}`"),
                    )
                })?;
                self.krate = Some(path);
            }
            _ => unreachable!("option `{option}` is listed but not handled"),
        }
        Ok(())
    }
}

/// The number of one-character edits between `a` and `b`, to suggest the option meant.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

fn string(option: &str, example: &str, value: &Expr) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit.clone()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{option}` takes a string literal: `{example}`"),
        )),
    }
}

/// An integer literal, possibly negated.
fn integer(option: &str, example: &str, value: &Expr) -> syn::Result<i128> {
    let wrong = || {
        syn::Error::new_spanned(
            value,
            format!("`{option}` takes an integer literal: `{example}`"),
        )
    };
    let out_of_range = || syn::Error::new_spanned(value, format!("`{option}` is out of range"));
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => lit.base10_parse::<i128>().map_err(|_| out_of_range()),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => match &**expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(lit), ..
            }) => lit
                .base10_parse::<i128>()
                .map(|n| -n)
                .map_err(|_| out_of_range()),
            _ => Err(wrong()),
        },
        _ => Err(wrong()),
    }
}

fn duration(option: &str, example: &str, value: &Expr) -> syn::Result<Millis> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => duration::parse(&lit.value()).map_err(|e| {
            syn::Error::new_spanned(
                value,
                format!("invalid `{option}`: {e}; {}", duration::FORMS),
            )
        }),
        _ => Err(syn::Error::new_spanned(
            value,
            format!(
                "`{option}` takes a duration string: `{example}`; {}",
                duration::FORMS
            ),
        )),
    }
}

/// The grammar's verdict on a queue name, phrased for the `queue` option.
fn check_queue(name: &str) -> Result<(), String> {
    queue::check(name).map_err(|e| match e {
        QueueNameError::NotAllowed(c) => format!(
            "{c:?} is not allowed in a queue name; use letters, digits, `_`, `-`, `.` and `:`"
        ),
        QueueNameError::Empty | QueueNameError::TooLong { .. } => format!(
            "`queue` must be 1 to {MAX_QUEUE_CHARS} characters long, not {}",
            name.chars().count()
        ),
        other => other.to_string(),
    })
}

/// The grammar's verdict on a schedule, phrased for the `cron` option. The zone's name is
/// checked when the worker starts, against the time zone database.
fn check_cron(expr: &str) -> Result<(), String> {
    cron::parse(expr).map(drop).map_err(|e| match e {
        CronError::TimeZone { zone } => format!(
            "invalid `cron` time zone {zone:?}; write an IANA name such as `CRON_TZ=Europe/Berlin` before the fields"
        ),
        other => format!("invalid `cron` schedule: {other}"),
    })
}

/// `N/window`: at most N starts in any window of that length.
fn parse_rate(text: &str) -> Result<(u32, Millis), String> {
    let Some((count, window)) = text.split_once('/') else {
        return Err(format!("{text:?} has no `/`"));
    };
    let count: u32 = count
        .trim()
        .parse()
        .ok()
        .filter(|n| (1..=MAX_SLOTS).contains(n))
        .ok_or_else(|| format!("{:?} is not a count of 1 to {MAX_SLOTS}", count.trim()))?;
    let window =
        duration::parse(window.trim()).map_err(|e| format!("{e} ({})", duration::FORMS))?;
    if window < Millis(1) || window.0 > u64::from(u32::MAX) {
        return Err(format!(
            "the window must be 1ms to about 49 days, not {window}"
        ));
    }
    Ok((count, window))
}

/// Splits a key template into text and `{argument}` placeholders; `{{` and `}}` are braces.
fn parse_template(template: &str) -> Result<Vec<Segment>, String> {
    if template.is_empty() {
        return Err(
            "the key is empty; leave `key` out for a key derived from the arguments".into(),
        );
    }
    let mut segments = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '}' => return Err("`}` has no matching `{`; write `}}` for a literal brace".into()),
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => {
                            return Err("`{` is not closed; write `{{` for a literal brace".into())
                        }
                    }
                }
                let name = placeholder(&name)?;
                if !text.is_empty() {
                    segments.push(Segment::Text(std::mem::take(&mut text)));
                }
                segments.push(Segment::Arg(name));
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        segments.push(Segment::Text(text));
    }
    Ok(segments)
}

/// The argument name inside `{...}`.
fn placeholder(inside: &str) -> Result<String, String> {
    let name = inside.trim();
    if name.is_empty() {
        return Err("`{}` needs an argument name, e.g. `{order_id}`".into());
    }
    if name.contains(':') {
        return Err(format!(
            "`{{{inside}}}`: a placeholder is an argument name, written with its `Display`; format specs are not supported"
        ));
    }
    let bare = name.strip_prefix("r#").unwrap_or(name);
    let is_ident = bare
        .chars()
        .next()
        .is_some_and(|c| c == '_' || c.is_alphabetic())
        && bare.chars().all(|c| c == '_' || c.is_alphanumeric());
    if !is_ident {
        return Err(format!(
            "`{{{inside}}}` is not an argument name; write `{{{{` and `}}}}` for literal braces"
        ));
    }
    Ok(bare.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse_ok(tokens: TokenStream) -> JobArgs {
        let mut errors = Errors::default();
        let args = parse(tokens, &mut errors);
        if let Err(e) = errors.finish() {
            panic!("unexpected error: {e}");
        }
        args
    }

    fn messages(tokens: TokenStream) -> Vec<String> {
        let mut errors = Errors::default();
        parse(tokens, &mut errors);
        errors.messages()
    }

    #[test]
    fn every_option_parses() {
        let args = parse_ok(quote!(
            name = "export",
            queue = "exports.v2",
            max_attempts = 5,
            lease = "1m30s",
            timeout = "10m",
            priority = -10,
            key = "export:{order_id}:{{x}}",
            backoff = "linear(10s, 10m)",
            cron = "0 */5 * * * *",
            crate = "jq"
        ));
        assert_eq!(args.name.unwrap().value(), "export");
        assert_eq!(args.queue.unwrap().value(), "exports.v2");
        assert_eq!(args.max_attempts, Some(5));
        assert_eq!(args.lease, Some(Millis(90_000)));
        assert_eq!(args.timeout, Some(Millis(600_000)));
        assert_eq!(args.priority, Some(-10));
        assert_eq!(
            args.key.unwrap().segments,
            [
                Segment::Text("export:".into()),
                Segment::Arg("order_id".into()),
                Segment::Text(":{x}".into())
            ]
        );
        assert_eq!(
            args.backoff,
            Some(BackoffSpec::Linear {
                step: Millis(10_000),
                max: Millis(600_000)
            })
        );
        assert_eq!(args.cron.unwrap().value(), "0 */5 * * * *");
        assert!(args.krate.unwrap().is_ident("jq"));
    }

    #[test]
    fn every_mistake_is_reported() {
        let errors = messages(quote!(
            queu = "x",
            max_attempts = 0,
            lease = "500ms",
            priority = 40000,
            priority = 1,
            backoff = "exponential(1s)",
            cron = "every minute",
            key = "{",
            name = ""
        ));
        assert_eq!(errors.len(), 9, "{errors:#?}");
        assert!(errors[0].starts_with(
            "unknown option `queu` (did you mean `queue`?); the options are `name`, `queue`"
        ));
        assert!(errors[1].contains("at least 1"));
        assert!(errors[2].contains("at least 1s, not 500ms"));
        assert!(errors[3].contains("between -32768 and 32767"));
        assert!(errors[4].contains("given twice"));
        assert!(errors[5].starts_with("invalid `backoff`"));
        assert!(errors[6].starts_with("invalid `cron` schedule"));
        assert!(errors[7].contains("not closed"));
        assert!(errors[8].contains("1 to 128 bytes"));
    }

    #[test]
    fn uniqueness_policies_parse_and_refuse_what_they_cannot_mean() {
        assert_eq!(
            parse_ok(quote!(unique = "while_active")).unique,
            Some(Unique::WhileActive)
        );
        assert_eq!(
            parse_ok(quote!(unique = "until_pruned")).unique,
            Some(Unique::UntilPruned)
        );
        assert_eq!(
            parse_ok(quote!(unique_for = "1h30m")).unique,
            Some(Unique::For(Millis(5_400_000)))
        );
        assert!(messages(quote!(unique = "forever"))[0]
            .starts_with("unknown `unique` policy \"forever\""));
        assert!(messages(quote!(unique_for = "0s"))[0].contains("longer than 0s"));
        assert!(
            messages(quote!(unique = "while_active", unique_for = "1h"))[0]
                .contains("keep one of them")
        );
    }

    #[test]
    fn values_of_the_wrong_kind_say_what_to_write() {
        assert_eq!(
            messages(quote!(max_attempts = "5")),
            ["`max_attempts` takes an integer literal: `max_attempts = 5`"]
        );
        assert_eq!(
            messages(quote!(queue)),
            [r#"`queue` needs a value: `queue = "exports"`"#]
        );
        assert_eq!(
            messages(quote!(queue = exports)),
            [r#"`queue` takes a string literal: `queue = "exports"`"#]
        );
        assert!(messages(quote!(queue = "a b"))[0].contains("' ' is not allowed"));
        assert!(messages(quote!(timeout = "0s"))[0].contains("longer than 0s"));
        assert!(messages(quote!(lease = 30))[0].contains("takes a duration string"));
        assert!(messages(quote!(crate = "not a path"))[0].contains("`crate` takes the path"));
    }

    #[test]
    fn unknown_options_far_from_every_option_get_no_guess() {
        assert!(messages(quote!(retries = 3))[0].starts_with("unknown option `retries`; "));
        assert_eq!(edit_distance("max_attempt", "max_attempts"), 1);
        assert_eq!(edit_distance("cron", "crate"), 3);
    }

    #[test]
    fn templates() {
        assert_eq!(
            parse_template("a{b}{{c}}{r#type}").unwrap(),
            [
                Segment::Text("a".into()),
                Segment::Arg("b".into()),
                Segment::Text("{c}".into()),
                Segment::Arg("type".into()),
            ]
        );
        for bad in ["", "{", "}", "{}", "{a:?}", "{a-b}", "a}b"] {
            assert!(parse_template(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn cron_schedules() {
        assert!(check_cron("0 */5 * * * *").is_ok());
        assert!(check_cron("CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri").is_ok());
        assert!(check_cron("TZ=America/New_York 0 30 17 * * *").is_ok());
        assert!(check_cron("CRON_TZ= 0 0 9 * * *").is_err());
        assert!(check_cron("CRON_TZ=Europe/Berlin 0 0 99 * * *").is_err());
        assert!(check_cron("*/5 * * * *").is_ok());
        assert!(check_cron("* * *").is_err());
        assert!(check_cron("0 61 * * * *").is_err());
    }
}
