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

    /// Freezes the process (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        assert!(signal(self.pid(), "-STOP"), "kill -STOP failed");
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

/// A TCP proxy in front of walserver that can lose walserver's answers: what was sent reaches
/// walserver, what comes back is dropped, and then the connections break, as when a network
/// fails after the request went through.
pub struct Proxy {
    pub addr: String,
    swallow: std::sync::Arc<std::sync::atomic::AtomicBool>,
    kill: tokio::sync::broadcast::Sender<()>,
}

impl Proxy {
    pub async fn start(upstream: &str) -> Proxy {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let swallow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (kill, _) = tokio::sync::broadcast::channel::<()>(4);
        let proxy = Proxy { addr, swallow: swallow.clone(), kill: kill.clone() };
        let upstream = upstream.to_string();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { continue };
                let mut killed = kill.subscribe();
                let swallow = swallow.clone();
                tokio::spawn(async move {
                    let (mut client_in, mut client_out) = client.into_split();
                    let (mut server_in, mut server_out) = server.into_split();
                    let up = tokio::io::copy(&mut client_in, &mut server_out);
                    let down = async {
                        let mut buffer = vec![0u8; 64 << 10];
                        loop {
                            let n = server_in.read(&mut buffer).await.unwrap_or(0);
                            if n == 0 {
                                return;
                            }
                            if swallow.load(Ordering::SeqCst) {
                                continue;
                            }
                            if client_out.write_all(&buffer[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
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

    /// Drops everything walserver sends for `time`, then breaks every connection.
    pub async fn lose_answers_for(&self, time: Duration) {
        use std::sync::atomic::Ordering;
        self.swallow.store(true, Ordering::SeqCst);
        tokio::time::sleep(time).await;
        self.swallow.store(false, Ordering::SeqCst);
        let _ = self.kill.send(());
    }

    pub fn start_losing_answers(&self) {
        self.swallow.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
