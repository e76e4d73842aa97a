//! Latency figures the write benches print alike: percentiles, and a line of p50, p99,
//! p99.9, max and the count over 50 ms.

use std::time::Duration;

/// The `q` quantile (0 to 1) of `sorted_or_not`, which must not be empty.
pub fn percentile(sorted_or_not: &[Duration], q: f64) -> Duration {
    let mut v = sorted_or_not.to_vec();
    v.sort();
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// One line of figures for the writes timed in `v` ("none" when there are none).
pub fn figures(v: &[Duration]) -> String {
    if v.is_empty() {
        return "none".to_string();
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let over = v.iter().filter(|d| **d > Duration::from_millis(50)).count();
    format!(
        "{:>7} writes: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.1} ms, over 50 ms {over}",
        v.len(),
        ms(percentile(v, 0.5)),
        ms(percentile(v, 0.99)),
        ms(percentile(v, 0.999)),
        ms(*v.iter().max().expect("not empty")),
    )
}
