//! Starts walserver processes on the suite's real Kafka broker for the crate's tests.
//!
//! Needs `WALSERVER` (the binary) and `WAL_TEST_BROKERS` (the broker `scripts/test.sh` starts);
//! without them every test fails, it does not skip.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use walclient::{Client, ClientOptions};

pub struct Walserver {
    child: Child,
    /// gRPC address, HOST:PORT or unix://PATH.
    pub addr: String,
    /// The /metrics listener, HOST:PORT.
    pub http: String,
    pub dir: PathBuf,
    /// The topic prefix, for a second walserver on the same topics.
    pub prefix: String,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run these tests through scripts/test.sh, or set WALSERVER to the walserver binary and WAL_TEST_BROKERS to a Kafka broker (tests/kafka/kafka.sh)")
    })
}

/// A topic prefix no other test or run uses.
pub fn unique_prefix(test: &str) -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("rust_{test}_{}_{}", std::process::id(), nanos % 1_000_000_000)
}

impl Walserver {
    /// A walserver with topics of its own: one topic of one partition, so every namespace
    /// shares one slot and the slot's end counts every record written.
    pub fn start(test: &str, extra: &[String]) -> Walserver {
        Walserver::start_on(&unique_prefix(test), extra)
    }

    /// A walserver on the topics of `prefix` (a second one shares the first one's namespaces).
    pub fn start_on(prefix: &str, extra: &[String]) -> Walserver {
        let binary = env("WALSERVER");
        let brokers = env("WAL_TEST_BROKERS");
        let dir = std::env::temp_dir().join(format!("walclient-rust-{}", unique_prefix("ws")));
        std::fs::create_dir_all(&dir).unwrap();
        let ready = dir.join("ready");
        let log = std::fs::File::create(dir.join("walserver.log")).unwrap();
        let mut args = vec![
            format!("--brokers={brokers}"),
            format!("--topic_prefix={prefix}"),
            "--topic_count=1".into(),
            "--partitions_per_topic=1".into(),
            "--replication_factor=1".into(),
            "--min_insync_replicas=1".into(),
            "--http_listen=127.0.0.1:0".into(),
            format!("--ready_file={}", ready.display()),
        ];
        if !extra.iter().any(|a| a.starts_with("--listen=")) {
            args.push("--listen=127.0.0.1:0".into());
        }
        args.extend(extra.iter().cloned());
        let child = Command::new(&binary)
            .args(&args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        let mut server = Walserver {
            child,
            addr: String::new(),
            http: String::new(),
            dir,
            prefix: prefix.into(),
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                let lines: Vec<&str> = text.lines().collect();
                if lines.len() >= 2 {
                    server.addr = lines[0].to_string();
                    server.http = lines[1].to_string();
                    return server;
                }
            }
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("walserver exited ({status}) at start:\n{}", server.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("walserver did not start in 60 s:\n{}", server.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("walserver.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing is answered. Returns once
    /// every thread of it is stopped: the signal takes effect a moment after kill returns, and a
    /// call sent in that moment was once answered.
    pub fn pause(&self) {
        assert!(signal(self.pid(), "-STOP"), "kill -STOP failed");
        let started = Instant::now();
        while !all_threads_stopped(self.pid()) {
            assert!(started.elapsed() < Duration::from_secs(10), "walserver did not stop");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn resume(&self) {
        assert!(signal(self.pid(), "-CONT"), "kill -CONT failed");
    }

    pub fn options(&self) -> ClientOptions {
        let mut options = ClientOptions::new(self.addr.clone());
        options.timeout = Duration::from_secs(20);
        options
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.options()).await.unwrap()
    }

    /// The value of an unlabelled metric on /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let mut stream = std::net::TcpStream::connect(&self.http).unwrap();
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", self.http).unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} is not on /metrics"))
            .trim()
            .parse()
            .unwrap()
    }
}

/// Whether every thread of `pid` is stopped (state T or t in /proc).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and may hold spaces.
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
        matches!(state, Some('T') | Some('t'))
    })
}

fn signal(pid: u32, which: &str) -> bool {
    Command::new("kill").args([which, &pid.to_string()]).status().is_ok_and(|s| s.success())
}

impl Drop for Walserver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("--- walserver log ({}) ---\n{}", self.dir.display(), self.log());
        }
    }
}

/// A TCP proxy in front of walserver that can lose walserver's answers (what was sent reaches
/// walserver, what comes back is dropped, and then the connections break, as when a network
/// fails after the request went through), or turn the connections open at one moment into black
/// holes (nothing forwarded either way, no FIN, no RST: a dropped NAT entry or a host that lost
/// power) while new connections work.
pub struct Proxy {
    pub addr: String,
    swallow: std::sync::Arc<std::sync::atomic::AtomicBool>,
    kill: tokio::sync::broadcast::Sender<()>,
    accepted: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Connections accepted before this many are black holes.
    black_holed_below: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Copies `from` to `to` until either closes, dropping what `drop_now` says to; `black_hole`
/// swallows the close too (the other side never hears of it).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    drop_now: impl Fn() -> bool,
    black_hole: impl Fn() -> bool,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        let n = from.read(&mut buffer).await.unwrap_or(0);
        if n == 0 && black_hole() {
            return std::future::pending().await;
        }
        if n == 0 {
            return;
        }
        if drop_now() {
            continue;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

impl Proxy {
    pub async fn start(upstream: &str) -> Proxy {
        use std::sync::atomic::Ordering;
        use std::sync::Arc;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let swallow = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (kill, _) = tokio::sync::broadcast::channel::<()>(4);
        let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let black_holed_below = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let proxy = Proxy {
            addr,
            swallow: swallow.clone(),
            kill: kill.clone(),
            accepted: accepted.clone(),
            black_holed_below: black_holed_below.clone(),
        };
        let upstream = upstream.to_string();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                // Counted before the upstream connect, which black_hole_existing may race.
                let id = accepted.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { continue };
                let mut killed = kill.subscribe();
                let (swallow, below) = (swallow.clone(), black_holed_below.clone());
                let black_hole = move || id < below.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    let (client_in, client_out) = client.into_split();
                    let (server_in, server_out) = server.into_split();
                    let up = pump(client_in, server_out, black_hole.clone(), black_hole.clone());
                    let swallowed = {
                        let black_hole = black_hole.clone();
                        move || swallow.load(Ordering::SeqCst) || black_hole()
                    };
                    let down = pump(server_in, client_out, swallowed, black_hole);
                    // Either side closing, or kill, drops both connections.
                    tokio::select! {
                        _ = up => {}
                        _ = down => {}
                        _ = killed.recv() => {}
                    }
                });
            }
        });
        proxy
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Turns every connection open now into a black hole; later ones work.
    pub fn black_hole_existing(&self) {
        use std::sync::atomic::Ordering;
        self.black_holed_below.store(self.accepted.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Drops everything walserver sends for `time`, then breaks every connection.
    pub async fn lose_answers_for(&self, time: Duration) {
        use std::sync::atomic::Ordering;
        self.swallow.store(true, Ordering::SeqCst);
        tokio::time::sleep(time).await;
        self.swallow.store(false, Ordering::SeqCst);
        let _ = self.kill.send(());
    }

    /// Breaks every connection open now, as a restarted walserver would; later ones work.
    pub fn cut_existing(&self) {
        let _ = self.kill.send(());
    }

    pub fn start_losing_answers(&self) {
        self.swallow.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
