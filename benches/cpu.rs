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

/// Where a thread of a bench runs. By default the clients and the loopback servers' threads
/// share the first CPU the process may use, so that every client sees the same wake-ups from
/// its server whatever the scheduler would have chosen; `BENCH_PIN=split` puts the servers
/// on the last CPU instead, `BENCH_PIN=off` pins nothing.
#[derive(Clone, Copy)]
#[allow(dead_code)]
pub enum Side {
    Client,
    Server,
}

/// Pins the calling thread (and the threads it spawns later) to its side's CPU.
///
/// The CPUs are those the process could use when it first called `pin` (kept): a thread
/// spawned after the client was pinned inherits the client's one CPU, so its own affinity
/// would offer the server no other.
#[allow(dead_code)]
pub fn pin(side: Side) {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    let mode = std::env::var("BENCH_PIN").unwrap_or_default();
    if mode == "off" {
        return;
    }
    let cpus = CPUS.get_or_init(|| {
        // SAFETY: `sched_getaffinity` writes only the zeroed set we pass, which lives across
        // the call; 0 is the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Vec::new();
            }
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    });
    let (Some(&first), Some(&last)) = (cpus.first(), cpus.last()) else {
        return;
    };
    let cpu = match (side, mode.as_str()) {
        (Side::Server, "split") => last,
        _ => first,
    };
    // SAFETY: `sched_setaffinity` reads only the set we pass, which lives across the call;
    // 0 is the calling thread.
    unsafe {
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
    }
}
