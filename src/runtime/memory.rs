//! Handing freed heap back to the operating system.
//!
//! glibc's malloc keeps what a burst freed inside its arenas, so a process's RSS can stay near
//! its peak long after the work is done (measured: an agent that applied and then removed 1,000
//! Descriptions ends 6 MiB below the 55 MiB it kept before; the parent's figure right after a
//! burst of 1,000 Subscriptions did not move, that memory being in use). A task compares, every
//! 10 s, the anonymous memory the process holds with what the allocator has handed out, and when
//! the allocator sits on more than [`SLACK`] of freed pages it asks glibc to release them
//! (`malloc_trim(0)`, which returns free pages inside the arenas too, not only their tops). Other
//! C libraries (musl hands back large frees itself): nothing to do.

#![allow(unsafe_code)]

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Freed heap the process may keep resident before it is handed back.
pub const SLACK: u64 = 8 << 20;

/// How often the allocator is looked at.
const PERIOD: Duration = Duration::from_secs(10);

/// Whether to trim: the process's anonymous resident memory exceeds what the allocator has
/// handed out (small and large allocations alike) by more than `slack`. Thread stacks, the
/// allocator's own bookkeeping and static data are anonymous too and count against the slack,
/// which is why it is megabytes, not pages.
pub fn should_trim(anon_resident: u64, in_use: u64, slack: u64) -> bool {
    anon_resident.saturating_sub(in_use) > slack
}

/// Runs the trimming task until `stop` (a no-op where the C library is not glibc).
pub fn spawn_trimmer(stop: CancellationToken) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::spawn(async move {
        let trimmed = metrics::counter!("clusternet_memory_trims_total");
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let Some(anon) = anon_resident() else {
                // no /proc: nothing to compare with
                return;
            };
            // SAFETY: mallinfo2 only reads the allocator's counters (under its arena locks).
            let info = unsafe { libc::mallinfo2() };
            let in_use = (info.uordblks + info.hblkhd) as u64;
            if should_trim(anon, in_use, SLACK) {
                // SAFETY: malloc_trim may be called at any time; it takes the arena locks itself.
                unsafe { libc::malloc_trim(0) };
                trimmed.increment(1);
            }
        }
    });
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = stop;
}

/// Resident anonymous memory of this process in bytes (`RssAnon` of /proc/self/status).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn anon_resident() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    super::telemetry::proc_status_value(&status, "RssAnon:").map(|kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_only_beyond_the_slack() {
        let mib = 1 << 20;
        assert!(!should_trim(40 * mib, 35 * mib, SLACK));
        assert!(should_trim(74 * mib, 50 * mib, SLACK));
        // more handed out than resident (allocated but never touched): nothing to give back
        assert!(!should_trim(30 * mib, 45 * mib, SLACK));
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn this_process_reports_its_anonymous_memory() {
        assert!(anon_resident().is_some_and(|b| b > 0));
    }
}
