//! walpeer: walserver against the path it replaces, on the same broker in the same run.
//!
//! The datanodes walserver is built for write their WAL to Kafka in-process through rskafka,
//! behind a worker that merges the requests for one topic into one produce call. walpeer drives
//! the same load through three paths, alternating them round by round, and reports the median of
//! `--runs` rounds and walserver's ratio to each:
//!   rskafka         one produce call per append call
//!   rskafka+worker  the datanode's path: calls merged per topic, one produce in flight per topic
//!   walserver       walserver (started here) through the Rust walclient
//! Region r writes to topic r % `--topics` (one partition each) on the rskafka paths, and to
//! namespace r through walserver.
//!
//! Modes:
//!   regions  a datanode's write batch: `--region_callers` closed-loop callers, each call one
//!            entry for each of `--regions_per_call` consecutive regions (from a random one) of
//!            `--regions`; rskafka produces the call's entries grouped by topic, all topics at
//!            once; walserver gets one append of them all
//!   batched  `--callers` closed-loop callers, `--batch` entries per call
//!   single   `--single_callers` closed-loop callers, one entry per call
//!   latency  open loop at `--latency_load` times walserver's single-entry rate (measured first
//!            in the same run), one entry per call: p50, p99, max, calls over 20 ms; after
//!            regions in the same run, also its write batch at that share of walserver's
//!            regions rate (`regions-latency`)
//!   replay   `--replay_mib` MiB of one region read back: walclient `Read` of one namespace
//!            against an rskafka fetch loop over a topic holding the same entries
//! CPU is per process (the peer, plus walserver on its path), in seconds per GB appended.

mod measure;
mod sinks;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use measure::{median, payloads, process_cpu_seconds, Percentiles, Walserver};
use rskafka::client::partition::{Compression, OffsetAt, PartitionClient};
use rskafka::client::{Client as KafkaClient, ClientBuilder};
use rskafka::BackoffConfig;
use sinks::{merging_workers, partition_clients, PathKind, Sink};
use tokio::task::JoinSet;
use walclient::{Bytes, Client as WalClient, ClientOptions, ReadOptions};

const REPLAY_NAMESPACE: u64 = 1_000_000;
const MODES: [&str; 5] = ["regions", "batched", "single", "latency", "replay"];

struct Args {
    brokers: String,
    walserver: String,
    modes: Vec<String>,
    seconds: f64,
    runs: usize,
    entry_bytes: usize,
    batch: usize,
    callers: usize,
    single_callers: usize,
    regions: usize,
    regions_per_call: usize,
    region_callers: usize,
    time_series: bool,
    compression: String,
    replay_mib: usize,
    latency_load: f64,
    topics: usize,
    fetch_bytes: i32,
    csv: Option<String>,
    walserver_args: Vec<String>,
    /// The broker's process, to report its CPU per GB beside each path's (same host only).
    broker_pid: Option<u32>,
    /// Added to the rskafka paths' names: which rskafka this binary was built with
    /// (scripts/walpeer_nodelay.sh builds one with TCP_NODELAY).
    rskafka_label: String,
}

const USAGE: &str =
    "walpeer --brokers=HOST:PORT --walserver=PATH [--modes=batched,single,latency,replay]
  [--seconds=5] [--runs=3] [--entry_bytes=1024] [--batch=64] [--callers=4] [--single_callers=64]
  [--regions=1000] [--regions_per_call=32] [--region_callers=8]
  [--payload=random|timeseries] [--compression=none|lz4] [--replay_mib=64] [--latency_load=0.5]
  [--topics=16] [--fetch_bytes=8388608] [--csv=FILE] [--walserver_args=--a=1,--b=2]
  [--broker_pid=PID] [--rskafka_label=TEXT] [--smoke]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        brokers: String::new(),
        walserver: String::new(),
        modes: MODES.map(String::from).to_vec(),
        seconds: 5.0,
        runs: 3,
        entry_bytes: 1024,
        batch: 64,
        callers: 4,
        single_callers: 64,
        regions: 1000,
        regions_per_call: 32,
        region_callers: 8,
        time_series: false,
        compression: "none".into(),
        replay_mib: 64,
        latency_load: 0.5,
        topics: 16,
        fetch_bytes: 8 << 20,
        csv: None,
        walserver_args: Vec::new(),
        broker_pid: None,
        rskafka_label: String::new(),
    };
    for arg in std::env::args().skip(1) {
        if arg == "--smoke" {
            // Tiny sizes, one round: proves the peer works, measures nothing.
            (a.seconds, a.runs, a.replay_mib, a.single_callers, a.regions) = (0.5, 1, 2, 8, 64);
            continue;
        }
        let (name, value) = arg
            .strip_prefix("--")
            .and_then(|s| s.split_once('='))
            .ok_or_else(|| format!("unexpected argument '{arg}'\n{USAGE}"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|_| format!("--{name}: not a number"));
        match name {
            "brokers" => a.brokers = value.into(),
            "walserver" => a.walserver = value.into(),
            "modes" => a.modes = value.split(',').map(String::from).collect(),
            "seconds" => a.seconds = number(value)?,
            "runs" => a.runs = number(value)? as usize,
            "entry_bytes" => a.entry_bytes = number(value)? as usize,
            "batch" => a.batch = number(value)? as usize,
            "callers" => a.callers = number(value)? as usize,
            "single_callers" => a.single_callers = number(value)? as usize,
            "regions" => a.regions = number(value)? as usize,
            "regions_per_call" => a.regions_per_call = number(value)? as usize,
            "region_callers" => a.region_callers = number(value)? as usize,
            "payload" => {
                a.time_series = match value {
                    "timeseries" => true,
                    "random" => false,
                    _ => return Err("--payload: random or timeseries".into()),
                }
            }
            "compression" => a.compression = value.into(),
            "replay_mib" => a.replay_mib = number(value)? as usize,
            "latency_load" => a.latency_load = number(value)?,
            "topics" => a.topics = number(value)? as usize,
            "fetch_bytes" => a.fetch_bytes = number(value)? as i32,
            "csv" => a.csv = Some(value.into()),
            "walserver_args" => a.walserver_args = value.split(',').map(String::from).collect(),
            "broker_pid" => a.broker_pid = Some(number(value)? as u32),
            "rskafka_label" => a.rskafka_label = value.into(),
            _ => return Err(format!("unknown flag --{name}\n{USAGE}")),
        }
    }
    if a.brokers.is_empty() || a.walserver.is_empty() {
        return Err(format!("--brokers and --walserver are required\n{USAGE}"));
    }
    if let Some(pid) = a.broker_pid {
        if std::fs::metadata(format!("/proc/{pid}/stat")).is_err() {
            return Err(format!("--broker_pid={pid}: no such process on this host"));
        }
    }
    if a.entry_bytes < 8 {
        return Err("--entry_bytes: at least 8 (a replayed entry starts with its number)".into());
    }
    if a.runs == 0 || a.callers == 0 || a.single_callers == 0 || a.batch == 0 || a.topics == 0 {
        return Err("--runs, --callers, --single_callers, --batch and --topics must be >= 1".into());
    }
    if a.region_callers == 0 || a.regions_per_call == 0 || a.regions_per_call > a.regions {
        return Err("--region_callers >= 1, and 1 <= --regions_per_call <= --regions".into());
    }
    if let Some(m) = a.modes.iter().find(|m| !MODES.contains(&m.as_str())) {
        return Err(format!("unknown mode '{m}': {}", MODES.join(", ")));
    }
    if !["none", "lz4"].contains(&a.compression.as_str()) {
        return Err("--compression: none or lz4".into());
    }
    Ok(a)
}

/// Everything a round needs: the three sinks, and the pids whose CPU each path costs.
struct Bench {
    args: Args,
    sinks: Vec<(PathKind, Arc<Sink>)>,
    wal: WalClient,
    walserver: Walserver,
    replay_partition: Arc<PartitionClient>,
    entries: Vec<Bytes>,
    csv: Vec<String>,
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("walpeer: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args).await {
        eprintln!("walpeer: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), String> {
    let prefix = format!("walpeer{}", std::process::id());
    // rskafka retries for ever by default: a benchmark against a broker that is gone must fail.
    let backoff = BackoffConfig { deadline: Some(Duration::from_secs(30)), ..Default::default() };
    let kafka = ClientBuilder::new(vec![args.brokers.clone()])
        .backoff_config(backoff)
        .build()
        .await
        .map_err(|e| format!("rskafka cannot reach {}: {e}", args.brokers))?;
    let result = measure(args, &kafka, &prefix).await;
    // A benchmark writes many GB: leave none of it behind on the broker, whatever happened.
    let controller = kafka.controller_client().map_err(|e| e.to_string())?;
    for topic in kafka.list_topics().await.map_err(|e| format!("rskafka list topics: {e}"))? {
        if topic.name.starts_with(&format!("{prefix}_")) {
            controller
                .delete_topic(topic.name.clone(), 10_000)
                .await
                .map_err(|e| format!("rskafka cannot delete {}: {e}", topic.name))?;
        }
    }
    result
}

/// Creates the topics and the namespaces, starts walserver (stopped when this returns), runs
/// the modes and writes the CSV.
async fn measure(args: Args, kafka: &KafkaClient, prefix: &str) -> Result<(), String> {
    let compression = match args.compression.as_str() {
        "lz4" => Compression::Lz4,
        _ => Compression::NoCompression,
    };
    let controller = kafka.controller_client().map_err(|e| e.to_string())?;
    let mut topics: Vec<String> = (0..args.topics).map(|t| format!("{prefix}_{t}")).collect();
    topics.push(format!("{prefix}_replay"));
    for topic in &topics {
        controller
            .create_topic(topic.clone(), 1, 1, 10_000)
            .await
            .map_err(|e| format!("rskafka cannot create {topic}: {e}"))?;
    }
    let mut partitions = partition_clients(kafka, &topics).await?;
    let replay_partition = partitions.pop().expect("the replay topic");

    let walserver = Walserver::start(
        &args.walserver,
        &args.brokers,
        &format!("{prefix}_wal"),
        &args.compression,
        &args.walserver_args,
    )?;
    let mut options = ClientOptions::new(walserver.address.clone());
    options.timeout = Duration::from_secs(60);
    let wal = WalClient::connect(options).await.map_err(|s| format!("walclient: {s}"))?;
    let mut regions = args.callers.max(args.single_callers);
    if args.modes.iter().any(|m| m == "regions") {
        regions = regions.max(args.regions);
    }
    let namespaces: Vec<u64> = (1..=regions as u64).collect();
    for &ns in &namespaces {
        wal.create_namespace(ns).await.map_err(|s| format!("create namespace {ns}: {s}"))?;
    }

    let sinks = vec![
        (PathKind::Direct, Arc::new(Sink::Direct { partitions: partitions.clone(), compression })),
        (
            PathKind::Merged,
            Arc::new(Sink::Merged { workers: merging_workers(&partitions, compression) }),
        ),
        (PathKind::Walserver, Arc::new(Sink::Walserver { client: wal.clone(), namespaces })),
    ];
    let entries = payloads(args.batch.max(256), args.entry_bytes, args.time_series);
    println!(
        "walpeer: {} B {} entries, compression {}, {} round(s) of {} s, walserver at {}",
        args.entry_bytes,
        if args.time_series { "time-series" } else { "random" },
        args.compression,
        args.runs,
        args.seconds,
        walserver.address
    );
    let mut bench =
        Bench { args, sinks, wal, walserver, replay_partition, entries, csv: Vec::new() };
    bench.run_modes().await?;
    if let Some(path) = &bench.args.csv {
        let mut text = "mode,path,payload,compression,round,value,unit,cpu_s_per_gb\n".to_string();
        for row in &bench.csv {
            text.push_str(row);
            text.push('\n');
        }
        std::fs::write(path, text).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

impl Bench {
    async fn run_modes(&mut self) -> Result<(), String> {
        let modes = self.args.modes.clone();
        let mut single_walserver_rate = None;
        let mut regions_walserver_rate = None;
        for mode in &modes {
            match mode.as_str() {
                "regions" => {
                    let load = Load::Regions {
                        regions: self.args.regions,
                        per_call: self.args.regions_per_call,
                    };
                    regions_walserver_rate =
                        Some(self.closed_loop("regions", self.args.region_callers, load).await?);
                }
                "batched" => {
                    let load = Load::OneRegion { batch: self.args.batch };
                    self.closed_loop("batched", self.args.callers, load).await?;
                }
                "single" => {
                    let callers = self.args.single_callers;
                    let load = Load::OneRegion { batch: 1 };
                    single_walserver_rate = Some(self.closed_loop("single", callers, load).await?);
                }
                "latency" => {
                    let max = match single_walserver_rate {
                        Some(rate) => rate,
                        None => {
                            let callers = self.args.single_callers;
                            self.closed_loop("single", callers, Load::OneRegion { batch: 1 })
                                .await?
                        }
                    };
                    let one = Load::OneRegion { batch: 1 };
                    self.latency("latency", one, max * self.args.latency_load).await?;
                    // The datanode's write batch at the same share of walserver's maximum, if
                    // regions measured it: calls of one entry for each of regions_per_call.
                    if let Some(entries_per_s) = regions_walserver_rate {
                        let per_call = self.args.regions_per_call;
                        let load = Load::Regions { regions: self.args.regions, per_call };
                        let calls_per_s = entries_per_s * self.args.latency_load / per_call as f64;
                        self.latency("regions-latency", load, calls_per_s).await?;
                    }
                }
                "replay" => self.replay().await?,
                other => unreachable!("parse_args checked mode {other}"),
            }
        }
        Ok(())
    }

    fn path_name(&self, path: PathKind) -> String {
        match path {
            PathKind::Walserver => path.name().to_string(),
            _ => format!("{}{}", path.name(), self.args.rskafka_label),
        }
    }

    fn pids(&self, path: PathKind) -> Vec<u32> {
        let mut pids = vec![std::process::id()];
        if path == PathKind::Walserver {
            pids.push(self.walserver.pid());
        }
        pids
    }

    fn cpu(&self, path: PathKind) -> f64 {
        self.pids(path).into_iter().map(process_cpu_seconds).sum()
    }

    fn record(
        &mut self,
        mode: &str,
        path: PathKind,
        round: usize,
        value: f64,
        unit: &str,
        cpu: f64,
    ) {
        self.csv.push(format!(
            "{mode},{},{},{},{round},{value:.1},{unit},{cpu:.2}",
            self.path_name(path),
            if self.args.time_series { "timeseries" } else { "random" },
            self.args.compression
        ));
    }

    /// `callers` callers appending as `load` says for `--seconds`, each path in turn, `--runs`
    /// rounds. Returns walserver's median entries/s.
    async fn closed_loop(&mut self, mode: &str, callers: usize, load: Load) -> Result<f64, String> {
        let batch = match load {
            Load::OneRegion { batch } => batch,
            Load::Regions { per_call, .. } => per_call,
        };
        let mut rates = vec![Vec::new(); self.sinks.len()];
        let mut cpus = vec![Vec::new(); self.sinks.len()];
        let mut broker_cpus = vec![Vec::new(); self.sinks.len()];
        for round in 0..self.args.runs {
            for i in 0..self.sinks.len() {
                let (path, sink) = (self.sinks[i].0, Arc::clone(&self.sinks[i].1));
                let cpu0 = self.cpu(path);
                let broker0 = self.args.broker_pid.map(process_cpu_seconds);
                let started = Instant::now();
                let stop = started + Duration::from_secs_f64(self.args.seconds);
                let mut tasks = JoinSet::new();
                for caller in 0..callers {
                    let sink = Arc::clone(&sink);
                    let entries: Vec<Bytes> = (0..batch)
                        .map(|k| self.entries[(caller + k) % self.entries.len()].clone())
                        .collect();
                    tasks.spawn(async move {
                        let mut appended = 0usize;
                        let mut call = 0u64;
                        while Instant::now() < stop {
                            match load {
                                Load::OneRegion { .. } => sink.append(caller, &entries).await?,
                                Load::Regions { regions, per_call } => {
                                    let first = splitmix64((caller as u64) << 32 | call) as usize;
                                    let picked: Vec<usize> =
                                        (0..per_call).map(|k| (first + k) % regions).collect();
                                    sink.append_regions(&picked, &entries).await?
                                }
                            }
                            appended += entries.len();
                            call += 1;
                        }
                        Ok::<usize, String>(appended)
                    });
                }
                let mut appended = 0;
                while let Some(done) = tasks.join_next().await {
                    appended += done.map_err(|e| e.to_string())??;
                }
                let seconds = started.elapsed().as_secs_f64();
                let gb = (appended * self.args.entry_bytes) as f64 / 1e9;
                let cpu_per_gb = (self.cpu(path) - cpu0) / gb;
                if let (Some(pid), Some(before)) = (self.args.broker_pid, broker0) {
                    broker_cpus[i].push((process_cpu_seconds(pid) - before) / gb);
                }
                let rate = appended as f64 / seconds;
                self.record(mode, path, round, rate, "entries/s", cpu_per_gb);
                rates[i].push(rate);
                cpus[i].push(cpu_per_gb);
            }
        }
        match load {
            Load::OneRegion { .. } => {
                println!("\n{mode}: {callers} callers, {batch} entries per call")
            }
            Load::Regions { regions, per_call } => println!(
                "\n{mode}: {callers} callers, each call one entry for each of {per_call} of \
                 {regions} regions on {} topics",
                self.args.topics
            ),
        }
        self.report(&rates, &cpus, "entries/s");
        if self.args.broker_pid.is_some() {
            // The host's two cores are shared by the broker and the path: what the path costs the
            // broker decides how much of them is left for the path itself.
            for (i, (path, _)) in self.sinks.iter().enumerate() {
                println!(
                    "  {:<28} broker CPU {:.2} s/GB, path and broker {:.2} s/GB",
                    self.path_name(*path),
                    median(&broker_cpus[i]),
                    median(&broker_cpus[i]) + median(&cpus[i])
                );
            }
        }
        Ok(median(&rates[self.sinks.len() - 1]))
    }

    fn report(&self, values: &[Vec<f64>], cpus: &[Vec<f64>], unit: &str) {
        let wal = median(values.last().expect("walserver's row"));
        println!(
            "  {:<28} {:>34} {:>12} {:>10} {:>12}",
            "path", unit, "median", "cpu s/GB", "walserver/it"
        );
        for (i, (path, _)) in self.sinks.iter().enumerate() {
            let rounds: Vec<String> = values[i].iter().map(|v| format!("{v:.0}")).collect();
            let m = median(&values[i]);
            println!(
                "  {:<28} {:>34} {:>12.0} {:>10.2} {:>12.2}",
                self.path_name(*path),
                rounds.join(" / "),
                m,
                median(&cpus[i]),
                wal / m
            );
        }
    }

    /// Open loop: one call every 1/rate s whatever the answers (one entry, spread over the
    /// regions, or one write batch of `load`); a call's latency counts from when it was due, so a stall is not hidden by the calls it held
    /// back. tokio's timer ticks every millisecond: the calls due within one leave together, and
    /// each counts up to 1 ms (0.5 ms on average) of waiting for its tick, on every path alike.
    async fn latency(&mut self, mode: &str, load: Load, rate: f64) -> Result<(), String> {
        if !(rate > 0.0 && rate.is_finite()) {
            return Err(format!("{mode}: no rate to run the open loop at ({rate} calls/s)"));
        }
        let per_call = match load {
            Load::OneRegion { batch } => batch,
            Load::Regions { per_call, .. } => per_call,
        };
        println!(
            "\n{mode}: open loop at {rate:.0} calls/s, {per_call} entr{} per call",
            if per_call == 1 { "y" } else { "ies" }
        );
        println!(
            "  {:<28} {:>8} {:>8} {:>8} {:>9} {:>12}",
            "path", "round", "p50 ms", "p99 ms", "max ms", "over 20 ms"
        );
        let regions = self.args.single_callers;
        for round in 0..self.args.runs {
            for i in 0..self.sinks.len() {
                let (path, sink) = (self.sinks[i].0, Arc::clone(&self.sinks[i].1));
                let cpu0 = self.cpu(path);
                let started = tokio::time::Instant::now();
                // At least one: a low rate times a short round (the smoke run's 0.5 s) can round
                // down to no call, and the round to no figure.
                let calls = ((rate * self.args.seconds) as usize).max(1);
                let mut tasks = JoinSet::new();
                for k in 0..calls {
                    let due = started + Duration::from_secs_f64(k as f64 / rate);
                    tokio::time::sleep_until(due).await;
                    let sink = Arc::clone(&sink);
                    let entries: Vec<Bytes> = (0..per_call)
                        .map(|i| self.entries[(k + i) % self.entries.len()].clone())
                        .collect();
                    tasks.spawn(async move {
                        match load {
                            Load::OneRegion { .. } => sink.append(k % regions, &entries).await?,
                            Load::Regions { regions, per_call } => {
                                let first = splitmix64(k as u64) as usize;
                                let picked: Vec<usize> =
                                    (0..per_call).map(|i| (first + i) % regions).collect();
                                sink.append_regions(&picked, &entries).await?
                            }
                        }
                        Ok::<f64, String>(due.elapsed().as_secs_f64() * 1e3)
                    });
                }
                let mut ms = Vec::with_capacity(calls);
                while let Some(done) = tasks.join_next().await {
                    ms.push(done.map_err(|e| e.to_string())??);
                }
                let gb = (calls * per_call * self.args.entry_bytes) as f64 / 1e9;
                let cpu_per_gb = (self.cpu(path) - cpu0) / gb;
                let p = Percentiles::new(ms);
                println!(
                    "  {:<28} {:>8} {:>8.2} {:>8.2} {:>9.1} {:>12}",
                    self.path_name(path),
                    round + 1,
                    p.at(0.5),
                    p.at(0.99),
                    p.max(),
                    p.count_over(20.0)
                );
                self.record(&format!("{mode}-p50"), path, round, p.at(0.5), "ms", cpu_per_gb);
                self.record(&format!("{mode}-p99"), path, round, p.at(0.99), "ms", cpu_per_gb);
                self.record(&format!("{mode}-max"), path, round, p.max(), "ms", cpu_per_gb);
            }
        }
        Ok(())
    }

    /// Writes `--replay_mib` MiB once into walserver's replay namespace and into the replay
    /// topic, then reads each back, alternating.
    async fn replay(&mut self) -> Result<(), String> {
        let count = (self.args.replay_mib << 20) / self.args.entry_bytes;
        let expected = (count * self.args.entry_bytes) as u64;
        let wal = Sink::Walserver { client: self.wal.clone(), namespaces: vec![REPLAY_NAMESPACE] };
        let direct = Sink::Direct {
            partitions: vec![Arc::clone(&self.replay_partition)],
            compression: match self.args.compression.as_str() {
                "lz4" => Compression::Lz4,
                _ => Compression::NoCompression,
            },
        };
        // Created now, so that its read starts after what the other modes wrote to its slot
        // (a read of a namespace scans its slot from the namespace's first record on).
        self.wal
            .create_namespace(REPLAY_NAMESPACE)
            .await
            .map_err(|s| format!("create namespace {REPLAY_NAMESPACE}: {s}"))?;
        // Entry k starts with k: a read checks that it gets every entry once and in order.
        let replay: Vec<Bytes> = (0..count)
            .map(|k| {
                let mut data = self.entries[k % self.entries.len()].to_vec();
                data[..8].copy_from_slice(&(k as u64).to_le_bytes());
                Bytes::from(data)
            })
            .collect();
        for sink in [&wal, &direct] {
            for chunk in replay.chunks(256) {
                sink.append(0, chunk).await?;
            }
        }
        let mut rates = [Vec::new(), Vec::new()];
        for round in 0..self.args.runs {
            // walserver: one Read of the namespace, as a region opening replays it.
            let cpu0 = self.cpu(PathKind::Walserver);
            let started = Instant::now();
            let mut read = ReadOptions::new(REPLAY_NAMESPACE);
            read.timeout = Some(Duration::from_secs(600));
            let mut stream = self.wal.read(read);
            let mut check = ReplayCheck::new(self.args.entry_bytes);
            while let Some(entry) = stream.next().await {
                check.next(&entry.map_err(|s| format!("walserver read: {s}"))?.data)?;
            }
            let bytes = check.bytes;
            let wal_rate = self.replayed(bytes, expected, started)?;
            let cpu = (self.cpu(PathKind::Walserver) - cpu0) / (bytes as f64 / 1e9);
            self.record("replay", PathKind::Walserver, round, wal_rate, "MiB/s", cpu);

            // rskafka: fetch from the first offset to the high watermark seen at the start.
            let cpu0 = self.cpu(PathKind::Direct);
            let started = Instant::now();
            let partition = &self.replay_partition;
            let end = partition.get_offset(OffsetAt::Latest).await.map_err(|e| e.to_string())?;
            let mut offset =
                partition.get_offset(OffsetAt::Earliest).await.map_err(|e| e.to_string())?;
            let mut check = ReplayCheck::new(self.args.entry_bytes);
            while offset < end {
                let (records, _) = partition
                    .fetch_records(offset, 1..self.args.fetch_bytes, 500)
                    .await
                    .map_err(|e| format!("rskafka fetch: {e}"))?;
                for r in records {
                    check.next(r.record.value.as_deref().unwrap_or_default())?;
                    offset = r.offset + 1;
                }
            }
            let bytes = check.bytes;
            let direct_rate = self.replayed(bytes, expected, started)?;
            let cpu = (self.cpu(PathKind::Direct) - cpu0) / (bytes as f64 / 1e9);
            self.record("replay", PathKind::Direct, round, direct_rate, "MiB/s", cpu);
            rates[0].push(direct_rate);
            rates[1].push(wal_rate);
        }
        println!("\nreplay: {} MiB of one region", self.args.replay_mib);
        println!("  {:<28} {:>34} {:>12} {:>12}", "path", "MiB/s", "median", "walserver/it");
        let wal = median(&rates[1]);
        for (name, values) in [("rskafka fetch", &rates[0]), ("walserver Read", &rates[1])] {
            let rounds: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
            println!(
                "  {:<28} {:>34} {:>12.0} {:>12.2}",
                name,
                rounds.join(" / "),
                median(values),
                wal / median(values)
            );
        }
        Ok(())
    }

    // Every entry was read (the count matches) and ReplayCheck saw them in order.
    fn replayed(&self, bytes: u64, expected: u64, started: Instant) -> Result<f64, String> {
        if bytes != expected {
            return Err(format!("replay read {bytes} bytes, wrote {expected}"));
        }
        Ok(bytes as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64())
    }
}

/// What a replay must read: entries 0, 1, 2... (each starts with its number) of one size.
/// What each call of a closed loop appends.
#[derive(Clone, Copy)]
enum Load {
    /// `batch` entries of the caller's own region.
    OneRegion { batch: usize },
    /// One entry for each of `per_call` consecutive regions of `regions`, from a random one.
    Regions { regions: usize, per_call: usize },
}

/// A well-mixed 64-bit hash (splitmix64's finalizer): the first region of each call.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct ReplayCheck {
    entry_bytes: usize,
    next: u64,
    bytes: u64,
}

impl ReplayCheck {
    fn new(entry_bytes: usize) -> Self {
        ReplayCheck { entry_bytes, next: 0, bytes: 0 }
    }
    fn next(&mut self, data: &[u8]) -> Result<(), String> {
        let number = data.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if data.len() != self.entry_bytes || number != Some(self.next) {
            return Err(format!(
                "replay read entry {number:?} of {} bytes where entry {} of {} was due",
                data.len(),
                self.next,
                self.entry_bytes
            ));
        }
        self.next += 1;
        self.bytes += data.len() as u64;
        Ok(())
    }
}
