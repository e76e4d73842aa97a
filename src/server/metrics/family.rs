//! The helpers every part of the exposition registers its families with: counters,
//! gauges and seconds filled from label sets. A leaf, so the exposition and its parts
//! (`remote.rs`) use them without using each other.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::http::Labels;

/// The label set of one sample.
pub(crate) fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// A counter family registered under `name`, filled with one value per label set.
pub(crate) fn counters(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, u64)>,
) {
    let family = Family::<Labels, Counter>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).inc_by(value);
    }
    registry.register(name, help, family);
}

/// A gauge family of integers.
pub(crate) fn gauges(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, i64)>,
) {
    let family = Family::<Labels, Gauge>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).set(value);
    }
    registry.register(name, help, family);
}

/// A gauge family of seconds.
pub(crate) fn seconds(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, Duration)>,
) {
    let family = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).set(value.as_secs_f64());
    }
    registry.register(name, help, family);
}

/// Saturating conversion for gauges, which are signed.
pub(crate) fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
