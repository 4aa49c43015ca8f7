//! Per-request latency histograms (`--metrics`, read by [`crate::metrics`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// A request kind, the label of the per-request metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Op {
    pub op: &'static str,
}

fn histogram() -> Histogram {
    // 2 µs to about 4 s, doubling
    Histogram::new(exponential_buckets(2e-6, 2.0, 22))
}

/// How long requests took to serve, by kind (from their decoding to their reply's encoding);
/// measured only while the endpoint is on (a server without `--metrics` reads no clock for
/// it).
pub struct Latency {
    pub(crate) on: std::sync::atomic::AtomicBool,
    pub(crate) family: Family<Op, Histogram, fn() -> Histogram>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            on: Default::default(),
            family: Family::new_with_constructor(histogram),
        }
    }
}

impl Latency {
    /// The start of a request to time, if timing is on.
    #[inline]
    pub fn start(&self) -> Option<std::time::Instant> {
        self.on
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(std::time::Instant::now)
    }

    /// Records a request of kind `op` started at `started` (see [`Latency::start`]).
    #[inline]
    pub fn done(&self, op: &'static str, started: Option<std::time::Instant>) {
        if let Some(t) = started {
            self.family
                .get_or_create(&Op { op })
                .observe(t.elapsed().as_secs_f64());
        }
    }
}
