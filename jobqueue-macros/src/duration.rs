//! Durations as the options write them: `"500ms"`, `"30s"`, `"10m"`, `"1h30m"`, `"7d"`.

use std::fmt;

/// The forms a duration may take, for error messages.
pub(crate) const FORMS: &str = "write a number and a unit (`ms`, `s`, `m`, `h` or `d`), or several from the largest unit down: `\"500ms\"`, `\"30s\"`, `\"10m\"`, `\"1h30m\"`, `\"7d\"`";

const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// A duration in whole milliseconds, the finest unit the options accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Millis(pub(crate) u64);

impl Millis {
    pub(crate) const SECOND: Millis = Millis(1_000);
}

impl fmt::Display for Millis {
    /// Writes the duration back in the options' own notation (`90000` ms as `1m30s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("0s");
        }
        let mut rest = self.0;
        for (unit, ms) in UNITS {
            if rest >= ms {
                write!(f, "{}{unit}", rest / ms)?;
                rest %= ms;
            }
        }
        Ok(())
    }
}

/// Parses `"1h30m"` and the like. The error says what is wrong; callers add [`FORMS`].
pub(crate) fn parse(text: &str) -> Result<Millis, String> {
    if text.is_empty() {
        return Err("the duration is empty".into());
    }
    let mut rest = text;
    let mut total: u64 = 0;
    // Index into `UNITS` of the last unit used: each later unit must be smaller.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("expected a number at `{rest}`"));
        }
        let (number, after) = rest.split_at(digits);
        let letters = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(letters);
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(if unit.is_empty() {
                format!("`{number}` has no unit")
            } else {
                format!("`{unit}` is not a unit")
            });
        };
        match last {
            Some(l) if l == index => return Err(format!("`{unit}` is repeated")),
            Some(l) if l > index => return Err(format!("`{unit}` comes after a smaller unit")),
            _ => {}
        }
        last = Some(index);
        let part = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(UNITS[index].1))
            .and_then(|ms| total.checked_add(ms));
        total = part.ok_or_else(|| "the duration is too long".to_owned())?;
        rest = after;
    }
    Ok(Millis(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_combined_units() {
        assert_eq!(parse("500ms"), Ok(Millis(500)));
        assert_eq!(parse("30s"), Ok(Millis(30_000)));
        assert_eq!(parse("10m"), Ok(Millis(600_000)));
        assert_eq!(parse("2h"), Ok(Millis(7_200_000)));
        assert_eq!(parse("7d"), Ok(Millis(604_800_000)));
        assert_eq!(parse("1m30s"), Ok(Millis(90_000)));
        assert_eq!(parse("1d2h3m4s5ms"), Ok(Millis(93_784_005)));
        assert_eq!(parse("0s"), Ok(Millis(0)));
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "",
            "30",
            "s",
            "30 s",
            " 30s",
            "30sec",
            "1.5h",
            "-1s",
            "30s1m",
            "1m1m",
            "1h 30m",
            "30S",
            "99999999999999999999d",
            "999999999999999d",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn displays_in_the_same_notation() {
        for text in ["500ms", "30s", "1m30s", "1d2h3m4s5ms", "0s"] {
            assert_eq!(parse(text).unwrap().to_string(), text);
        }
    }
}
