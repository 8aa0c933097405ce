//! Memory freed is given back to the machine. glibc's allocator keeps what a thread's arena freed for that arena's
//! next allocations, and returns the top of the main heap only: after a tenant's flood of large objects has been
//! copied, cached and deleted, `nest up` held hundreds of megabytes it no longer used (issue 33). Every few seconds a
//! thread asks the allocator to return every free page (`malloc_trim`), which costs a walk of the free lists —
//! microseconds when little was freed.

use std::time::Duration;

/// How often freed memory is given back.
const EVERY: Duration = Duration::from_secs(5);

/// Starts the thread that gives freed memory back, for as long as the process runs.
pub fn give_back_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let spawned = std::thread::Builder::new().name("malloc-trim".into()).spawn(|| {
            loop {
                std::thread::sleep(EVERY);
                // SAFETY: malloc_trim only returns free pages of glibc's heaps to the kernel; it takes the
                // allocator's own locks and touches no memory of the program's.
                unsafe { libc::malloc_trim(0) };
            }
        });
        if let Err(error) = spawned {
            tracing::warn!(%error, "freed memory will not be given back to the machine");
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = EVERY;
}
