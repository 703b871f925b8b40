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

/// Where a thread of a bench runs: the clients on the first CPU the process may use, the
/// loopback servers on the last (the same one when there is one), so that every client
/// sees the same wake-ups from its server whatever the scheduler would have chosen.
#[derive(Clone, Copy)]
#[allow(dead_code)]
pub enum Side {
    Client,
    Server,
}

/// Pins the calling thread (and the threads it spawns later) to its side's CPU.
#[allow(dead_code)]
pub fn pin(side: Side) {
    let mode = std::env::var("BENCH_PIN").unwrap_or_default();
    if mode == "off" {
        return;
    }
    // SAFETY: `sched_getaffinity`/`sched_setaffinity` read and write only the zeroed set
    // we pass, which lives across the calls; 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        let (Some(&first), Some(&last)) = (cpus.first(), cpus.last()) else {
            return;
        };
        let cpu = match (side, mode.as_str()) {
            (Side::Server, "same") | (Side::Client, _) => first,
            (Side::Server, _) => last,
        };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
    }
}
