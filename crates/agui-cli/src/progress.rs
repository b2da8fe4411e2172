//! Progress bars for long operations: drawn on standard error only when it
//! is a terminal (silent when piped or redirected), with rates and ETAs
//! rounded to what a person reads (three significant digits; no ETA before
//! a second of work, when an estimate would be noise).

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// What a bar counts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unit {
    /// Bytes (shown as kB, MB, GB).
    Bytes,
    /// Events.
    Events,
    /// Threads (`store check`).
    Threads,
}

/// A bar of `total` units (`None`: unknown, a spinner with counts). It
/// shows up only on a terminal and only once the work has lasted a second
/// (a quick command prints no bar at all); finish it with
/// `finish_and_clear` before printing a summary.
pub fn bar(total: Option<u64>, unit: Unit, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
    if std::io::stderr().is_terminal() {
        let weak = bar.downgrade();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            if let Some(bar) = weak.upgrade()
                && !bar.is_finished()
            {
                bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(4));
                bar.enable_steady_tick(Duration::from_millis(250));
            }
        });
    }
    let template = match total {
        Some(_) => format!("{what} {{bar:30}} {{done}}/{{total}} {{rate}} {{eta}} {{msg}}"),
        None => format!("{what} {{spinner}} {{done}} {{rate}} {{msg}}"),
    };
    let style = ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "done",
            move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&amount(s.pos() as f64, unit));
            },
        )
        .with_key(
            "total",
            move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&amount(s.len().unwrap_or(0) as f64, unit));
            },
        )
        .with_key(
            "rate",
            move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&rate(s.pos(), s.elapsed(), unit));
            },
        )
        .with_key("eta", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = w.write_str(&eta(s.pos(), s.len(), s.elapsed()));
        });
    bar.set_style(style);
    bar
}

/// Prints a line on standard error without breaking the bar.
pub fn warn(bar: &ProgressBar, line: &str) {
    bar.suspend(|| eprintln!("{line}"));
}

/// `n` with three significant digits and a unit: `812 B`, `4.21 MB`,
/// `1.23M events`.
pub fn amount(n: f64, unit: Unit) -> String {
    let (value, prefix) = scaled(n);
    match unit {
        Unit::Bytes => format!("{value} {prefix}B"),
        Unit::Events if prefix.is_empty() => format!("{value} events"),
        Unit::Events => format!("{value}{prefix} events"),
        Unit::Threads if prefix.is_empty() => format!("{value} threads"),
        Unit::Threads => format!("{value}{prefix} threads"),
    }
}

/// `n` scaled to k, M, G, T (powers of 1,000), three significant digits.
fn scaled(n: f64) -> (String, &'static str) {
    let mut v = n.max(0.0);
    let mut prefix = "";
    for p in ["k", "M", "G", "T"] {
        if v < 999.5 {
            break;
        }
        v /= 1000.0;
        prefix = p;
    }
    let text = if prefix.is_empty() || v >= 99.95 {
        format!("{v:.0}")
    } else if v >= 9.995 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    (text, prefix)
}

/// The average rate since the start (steadier than a windowed estimate, and
/// sensible from the first second: nothing is shown before 1 s).
pub fn rate(pos: u64, elapsed: Duration, unit: Unit) -> String {
    let secs = elapsed.as_secs_f64();
    if secs < 1.0 || pos == 0 {
        return String::new();
    }
    format!("({}/s)", amount(pos as f64 / secs, unit))
}

/// The time left at the average rate so far, rounded (`eta 45 s`,
/// `eta 3 min`, `eta 1 h 20 min`); nothing before 1 s of work.
pub fn eta(pos: u64, len: Option<u64>, elapsed: Duration) -> String {
    let Some(len) = len else {
        return String::new();
    };
    let secs = elapsed.as_secs_f64();
    if secs < 1.0 || pos == 0 || pos >= len {
        return String::new();
    }
    let left = secs * (len - pos) as f64 / pos as f64;
    let mut out = String::from("eta ");
    if left < 10.0 {
        let _ = write!(out, "{} s", left.ceil() as u64);
    } else if left < 60.0 {
        let _ = write!(out, "{} s", (left / 5.0).ceil() as u64 * 5);
    } else if left < 3600.0 {
        let _ = write!(out, "{} min", (left / 60.0).round().max(1.0) as u64);
    } else {
        let minutes = (left / 60.0).round() as u64;
        let _ = write!(out, "{} h {} min", minutes / 60, minutes % 60);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_have_three_significant_digits() {
        assert_eq!(amount(0.0, Unit::Bytes), "0 B");
        assert_eq!(amount(812.0, Unit::Bytes), "812 B");
        assert_eq!(amount(4_213_000.0, Unit::Bytes), "4.21 MB");
        assert_eq!(amount(42_130_000.0, Unit::Bytes), "42.1 MB");
        assert_eq!(amount(780_000_000.0, Unit::Bytes), "780 MB");
        assert_eq!(amount(999_999.0, Unit::Events), "1.00M events");
        assert_eq!(amount(560_000.0, Unit::Events), "560k events");
        assert_eq!(amount(12.0, Unit::Events), "12 events");
        assert_eq!(amount(25_300.0, Unit::Threads), "25.3k threads");
    }

    #[test]
    fn rates_are_rounded_and_wait_for_a_second() {
        assert_eq!(rate(5000, Duration::from_millis(300), Unit::Events), "");
        assert_eq!(
            rate(4912, Duration::from_secs_f64(1.7), Unit::Events),
            "(2.89k events/s)"
        );
        assert_eq!(
            rate(13_000_000, Duration::from_secs(3), Unit::Bytes),
            "(4.33 MB/s)"
        );
    }

    #[test]
    fn etas_are_rounded_and_wait_for_a_second() {
        let s = Duration::from_secs;
        assert_eq!(eta(10, Some(100), Duration::from_millis(500)), "");
        assert_eq!(eta(50, Some(100), s(3)), "eta 3 s");
        assert_eq!(eta(10, Some(100), s(3)), "eta 30 s");
        assert_eq!(eta(10, Some(100), s(20)), "eta 3 min");
        assert_eq!(eta(1, Some(100), s(60)), "eta 1 h 39 min");
        assert_eq!(eta(100, Some(100), s(60)), "");
        assert_eq!(eta(10, None, s(60)), "");
    }
}
