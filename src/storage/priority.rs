//! Background work yields the CPU to foreground requests: the lifecycle's worker threads
//! and its compression pool run at a lower scheduling priority than the HTTP handlers, so
//! on a small machine a policy catching up on a backlog takes what the requests leave
//! instead of queueing them behind its frames.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// How background threads are scheduled (Linux gives each thread its own policy and nice
/// value, and threads it starts inherit them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackgroundPriority {
    /// `SCHED_IDLE` for compression (the whole run: planning, encoding, writing,
    /// committing): it runs only on CPU time nothing else wants, so requests are never
    /// delayed by it (under a sustained full load, compression waits); the workers, and
    /// the delete runs on them, at nice 19 ([`Self::for_workers`]).
    #[default]
    Idle,
    /// nice 19: the lowest normal priority; a small share of the CPU even under full load.
    Low,
    /// As the request handlers.
    Normal,
}

impl BackgroundPriority {
    /// What the lifecycle's worker threads run at: as asked, but never idle — a worker
    /// that could wait forever under a full load would stop delete policies freeing
    /// space; only compression's encoding threads wait for idle CPU.
    pub fn for_workers(self) -> BackgroundPriority {
        match self {
            BackgroundPriority::Idle => BackgroundPriority::Low,
            other => other,
        }
    }
}

impl FromStr for BackgroundPriority {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "idle" => Ok(BackgroundPriority::Idle),
            "low" => Ok(BackgroundPriority::Low),
            "normal" => Ok(BackgroundPriority::Normal),
            _ => Err(Error::unprocessable(format!(
                "priority '{}' is not one of idle, low, normal",
                text.escape_default()
            ))),
        }
    }
}

impl fmt::Display for BackgroundPriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackgroundPriority::Idle => "idle",
            BackgroundPriority::Low => "low",
            BackgroundPriority::Normal => "normal",
        })
    }
}

/// Runs `work` on a thread of its own at `priority` (the threads it starts inherit it)
/// and returns its result; the calling thread keeps its own priority. A panic in `work`
/// goes on in the caller. When no thread can be started, `work` runs on the caller, at
/// the caller's priority.
///
/// Why a thread: a thread may always lower its priority but, unprivileged, may not raise
/// it again (leaving `SCHED_IDLE` for nice 19 needs an `RLIMIT_NICE` few systems grant),
/// so a worker that runs compress and delete policies in turn keeps its own priority and
/// lowers a run's thread instead.
pub fn run_at<T: Send>(priority: BackgroundPriority, work: impl FnOnce() -> T + Send) -> T {
    let work = std::sync::Mutex::new(Some(work));
    let take = || {
        work.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    };
    let spawned = std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("halflife-run".into())
            .spawn_scoped(scope, || {
                run_in_background(priority);
                take().map(|work| work())
            });
        match thread {
            Ok(thread) => match thread.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            },
            Err(e) => {
                log::warn!("could not start a thread at priority {priority}: {e}");
                None
            }
        }
    });
    match spawned {
        Some(result) => result,
        None => (take().expect("the work runs once: its thread did not take it"))(),
    }
}

/// The nice value of [`BackgroundPriority::Low`].
const LOW_NICE: i32 = 19;

/// Runs the calling thread (and the threads it starts from now on) at `priority`. A
/// failure is logged and changes nothing else: the work runs all the same.
pub fn run_in_background(priority: BackgroundPriority) {
    // SAFETY: the calls take plain values (0 is the calling thread) and have no memory
    // preconditions; a thread may always lower its own priority.
    let result = unsafe {
        match priority {
            BackgroundPriority::Normal => return,
            BackgroundPriority::Idle => {
                let param = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(0, libc::SCHED_IDLE, &param)
            }
            BackgroundPriority::Low => {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, tid, LOW_NICE)
            }
        }
    };
    if result != 0 {
        log::warn!(
            "could not run a background thread at priority {priority}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The names (as the kernel keeps them: 15 bytes at most) of the threads that run
/// lifecycle work: a run's own thread and those it starts (`halflife-run`), and the
/// compression pools' (`halflife-compress-N`).
pub const BACKGROUND_THREADS: [&str; 2] = ["halflife-run", "halflife-compre"];

/// A thread raised to normal priority by [`raise_threads`], and how it ran before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaisedThread {
    tid: libc::pid_t,
    name: String,
    policy: libc::c_int,
    nice: libc::c_int,
}

/// Raises to normal priority every thread of this process whose name starts with one of
/// `names` and that runs below it (`SCHED_IDLE`, or a positive nice value); returns them
/// to lower again ([`lower_again`]). A thread lowered this way can be raised only by a
/// process with `CAP_SYS_NICE`, or whose `RLIMIT_NICE` allows nice 0 (`LimitNICE=-20`
/// under systemd): otherwise the error, with nothing changed.
pub fn raise_threads(names: &[&str]) -> std::io::Result<Vec<RaisedThread>> {
    let mut raised = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        let task = task?;
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else {
            continue; // the thread ended
        };
        let name = name.trim_end().to_string();
        if !names.iter().any(|n| name.starts_with(n)) {
            continue;
        }
        // SAFETY: plain queries and changes of a thread of this process by its id.
        // (A thread that ended meanwhile answers -1 to both: skipped below.)
        let (policy, nice) = unsafe {
            let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
            (libc::sched_getscheduler(tid), nice)
        };
        if policy != libc::SCHED_IDLE && nice <= 0 {
            continue;
        }
        let thread = RaisedThread {
            tid,
            name,
            policy,
            nice,
        };
        // SAFETY: as above.
        let failed = unsafe {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) != 0
                || libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 0) != 0
        };
        if failed {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::ESRCH) {
                continue; // it ended meanwhile
            }
            lower_again(&raised);
            lower_again(std::slice::from_ref(&thread));
            return Err(error);
        }
        raised.push(thread);
    }
    Ok(raised)
}

/// Lowers the threads [`raise_threads`] raised back to how they ran, those still there
/// under the same name (lowering needs no privilege).
pub fn lower_again(raised: &[RaisedThread]) {
    for thread in raised {
        let comm = format!("/proc/self/task/{}/comm", thread.tid);
        if !std::fs::read_to_string(comm).is_ok_and(|n| n.trim_end() == thread.name) {
            continue;
        }
        // SAFETY: plain changes of a thread of this process by its id.
        unsafe {
            libc::setpriority(
                libc::PRIO_PROCESS,
                thread.tid as libc::id_t,
                thread.nice.max(0),
            );
            if thread.policy == libc::SCHED_IDLE {
                let param = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(thread.tid, libc::SCHED_IDLE, &param);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn background_threads_run_lower_and_the_caller_does_not() {
        // SAFETY: plain queries of the calling thread.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let nice = || unsafe {
            libc::getpriority(
                libc::PRIO_PROCESS,
                libc::syscall(libc::SYS_gettid) as libc::id_t,
            )
        };
        let mine = (policy(), nice());
        let idle = in_thread(move || {
            run_in_background(BackgroundPriority::Idle);
            policy()
        });
        assert_eq!(idle, libc::SCHED_IDLE);
        let low = in_thread(move || {
            run_in_background(BackgroundPriority::Low);
            nice()
        });
        assert_eq!(low, LOW_NICE);
        let normal = in_thread(move || {
            run_in_background(BackgroundPriority::Normal);
            (policy(), nice())
        });
        assert_eq!(normal, mine);
        assert_eq!((policy(), nice()), mine, "the caller keeps its priority");
        // run_at: the work runs lowered, the caller stays as it was, panics go on.
        assert_eq!(run_at(BackgroundPriority::Idle, policy), libc::SCHED_IDLE);
        assert_eq!(run_at(BackgroundPriority::Low, nice), LOW_NICE);
        assert_eq!((policy(), nice()), mine, "the caller keeps its priority");
        let panicked =
            std::panic::catch_unwind(|| run_at(BackgroundPriority::Idle, || panic!("boom")));
        assert!(panicked.is_err());
        assert_eq!(
            "IDLE".parse::<BackgroundPriority>().unwrap(),
            BackgroundPriority::Idle
        );
        let err = "fast".parse::<BackgroundPriority>().unwrap_err();
        assert!(err.message().contains("'fast'"), "{err}");
    }
}
