//! The run process's own load, sampled every few seconds off the training thread (the metrics
//! store's thread asks): CPU use of the process, its resident memory, and the host's memory. An
//! input-bound run (CPU at 100 %) tells itself apart from one waiting on its device.
//!
//! Linux reads `/proc/self/stat`, `/proc/self/statm` and `/proc/meminfo`; elsewhere nothing is
//! sampled. The parsers are pure functions of the files' text.

use std::time::{Duration, Instant};

/// How often a run samples itself.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// One sample of the process and the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// CPU time the process used over the last interval, as a percentage of one core (200 %:
    /// two cores busy).
    pub cpu_percent: f64,
    /// CPU time the process has used since it started, seconds (user and system).
    pub cpu_seconds: f64,
    /// Resident memory of the process, bytes.
    pub rss_bytes: u64,
    /// Host memory in use (total less available), bytes.
    pub host_used_bytes: u64,
    pub host_total_bytes: u64,
}

/// utime + stime of `/proc/self/stat`, in clock ticks. The command name (field 2) may hold
/// spaces and parentheses: the fields are counted after its last `)`.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime 14 and stime 15 (1-based over the whole line).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Resident pages, the second number of `/proc/self/statm`.
pub fn resident_pages(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse().ok()
}

/// (total, available) bytes from `/proc/meminfo` (its numbers are in kB).
pub fn host_memory(meminfo: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim_start_matches(':')
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        Some(kb * 1024)
    };
    Some((field("MemTotal")?, field("MemAvailable")?))
}

/// Samples the process: each [`CpuSampler::sample`] reports the CPU used since the one before.
pub struct CpuSampler {
    last: Option<(Instant, u64)>,
    ticks_per_second: f64,
    page_size: u64,
}

impl Default for CpuSampler {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuSampler {
    pub fn new() -> Self {
        Self {
            last: None,
            ticks_per_second: rustix::param::clock_ticks_per_second() as f64,
            page_size: rustix::param::page_size() as u64,
        }
    }

    /// A sample, or `None` where the system does not say (not Linux, an unreadable file). The
    /// first one has no interval yet: its CPU share is NaN.
    pub fn sample(&mut self) -> Option<Sample> {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let now = Instant::now();
        let ticks = cpu_ticks(&read("/proc/self/stat")?)?;
        let cpu_percent = match self.last {
            Some((then, before)) => {
                let wall = now.duration_since(then).as_secs_f64();
                let used = ticks.saturating_sub(before) as f64 / self.ticks_per_second;
                if wall > 0.0 {
                    100.0 * used / wall
                } else {
                    f64::NAN
                }
            }
            None => f64::NAN,
        };
        self.last = Some((now, ticks));
        let cpu_seconds = ticks as f64 / self.ticks_per_second;
        let rss_bytes = resident_pages(&read("/proc/self/statm")?)? * self.page_size;
        let (total, available) = host_memory(&read("/proc/meminfo")?)?;
        Some(Sample {
            cpu_percent,
            cpu_seconds,
            rss_bytes,
            host_used_bytes: total.saturating_sub(available),
            host_total_bytes: total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_parse_by_hand() {
        // A name with a space and a parenthesis; utime 1500, stime 250.
        let stat = "4242 (conelab (x) y) R 1 4242 4242 0 -1 4194304 900 0 0 0 1500 250 0 0 20 0 9 0 100 1000000 2500 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(1750));
        assert_eq!(cpu_ticks("garbage"), None);
        assert_eq!(resident_pages("51200 2500 800 10 0 3000 0\n"), Some(2500));
        let meminfo = "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20480000 kB\n";
        assert_eq!(
            host_memory(meminfo),
            Some((24_576_000 * 1024, 20_480_000 * 1024))
        );
        assert_eq!(host_memory("MemTotal: 5 kB\n"), None);
    }

    #[cfg(target_os = "linux")]
    /// The process's CPU time as the sampler reads it against getrusage(2) taken around it (a
    /// second source, to the kernel's 10 ms tick); RSS against /proc/self/status's VmRSS; the
    /// share over an interval is the CPU time used over the wall time, whatever the load.
    #[test]
    fn the_samples_agree_with_getrusage_and_status() {
        let usage = || {
            // SAFETY: getrusage fills a struct we own.
            let mut u: libc::rusage = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) }, 0);
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            secs(u.ru_utime) + secs(u.ru_stime)
        };
        let mut s = CpuSampler::new();
        let before = usage();
        let first = s.sample().expect("Linux");
        let after = usage();
        assert!(first.cpu_percent.is_nan(), "no interval yet");
        assert!(
            first.cpu_seconds >= before - 0.02 && first.cpu_seconds <= after + 0.02,
            "{before} <= {} <= {after}",
            first.cpu_seconds
        );
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let second = s.sample().expect("Linux");
        assert!(second.cpu_seconds >= first.cpu_seconds);
        assert!(second.cpu_percent.is_finite() && second.cpu_percent >= 0.0);
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let vm_rss: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS");
        let rss_kb = second.rss_bytes / 1024;
        assert!(
            rss_kb.abs_diff(vm_rss) <= vm_rss / 10 + 1024,
            "{rss_kb} kB vs VmRSS {vm_rss} kB"
        );
        assert!(second.host_used_bytes < second.host_total_bytes);
    }
}
