//! Long-running parts that outlive a panic: each runs in a task of its own, and a panic in it is logged and the part
//! started again after a back-off, as a kubelet restarts a crashing container. A panic is a bug; this keeps one bug
//! in one controller (or one tenant's object that reaches it) from stopping every other part of a process, which it
//! did while the parts ran as futures of one task (`tokio::join!`) or had their task's `JoinError` unwrapped.
//!
//! ```no_run
//! # async fn example() {
//! nest_client::supervise::restarting("replicaset", || async { /* run the controller */ }).await;
//! # }
//! ```

use std::future::Future;
use std::time::Duration;

/// The first wait before a part is started again after a panic; it doubles with each panic in a row.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait.
const MOST_BACKOFF: Duration = Duration::from_secs(60);
/// A part that ran this long before it panicked starts again after the first back-off.
const STEADY: Duration = Duration::from_secs(300);

/// Runs `start()` in a task of its own until it returns, starting it again after a back-off (1 s doubling to 60 s)
/// whenever it panics. Returns when the part returns, or when its task is cancelled.
pub async fn restarting<F, Fut>(name: &'static str, mut start: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut backoff = FIRST_BACKOFF;
    loop {
        let started = tokio::time::Instant::now();
        let task = tokio::spawn(start());
        let aborter = task.abort_handle();
        // Dropping this future (the process stopping the part) stops the task too.
        let _stop_with_caller = AbortOnDrop(aborter);
        match task.await {
            Ok(()) => return,
            Err(error) if error.is_panic() => {
                let panic = error.into_panic();
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                if started.elapsed() >= STEADY {
                    backoff = FIRST_BACKOFF;
                }
                tracing::error!(part = name, %message, restart_in = ?backoff, "a part of this process failed; restarting it");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MOST_BACKOFF);
            }
            Err(_) => return,
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// The test's own panics are not printed (a run's output is searched for panics); any other still is.
    fn quiet_about(deliberate: &'static str) {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info.payload().downcast_ref::<&str>().copied().unwrap_or_default();
            if message != deliberate {
                default(info);
            }
        }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_part_that_panics_is_started_again_and_the_rest_go_on() {
        quiet_about("a deliberate failure of the part under test");
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = starts.clone();
        restarting("flaky", move || {
            let starts = counted.clone();
            async move {
                if starts.fetch_add(1, Ordering::SeqCst) < 2 {
                    panic!("a deliberate failure of the part under test");
                }
            }
        })
        .await;
        assert_eq!(starts.load(Ordering::SeqCst), 3, "two panics, then a run that returned");
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_supervisor_stops_the_part() {
        let (sender, mut receiver) = tokio::sync::mpsc::channel::<()>(1);
        let supervisor = tokio::spawn(restarting("forever", move || {
            let sender = sender.clone();
            async move {
                let _held = sender;
                std::future::pending::<()>().await
            }
        }));
        tokio::task::yield_now().await;
        supervisor.abort();
        let _ = supervisor.await;
        // The part's task is gone, so the last sender is dropped and the channel closes.
        assert!(receiver.recv().await.is_none());
    }
}
