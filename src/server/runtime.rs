//! The process's tokio runtime for `[server] threads`: one thread gets tokio's current-thread
//! scheduler, more get the multi-thread (work-stealing) one.
//!
//! The work-stealing scheduler does bookkeeping at every scheduling round that one thread does
//! not need (two clock reads and an exponential average for its adaptive global-queue interval,
//! its atomics): the current-thread scheduler spends about 5% fewer user-space instructions an
//! event (docs/performance.md, "where the rest goes"). `threads = 0` counts the threads this
//! process may use as `std::thread::available_parallelism` does, a container's CPU quota
//! included, so a sidecar given one CPU gets the current-thread scheduler by default.

use tokio::runtime::Builder;

/// The runtime builder for `threads` (0: as many as [`std::thread::available_parallelism`]);
/// the caller enables the drivers and builds it.
pub fn builder(threads: usize) -> Builder {
    match threads_for(threads) {
        1 => Builder::new_current_thread(),
        n => {
            let mut rt = Builder::new_multi_thread();
            rt.worker_threads(n);
            rt
        }
    }
}

/// The threads `[server] threads` asks for: itself, or the available parallelism for 0.
fn threads_for(threads: usize) -> usize {
    match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::runtime::RuntimeFlavor;

    fn built(threads: usize) -> tokio::runtime::Runtime {
        builder(threads).enable_all().build().unwrap()
    }

    #[test]
    fn one_thread_gets_the_current_thread_scheduler() {
        let rt = built(1);
        assert_eq!(rt.handle().runtime_flavor(), RuntimeFlavor::CurrentThread);
        // It serves timers and sockets as the other does.
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let (c, a) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
            assert!(c.is_ok() && a.is_ok());
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        });
    }

    #[test]
    fn more_threads_get_the_multi_thread_scheduler_with_that_many_workers() {
        let rt = built(3);
        assert_eq!(rt.handle().runtime_flavor(), RuntimeFlavor::MultiThread);
        assert_eq!(rt.metrics().num_workers(), 3);
    }

    #[test]
    fn zero_counts_the_available_parallelism() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(threads_for(0), n);
        let rt = built(0);
        let flavor = rt.handle().runtime_flavor();
        match n {
            1 => assert_eq!(flavor, RuntimeFlavor::CurrentThread),
            _ => assert_eq!(rt.metrics().num_workers(), n),
        }
    }
}
