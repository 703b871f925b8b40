//! CPU time as the benches measure it (shared by each bench that counts CPU, not wall time).

/// User + system CPU time of the whole process (`libc::RUSAGE_SELF`, exited threads
/// included) or of the calling thread (`libc::RUSAGE_THREAD`), in nanoseconds.
pub fn cpu_ns(who: libc::c_int) -> u64 {
    // SAFETY: `getrusage` only writes into the zeroed struct we pass, which lives across the
    // call; an all-zero `rusage` is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(who, &mut usage), 0);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}
