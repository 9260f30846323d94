//! `-memprofile`: a sampling heap profiler in the pprof format.
//!
//! [`SamplingAllocator`] wraps the `warrant` binary's allocator (mimalloc) and
//! does nothing but forward until a run asks for a heap profile: the cost on
//! the normal path is one relaxed atomic load per allocation and per free.
//! While sampling, it samples allocations the way Go's runtime does (on
//! average one per [`SAMPLE_RATE`] bytes allocated by a thread, chosen by an
//! exponential byte countdown, so larger allocations are more likely to be
//! picked), records the sampled allocation's stack, and forgets it when it is
//! freed. [`stop`] turns the samples into a pprof `Profile` with Go's heap
//! sample types (`alloc_objects`, `alloc_space`, `inuse_objects`,
//! `inuse_space`), each sample scaled by the inverse of its sampling
//! probability, so `go tool pprof` / `pprof` read it as they read Go's.
//!
//! Why not jemalloc's profiler (`tikv-jemallocator` + `jemalloc_pprof`): it
//! needs jemalloc as the binary's allocator with profiling compiled in, which
//! would change the allocator of the shipped server for the sake of a bench
//! flag. This wrapper keeps mimalloc and costs nothing measurable when off.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// Mean bytes between two samples of one thread: Go's default
/// `runtime.MemProfileRate`, so the profiles read alike.
pub const SAMPLE_RATE: u64 = 512 * 1024;
/// Frames kept per sampled stack.
const MAX_FRAMES: usize = 64;

/// Bit of [`STATE`]: an allocation went through a [`SamplingAllocator`].
const INSTALLED: u8 = 1;
/// Bit of [`STATE`]: sampling is on.
const ENABLED: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(0);

/// A lock-free filter in front of the live-sample table: a free whose
/// pointer's bit is clear was certainly not sampled and takes no lock. Bits
/// are never cleared; a stale one only costs a lookup.
const FILTER_WORDS: usize = 4096;
static FILTER: [AtomicU64; FILTER_WORDS] = [const { AtomicU64::new(0) }; FILTER_WORDS];

static SAMPLES: Mutex<Option<Samples>> = Mutex::new(None);

thread_local! {
    /// Set while this thread is inside the profiler, so the profiler's own
    /// allocations (table growth, unwinding) are neither sampled nor deadlock.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// Bytes this thread may still allocate before its next sample.
    static COUNTDOWN: Cell<i64> = const { Cell::new(0) };
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// The global allocator of the `warrant` binary: `inner` plus heap sampling
/// when a bench run asks for it.
pub struct SamplingAllocator<A> {
    inner: A,
}

impl<A> SamplingAllocator<A> {
    pub const fn new(inner: A) -> Self {
        Self { inner }
    }
}

// SAFETY: every method forwards to `inner` with the caller's own arguments,
// so `inner`'s guarantees are passed on unchanged; the sampling hooks only
// read the pointer's address and never touch the memory behind it.
unsafe impl<A: GlobalAlloc> GlobalAlloc for SamplingAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { self.inner.alloc(layout) };
        after_alloc(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { self.inner.alloc_zeroed(layout) };
        after_alloc(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        before_free(ptr);
        // SAFETY: forwarded as is (see the impl).
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        before_free(ptr);
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { self.inner.realloc(ptr, layout, new_size) };
        after_alloc(p, new_size);
        p
    }
}

#[inline]
fn after_alloc(p: *mut u8, size: usize) {
    let state = STATE.load(Ordering::Relaxed);
    if state & ENABLED != 0 {
        if !p.is_null() {
            on_alloc(p as usize, size);
        }
    } else if state & INSTALLED == 0 {
        STATE.fetch_or(INSTALLED, Ordering::Relaxed);
    }
}

#[inline]
fn before_free(p: *mut u8) {
    if STATE.load(Ordering::Relaxed) & ENABLED != 0 {
        on_free(p as usize);
    }
}

/// Runs `f` unless this thread is already inside the profiler.
fn guarded(f: impl FnOnce()) {
    let entered = BUSY.try_with(|b| !b.replace(true)).unwrap_or(false);
    if entered {
        f();
        let _ = BUSY.try_with(|b| b.set(false));
    }
}

fn filter_slot(addr: usize) -> (usize, u64) {
    // Allocations are at least 8-aligned; mix the rest of the bits.
    let h = ((addr >> 3) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let bit = (h >> 40) as usize % (FILTER_WORDS * 64);
    (bit / 64, 1u64 << (bit % 64))
}

/// A uniform draw in (0, 1] from a per-thread xorshift generator; seeded from
/// the thread-local's address, which differs per thread.
fn uniform() -> f64 {
    RNG.try_with(|r| {
        let mut x = r.get();
        if x == 0 {
            x = (r as *const Cell<u64> as u64) ^ 0x2545_F491_4F6C_DD1D;
            x |= 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    })
    .unwrap_or(0.5)
}

/// Bytes until the next sample: exponential with mean [`SAMPLE_RATE`].
fn next_countdown() -> i64 {
    (-uniform().ln() * SAMPLE_RATE as f64) as i64 + 1
}

/// How many allocations of `size` one sample stands for: the inverse of the
/// probability that the exponential countdown ends inside it.
pub fn sample_weight(size: usize, rate: u64) -> f64 {
    let p = 1.0 - (-(size as f64) / rate as f64).exp();
    if p > 0.0 { 1.0 / p } else { 1.0 }
}

fn on_alloc(addr: usize, size: usize) {
    let due = COUNTDOWN
        .try_with(|c| {
            let left = c.get() - size as i64;
            if left <= 0 {
                c.set(next_countdown());
                true
            } else {
                c.set(left);
                false
            }
        })
        .unwrap_or(false);
    if !due {
        return;
    }
    guarded(|| {
        let mut frames = [0usize; MAX_FRAMES];
        let mut n = 0;
        backtrace::trace(|f| {
            frames[n] = f.ip() as usize;
            n += 1;
            n < MAX_FRAMES
        });
        let mut guard = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = guard.as_mut() {
            s.record(addr, size, &frames[..n]);
            let (word, bit) = filter_slot(addr);
            FILTER[word].fetch_or(bit, Ordering::Relaxed);
        }
    });
}

fn on_free(addr: usize) {
    let (word, bit) = filter_slot(addr);
    if FILTER[word].load(Ordering::Relaxed) & bit == 0 {
        return;
    }
    guarded(|| {
        let mut guard = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = guard.as_mut() {
            s.live.remove(&addr);
        }
    });
}

/// Per distinct stack: estimated allocations and bytes since sampling began.
#[derive(Default, Clone, Copy)]
struct Totals {
    objects: f64,
    bytes: f64,
}

#[derive(Default)]
struct Samples {
    index: HashMap<Vec<usize>, usize>,
    stacks: Vec<(Vec<usize>, Totals)>,
    /// Sampled allocations not yet freed: address → (stack index, size).
    live: HashMap<usize, (usize, usize)>,
}

impl Samples {
    fn record(&mut self, addr: usize, size: usize, frames: &[usize]) {
        let w = sample_weight(size, SAMPLE_RATE);
        let idx = match self.index.get(frames) {
            Some(i) => *i,
            None => {
                self.stacks.push((frames.to_vec(), Totals::default()));
                self.index.insert(frames.to_vec(), self.stacks.len() - 1);
                self.stacks.len() - 1
            }
        };
        let t = &mut self.stacks[idx].1;
        t.objects += w;
        t.bytes += w * size as f64;
        self.live.insert(addr, (idx, size));
    }

    /// Each stack's estimates: allocated since the start, and still live.
    fn into_stack_samples(self) -> Vec<StackSample> {
        let mut out: Vec<StackSample> = self
            .stacks
            .into_iter()
            .map(|(frames, t)| StackSample {
                frames,
                alloc: (t.objects, t.bytes),
                inuse: (0.0, 0.0),
            })
            .collect();
        for (idx, size) in self.live.into_values() {
            if let Some(s) = out.get_mut(idx) {
                let w = sample_weight(size, SAMPLE_RATE);
                s.inuse.0 += w;
                s.inuse.1 += w * size as f64;
            }
        }
        out
    }
}

/// Whether the running binary's global allocator is a [`SamplingAllocator`]
/// (it has seen an allocation; any Rust program makes one before `main`).
pub fn installed() -> bool {
    STATE.load(Ordering::Relaxed) & (INSTALLED | ENABLED) != 0
}

/// Starts sampling (from a clean table).
pub fn start() -> anyhow::Result<()> {
    if !installed() {
        anyhow::bail!(
            "memprofile: this process's allocator is not warrant's sampling allocator \
             (run it through the `warrant` binary)"
        );
    }
    let fresh = Samples::default();
    *SAMPLES.lock().unwrap_or_else(|e| e.into_inner()) = Some(fresh);
    STATE.fetch_or(ENABLED, Ordering::SeqCst);
    Ok(())
}

/// One sampled stack and its estimates, ready for encoding.
pub struct StackSample {
    pub frames: Vec<usize>,
    pub alloc: (f64, f64),
    pub inuse: (f64, f64),
}

/// Stops sampling and returns what was sampled: allocations since [`start`]
/// and those of them still live now.
pub fn stop() -> Vec<StackSample> {
    STATE.fetch_and(!ENABLED, Ordering::SeqCst);
    let taken = SAMPLES.lock().unwrap_or_else(|e| e.into_inner()).take();
    taken.map(Samples::into_stack_samples).unwrap_or_default()
}
