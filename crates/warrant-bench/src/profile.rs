//! `-cpuprofile FILE` and `-memprofile FILE`: pprof profiles of the bench
//! process (the embedded server included, since it runs in-process), taken
//! over the measured window and written after the server has drained.
//!
//! CPU: the `pprof` crate's SIGPROF sampler (99 Hz, every thread of the
//! process). Heap: [`crate::heapprof`]'s sampling allocator. Both are encoded
//! as the protobuf `perftools.profiles.Profile` that `go tool pprof` reads.

use crate::heapprof::{self, StackSample};
use anyhow::{Context, Result, anyhow};
use pprof::protos::{self, Message};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

/// CPU samples per second: pprof's (and Go's) customary rate, off the round
/// 100 so sampling does not lock step with periodic work.
const CPU_HZ: i32 = 99;

/// Profilers running over one measured window.
pub struct Profilers {
    cpu: Option<(PathBuf, pprof::ProfilerGuard<'static>)>,
    mem: Option<(PathBuf, Instant, SystemTime)>,
}

/// Profiles taken, waiting to be written once the server has drained.
pub struct Captured {
    files: Vec<(PathBuf, protos::Profile)>,
}

impl Profilers {
    /// Starts what was asked for (nothing when both are `None`).
    pub fn start(cpu: Option<&Path>, mem: Option<&Path>) -> Result<Self> {
        let mem = match mem {
            Some(path) => {
                heapprof::start()?;
                Some((path.to_path_buf(), Instant::now(), SystemTime::now()))
            }
            None => None,
        };
        let cpu = match cpu {
            Some(path) => {
                // Unwinding through these libraries from a signal handler can
                // deadlock (their own locks); pprof skips them when told.
                let guard = pprof::ProfilerGuardBuilder::default()
                    .frequency(CPU_HZ)
                    .blocklist(&["libc", "libgcc", "pthread", "vdso"])
                    .build()
                    .map_err(|e| anyhow!("cpuprofile: starting the CPU profiler: {e}"))?;
                Some((path.to_path_buf(), guard))
            }
            None => None,
        };
        Ok(Self { cpu, mem })
    }

    /// Stops the profilers and keeps their profiles for [`Captured::write`].
    pub fn stop(self) -> Result<Captured> {
        let mut files = Vec::new();
        if let Some((path, guard)) = self.cpu {
            let profile = guard
                .report()
                .build()
                .and_then(|r| r.pprof())
                .map_err(|e| anyhow!("cpuprofile: building the profile: {e}"))?;
            drop(guard);
            files.push((path, profile));
        }
        if let Some((path, started, wall)) = self.mem {
            let samples = heapprof::stop();
            let unix_nanos = wall
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i64);
            let profile = heap_profile(
                &samples,
                heapprof::SAMPLE_RATE,
                unix_nanos,
                started.elapsed().as_nanos() as i64,
                &mut resolve,
            );
            files.push((path, profile));
        }
        Ok(Captured { files })
    }
}

impl Captured {
    pub fn write(self) -> Result<()> {
        for (path, profile) in self.files {
            std::fs::write(&path, profile.encode_to_vec())
                .with_context(|| format!("writing the profile {}", path.display()))?;
        }
        Ok(())
    }
}

/// One frame of a resolved address: function, file, line (innermost first
/// when the address is inside inlined code).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub function: String,
    pub file: String,
    pub line: i64,
}

fn resolve(ip: usize) -> Vec<Frame> {
    let mut frames = Vec::new();
    backtrace::resolve(ip as *mut std::ffi::c_void, |sym| {
        frames.push(Frame {
            function: sym
                .name()
                .map_or_else(|| format!("{ip:#x}"), |n| format!("{n:#}")),
            file: sym
                .filename()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            line: sym.lineno().map_or(0, i64::from),
        });
    });
    if frames.is_empty() {
        frames.push(Frame {
            function: format!("{ip:#x}"),
            file: String::new(),
            line: 0,
        });
    }
    frames
}

/// Frames of the profiler and the allocator itself, cut from the leaf end of
/// each stack so a sample points at the code that allocated.
fn is_allocator_frame(function: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "backtrace::",
        "__rust_",
        "__rdl_",
        "alloc::alloc::",
        "<alloc::alloc::Global",
        "std::alloc::",
    ];
    function.contains("heapprof") || PREFIXES.iter().any(|p| function.starts_with(p))
}

/// Interning of the profile's string table (index 0 is the empty string).
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Self::default();
        s.id("");
        s
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The heap samples as a pprof `Profile` with Go's heap sample types; the
/// default sample type is `inuse_space`, as in Go's heap profiles.
pub fn heap_profile(
    samples: &[StackSample],
    rate: u64,
    time_nanos: i64,
    duration_nanos: i64,
    resolve: &mut dyn FnMut(usize) -> Vec<Frame>,
) -> protos::Profile {
    let mut strings = Strings::new();
    fn value_type(ty: &str, unit: &str, s: &mut Strings) -> protos::ValueType {
        protos::ValueType {
            ty: s.id(ty),
            unit: s.id(unit),
        }
    }
    let sample_type = vec![
        value_type("alloc_objects", "count", &mut strings),
        value_type("alloc_space", "bytes", &mut strings),
        value_type("inuse_objects", "count", &mut strings),
        value_type("inuse_space", "bytes", &mut strings),
    ];
    let period_type = Some(value_type("space", "bytes", &mut strings));
    let mut functions: Vec<protos::Function> = Vec::new();
    let mut function_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut locations: Vec<protos::Location> = Vec::new();
    let mut location_ids: HashMap<usize, (u64, bool)> = HashMap::new();
    let mut out_samples = Vec::new();
    for s in samples {
        let mut ids = Vec::new();
        let mut at_leaf = true;
        for &ip in &s.frames {
            let (id, allocator) = match location_ids.get(&ip) {
                Some(v) => *v,
                None => {
                    let frames = resolve(ip);
                    let allocator = frames.iter().all(|f| is_allocator_frame(&f.function));
                    let mut lines = Vec::new();
                    for f in frames {
                        let key = (f.function.clone(), f.file.clone());
                        let function_id = match function_ids.get(&key) {
                            Some(id) => *id,
                            None => {
                                let id = functions.len() as u64 + 1;
                                let name = strings.id(&f.function);
                                functions.push(protos::Function {
                                    id,
                                    name,
                                    system_name: name,
                                    filename: strings.id(&f.file),
                                    start_line: 0,
                                });
                                function_ids.insert(key, id);
                                id
                            }
                        };
                        lines.push(protos::Line {
                            function_id,
                            line: f.line,
                        });
                    }
                    let id = locations.len() as u64 + 1;
                    locations.push(protos::Location {
                        id,
                        mapping_id: 0,
                        address: ip as u64,
                        line: lines,
                        is_folded: false,
                    });
                    location_ids.insert(ip, (id, allocator));
                    (id, allocator)
                }
            };
            if at_leaf && allocator {
                continue;
            }
            at_leaf = false;
            ids.push(id);
        }
        if ids.is_empty() {
            continue;
        }
        out_samples.push(protos::Sample {
            location_id: ids,
            value: vec![
                s.alloc.0.round() as i64,
                s.alloc.1.round() as i64,
                s.inuse.0.round() as i64,
                s.inuse.1.round() as i64,
            ],
            label: Vec::new(),
        });
    }
    let default_sample_type = sample_type.last().map_or(0, |v| v.ty);
    protos::Profile {
        sample_type,
        sample: out_samples,
        mapping: Vec::new(),
        location: locations,
        function: functions,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos,
        duration_nanos,
        period_type,
        period: rate as i64,
        comment: Vec::new(),
        default_sample_type,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_resolve(ip: usize) -> Vec<Frame> {
        let name = match ip {
            1 => "__rust_alloc",
            2 => "warrant_bench::heapprof::on_alloc",
            3 => "warrant_store::writer::commit",
            4 => "main",
            _ => "?",
        };
        vec![Frame {
            function: name.into(),
            file: "src/x.rs".into(),
            line: ip as i64,
        }]
    }

    #[test]
    fn heap_samples_become_a_profile_with_gos_heap_sample_types() {
        let samples = vec![
            StackSample {
                frames: vec![1, 2, 3, 4],
                alloc: (10.4, 4096.0),
                inuse: (2.0, 1024.0),
            },
            // A stack that is all allocator is dropped.
            StackSample {
                frames: vec![1, 2],
                alloc: (1.0, 8.0),
                inuse: (0.0, 0.0),
            },
        ];
        let p = heap_profile(&samples, 512 * 1024, 7, 9, &mut fake_resolve);
        let name = |i: i64| p.string_table[i as usize].as_str();
        let types: Vec<_> = p.sample_type.iter().map(|t| name(t.ty)).collect();
        assert_eq!(
            types,
            [
                "alloc_objects",
                "alloc_space",
                "inuse_objects",
                "inuse_space"
            ]
        );
        assert_eq!(name(p.default_sample_type), "inuse_space");
        assert_eq!(p.period, 512 * 1024);
        assert_eq!(p.sample.len(), 1);
        let s = &p.sample[0];
        assert_eq!(s.value, [10, 4096, 2, 1024]);
        // The leaf is the code that allocated, not the allocator.
        let leaf = p
            .location
            .iter()
            .find(|l| l.id == s.location_id[0])
            .unwrap();
        let f = p
            .function
            .iter()
            .find(|f| f.id == leaf.line[0].function_id)
            .unwrap();
        assert_eq!(name(f.name), "warrant_store::writer::commit");
        assert_eq!(s.location_id.len(), 2);
        // It survives a protobuf round trip.
        let back = protos::Profile::decode(p.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn sample_weights_undo_the_sampling_probability() {
        let rate = 512 * 1024;
        // A tiny allocation stands for about rate/size allocations; a huge one
        // is always sampled and stands for itself.
        let w = heapprof::sample_weight(64, rate);
        assert!((w - rate as f64 / 64.0).abs() / w < 0.001, "{w}");
        assert!((heapprof::sample_weight(100 * rate as usize, rate) - 1.0).abs() < 1e-9);
        assert_eq!(heapprof::sample_weight(0, rate), 1.0);
    }
}
