//! The process's own figures in the Prometheus text format, under the names every client
//! library uses: `process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds` and
//! `process_start_time_seconds`, read from `getrusage` and `/proc/self` at scrape time.
//!
//! Rendered here rather than through `metrics` because its counters are integers, and CPU
//! time must keep its microseconds for a CPU-per-request rate to be exact.

use std::fmt::Write;

/// Appends the process metrics to `out`.
pub fn render(out: &mut String) {
    if let Some(cpu) = cpu_seconds() {
        family(
            out,
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, in seconds.",
            cpu,
        );
    }
    if let Some((vsize, rss)) = memory() {
        family(
            out,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size, in bytes.",
            vsize,
        );
        family(
            out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size, in bytes.",
            rss,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        // The directory handle read here is one of them.
        let n = fds.count().saturating_sub(1);
        family(
            out,
            "process_open_fds",
            "gauge",
            "Open file descriptors.",
            n as f64,
        );
    }
    if let Some(max) = max_fds() {
        family(
            out,
            "process_max_fds",
            "gauge",
            "The open file descriptor limit.",
            max,
        );
    }
    if let Some(t) = start_time() {
        family(
            out,
            "process_start_time_seconds",
            "gauge",
            "Start time since the Unix epoch, in seconds.",
            t,
        );
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str, v: f64) {
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n\n"
    );
}

/// User + system CPU of every thread, to the microsecond.
#[allow(unsafe_code)] // FFI: getrusage.
pub fn cpu_seconds() -> Option<f64> {
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given and nothing else.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(ru.ru_utime) + secs(ru.ru_stime))
}

#[allow(unsafe_code)] // FFI: sysconf.
fn page_size() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as f64
    } else {
        4096.0
    }
}

fn memory() -> Option<(f64, f64)> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut f = statm.split_ascii_whitespace();
    let size: f64 = f.next()?.parse().ok()?;
    let resident: f64 = f.next()?.parse().ok()?;
    Some((size * page_size(), resident * page_size()))
}

#[allow(unsafe_code)] // FFI: getrlimit.
fn max_fds() -> Option<f64> {
    // SAFETY: rlimit is two integers, for which zeroes are valid.
    let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return None;
    }
    Some(rl.rlim_cur as f64)
}

#[allow(unsafe_code)] // FFI: sysconf.
fn start_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command, which is in parentheses and may hold spaces.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    // starttime is field 22 of proc(5); `rest` begins at field 3.
    let ticks: f64 = rest.split_ascii_whitespace().nth(19)?.parse().ok()?;
    let btime: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(btime + ticks / if hz > 0 { hz as f64 } else { 100.0 })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_figures_are_there_and_plausible() {
        let mut s = String::new();
        super::render(&mut s);
        let value = |name: &str| -> f64 {
            s.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("{name} missing from:\n{s}"))
        };
        assert!(value("process_cpu_seconds_total") > 0.0);
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_open_fds") >= 3.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = value("process_start_time_seconds");
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "{start} vs {now}"
        );
    }
}
