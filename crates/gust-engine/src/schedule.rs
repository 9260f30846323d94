//! Pure pacing: when each request of an open-model run is due, and how many closed
//! slots are active at a given time.
//!
//! The open schedule is defined by the cumulative count `N(t) = ∫₀ᵗ rate`: request `k`
//! (0-based) is due at the `t` where `N(t) = k`. This is fractional-carry pacing taken
//! to its limit — nothing is ever rounded, so 1,500/s over 5 s is exactly 7,500 due
//! times, each known to the nanosecond. Workers take interleaved sequence numbers
//! (`w, w + W, w + 2W, …`), so a rate below the worker count still paces correctly
//! (wrk2 runs such rates unthrottled).

use std::time::Duration;

use crate::spec::Stage;

/// One linear piece of the rate (or concurrency) profile.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Segment {
    start: f64,
    len: f64,
    from: f64,
    to: f64,
    /// `N` at `start`.
    cumulative: f64,
}

/// Piecewise-linear profile (rate in req/s or concurrency in slots) over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    segments: Vec<Segment>,
}

impl Profile {
    /// A constant value for `duration` (unbounded when `None`).
    pub fn constant(value: f64, duration: Option<Duration>) -> Self {
        let len = duration.map_or(f64::INFINITY, |d| d.as_secs_f64());
        Self {
            segments: vec![Segment {
                start: 0.0,
                len,
                from: value,
                to: value,
                cumulative: 0.0,
            }],
        }
    }

    /// Ramp from 0 through each stage's target.
    pub fn stages(stages: &[Stage]) -> Self {
        let mut segments = Vec::with_capacity(stages.len());
        let (mut start, mut from, mut cumulative) = (0.0, 0.0, 0.0);
        for s in stages {
            let len = s.duration.as_secs_f64();
            if len > 0.0 {
                segments.push(Segment {
                    start,
                    len,
                    from,
                    to: s.target,
                    cumulative,
                });
                cumulative += (from + s.target) / 2.0 * len;
                start += len;
            }
            from = s.target;
        }
        Self { segments }
    }

    /// Value at `t` seconds (0 outside the profile).
    pub fn value_at(&self, t: f64) -> f64 {
        for s in &self.segments {
            if t >= s.start && t < s.start + s.len {
                if s.len.is_infinite() {
                    return s.from;
                }
                return s.from + (s.to - s.from) * (t - s.start) / s.len;
            }
        }
        0.0
    }

    /// Total count the profile delivers (`N(end)`).
    pub fn total(&self) -> f64 {
        self.segments
            .last()
            .map_or(0.0, |s| s.cumulative + (s.from + s.to) / 2.0 * s.len)
    }
}

/// Due times of an open-model schedule, walked with a monotone cursor.
#[derive(Debug, Clone)]
pub struct OpenSchedule {
    profile: Profile,
    cursor: usize,
}

impl OpenSchedule {
    pub fn new(profile: Profile) -> Self {
        Self { profile, cursor: 0 }
    }

    /// When request `k` is due, or `None` if the profile ends first. Calls must use
    /// non-decreasing `k` (the cursor only moves forward).
    pub fn due(&mut self, k: u64) -> Option<Duration> {
        let k = k as f64;
        while let Some(s) = self.profile.segments.get(self.cursor) {
            let m = k - s.cumulative;
            let slope = if s.len.is_infinite() {
                0.0
            } else {
                (s.to - s.from) / s.len
            };
            // Solve from·x + slope·x²/2 = m for the smallest x ≥ 0, in the form
            // 2m / (from + √(from² + 2·slope·m)) that stays exact when slope → 0.
            let disc = s.from * s.from + 2.0 * slope * m;
            if m >= 0.0 && disc >= 0.0 {
                let denom = s.from + disc.sqrt();
                let x = if m == 0.0 {
                    Some(0.0)
                } else if denom > 0.0 {
                    Some(2.0 * m / denom)
                } else {
                    None
                };
                if let Some(x) = x
                    && x < s.len
                {
                    return Some(Duration::from_secs_f64(s.start + x));
                }
            }
            self.cursor += 1;
        }
        None
    }
}

/// Number of requests due strictly before `t` (for tests and reports).
pub fn due_before(profile: &Profile, t: Duration) -> u64 {
    let mut schedule = OpenSchedule::new(profile.clone());
    let mut k = 0;
    while let Some(d) = schedule.due(k) {
        if d >= t {
            break;
        }
        k += 1;
    }
    k
}

/// Is closed-model slot `slot` active at `t` seconds? Active slots are the
/// (linearly interpolated) concurrency rounded to the nearest whole slot.
pub fn slot_active(profile: &Profile, slot: usize, t: f64) -> bool {
    profile.value_at(t).round() > slot as f64
}

/// Deterministic, dependency-free PRNG (xorshift64*) for think times: each worker seeds
/// its own, so no lock and no syscall per draw.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Exponentially distributed with the given mean.
    pub fn exponential(&mut self, mean: Duration) -> Duration {
        Duration::from_secs_f64(-self.unit().ln() * mean.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn constant_rate_delivers_exactly_rate_times_duration() {
        for (rate, dur) in [
            (50.0, 5.0),
            (1500.0, 5.0),
            (20_000.0, 5.0),
            (3.0, 1.0),
            (0.5, 4.0),
        ] {
            let p = Profile::constant(rate, Some(secs(dur)));
            assert_eq!(
                due_before(&p, secs(dur)),
                (rate * dur) as u64,
                "rate {rate}"
            );
        }
    }

    #[test]
    fn fractional_rates_are_not_rounded() {
        // 1,500/s over 1 s is 1,500, not 1,000 (the 1 ms-tick rounding trap).
        let p = Profile::constant(1500.0, Some(secs(1.0)));
        assert_eq!(due_before(&p, secs(1.0)), 1500);
        // 2.5/s over 2 s is 5 (0, .4, .8, 1.2, 1.6).
        let p = Profile::constant(2.5, Some(secs(2.0)));
        assert_eq!(due_before(&p, secs(2.0)), 5);
    }

    #[test]
    fn due_times_are_evenly_spaced_to_the_nanosecond() {
        let mut s = OpenSchedule::new(Profile::constant(1500.0, Some(secs(1.0))));
        assert_eq!(s.due(0), Some(Duration::ZERO));
        let d = s.due(3).unwrap();
        assert!((d.as_secs_f64() - 0.002).abs() < 1e-9);
        assert_eq!(s.due(1500), None);
    }

    #[test]
    fn interleaved_workers_cover_the_schedule_exactly_once() {
        let p = Profile::constant(7.0, Some(secs(1.0)));
        let workers = 16; // more workers than requests per second
        let mut total = 0;
        for w in 0..workers {
            let mut s = OpenSchedule::new(p.clone());
            let mut k = w;
            while s.due(k).is_some() {
                total += 1;
                k += workers;
            }
        }
        assert_eq!(total, 7);
    }

    #[test]
    fn ramps_integrate_linearly_up_and_down() {
        // 0 → 100 over 2 s (100 requests), hold 100 for 1 s (100), 100 → 0 over 2 s (100).
        let stages = crate::spec::parse_stages("2s:100,1s:100,2s:0").unwrap();
        let p = Profile::stages(&stages);
        assert!((p.total() - 300.0).abs() < 1e-9);
        assert_eq!(due_before(&p, secs(5.0)), 300);
        assert_eq!(due_before(&p, secs(2.0)), 100);
        assert!((p.value_at(1.0) - 50.0).abs() < 1e-9);
        assert!((p.value_at(4.0) - 50.0).abs() < 1e-9);
        // Quadratic ramp-up: N(t) = 25 t², so request 25 is due at t = 1 s.
        let mut s = OpenSchedule::new(p);
        assert!((s.due(25).unwrap().as_secs_f64() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn zero_length_stage_is_a_jump() {
        let stages = crate::spec::parse_stages("0s:10,1s:10").unwrap();
        let p = Profile::stages(&stages);
        assert_eq!(due_before(&p, secs(1.0)), 10);
    }

    #[test]
    fn closed_slots_follow_the_concurrency_ramp() {
        let stages = crate::spec::parse_stages("0s:2,1s:2,1s:4").unwrap();
        let p = Profile::stages(&stages);
        assert!(slot_active(&p, 1, 0.5));
        assert!(!slot_active(&p, 2, 0.5));
        assert!(slot_active(&p, 3, 1.99));
        assert!(!slot_active(&p, 0, 2.5));
    }

    #[test]
    fn exponential_draws_have_the_requested_mean() {
        let mut rng = Rng::new(7);
        let n = 100_000;
        let mean: f64 = (0..n)
            .map(|_| rng.exponential(Duration::from_millis(10)).as_secs_f64())
            .sum::<f64>()
            / n as f64;
        assert!((mean - 0.010).abs() < 0.0005, "{mean}");
    }
}
