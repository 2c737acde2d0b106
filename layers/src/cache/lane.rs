//! A lane onto tokio's blocking pool: jobs run in the order given, by at most `max`
//! threads at once. The disk tier's writes and unlinks go through lanes, so that a disk
//! that stopped answering (a hung network mount) holds a known number of the pool's
//! threads, and the process's other blocking work (static files' reads, name lookups)
//! still gets the rest. The queue itself is bounded by its callers: the write queue's
//! bytes, and for unlinks the index the files were taken out of.
//!
//! A runtime that shuts down drops the pool's tasks that have not started: a lane made
//! with [`Unrun::RunHere`] then runs what is left where the task is dropped, so that an
//! unlink the answer to a POST promised is not lost with a graceful stop.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct Lane {
    max: usize,
    unrun: Unrun,
    state: Mutex<State>,
}

/// What becomes of the jobs left when a task of the lane is dropped before it ran (its
/// runtime shut down).
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Unrun {
    /// They run where the task is dropped.
    RunHere,
    /// They wait for the next task, which the next job starts.
    Wait,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Tasks on the pool taking jobs from `jobs`.
    running: usize,
}

impl Lane {
    pub(crate) fn new(max: usize, unrun: Unrun) -> Arc<Lane> {
        Arc::new(Lane {
            max: max.max(1),
            unrun,
            state: Mutex::default(),
        })
    }

    /// Runs `job` on the blocking pool after the jobs queued before it; outside a tokio
    /// runtime (tests, tools), now.
    pub(crate) fn run(self: &Arc<Self>, job: impl FnOnce() + Send + 'static) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return job();
        };
        let mut s = self.lock();
        s.jobs.push_back(Box::new(job));
        if s.running >= self.max {
            // A task under way takes it.
            return;
        }
        s.running += 1;
        drop(s);
        let task = Task(Some(self.clone()));
        rt.spawn_blocking(move || task.run());
    }

    /// Jobs waiting for a task.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.lock().jobs.len()
    }

    /// No job waits, and no task runs.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> bool {
        let s = self.lock();
        s.jobs.is_empty() && s.running == 0
    }

    fn drain(&self) {
        // Taken and counted out under one lock: a job queued meanwhile either finds this
        // task still counted (and is taken by it) or not (and starts another).
        loop {
            let mut s = self.lock();
            let Some(job) = s.jobs.pop_front() else {
                s.running -= 1;
                return;
            };
            drop(s);
            // A job that panics loses itself only: the task goes on with the next.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A task of the lane on the pool, counted in `running` until it ends or is dropped unrun.
struct Task(Option<Arc<Lane>>);

impl Task {
    fn run(mut self) {
        if let Some(lane) = self.0.take() {
            lane.drain();
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        let Some(lane) = self.0.take() else { return };
        if lane.unrun == Unrun::RunHere {
            // Counted still: jobs queued meanwhile are left to this loop.
            return lane.drain();
        }
        lane.lock().running -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Jobs that block (a hung disk) hold at most `max` threads; the rest wait, and all
    /// run once the disk answers.
    #[test]
    fn blocked_jobs_hold_at_most_max_threads() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let lane = Lane::new(3, Unrun::Wait);
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let order = Arc::new(Mutex::new(Vec::new()));
        let (release, hung) = std::sync::mpsc::channel::<()>();
        let hung = Arc::new(Mutex::new(hung));
        rt.block_on(async {
            for i in 0..20 {
                let (now, most, order, hung) =
                    (now.clone(), most.clone(), order.clone(), hung.clone());
                lane.run(move || {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    order.lock().unwrap().push(i);
                    let _ = hung.lock().unwrap().recv_timeout(Duration::from_secs(10));
                    now.fetch_sub(1, Ordering::SeqCst);
                });
            }
            assert!(lane.queued() >= 17, "{} queued", lane.queued());
            for _ in 0..20 {
                let _ = release.send(());
            }
            for _ in 0..500 {
                if order.lock().unwrap().len() == 20 && lane.lock().running == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        assert_eq!(order.lock().unwrap().len(), 20, "every job ran");
        assert_eq!(lane.lock().running, 0);
        assert!(
            most.load(Ordering::SeqCst) <= 3,
            "{} at once",
            most.load(Ordering::SeqCst)
        );
        // One task takes them in the order given.
        let one = Lane::new(1, Unrun::Wait);
        let order = Arc::new(Mutex::new(Vec::new()));
        rt.block_on(async {
            for i in 0..10 {
                let order = order.clone();
                one.run(move || order.lock().unwrap().push(i));
            }
            for _ in 0..500 {
                if one.idle() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        assert_eq!(*order.lock().unwrap(), (0..10).collect::<Vec<_>>());
        // A job given after every task ended starts a new one.
        let (tx, rx) = std::sync::mpsc::channel();
        rt.block_on(async {
            lane.run(move || tx.send(()).unwrap());
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }

    #[test]
    fn a_panicking_job_leaves_the_lane_whole() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let lane = Lane::new(1, Unrun::Wait);
        let (tx, rx) = std::sync::mpsc::channel();
        rt.block_on(async {
            lane.run(|| panic!("a job's own fault"));
            lane.run(move || tx.send(()).unwrap());
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }

    /// A job given as its runtime shuts down (a POST answered during a graceful stop):
    /// the pool drops the task unrun, and the job runs there and then, or waits for the
    /// next job's task, as the lane says.
    #[test]
    fn jobs_a_shutdown_left_unrun_run_or_wait_as_the_lane_says() {
        for unrun in [Unrun::RunHere, Unrun::Wait] {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let handle = rt.handle().clone();
            rt.shutdown_timeout(Duration::from_secs(5));
            let lane = Lane::new(1, unrun);
            let ran = Arc::new(AtomicUsize::new(0));
            {
                let _in = handle.enter();
                let r = ran.clone();
                lane.run(move || {
                    r.fetch_add(1, Ordering::SeqCst);
                });
            }
            let expected = usize::from(unrun == Unrun::RunHere);
            assert_eq!(ran.load(Ordering::SeqCst), expected);
            assert_eq!(lane.queued(), 1 - expected);
            assert_eq!(lane.lock().running, 0);
            if unrun == Unrun::Wait {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let r = ran.clone();
                rt.block_on(async { lane.run(move || drop(r)) });
                rt.shutdown_timeout(Duration::from_secs(5));
                assert_eq!(ran.load(Ordering::SeqCst), 1, "the waiting job ran first");
            }
        }
    }
}
