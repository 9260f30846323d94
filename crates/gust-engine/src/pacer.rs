//! Waiting for the next due time with microsecond precision.
//!
//! tokio's timer wheel has a 1 ms resolution and rounds deadlines up, so an open-model
//! request would leave up to a millisecond late (that is wrk2's pacing granularity).
//! On Linux each worker instead arms a `timerfd` (nanosecond-resolution hrtimer, no
//! timer slack) and waits for it through the runtime's own epoll, so the generator
//! neither spins nor needs a second thread. Elsewhere, or if the timerfd cannot be
//! created, it falls back to tokio's timer; the lag is recorded either way.

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
    use std::os::fd::OwnedFd;

    use rustix::time::{
        Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
        timerfd_settime,
    };
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;
    use tokio::time::Instant;

    pub struct TimerFd {
        fd: AsyncFd<OwnedFd>,
    }

    impl TimerFd {
        pub fn new() -> io::Result<Self> {
            let owned = timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )?;
            // SAFETY: the OwnedFd stays open and unchanged for as long as the AsyncFd
            // owns it (it is only closed when the AsyncFd is dropped). tokio asks for
            // this promise because registration cannot check it.
            let fd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE)? };
            Ok(Self { fd })
        }

        pub async fn sleep_until(&self, deadline: Instant) -> io::Result<()> {
            let now = Instant::now();
            if deadline <= now {
                return Ok(());
            }
            timerfd_settime(
                self.fd.get_ref(),
                TimerfdTimerFlags::empty(),
                &one_shot(deadline - now),
            )?;
            loop {
                let mut guard = self.fd.readable().await?;
                let mut expirations = [0u8; 8];
                match rustix::io::read(self.fd.get_ref(), &mut expirations) {
                    Ok(8) => return Ok(()),
                    Ok(_) | Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }

    /// A one-shot timer value. An all-zero `it_value` would disarm the timer
    /// instead of firing at once, so a sub-nanosecond wait becomes 1 ns.
    fn one_shot(wait: std::time::Duration) -> Itimerspec {
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let secs = i64::try_from(wait.as_secs()).unwrap_or(i64::MAX);
        let nanos = i64::from(wait.subsec_nanos()).max(i64::from(secs == 0));
        Itimerspec {
            it_interval: zero,
            it_value: Timespec {
                tv_sec: secs,
                tv_nsec: nanos,
            },
        }
    }

    #[cfg(test)]
    mod tests {
        use super::one_shot;
        use std::time::Duration;

        #[test]
        fn a_zero_wait_still_arms_the_timer() {
            let spec = one_shot(Duration::ZERO);
            assert_eq!((spec.it_value.tv_sec, spec.it_value.tv_nsec), (0, 1));
            let spec = one_shot(Duration::new(2, 0));
            assert_eq!((spec.it_value.tv_sec, spec.it_value.tv_nsec), (2, 0));
            let spec = one_shot(Duration::from_micros(1_500));
            assert_eq!(
                (spec.it_value.tv_sec, spec.it_value.tv_nsec),
                (0, 1_500_000)
            );
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
