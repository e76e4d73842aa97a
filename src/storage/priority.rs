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
    /// `SCHED_IDLE` for compression's encoding threads: they run only on CPU time
    /// nothing else wants, so requests are never delayed by them (under a sustained full
    /// load, compression waits); the workers run at nice 19 ([`Self::for_workers`]).
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
        assert_eq!(
            "IDLE".parse::<BackgroundPriority>().unwrap(),
            BackgroundPriority::Idle
        );
        let err = "fast".parse::<BackgroundPriority>().unwrap_err();
        assert!(err.message().contains("'fast'"), "{err}");
    }
}
