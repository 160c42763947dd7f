//! The process series (`process_*`, as Prometheus client libraries name them), read from
//! `/proc/self` at scrape time: resident and virtual memory, open descriptors and their limit,
//! threads. Elsewhere than Linux, or when a file cannot be read, the series is left out
//! rather than reported as zero.

use std::fmt::Write as _;

/// Appends the process series to `text`.
pub(crate) fn render(text: &mut String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let kib = |field: &str| status_field(&status, field).map(|kib| kib * 1024);
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count() as u64);
    let series: [(&str, &str, Option<u64>); 5] = [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            kib("VmRSS:"),
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            kib("VmSize:"),
        ),
        ("process_open_fds", "Open file descriptors.", open_fds),
        (
            "process_max_fds",
            "The most file descriptors the process may open (soft limit).",
            open_files_limit(&limits),
        ),
        (
            "process_threads",
            "Threads of the process.",
            status_field(&status, "Threads:"),
        ),
    ];
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for (name, help, value) in series {
        if let Some(value) = value {
            let _ = writeln!(text, "# HELP {name} {help}");
            let _ = writeln!(text, "# TYPE {name} gauge");
            let _ = writeln!(text, "{name} {value}");
        }
    }
}

/// The first number after `field` in `/proc/self/status` (`VmRSS:   1234 kB`).
fn status_field(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
}

/// The soft limit of `Max open files` in `/proc/self/limits`; `None` when unlimited.
fn open_files_limit(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|soft| soft.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_limits_lines_are_read() {
        let status = "Name:\tanteroom\nVmSize:\t  20480 kB\nVmRSS:\t   1024 kB\nThreads:\t7\n";
        assert_eq!(status_field(status, "VmRSS:"), Some(1024));
        assert_eq!(status_field(status, "Threads:"), Some(7));
        assert_eq!(status_field(status, "VmSwap:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(open_files_limit(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(open_files_limit(unlimited), None);
    }
}
