//! Watermarks: how far event time has progressed in a table.
//!
//! A partition's watermark is the largest event time committed to it minus
//! the table's delay. The table's watermark is the minimum over partitions,
//! except that a partition with no new rows for longer than the idle timeout
//! does not hold it back; when every partition is idle, the table's
//! watermark is the largest partition watermark. It never moves backwards.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use super::partition::EventTimeProgress;

/// One partition's watermark state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionWatermark {
    pub partition: u32,
    pub watermark_us: Option<i64>,
    pub last_event_us: Option<i64>,
    pub idle: bool,
}

/// A table's watermark and the partition watermarks it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableWatermark {
    pub partitions: Vec<PartitionWatermark>,
    pub watermark_us: Option<i64>,
}

/// Keeps a table's watermark monotonic across computations.
#[derive(Debug)]
pub struct WatermarkTracker {
    delay_us: i64,
    idle_timeout: Duration,
    /// Highest table watermark handed out; `i64::MIN` before the first.
    high: AtomicI64,
}

impl WatermarkTracker {
    pub fn new(delay_us: i64, idle_timeout: Duration) -> Self {
        WatermarkTracker {
            delay_us,
            idle_timeout,
            high: AtomicI64::new(i64::MIN),
        }
    }

    /// Continues from a watermark handed out before (by a checkpoint).
    pub fn resume_from(&self, watermark_us: i64) {
        self.high.fetch_max(watermark_us, Ordering::AcqRel);
    }

    /// Computes the watermarks from each partition's progress.
    pub fn compute(&self, progress: &[EventTimeProgress]) -> TableWatermark {
        let partitions: Vec<PartitionWatermark> = progress
            .iter()
            .enumerate()
            .map(|(k, p)| PartitionWatermark {
                partition: k as u32,
                watermark_us: p.max_event_us.map(|t| t.saturating_sub(self.delay_us)),
                last_event_us: p.max_event_us,
                idle: p.since_last_append >= self.idle_timeout,
            })
            .collect();
        let active: Vec<&PartitionWatermark> = partitions.iter().filter(|p| !p.idle).collect();
        let computed = if active.is_empty() {
            partitions.iter().filter_map(|p| p.watermark_us).max()
        } else if active.iter().any(|p| p.watermark_us.is_none()) {
            // An active partition that has seen no event yet holds it back.
            None
        } else {
            active.iter().filter_map(|p| p.watermark_us).min()
        };
        let watermark_us = match computed {
            Some(w) => {
                let prev = self.high.fetch_max(w, Ordering::AcqRel);
                Some(prev.max(w))
            }
            None => {
                let prev = self.high.load(Ordering::Acquire);
                (prev != i64::MIN).then_some(prev)
            }
        };
        TableWatermark {
            partitions,
            watermark_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(max: Option<i64>, quiet_ms: u64) -> EventTimeProgress {
        EventTimeProgress {
            max_event_us: max,
            since_last_append: Duration::from_millis(quiet_ms),
        }
    }

    #[test]
    fn minimum_over_active_partitions() {
        let t = WatermarkTracker::new(5, Duration::from_secs(30));
        let w = t.compute(&[p(Some(100), 0), p(Some(50), 0)]);
        assert_eq!(w.watermark_us, Some(45));
        assert_eq!(w.partitions[0].watermark_us, Some(95));
    }

    #[test]
    fn idle_partitions_do_not_hold_it_back() {
        let t = WatermarkTracker::new(5, Duration::from_secs(30));
        let w = t.compute(&[p(Some(100), 0), p(Some(50), 31_000), p(None, 40_000)]);
        assert_eq!(w.watermark_us, Some(95));
        assert!(w.partitions[1].idle && w.partitions[2].idle);
        // All idle: the largest partition watermark.
        let w = t.compute(&[p(Some(100), 31_000), p(Some(50), 31_000)]);
        assert_eq!(w.watermark_us, Some(95));
    }

    #[test]
    fn never_moves_backwards_and_waits_for_empty_active_partitions() {
        let t = WatermarkTracker::new(0, Duration::from_secs(30));
        assert_eq!(t.compute(&[p(None, 0), p(Some(10), 0)]).watermark_us, None);
        assert_eq!(
            t.compute(&[p(Some(20), 0), p(Some(10), 0)]).watermark_us,
            Some(10)
        );
        // A partition wakes up with older events: the watermark stays.
        assert_eq!(
            t.compute(&[p(Some(20), 0), p(Some(3), 0)]).watermark_us,
            Some(10)
        );
    }
}
