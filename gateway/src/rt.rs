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
