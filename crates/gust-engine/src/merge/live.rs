//! The live view of a run whose segments stream their ticks to one place: each tick
//! of the run is the sum of the segments' ticks with the same index, its percentiles
//! from their histograms added.
//!
//! Segments share one start instant, so tick `k` of every segment covers the same
//! wall-clock interval; a segment that started late shifts its indices by the ticks
//! it missed before sending them. A tick of the run is released once every segment
//! still running has sent it (or finished), or once another segment is
//! [`LAG_TICKS`] ahead: one stalled or dead segment must not freeze the view. A tick
//! that arrives after its index was released still counts in the totals (they are
//! each segment's own running totals), but not in that tick's percentiles; the
//! final report, merged from the segments' reports, is exact either way.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::metrics::{LiveTick, QuickPercentiles, Totals, error_rate, new_histogram};

/// How far (in ticks) the leading segment may run ahead of a silent one before the
/// run's ticks are released without it: 2 s at the default 250 ms tick.
pub const LAG_TICKS: u64 = 8;

/// Why a segment's tick was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TickError {
    #[error("no segment {0} in this run")]
    UnknownMember(usize),
    #[error("tick {0} carries no histograms (a segment's ticks do)")]
    NoHistograms(u64),
    #[error("tick {0}'s histograms are not encoded histograms")]
    BadHistograms(u64),
}

/// A tick of the run and how many segments it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedTick {
    pub tick: LiveTick,
    pub segments: usize,
}

#[derive(Debug, Default)]
struct Member {
    /// The index after the highest this segment has sent.
    next: u64,
    done: bool,
    totals: Totals,
}

struct Pending {
    latency: Histogram<u64>,
    service: Histogram<u64>,
    sent: u64,
    responses: u64,
    failures: u64,
    dropped: u64,
    in_flight: u64,
    segments: usize,
}

impl Pending {
    fn new() -> Self {
        Self {
            latency: new_histogram(),
            service: new_histogram(),
            sent: 0,
            responses: 0,
            failures: 0,
            dropped: 0,
            in_flight: 0,
            segments: 0,
        }
    }
}

pub struct TickMerger {
    tick: Duration,
    members: Vec<Member>,
    pending: BTreeMap<u64, Pending>,
    /// Every tick below this index has been released.
    released_below: u64,
    /// Ticks that came after their index was released.
    late_ticks: u64,
}

impl TickMerger {
    pub fn new(tick: Duration) -> Self {
        Self {
            tick,
            members: Vec::new(),
            pending: BTreeMap::new(),
            released_below: 0,
            late_ticks: 0,
        }
    }

    /// A new segment; its number names it in [`add`](Self::add) and
    /// [`finish`](Self::finish).
    pub fn join(&mut self) -> usize {
        self.members.push(Member::default());
        self.members.len() - 1
    }

    /// Ticks that arrived after their index was released.
    pub fn late_ticks(&self) -> u64 {
        self.late_ticks
    }

    /// Segment `member`'s tick (its index already on the run's axis); returns the
    /// run's ticks this releases, in order.
    pub fn add(&mut self, member: usize, tick: &LiveTick) -> Result<Vec<MergedTick>, TickError> {
        if member >= self.members.len() {
            return Err(TickError::UnknownMember(member));
        }
        let histograms = tick
            .histograms
            .as_ref()
            .ok_or(TickError::NoHistograms(tick.index))?;
        let (latency, service) = histograms
            .decode()
            .ok_or(TickError::BadHistograms(tick.index))?;
        let m = self
            .members
            .get_mut(member)
            .ok_or(TickError::UnknownMember(member))?;
        m.next = m.next.max(tick.index + 1);
        m.totals = tick.totals;
        if tick.index < self.released_below {
            self.late_ticks += 1;
        } else {
            let p = self.pending.entry(tick.index).or_insert_with(Pending::new);
            // Both histograms have the run's bounds (decode re-records into them).
            let _ = p.latency.add(&latency);
            let _ = p.service.add(&service);
            p.sent += tick.sent;
            p.responses += tick.responses;
            p.failures += tick.failures;
            p.dropped += tick.dropped;
            p.in_flight += tick.in_flight;
            p.segments += 1;
        }
        Ok(self.release(false))
    }

    /// Segment `member` sends nothing more; returns the ticks that no longer wait
    /// for it.
    pub fn finish(&mut self, member: usize) -> Result<Vec<MergedTick>, TickError> {
        self.members
            .get_mut(member)
            .ok_or(TickError::UnknownMember(member))?
            .done = true;
        Ok(self.release(false))
    }

    /// Every tick still held, for the end of the run.
    pub fn flush(&mut self) -> Vec<MergedTick> {
        self.release(true)
    }

    fn release(&mut self, all: bool) -> Vec<MergedTick> {
        let waiting = self
            .members
            .iter()
            .filter(|m| !m.done)
            .map(|m| m.next)
            .min()
            .unwrap_or(u64::MAX);
        let leading = self.members.iter().map(|m| m.next).max().unwrap_or(0);
        let below = if all {
            u64::MAX
        } else {
            waiting.max(leading.saturating_sub(LAG_TICKS))
        };
        let mut out = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() >= below {
                break;
            }
            let (index, p) = entry.remove_entry();
            out.push(self.tick_of(index, &p));
            self.released_below = index + 1;
        }
        if below != u64::MAX {
            self.released_below = self.released_below.max(below);
        }
        out
    }

    fn tick_of(&self, index: u64, p: &Pending) -> MergedTick {
        let mut totals = Totals::default();
        for m in &self.members {
            totals.sent += m.totals.sent;
            totals.responses += m.totals.responses;
            totals.successes += m.totals.successes;
            totals.failures += m.totals.failures;
            totals.dropped += m.totals.dropped;
        }
        totals.error_rate = error_rate(totals.failures, totals.successes);
        let secs = self.tick.as_secs_f64();
        MergedTick {
            tick: LiveTick {
                index,
                elapsed_s: (index + 1) as f64 * secs,
                rps: p.responses as f64 / secs,
                sent: p.sent,
                responses: p.responses,
                failures: p.failures,
                dropped: p.dropped,
                in_flight: p.in_flight,
                latency: QuickPercentiles::of(&p.latency),
                service: QuickPercentiles::of(&p.service),
                totals,
                histograms: None,
            },
            segments: p.segments,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::IntervalHistograms;

    const TICK: Duration = Duration::from_millis(250);

    /// A segment's tick: `responses` answers of `latency_us` each, and its totals.
    fn tick(index: u64, responses: u64, latency_us: u64, total: u64) -> LiveTick {
        let mut h = new_histogram();
        h.record_n(latency_us, responses).unwrap();
        LiveTick {
            index,
            elapsed_s: 0.0,
            rps: 0.0,
            sent: responses,
            responses,
            failures: 0,
            dropped: 0,
            in_flight: 1,
            latency: QuickPercentiles::of(&h),
            service: QuickPercentiles::of(&h),
            totals: Totals {
                sent: total,
                responses: total,
                successes: total,
                failures: 0,
                dropped: 0,
                error_rate: 0.0,
            },
            histograms: Some(IntervalHistograms::of(&h, &h)),
        }
    }

    #[test]
    fn a_tick_is_released_once_every_running_segment_sent_it() {
        let mut m = TickMerger::new(TICK);
        let (a, b) = (m.join(), m.join());
        assert!(m.add(a, &tick(0, 3, 1_000, 3)).unwrap().is_empty());
        let out = m.add(b, &tick(0, 1, 9_000, 1)).unwrap();
        assert_eq!(out.len(), 1);
        let t = &out[0];
        assert_eq!((t.tick.index, t.segments), (0, 2));
        assert_eq!((t.tick.responses, t.tick.in_flight), (4, 2));
        assert_eq!(t.tick.rps, 16.0);
        assert_eq!(t.tick.totals.responses, 4);
        // Percentiles of the union: three at 1 ms, one at 9 ms.
        assert!(t.tick.latency.p50_us < 1_100, "{:?}", t.tick.latency);
        assert!(t.tick.latency.p99_us > 8_900, "{:?}", t.tick.latency);
    }

    #[test]
    fn a_finished_segment_no_longer_holds_the_run_back() {
        let mut m = TickMerger::new(TICK);
        let (a, b) = (m.join(), m.join());
        assert!(m.add(a, &tick(0, 2, 1_000, 2)).unwrap().is_empty());
        let out = m.finish(b).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].segments, 1);
    }

    #[test]
    fn a_silent_segment_is_left_behind_after_the_lag() {
        let mut m = TickMerger::new(TICK);
        let (a, _silent) = (m.join(), m.join());
        for i in 0..LAG_TICKS {
            assert!(m.add(a, &tick(i, 1, 1_000, i + 1)).unwrap().is_empty());
        }
        let out = m.add(a, &tick(LAG_TICKS, 1, 1_000, LAG_TICKS + 1)).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].tick.index, 0);
        // Its late tick 0 adds to the totals, not to a released tick.
        let out = m.add(1, &tick(0, 5, 1_000, 5)).unwrap();
        assert!(out.iter().all(|t| t.tick.index > 0));
        assert_eq!(m.late_ticks(), 1);
        let rest = m.flush();
        assert_eq!(
            rest.last().unwrap().tick.totals.responses,
            LAG_TICKS + 1 + 5
        );
    }

    #[test]
    fn late_segment_ticks_land_on_their_wall_clock_index() {
        let mut m = TickMerger::new(TICK);
        let (a, b) = (m.join(), m.join());
        m.add(a, &tick(0, 1, 1_000, 1)).unwrap();
        m.add(a, &tick(1, 1, 1_000, 2)).unwrap();
        // b started a tick late: its first tick is index 1 on the run's axis.
        let out = m.add(b, &tick(1, 1, 1_000, 1)).unwrap();
        let seen: Vec<(u64, usize)> = out.iter().map(|t| (t.tick.index, t.segments)).collect();
        assert_eq!(seen, vec![(0, 1), (1, 2)]);
    }

    #[test]
    fn rejects_ticks_without_histograms_and_unknown_segments() {
        let mut m = TickMerger::new(TICK);
        let a = m.join();
        let mut bare = tick(0, 1, 1_000, 1);
        bare.histograms = None;
        assert_eq!(m.add(a, &bare), Err(TickError::NoHistograms(0)));
        let mut garbled = tick(0, 1, 1_000, 1);
        garbled.histograms = Some(IntervalHistograms {
            latency: "not base64!".into(),
            service: "x".into(),
        });
        assert_eq!(m.add(a, &garbled), Err(TickError::BadHistograms(0)));
        assert_eq!(
            m.add(7, &tick(0, 1, 1_000, 1)),
            Err(TickError::UnknownMember(7))
        );
        assert_eq!(m.finish(7), Err(TickError::UnknownMember(7)));
    }
}
