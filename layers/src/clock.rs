//! A cheap clock for the hot path's coarse deadlines.

/// Milliseconds on `CLOCK_MONOTONIC_COARSE` (since boot on Linux), for windows measured in
/// milliseconds to seconds that are read on every request: an open-file cache entry's
/// validity, an idle pooled connection's age, an ejected upstream's cooldown. The clock
/// ticks every 1 to 10 ms and a read costs about 3 ns here, against 21 ns for
/// `Instant::now`. Not for latencies: those need `Instant`.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // FFI: clock_gettime.
pub fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to. The clock exists since Linux 2.6.32,
    // so the call can't fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// Milliseconds since this clock was first read.
#[cfg(not(target_os = "linux"))]
pub fn coarse_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn moves_forward_in_milliseconds() {
        let a = super::coarse_ms();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let b = super::coarse_ms();
        // A tick of up to 10 ms either side.
        assert!((30..200).contains(&(b - a)), "{a} -> {b}");
    }
}
