//! What the peer measures with: process CPU, latency percentiles, payloads, and walserver as a
//! child process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use walclient::Bytes;

/// CPU seconds (user + system) a process has used so far, from /proc: per process, so that other
/// load on the host does not count.
pub fn process_cpu_seconds(pid: u32) -> f64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // The command name may hold spaces; the fields after its closing parenthesis do not.
    let Some(close) = text.rfind(')') else { return 0.0 };
    let fields: Vec<&str> = text[close + 2..].split(' ').collect();
    // utime and stime are fields 14 and 15 of the file, [11] and [12] after the name.
    let ticks: f64 = fields[11].parse::<f64>().unwrap_or(0.0) + fields[12].parse().unwrap_or(0.0);
    ticks / clock_ticks_per_second()
}

fn clock_ticks_per_second() -> f64 {
    // Linux has reported 100 to user space on every architecture since 2.6.
    100.0
}

/// Sorted latencies in milliseconds.
pub struct Percentiles(Vec<f64>);

impl Percentiles {
    pub fn new(mut ms: Vec<f64>) -> Self {
        ms.sort_by(f64::total_cmp);
        Percentiles(ms)
    }
    pub fn at(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0[((p * self.0.len() as f64) as usize).min(self.0.len() - 1)]
    }
    pub fn max(&self) -> f64 {
        self.0.last().copied().unwrap_or(0.0)
    }
    pub fn count_over(&self, ms: f64) -> usize {
        self.0.iter().filter(|&&v| v > ms).count()
    }
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

/// `count` entries of `bytes` each: random bytes (incompressible), or lines of a time series as
/// a metrics database writes them (compressible, like the database's own WAL entries).
pub fn payloads(count: usize, bytes: usize, time_series: bool) -> Vec<Bytes> {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..count)
        .map(|i| {
            let mut data = Vec::with_capacity(bytes + 128);
            if time_series {
                let mut row = 0u64;
                while data.len() < bytes {
                    let r = next();
                    data.extend_from_slice(
                        format!(
                            "cpu,host=host-{},region=eu-west-{} usage_user={}.{},usage_idle={}.{} {}\n",
                            (i as u64 + row) % 100,
                            row % 3,
                            r % 100,
                            (r >> 8) % 100,
                            (r >> 16) % 100,
                            (r >> 24) % 100,
                            1_700_000_000_000u64 + (i as u64) * 1000 + row
                        )
                        .as_bytes(),
                    );
                    row += 1;
                }
            } else {
                while data.len() < bytes {
                    data.extend_from_slice(&next().to_le_bytes());
                }
            }
            data.truncate(bytes);
            Bytes::from(data)
        })
        .collect()
}

/// walserver started by the peer, with the flags a benchmark needs; stopped when dropped.
pub struct Walserver {
    child: Child,
    pub address: String,
}

impl Walserver {
    pub fn start(
        binary: &str,
        brokers: &str,
        prefix: &str,
        compression: &str,
        extra: &[String],
    ) -> Result<Walserver, String> {
        let ready = PathBuf::from(format!("/tmp/walpeer-{}-{prefix}.ready", std::process::id()));
        let _ = std::fs::remove_file(&ready);
        let log = std::fs::File::create(format!("/tmp/walpeer-{prefix}.log"))
            .map_err(|e| format!("walserver log: {e}"))?;
        let mut child = Command::new(binary)
            .arg(format!("--brokers={brokers}"))
            .arg(format!("--topic_prefix={prefix}"))
            .arg("--listen=127.0.0.1:0")
            .arg("--http_listen=")
            .arg("--replication_factor=1")
            .arg("--min_insync_replicas=1")
            .arg("--log_level=warn")
            .arg(format!("--compression={compression}"))
            .arg(format!("--ready_file={}", ready.display()))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {binary}: {e}"))?;
        let started = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                if let Some(address) = text.lines().next().filter(|l| !l.is_empty()) {
                    let _ = std::fs::remove_file(&ready);
                    return Ok(Walserver { child, address: address.to_string() });
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "walserver exited during start-up ({status}); see /tmp/walpeer-{prefix}.log"
                ));
            }
            if started.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                return Err("walserver did not start within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Walserver {
    fn drop(&mut self) {
        // SIGTERM: walserver's orderly shutdown, which ends within its shutdown timeout; SIGKILL
        // if that cannot be sent or does not end it within 60 s.
        let termed = Command::new("kill")
            .arg(self.child.id().to_string())
            .status()
            .is_ok_and(|s| s.success());
        let give_up = Instant::now() + Duration::from_secs(if termed { 60 } else { 0 });
        while Instant::now() < give_up {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
