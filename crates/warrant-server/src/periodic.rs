//! The one shape of the server's background tasks: run a pass every
//! period, the first one period after the start, until the stop signal.

use std::future::Future;
use std::time::Duration;

/// Spawns `pass` every `period` (a late tick delays the next rather than
/// bunching) until `stop` turns true or its sender is gone.
pub fn every<F, Fut>(
    period: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut pass: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                changed = stop.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            if *stop.borrow() {
                return;
            }
            pass().await;
        }
    })
}
