//! The results: one row per measured case, printed as a table and written as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::measure::{figure, median};

/// One measured figure and the runs it comes from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figure {
    /// The median of the runs; for a latency percentile, the percentile of all the runs'
    /// samples pooled.
    pub(crate) value: f64,
    /// Each run's own figure.
    pub(crate) runs: Vec<f64>,
}

impl Figure {
    pub(crate) fn of(runs: Vec<f64>) -> Option<Figure> {
        (!runs.is_empty()).then(|| Figure {
            value: median(&runs),
            runs,
        })
    }
}

/// Which value a target applies to.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TargetOn {
    /// framework / baseline
    Ratio,
    /// The framework's own figure (itself a ratio, e.g. history / empty table).
    Framework,
    /// framework / minimal: against the baseline's loop on the minimal table.
    Minimal,
}

/// A target a figure should reach (at least `min`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Target {
    pub(crate) on: TargetOn,
    pub(crate) min: f64,
    pub(crate) met: bool,
}

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) scenario: &'static str,
    pub(crate) case: String,
    pub(crate) unit: &'static str,
    pub(crate) higher_is_better: bool,
    pub(crate) framework: Option<Figure>,
    pub(crate) baseline: Option<Figure>,
    /// framework / baseline, of the medians.
    pub(crate) ratio: Option<f64>,
    /// The baseline's loop on the minimal table of the pattern, where measured.
    pub(crate) minimal: Option<Figure>,
    /// framework / minimal, of the medians.
    pub(crate) minimal_ratio: Option<f64>,
    /// The same loop on the minimal table at REPEATABLE READ, where measured.
    pub(crate) minimal_rr: Option<Figure>,
    /// framework / minimal at REPEATABLE READ, of the medians.
    pub(crate) minimal_rr_ratio: Option<f64>,
    pub(crate) target: Option<Target>,
    /// Diagnostics: statements per job, claim sizes, counters.
    pub(crate) notes: BTreeMap<String, String>,
}

impl Row {
    pub(crate) fn new(scenario: &'static str, case: impl Into<String>, unit: &'static str) -> Row {
        Row {
            scenario,
            case: case.into(),
            unit,
            higher_is_better: true,
            framework: None,
            baseline: None,
            ratio: None,
            minimal: None,
            minimal_ratio: None,
            minimal_rr: None,
            minimal_rr_ratio: None,
            target: None,
            notes: BTreeMap::new(),
        }
    }

    pub(crate) fn lower_is_better(mut self) -> Row {
        self.higher_is_better = false;
        self
    }

    /// Sets both figures (medians of the runs) and their ratio.
    pub(crate) fn figures(self, framework: Vec<f64>, baseline: Vec<f64>) -> Row {
        self.with(Figure::of(framework), Figure::of(baseline))
    }

    /// Sets both figures and their ratio.
    pub(crate) fn with(mut self, framework: Option<Figure>, baseline: Option<Figure>) -> Row {
        self.framework = framework;
        self.baseline = baseline;
        self.ratio = match (&self.framework, &self.baseline) {
            (Some(f), Some(b)) if b.value > 0.0 => Some(f.value / b.value),
            _ => None,
        };
        self
    }

    /// Sets the minimal table's figure and the framework's ratio to it.
    pub(crate) fn minimal(mut self, runs: Vec<f64>) -> Row {
        self.minimal = Figure::of(runs);
        self.minimal_ratio = match (&self.framework, &self.minimal) {
            (Some(f), Some(m)) if m.value > 0.0 => Some(f.value / m.value),
            _ => None,
        };
        self
    }

    /// Sets the minimal table's figure at REPEATABLE READ and the framework's ratio to it.
    pub(crate) fn minimal_rr(mut self, runs: Vec<f64>) -> Row {
        self.minimal_rr = Figure::of(runs);
        self.minimal_rr_ratio = match (&self.framework, &self.minimal_rr) {
            (Some(f), Some(m)) if m.value > 0.0 => Some(f.value / m.value),
            _ => None,
        };
        self
    }

    /// Requires at least `min` of a ratio or of the framework's figure.
    pub(crate) fn target(mut self, on: TargetOn, min: f64) -> Row {
        let value = match on {
            TargetOn::Ratio => self.ratio,
            TargetOn::Minimal => self.minimal_ratio,
            TargetOn::Framework => self.framework.as_ref().map(|f| f.value),
        };
        self.target = Some(Target {
            on,
            min,
            met: value.is_some_and(|v| v >= min),
        });
        self
    }

    pub(crate) fn note(mut self, key: &str, value: impl Into<String>) -> Row {
        self.notes.insert(key.to_owned(), value.into());
        self
    }
}

/// The whole report, as written to JSON.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) command: String,
    pub(crate) machine: BTreeMap<String, String>,
    pub(crate) server: BTreeMap<String, String>,
    pub(crate) runs: u32,
    pub(crate) quick: bool,
    pub(crate) seconds: f64,
    pub(crate) rows: Vec<Row>,
}

impl Report {
    /// The table, as printed.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        let header = [
            "scenario",
            "case",
            "unit",
            "framework",
            "baseline",
            "fw/base",
            "minimal",
            "fw/min",
            "min RR",
            "fw/minRR",
            "target",
        ];
        let mut lines: Vec<[String; 11]> = vec![header.map(String::from)];
        for r in &self.rows {
            let fig = |f: &Option<Figure>| f.as_ref().map_or("-".into(), |f| figure(f.value));
            let target = r.target.as_ref().map_or(String::new(), |t| {
                format!(
                    "{}>= {:.2} {}",
                    match t.on {
                        TargetOn::Framework => "fw ",
                        TargetOn::Minimal => "fw/min ",
                        TargetOn::Ratio => "",
                    },
                    t.min,
                    if t.met { "met" } else { "NOT MET" }
                )
            });
            lines.push([
                r.scenario.to_owned(),
                r.case.clone(),
                format!(
                    "{}{}",
                    r.unit,
                    if r.higher_is_better {
                        ""
                    } else {
                        " (lower=better)"
                    }
                ),
                fig(&r.framework),
                fig(&r.baseline),
                r.ratio.map_or("-".into(), |v| format!("{v:.2}")),
                fig(&r.minimal),
                r.minimal_ratio.map_or("-".into(), |v| format!("{v:.2}")),
                fig(&r.minimal_rr),
                r.minimal_rr_ratio.map_or("-".into(), |v| format!("{v:.2}")),
                target,
            ]);
        }
        let widths: Vec<usize> = (0..11)
            .map(|c| {
                lines
                    .iter()
                    .map(|l| l[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for (i, l) in lines.iter().enumerate() {
            let mut line = String::new();
            for (c, cell) in l.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                // Text left, numbers right.
                if (3..=9).contains(&c) {
                    let _ = write!(line, "{}{}  ", " ".repeat(pad), cell);
                } else {
                    let _ = write!(line, "{}{}  ", cell, " ".repeat(pad));
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
            if i == 0 {
                let _ = writeln!(out, "{}", "-".repeat(widths.iter().sum::<usize>() + 20));
            }
        }
        let notes: Vec<&Row> = self.rows.iter().filter(|r| !r.notes.is_empty()).collect();
        if !notes.is_empty() {
            let _ = writeln!(out, "\nnotes (medians where there were several runs):");
            for r in notes {
                let kv: Vec<String> = r.notes.iter().map(|(k, v)| format!("{k} {v}")).collect();
                let _ = writeln!(out, "  {} / {}: {}", r.scenario, r.case, kv.join("; "));
            }
        }
        out
    }
}
