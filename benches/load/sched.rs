//! Who waited for a CPU during a phase: the run-queue wait of a hop's threads and of the load
//! tool's own (from `/proc/<pid>/task/*/schedstat`), and how busy the whole machine was (from
//! `/proc/stat`). On a small shared machine a delivery delay's tail is often time a ready
//! thread spent waiting for a core, not work; these figures say how much.

use std::collections::HashMap;

/// Scheduler totals of a set of processes over a phase, summed over their threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sched {
    /// Time on a CPU, in nanoseconds.
    pub on_cpu_ns: u64,
    /// Time runnable but waiting for a CPU, in nanoseconds.
    pub waiting_ns: u64,
}

impl Sched {
    /// The wait in milliseconds.
    pub fn waiting_ms(&self) -> f64 {
        self.waiting_ns as f64 / 1e6
    }
}

/// Each thread's totals at one moment, by thread id.
#[derive(Debug, Clone, Default)]
pub struct Sample(HashMap<u32, Sched>);

impl Sample {
    /// What the threads alive now did since `earlier` (a thread started since counts from 0;
    /// one that exited meanwhile is not counted: thread pools come and go).
    pub fn since(&self, earlier: &Sample) -> Sched {
        let mut s = Sched::default();
        for (tid, now) in &self.0 {
            let then = earlier.0.get(tid).copied().unwrap_or_default();
            s.on_cpu_ns += now.on_cpu_ns.saturating_sub(then.on_cpu_ns);
            s.waiting_ns += now.waiting_ns.saturating_sub(then.waiting_ns);
        }
        s
    }
}

/// The threads of `pids` now.
pub fn of(pids: &[u32]) -> Sample {
    let mut out = HashMap::new();
    for p in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(tid) = t.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(line) = std::fs::read_to_string(t.path().join("schedstat")) else {
                continue;
            };
            let mut f = line
                .split_whitespace()
                .map(|v| v.parse::<u64>().unwrap_or(0));
            let on_cpu_ns = f.next().unwrap_or(0);
            let waiting_ns = f.next().unwrap_or(0);
            out.insert(
                tid,
                Sched {
                    on_cpu_ns,
                    waiting_ns,
                },
            );
        }
    }
    Sample(out)
}

/// The load tool's own threads, whose clients time the deliveries.
pub fn own() -> Sample {
    of(&[std::process::id()])
}

/// Busy and total jiffies of all CPUs since boot.
#[derive(Debug, Clone, Copy, Default)]
pub struct Machine {
    busy: u64,
    total: u64,
}

impl Machine {
    /// A sample of `/proc/stat`'s `cpu` line.
    pub fn now() -> Machine {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is inside user).
        let total: u64 = f.iter().take(8).sum();
        let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
        Machine {
            busy: total - idle,
            total,
        }
    }

    /// The share of all CPUs busy since `earlier`, in percent.
    pub fn busy_pct_since(&self, earlier: Machine) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        100.0 * self.busy.saturating_sub(earlier.busy) as f64 / total as f64
    }
}
