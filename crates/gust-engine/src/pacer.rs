//! Waiting for the next due time with microsecond precision.
//!
//! tokio's timer wheel has a 1 ms resolution and rounds deadlines up, so an open-model
//! request would leave up to a millisecond late (that is wrk2's pacing granularity).
//! On Linux each worker instead arms a `timerfd` (nanosecond-resolution hrtimer, no
//! timer slack) and waits for it through the runtime's own epoll, so the generator
//! neither spins nor needs a second thread. Elsewhere, or if the timerfd cannot be
//! created, it falls back to tokio's timer; the lag is measured either way.

use tokio::time::Instant;

pub struct Pacer {
    #[cfg(target_os = "linux")]
    timerfd: Option<linux::TimerFd>,
}

impl Pacer {
    pub fn new() -> Self {
        Self {
            #[cfg(target_os = "linux")]
            timerfd: linux::TimerFd::new().ok(),
        }
    }

    /// Return at (or just after) `deadline`.
    pub async fn sleep_until(&self, deadline: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.timerfd
            && fd.sleep_until(deadline).await.is_ok()
        {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;
    use tokio::time::Instant;

    pub struct TimerFd {
        fd: AsyncFd<OwnedFd>,
    }

    impl TimerFd {
        pub fn new() -> io::Result<Self> {
            // SAFETY: timerfd_create takes no pointers; it returns a new descriptor or -1.
            let raw = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
            let owned = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: the OwnedFd stays open and unchanged for as long as the AsyncFd
            // owns it (it is only closed when the AsyncFd is dropped).
            let fd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE)? };
            Ok(Self { fd })
        }

        pub async fn sleep_until(&self, deadline: Instant) -> io::Result<()> {
            let now = Instant::now();
            if deadline <= now {
                return Ok(());
            }
            let wait = deadline - now;
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: wait.as_secs() as libc::time_t,
                    tv_nsec: (wait.subsec_nanos() as libc::c_long)
                        .max(i64::from(wait.as_secs() == 0) as libc::c_long),
                },
            };
            let fd = self.fd.get_ref().as_raw_fd();
            // SAFETY: `fd` is a valid timerfd; `spec` is initialised; old value not wanted.
            if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            loop {
                let mut guard = self.fd.readable().await?;
                let mut expirations = [0u8; 8];
                // SAFETY: reads at most 8 bytes into a local 8-byte buffer.
                let n = unsafe { libc::read(fd, expirations.as_mut_ptr().cast(), 8) };
                if n == 8 {
                    return Ok(());
                }
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::WouldBlock {
                    return Err(err);
                }
                guard.clear_ready();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn wakes_at_the_deadline_not_before() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let pacer = Pacer::new();
            for micros in [50u64, 300, 1_500, 2_250] {
                let deadline = Instant::now() + Duration::from_micros(micros);
                pacer.sleep_until(deadline).await;
                assert!(Instant::now() >= deadline, "woke early for {micros} µs");
            }
            // A deadline in the past returns at once.
            pacer
                .sleep_until(Instant::now() - Duration::from_millis(1))
                .await;
        });
    }
}
