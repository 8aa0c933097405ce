//! Latency summaries.

use std::time::Duration;

/// Percentiles of a set of latencies, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Summary {
    /// Summarises `samples` (sorted in place). An empty set summarises to zeros.
    pub fn of(samples: &mut [Duration]) -> Summary {
        if samples.is_empty() {
            return Summary { count: 0, avg_ms: 0.0, p50_ms: 0.0, p99_ms: 0.0, max_ms: 0.0 };
        }
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let at = |q: f64| ms(samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1]);
        let total: Duration = samples.iter().sum();
        Summary {
            count: samples.len(),
            avg_ms: round(ms(total) / samples.len() as f64),
            p50_ms: round(at(0.50)),
            p99_ms: round(at(0.99)),
            max_ms: round(ms(samples[samples.len() - 1])),
        }
    }
}

/// Three decimals are plenty for milliseconds and keep the JSON readable.
pub fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = Summary::of(&mut samples);
        assert_eq!((s.count, s.p50_ms, s.p99_ms, s.max_ms), (100, 50.0, 99.0, 100.0));
        assert_eq!(s.avg_ms, 50.5);
        assert_eq!(Summary::of(&mut []).count, 0);
    }
}
