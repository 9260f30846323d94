//! Execution segments: one process's exact, non-overlapping share of a run that
//! several processes generate together.
//!
//! A segment is a half-open interval `[start, end)` of `[0, 1)` with rational ends,
//! and a period `D`: the least common multiple of the two denominators *as written*
//! (`2/4` counts as quarters, not halves). The run's items (open-model requests,
//! closed-model slots, iteration tickets, data rows) are numbered `0, 1, 2, …`, and
//! item `k` belongs to the segment whose interval holds `(k mod D) / D`. So
//! segments of one period that tile `[0, 1)` share every item exactly once, and
//! each takes its items spread through the whole run: `--segment i/n` (`[i/n,
//! (i+1)/n)`, period `n`) owns items `i, i + n, i + 2n, …`, so the open model's
//! arrival times of the `n` processes interleave and together are the one schedule.
//!
//! Segments of different periods (`0/2` beside `2/4`) would split the items two
//! ways at once; every segment of a run must use one period (`gust merge` refuses
//! a mix).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ConfigError;

/// The largest period (`D`, in items) a segment may have. It bounds the arithmetic
/// (`j / m * D` never overflows for any count a run can reach) and is far more
/// machines than a run has.
pub const MAX_PERIOD: u64 = 1_000_000;

/// `num / den` as written (not reduced: the denominator sets the period),
/// `0 ≤ num ≤ den`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fraction {
    num: u64,
    den: u64,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl Fraction {
    fn new(num: u64, den: u64) -> Result<Self, String> {
        if den == 0 || den > MAX_PERIOD {
            return Err(format!("a denominator of {den} (1 to {MAX_PERIOD})"));
        }
        if num > den {
            return Err(format!("{num}/{den} is more than 1"));
        }
        Ok(Self { num, den })
    }

    /// "1/4", "0.25", "25%", "0" or "1".
    fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let number = |s: &str| -> Result<u64, String> {
            s.parse::<u64>()
                .map_err(|_| format!("{text:?} is not a fraction (try 1/4, 0.25 or 25%)"))
        };
        if let Some((n, d)) = t.split_once('/') {
            return Self::new(number(n)?, number(d)?);
        }
        let (digits, scale) = match t.strip_suffix('%') {
            Some(p) => (p, 100),
            None => (t, 1),
        };
        let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{text:?}: at most 6 decimal places"));
        }
        let den = 10u64.pow(frac.len() as u32) * scale;
        let whole = if whole.is_empty() && !frac.is_empty() {
            0
        } else {
            number(whole)?
        };
        let frac_value = if frac.is_empty() { 0 } else { number(frac)? };
        let num = whole
            .checked_mul(10u64.pow(frac.len() as u32))
            .and_then(|w| w.checked_add(frac_value))
            .ok_or_else(|| format!("{text:?} is more than 1"))?;
        Self::new(num, den)
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.num, self.den) {
            (0, 1) => write!(f, "0"),
            (1, 1) => write!(f, "1"),
            (n, d) => write!(f, "{n}/{d}"),
        }
    }
}

/// One process's share of a run: `[start, end)` of `[0, 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    start: Fraction,
    end: Fraction,
    /// `D`: the items repeat their owners every `period` items.
    period: u64,
    /// The residues `lo..hi` of `k mod period` are this segment's.
    lo: u64,
    hi: u64,
}

impl Default for Segment {
    /// The whole run: a process alone.
    fn default() -> Self {
        let (zero, one) = (Fraction { num: 0, den: 1 }, Fraction { num: 1, den: 1 });
        Self {
            start: zero,
            end: one,
            period: 1,
            lo: 0,
            hi: 1,
        }
    }
}

impl Segment {
    fn from_fractions(start: Fraction, end: Fraction) -> Result<Self, String> {
        if start.num * end.den >= end.num * start.den {
            return Err(format!(
                "{start}:{end} is empty (the start must be below the end)"
            ));
        }
        let period = start.den / gcd(start.den, end.den) * end.den;
        if period > MAX_PERIOD {
            return Err(format!(
                "{start}:{end} needs a period of {period} items (at most {MAX_PERIOD})"
            ));
        }
        Ok(Self {
            start,
            end,
            period,
            lo: start.num * (period / start.den),
            hi: end.num * (period / end.den),
        })
    }

    /// Segment `index` of `count` equal ones, counted from 0 (as Kubernetes'
    /// `JOB_COMPLETION_INDEX`): `[index/count, (index+1)/count)`.
    pub fn nth(index: u64, count: u64) -> Result<Self, ConfigError> {
        if count == 0 || index >= count {
            return Err(ConfigError::new(
                "segment",
                format!("{index}/{count}: the index must be below the count (from 0)"),
            ));
        }
        let fraction = |n| Fraction::new(n, count).map_err(|e| ConfigError::new("segment", e));
        Self::from_fractions(fraction(index)?, fraction(index + 1)?)
            .map_err(|e| ConfigError::new("segment", e))
    }

    /// `i/n` (segment `i` of `n`, from 0) or k6's `a:b` (fractions, decimals or
    /// percentages: `0:1/4`, `0.25:0.5`, `50%:100%`).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let t = text.trim();
        if let Some((a, b)) = t.split_once(':') {
            let start = Fraction::parse(a).map_err(|e| ConfigError::new("segment", e))?;
            let end = Fraction::parse(b).map_err(|e| ConfigError::new("segment", e))?;
            return Self::from_fractions(start, end).map_err(|e| ConfigError::new("segment", e));
        }
        let Some((i, n)) = t.split_once('/') else {
            return Err(ConfigError::new(
                "segment",
                format!("{text:?}: use i/n (from 0) or a:b"),
            ));
        };
        let number = |s: &str| {
            s.trim().parse::<u64>().map_err(|_| {
                ConfigError::new("segment", format!("{text:?}: use i/n (from 0) or a:b"))
            })
        };
        Self::nth(number(i)?, number(n)?)
    }

    /// Whether this is the whole run (no segmenting).
    pub fn is_whole(&self) -> bool {
        self.lo == 0 && self.hi == self.period
    }

    /// Items this segment owns per period.
    fn per_period(&self) -> u64 {
        self.hi - self.lo
    }

    /// Whether item `k` of the run is this segment's.
    pub fn owns(&self, k: u64) -> bool {
        (self.lo..self.hi).contains(&(k % self.period))
    }

    /// The run-wide number of this segment's `j`-th item (from 0).
    pub fn global(&self, j: u64) -> u64 {
        let m = self.per_period();
        (j / m) * self.period + self.lo + j % m
    }

    /// How many of the run's items `0..n` are this segment's.
    pub fn count_below(&self, n: u64) -> u64 {
        let rest = (n % self.period).clamp(self.lo, self.hi) - self.lo;
        (n / self.period) * self.per_period() + rest
    }

    /// The number of items after which the owners repeat (`D`). Segments of one
    /// run share it.
    pub fn period(&self) -> u64 {
        self.period
    }

    /// Whether two segments of one period share an item.
    pub fn overlaps(&self, other: &Segment) -> bool {
        self.lo < other.hi && other.lo < self.hi
    }

    /// Orders segments by where they start.
    pub fn bounds_cmp(&self, other: &Segment) -> std::cmp::Ordering {
        (self.start.num * other.start.den).cmp(&(other.start.num * self.start.den))
    }

    /// Whether `segments` (of one period) tile the run exactly: no gap, no overlap.
    pub fn tile_whole(segments: &[Segment]) -> bool {
        let Some(period) = segments.first().map(|s| s.period) else {
            return false;
        };
        let mut sorted: Vec<&Segment> = segments.iter().collect();
        sorted.sort_by_key(|s| s.lo);
        let mut at = 0;
        for s in sorted {
            if s.period != period || s.lo != at {
                return false;
            }
            at = s.hi;
        }
        at == period
    }
}

impl Segment {
    /// The parts of the run that none of `segments` (of one period, not
    /// overlapping) holds: one segment per missing item of the period (`3/4`) when
    /// the period is small enough to list, else one per uncovered range.
    pub fn gaps(segments: &[Segment]) -> Vec<Segment> {
        let Some(period) = segments.first().map(|s| s.period) else {
            return vec![Segment::default()];
        };
        let mut held: Vec<(u64, u64)> = segments.iter().map(|s| (s.lo, s.hi)).collect();
        held.sort_unstable();
        let mut uncovered = Vec::new();
        let mut at = 0;
        for (lo, hi) in held.into_iter().chain([(period, period)]) {
            if lo > at {
                uncovered.push((at, lo));
            }
            at = at.max(hi);
        }
        // Reduced, so a range reads `1/2:1`, not `2/4:4/4`.
        let reduced = |n: u64| {
            let g = gcd(n, period).max(1);
            Fraction::new(n / g, period / g)
        };
        let piece = |lo: u64, hi: u64| {
            reduced(lo)
                .and_then(|a| Ok((a, reduced(hi)?)))
                .and_then(|(a, b)| Self::from_fractions(a, b))
                .ok()
        };
        const LISTED: u64 = 64;
        uncovered
            .into_iter()
            .flat_map(|(lo, hi)| {
                if period <= LISTED {
                    (lo..hi).filter_map(|i| piece(i, i + 1)).collect::<Vec<_>>()
                } else {
                    piece(lo, hi).into_iter().collect()
                }
            })
            .collect()
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A segment one item per period wide is `[lo/D, (lo+1)/D)`: the `i/n` form
        // that `--segment` takes.
        if self.per_period() == 1 {
            return write!(f, "{}/{}", self.lo, self.period);
        }
        write!(f, "{}:{}", self.start, self.end)
    }
}

impl Serialize for Segment {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Segment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Segment::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn gaps_name_the_missing_items_or_ranges() {
        let held = |texts: &[&str]| -> Vec<String> {
            let segs: Vec<Segment> = texts.iter().map(|t| Segment::parse(t).unwrap()).collect();
            Segment::gaps(&segs)
                .iter()
                .map(Segment::to_string)
                .collect()
        };
        assert_eq!(held(&["0/4", "2/4"]), ["1/4", "3/4"]);
        assert_eq!(held(&["0/4", "1/4", "2/4", "3/4"]), Vec::<String>::new());
        assert_eq!(held(&["0:1/2"]), ["1/2"]);
        assert_eq!(Segment::gaps(&[]), vec![Segment::default()]);
        assert_eq!(held(&["0:1/100", "50/100:1"]), ["1/100:1/2"]);
        assert_eq!(held(&["0:1/1000"]), ["1/1000:1"]);
    }

    use super::*;

    fn seg(text: &str) -> Segment {
        Segment::parse(text).unwrap()
    }

    #[test]
    fn equal_segments_take_every_nth_item() {
        let s = seg("1/4");
        assert_eq!(
            (0..4).map(|j| s.global(j)).collect::<Vec<_>>(),
            [1, 5, 9, 13]
        );
        assert!(s.owns(9) && !s.owns(8));
        assert_eq!(s.count_below(10), 3); // 1, 5, 9
        assert_eq!(s.to_string(), "1/4");
        assert_eq!(seg("0:1/4").to_string(), "0/4");
        assert_eq!(seg("1/2").to_string(), "1/2");
        assert_eq!(seg("2/4").to_string(), "2/4");
        assert_eq!(seg("1/3:1").to_string(), "1/3:1");
    }

    #[test]
    fn segments_that_tile_the_run_share_every_item_exactly_once() {
        for set in [
            vec!["0/3", "1/3", "2/3"],
            vec!["0:1/3", "1/3:1"],
            vec!["0:0.25", "25%:0.60", "0.60:1"],
            vec!["0:1/4", "1/4:2/4", "2/4:1"],
            vec!["0/1"],
        ] {
            let segments: Vec<Segment> = set.iter().map(|t| seg(t)).collect();
            assert!(Segment::tile_whole(&segments), "{set:?}");
            for n in [0u64, 1, 7, 100, 1001] {
                let total: u64 = segments.iter().map(|s| s.count_below(n)).sum();
                assert_eq!(total, n, "{set:?} below {n}");
            }
            for k in 0..500u64 {
                let owners = segments.iter().filter(|s| s.owns(k)).count();
                assert_eq!(owners, 1, "{set:?}: item {k}");
            }
            for s in &segments {
                // global is the j-th owned item, in order.
                let owned: Vec<u64> = (0..500).filter(|k| s.owns(*k)).collect();
                let by_index: Vec<u64> = (0..owned.len() as u64).map(|j| s.global(j)).collect();
                assert_eq!(owned, by_index, "{s}");
                assert_eq!(s.count_below(500), owned.len() as u64);
            }
        }
    }

    #[test]
    fn finds_gaps_overlaps_and_mixed_periods() {
        assert!(!Segment::tile_whole(&[seg("0/2")]));
        assert!(!Segment::tile_whole(&[seg("0:3/6"), seg("2/6:1")]));
        assert!(seg("0:3/6").overlaps(&seg("2/6:1")));
        assert!(!seg("0/2").overlaps(&seg("1/2")));
        // Halves beside quarters split the items two ways: not a tiling.
        assert_ne!(seg("0/2").period(), seg("2/4").period());
        assert!(!Segment::tile_whole(&[seg("0/2"), seg("2/4"), seg("3/4")]));
        assert_eq!(seg("2/4:4/4").period(), 4, "the denominators as written");
    }

    #[test]
    fn rejects_bad_segments_naming_the_field() {
        for bad in [
            "4/4",
            "1/0",
            "x",
            "1/2:1/4",
            "1/3:1/3",
            "0:1.5",
            "0:0.1234567",
            "1:2",
        ] {
            let err = Segment::parse(bad).unwrap_err();
            assert_eq!(err.field, "segment", "{bad}");
        }
        assert!(Segment::parse("0:1/1000001").is_err(), "period too long");
    }

    #[test]
    fn the_default_is_the_whole_run() {
        let s = Segment::default();
        assert!(s.is_whole());
        assert_eq!(s.global(41), 41);
        assert_eq!(s.count_below(41), 41);
        assert!(seg("0:1").is_whole());
        assert!(!seg("0/2").is_whole());
    }

    #[test]
    fn round_trips_through_json() {
        for t in ["2/5", "1/3:1", "0:1"] {
            let s = seg(t);
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Segment>(&json).unwrap(), s, "{json}");
        }
    }
}
