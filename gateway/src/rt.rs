//! The runtime's ground floor: which worker a thread is, how many there are, and threads
//! with a runtime of their own. Everything above may use it; it uses nothing of the crate
//! but the configuration.

use gatehouse_config::Config;
use std::future::Future;
use std::io;
use std::thread::JoinHandle;

thread_local! {
    static WORKER_SLOT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Which worker this thread is (a per-core runtime, or a `shared` runtime's worker thread;
/// 0 off the workers): state kept per worker, such as the proxy's connection pools, is
/// indexed by it.
pub fn worker_slot() -> usize {
    WORKER_SLOT.with(|s| s.get())
}

pub(crate) fn set_worker_slot(slot: usize) {
    WORKER_SLOT.with(|s| s.set(slot));
}

/// How many workers `config` runs, and so worker slots: runtimes in `per-core` mode, worker
/// threads in `shared` mode (there a task may move between threads, so a slot is where most
/// of a connection's work happens, not all of it).
pub fn workers(config: &Config) -> usize {
    config.worker_count()
}

/// Runs `fut` on a current-thread runtime of its own, on a thread named `name`: work kept
/// off the request path (the admin listener, ACME).
pub(crate) fn spawn_on_own_runtime<F>(name: &str, fut: F) -> io::Result<JoinHandle<()>>
where
    F: Future<Output = ()> + Send + 'static,
{
    let name = name.to_string();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(fut),
                Err(e) => tracing::error!("{name}: runtime: {e}"),
            }
        })
}

pin_project_lite::pin_project! {
    /// [`within`]'s future.
    pub(crate) struct Within<F> {
        #[pin]
        fut: F,
        limit: std::time::Duration,
        #[pin]
        timer: Option<tokio::time::Sleep>,
    }
}

/// `fut`, or `None` if it has not finished `limit` after it first had to wait. As
/// `tokio::time::timeout`, but the timer (a clock read and the runtime handle's reference
/// count, each time) is set up only if `fut` is not ready at its first poll: most of an
/// HTTP/3 response's writes are, and five timeouts a request were 2–3% of h3-1k's CPU.
/// Unlike tokio's, it does not poll its timer outside the task's coop budget: keep it for
/// futures that do not spend that budget (quinn's and h3's I/O do not).
pub(crate) fn within<F: Future>(limit: std::time::Duration, fut: F) -> Within<F> {
    Within {
        fut,
        limit,
        timer: None,
    }
}

impl<F: Future> Future for Within<F> {
    type Output = Option<F::Output>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut this = self.project();
        if let std::task::Poll::Ready(v) = this.fut.poll(cx) {
            return std::task::Poll::Ready(Some(v));
        }
        if this.timer.is_none() {
            this.timer.set(Some(tokio::time::sleep(*this.limit)));
        }
        match this.timer.as_pin_mut().map(|t| t.poll(cx)) {
            Some(std::task::Poll::Ready(())) => std::task::Poll::Ready(None),
            _ => std::task::Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::within;
    use std::future::Future;
    use std::time::Duration;

    fn run<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn within_is_the_future_or_none_after_its_limit() {
        run(async {
            assert_eq!(within(Duration::ZERO, async { 7 }).await, Some(7));
            let late = tokio::time::sleep(Duration::from_millis(200));
            assert_eq!(within(Duration::from_millis(20), late).await, None);
            let soon = async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                8
            };
            assert_eq!(within(Duration::from_secs(5), soon).await, Some(8));
            // The limit counts from the first wait, and a pending future still ends it.
            let never = std::future::pending::<()>();
            let t = tokio::time::Instant::now();
            assert_eq!(within(Duration::from_millis(30), never).await, None);
            assert!(t.elapsed() >= Duration::from_millis(30));
        });
    }
}
