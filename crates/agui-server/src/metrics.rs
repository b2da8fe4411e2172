//! Prometheus metrics, kept in atomics and rendered as text.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Bucket bounds of the latency histograms, in seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

/// A latency histogram.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation: one counter of its own bucket (the
    /// cumulative counts Prometheus wants are summed at render time, so the
    /// hot path touches three atomics, not one per bucket).
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| s <= *b) {
            self.counts[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_micros
            .fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let n = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_micros.load(Relaxed) as f64 / 1_000_000.0
        );
        let _ = writeln!(out, "{name}_count {n}");
    }
}

/// Every metric of the gateway.
#[derive(Default)]
pub struct Metrics {
    /// Runs being forwarded now.
    pub runs_in_flight: AtomicU64,
    /// Runs ended `finished`.
    pub runs_finished: AtomicU64,
    /// Runs ended `error` by the upstream.
    pub runs_error: AtomicU64,
    /// Runs the gateway closed (upstream failure, limits, shutdown).
    pub runs_closed_by_gateway: AtomicU64,
    /// Runs closed as interrupted at start-up.
    pub runs_interrupted: AtomicU64,
    /// Runs stopped (`POST .../stop`, or a dropped client under
    /// `on_disconnect = cancel`).
    pub runs_cancelled: AtomicU64,
    /// Runs set aside (a branch that ran beside another branch's run).
    pub runs_aside: AtomicU64,
    /// Runs set aside that joined their thread's log.
    pub runs_joined: AtomicU64,
    /// Tries to join a run set aside that found it never can (its parent
    /// cannot, or the thread's log refuses it); it stays set aside.
    pub runs_stuck: AtomicU64,
    /// Events stored.
    pub events_stored: AtomicU64,
    /// JSON bytes stored.
    pub bytes_stored: AtomicU64,
    /// Upstream failures (connect, status, timeout, garbage, early close).
    pub upstream_errors: AtomicU64,
    /// Store failures.
    pub store_errors: AtomicU64,
    /// Attach / connect streams open now.
    pub subscribers: AtomicU64,
    /// Connections refused over the connection cap.
    pub connections_refused: AtomicU64,
    /// Run streams cut because their client stopped reading
    /// (`client_buffer_bytes`).
    pub clients_cut: AtomicU64,
    /// Time of each append (a batch).
    pub append_latency: Histogram,
    /// Time from the upstream request to its response headers.
    pub upstream_ttfb: Histogram,
}

impl Metrics {
    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let g = |out: &mut String, name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        g(
            &mut out,
            "agui_runs_in_flight",
            "gauge",
            "Runs being forwarded now.",
            self.runs_in_flight.load(Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP agui_runs_total Runs ended, by status.\n# TYPE agui_runs_total counter"
        );
        for (status, v) in [
            ("finished", &self.runs_finished),
            ("error", &self.runs_error),
            ("closed_by_gateway", &self.runs_closed_by_gateway),
            ("interrupted", &self.runs_interrupted),
            ("cancelled", &self.runs_cancelled),
        ] {
            let _ = writeln!(
                out,
                "agui_runs_total{{status=\"{status}\"}} {}",
                v.load(Relaxed)
            );
        }
        g(
            &mut out,
            "agui_runs_aside_total",
            "counter",
            "Runs set aside: branches that ran beside another branch's run of their thread.",
            self.runs_aside.load(Relaxed),
        );
        g(
            &mut out,
            "agui_runs_joined_total",
            "counter",
            "Runs set aside that joined their thread's log.",
            self.runs_joined.load(Relaxed),
        );
        g(
            &mut out,
            "agui_runs_aside_stuck_total",
            "counter",
            "Tries to join a run set aside that found it never can (logged; it stays set aside).",
            self.runs_stuck.load(Relaxed),
        );
        g(
            &mut out,
            "agui_events_stored_total",
            "counter",
            "Events stored.",
            self.events_stored.load(Relaxed),
        );
        g(
            &mut out,
            "agui_bytes_stored_total",
            "counter",
            "JSON bytes of the events stored.",
            self.bytes_stored.load(Relaxed),
        );
        g(
            &mut out,
            "agui_upstream_errors_total",
            "counter",
            "Upstream failures.",
            self.upstream_errors.load(Relaxed),
        );
        g(
            &mut out,
            "agui_store_errors_total",
            "counter",
            "Store failures.",
            self.store_errors.load(Relaxed),
        );
        g(
            &mut out,
            "agui_connections_refused_total",
            "counter",
            "Connections refused over the connection cap.",
            self.connections_refused.load(Relaxed),
        );
        g(
            &mut out,
            "agui_clients_cut_total",
            "counter",
            "Run streams cut because their client fell more than client_buffer_bytes behind (it can attach again).",
            self.clients_cut.load(Relaxed),
        );
        g(
            &mut out,
            "agui_subscribers",
            "gauge",
            "Attach and connect streams open now.",
            self.subscribers.load(Relaxed),
        );
        self.append_latency.render(
            &mut out,
            "agui_store_append_seconds",
            "Time to store one batch of events.",
        );
        self.upstream_ttfb.render(
            &mut out,
            "agui_upstream_response_seconds",
            "Time from the upstream request to its response headers.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::default();
        m.events_stored.fetch_add(3, Relaxed);
        m.append_latency.observe(Duration::from_micros(300));
        m.append_latency.observe(Duration::from_secs(10));
        let t = m.render();
        assert!(t.contains("agui_events_stored_total 3\n"));
        assert!(t.contains("agui_store_append_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(t.contains("agui_store_append_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(t.contains("agui_store_append_seconds_count 2\n"));
        assert!(t.contains("agui_runs_total{status=\"finished\"} 0\n"));
    }
}
