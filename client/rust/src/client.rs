use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use prost::Message;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Request, Status};

use crate::append_stream::{AppendStreamer, MAX_MESSAGE_BYTES};
use crate::proto::wal_service_client::WalServiceClient;
use crate::proto::{self, AppendRequest, Entry, Namespace};

/// How to reach walserver and how patient to be. [`ClientOptions::new`] gives the defaults.
/// Its `Debug` output leaves the bearer token out.
#[derive(Clone)]
pub struct ClientOptions {
    /// walserver's address: `HOST:PORT`, `http://HOST:PORT`, `https://HOST:PORT` or
    /// `unix:///path/to/socket` (the sidecar's socket).
    pub target: String,
    /// Deadline of each call, retries included, unless the call says otherwise. 30 s.
    pub timeout: Duration,
    /// Retries of safe calls after `Unavailable`; 0 turns retries off. 4.
    pub max_retries: u32,
    /// First wait before a retry; doubled after each retry up to 2 s, with jitter. 100 ms.
    pub retry_backoff: Duration,
    /// Deadline of each attempt of an append, so that a lost answer leaves time for a retry
    /// within `timeout`. 10 s.
    pub append_attempt_timeout: Duration,
    /// Appends travel on one shared `AppendStream` call (true, the default); false: one unary
    /// `Append` call each.
    pub append_stream: bool,
    /// Send a CRC-32C with every entry appended, and check the one every entry read carries
    /// (see "Checksums" in the crate docs). True.
    pub checksums: bool,
    /// Identifies this client's appends (see "Retry-safe appends"); 0 picks a random id. Give
    /// two clients the same id only if they never append to the same namespace, and never reuse
    /// an id after the client that had it stopped: sequences start at 1 again, and reads drop an
    /// entry whose sequence they already saw for its id and namespace, as a retried copy.
    pub writer_id: u64,
    /// HTTP/2 keepalive: ping walserver when nothing came from it for `keepalive_time`, and drop
    /// the connection when the answer takes longer than `keepalive_timeout`. Its calls end
    /// `Unavailable` and the next ones go on a new connection, so a connection cut off without a
    /// FIN (a dropped NAT entry, a host that lost power) is noticed within the sum of the two.
    /// Zero: no pings; else at least 1 s (walserver refuses faster pings). 10 s and 5 s.
    pub keepalive_time: Duration,
    /// See `keepalive_time`.
    pub keepalive_timeout: Duration,
    /// Sent with every call as `authorization: Bearer <auth_token>` when not empty (walserver's
    /// `--auth_token_file`).
    pub auth_token: String,
    /// TLS: PEM CA certificates to verify walserver with (none: plaintext, unless the target
    /// says `https://`, which then needs this).
    pub tls_ca_file: Option<PathBuf>,
    /// This client's PEM certificate and key, for a walserver that requires one
    /// (`--tls_client_ca_file`).
    pub tls_cert_file: Option<PathBuf>,
    /// The key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
}

impl ClientOptions {
    /// The defaults, for walserver at `target`.
    pub fn new(target: impl Into<String>) -> Self {
        ClientOptions {
            target: target.into(),
            timeout: Duration::from_secs(30),
            max_retries: 4,
            retry_backoff: Duration::from_millis(100),
            append_attempt_timeout: Duration::from_secs(10),
            append_stream: true,
            checksums: true,
            writer_id: 0,
            keepalive_time: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(5),
            auth_token: String::new(),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token = if self.auth_token.is_empty() { "" } else { "<redacted>" };
        f.debug_struct("ClientOptions")
            .field("target", &self.target)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_backoff", &self.retry_backoff)
            .field("append_attempt_timeout", &self.append_attempt_timeout)
            .field("append_stream", &self.append_stream)
            .field("checksums", &self.checksums)
            .field("writer_id", &self.writer_id)
            .field("keepalive_time", &self.keepalive_time)
            .field("keepalive_timeout", &self.keepalive_timeout)
            .field("auth_token", &token)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .finish()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions::new("127.0.0.1:50051")
    }
}

/// What [`Client::create_namespace`] returns.
#[derive(Clone, Debug)]
pub struct CreateNamespaceResult {
    /// The namespace's assignment (its slot) and watermarks.
    pub namespace: Namespace,
    /// False: it existed already, and `namespace` is its assignment.
    pub created: bool,
}

/// What [`Client::acquire_namespace`] returns.
#[derive(Clone, Debug)]
pub struct AcquireResult {
    /// The namespace, with the new epoch in `epoch`.
    pub namespace: Namespace,
    /// The new epoch, which this client's appends to the namespace now carry.
    pub epoch: u64,
}

/// A client of one walserver. Cheap to clone: clones share the connection, the append stream,
/// the writer id and its sequences. Every method needs a Tokio runtime.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) options: ClientOptions,
    pub(crate) stub: WalServiceClient<Channel>,
    auth: Option<MetadataValue<Ascii>>,
    writer_id: u64,
    writers: Mutex<WriterState>,
    streamer: Option<AppendStreamer>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("writer_id", &self.inner.writer_id)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct WriterState {
    last_sequence: HashMap<u64, u64>, // per namespace
    epochs: HashMap<u64, u64>,        // acquired, per namespace
}

impl Client {
    /// Creates a channel to walserver. It connects lazily, so this succeeds without a server;
    /// `InvalidArgument` for a target, token or TLS file that cannot be used.
    pub async fn connect(options: ClientOptions) -> Result<Client, Status> {
        let channel = channel(&options)?;
        Client::on_channel(channel, options)
    }

    /// A client on a channel made by the caller (its own TLS, interceptors or load balancing);
    /// `options.target` and the TLS files are not used.
    pub fn on_channel(channel: Channel, options: ClientOptions) -> Result<Client, Status> {
        let auth = if options.auth_token.is_empty() {
            None
        } else {
            Some(
                format!("Bearer {}", options.auth_token)
                    .parse()
                    .map_err(|_| Status::invalid_argument("auth_token is not printable ASCII"))?,
            )
        };
        let stub = WalServiceClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let writer_id = if options.writer_id != 0 { options.writer_id } else { random_writer_id() };
        let inner = Arc::new(Inner {
            streamer: options.append_stream.then(AppendStreamer::new),
            options,
            stub,
            auth,
            writer_id,
            writers: Mutex::new(WriterState::default()),
        });
        Ok(Client { inner })
    }

    /// The writer id this client's appends carry.
    pub fn writer_id(&self) -> u64 {
        self.inner.writer_id
    }

    /// The generated stub, for calls this client does not wrap. Requests made on it carry no
    /// bearer token or deadline unless the caller adds them.
    pub fn stub(&self) -> WalServiceClient<Channel> {
        self.inner.stub.clone()
    }

    /// Creates a namespace and assigns it a slot. Idempotent: an existing namespace comes back
    /// with `created == false` and its assignment. Retried on `Unavailable`. `InvalidArgument`
    /// for id 0.
    pub async fn create_namespace(
        &self,
        namespace_id: u64,
    ) -> Result<CreateNamespaceResult, Status> {
        self.create(proto::CreateNamespaceRequest { namespace_id, ..Default::default() }).await
    }

    /// The same in the slot asked for: one of walserver's topics and a partition of it, for
    /// callers that place namespaces themselves (a datanode's regions sharing a topic).
    /// `InvalidArgument` for a slot walserver does not serve, `FailedPrecondition` if the
    /// namespace exists in another slot (or a walserver too old to know the field put it
    /// elsewhere).
    pub async fn create_namespace_in(
        &self,
        namespace_id: u64,
        topic: &str,
        partition: i32,
    ) -> Result<CreateNamespaceResult, Status> {
        let result = self
            .create(proto::CreateNamespaceRequest {
                namespace_id,
                topic: topic.to_string(),
                partition,
            })
            .await?;
        let namespace = &result.namespace;
        if !topic.is_empty() && (namespace.topic != topic || namespace.partition != partition) {
            // A walserver older than the slot field ignores it.
            return Err(Status::failed_precondition(format!(
                "namespace {namespace_id} is in {}[{}], not in the slot asked for, \
                 {topic}[{partition}]: walserver does not know the field (an older version)",
                namespace.topic, namespace.partition
            )));
        }
        Ok(result)
    }

    async fn create(
        &self,
        request: proto::CreateNamespaceRequest,
    ) -> Result<CreateNamespaceResult, Status> {
        let deadline = self.deadline(None);
        let request = &request;
        let response = self
            .with_retries(deadline, |mut stub, this| async move {
                let request = this.request(request.clone(), Some(deadline));
                stub.create_namespace(request).await
            })
            .await?;
        Ok(CreateNamespaceResult {
            namespace: response.namespace.unwrap_or_default(),
            created: response.created,
        })
    }

    /// Makes this client the namespace's only writer: a new epoch, higher than any before, which
    /// this client's later appends to the namespace carry. Call it when a region opens, before
    /// replaying it. Retried on `Unavailable` (a retry at worst raises the epoch once more).
    /// `NotFound` for an unknown namespace.
    pub async fn acquire_namespace(&self, namespace_id: u64) -> Result<AcquireResult, Status> {
        let deadline = self.deadline(None);
        let response = self
            .with_retries(deadline, |mut stub, this| async move {
                let request =
                    this.request(proto::AcquireNamespaceRequest { namespace_id }, Some(deadline));
                stub.acquire_namespace(request).await
            })
            .await?;
        let mut writers = self.inner.writers.lock().unwrap();
        let epoch = writers.epochs.entry(namespace_id).or_default();
        *epoch = (*epoch).max(response.epoch);
        Ok(AcquireResult {
            namespace: response.namespace.unwrap_or_default(),
            epoch: response.epoch,
        })
    }

    /// Appends the request's entries (several namespaces may share one request) and returns
    /// their ids in request order, once Kafka acknowledged every one (acks=all). Ids increase
    /// within a namespace in request order (a retry's answer excepted, when an earlier attempt
    /// wrote a later entry but not an earlier one: its ids are those of the copies in the log).
    /// Entries without a sequence get the next ones of this
    /// client, and without an epoch the one this client acquired. Retried as "Retry-safe
    /// appends" says; on a final error a prefix may be durable. `FailedPrecondition` when the
    /// epoch was fenced; `InvalidArgument` for no entries, namespace id 0 or an entry over the
    /// server's limit; `NotFound` for an unknown namespace.
    pub async fn append(&self, mut request: AppendRequest) -> Result<Vec<u64>, Status> {
        self.stamp(&mut request);
        let options = &self.inner.options;
        let deadline = self.deadline(None);
        // A request larger than a stream message goes as unary calls (see append_stream.rs).
        let request_bytes = request.encoded_len();
        let first_attempt = Instant::now();
        let mut retry = 0;
        loop {
            let attempt_deadline = deadline.min(Instant::now() + options.append_attempt_timeout);
            let streamed = match &self.inner.streamer {
                Some(streamer) if streamer.supported() && request_bytes <= MAX_MESSAGE_BYTES => {
                    Some(streamer.append(self, &request, attempt_deadline).await)
                }
                _ => None,
            };
            let result = match streamed {
                // A walserver without AppendStream: this attempt goes as a unary call, and so
                // does every later one (supported() is false from now on).
                Some(Err(status)) if status.code() == Code::Unimplemented => {
                    self.append_unary(&request, attempt_deadline).await
                }
                Some(result) => result,
                None => self.append_unary(&request, attempt_deadline).await,
            };
            let status = match result {
                Ok(ids) => return Ok(ids),
                Err(status) => status,
            };
            // Unavailable: walserver or Kafka unreachable, or Kafka did not acknowledge in time.
            // DeadlineExceeded: this attempt ran out of time; the call may have some left.
            let retryable = matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded);
            if !retryable || options.max_retries == 0 {
                return Err(status);
            }
            let sleep = retry_jitter(retry_backoff(options.retry_backoff, retry));
            if !attempt_fits(sleep, deadline) {
                return Err(status);
            }
            tokio::time::sleep(sleep).await;
            retry += 1;
            // Said on every retry: walserver answers the entries an earlier attempt wrote with
            // their ids instead of writing them twice.
            request.first_attempt_age_ms = (first_attempt.elapsed().as_millis() as u64).max(1);
        }
    }

    /// Appends `entries` to one namespace; see [`Client::append`].
    pub async fn append_entries<I, D>(
        &self,
        namespace_id: u64,
        entries: I,
    ) -> Result<Vec<u64>, Status>
    where
        I: IntoIterator<Item = D>,
        D: Into<Bytes>,
    {
        let entries = entries
            .into_iter()
            .map(|data| Entry { namespace_id, data: data.into(), ..Default::default() })
            .collect();
        self.append(AppendRequest { entries, ..Default::default() }).await
    }

    /// Makes entries with id < `entry_id` unreadable and lets walserver prune them from Kafka.
    /// A lower value than before, or 0, is a no-op. `OutOfRange` past the namespace's end.
    /// Retried on `Unavailable` (truncation is monotonic).
    pub async fn truncate(&self, namespace_id: u64, entry_id: u64) -> Result<Namespace, Status> {
        let deadline = self.deadline(None);
        let response = self
            .with_retries(deadline, |mut stub, this| async move {
                let request =
                    this.request(proto::TruncateRequest { namespace_id, entry_id }, Some(deadline));
                stub.truncate(request).await
            })
            .await?;
        Ok(response.namespace.unwrap_or_default())
    }

    /// The namespace's assignment and watermarks (`next_entry_id` is an exclusive upper bound
    /// of its entry ids). Retried on `Unavailable`. `NotFound` for an unknown namespace.
    pub async fn get_namespace(&self, namespace_id: u64) -> Result<Namespace, Status> {
        let deadline = self.deadline(None);
        let response = self
            .with_retries(deadline, |mut stub, this| async move {
                let request =
                    this.request(proto::GetNamespaceRequest { namespace_id }, Some(deadline));
                stub.get_namespace(request).await
            })
            .await?;
        Ok(response.namespace.unwrap_or_default())
    }

    /// Where a slot's records begin and end in Kafka now (`next_entry_id` is the id the next
    /// record there gets), and how many namespaces live in it. Retried on `Unavailable`.
    /// `InvalidArgument` for a slot walserver does not serve.
    pub async fn get_slot(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<proto::GetSlotResponse, Status> {
        let deadline = self.deadline(None);
        self.with_retries(deadline, |mut stub, this| async move {
            let request = this.request(
                proto::GetSlotRequest { topic: topic.to_string(), partition },
                Some(deadline),
            );
            stub.get_slot(request).await
        })
        .await
    }

    /// Every live namespace in id order, fetching page after page within one deadline. Retried
    /// on `Unavailable`.
    pub async fn list_namespaces(&self) -> Result<Vec<Namespace>, Status> {
        let deadline = self.deadline(None);
        let mut all = Vec::new();
        let mut page_token = String::new();
        loop {
            let token = page_token.clone();
            let page = self
                .with_retries(deadline, |mut stub, this| {
                    let page_token = token.clone();
                    async move {
                        let request = this.request(
                            proto::ListNamespacesRequest { page_size: 0, page_token },
                            Some(deadline),
                        );
                        stub.list_namespaces(request).await
                    }
                })
                .await?;
            all.extend(page.namespaces);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            page_token = page.next_page_token;
        }
    }

    /// Deletes a namespace (its records become prunable) and forgets the epoch this client
    /// acquired for it: a namespace created again with the id starts above it, so acquire it
    /// anew. Not retried: a retry after a lost answer would report `NotFound`.
    pub async fn delete_namespace(&self, namespace_id: u64) -> Result<(), Status> {
        let deadline = self.deadline(None);
        let mut stub = self.inner.stub.clone();
        let request = self.request(proto::DeleteNamespaceRequest { namespace_id }, Some(deadline));
        until(Some(deadline), stub.delete_namespace(request)).await?;
        // A namespace created again with this id starts above this epoch: the writer must
        // acquire it anew.
        self.inner.writers.lock().unwrap().epochs.remove(&namespace_id);
        Ok(())
    }

    // ---- shared by the calls ----

    pub(crate) fn deadline(&self, timeout: Option<Duration>) -> Instant {
        Instant::now() + timeout.filter(|t| !t.is_zero()).unwrap_or(self.inner.options.timeout)
    }

    /// A request carrying the bearer token and, when given, the deadline (as grpc-timeout, so
    /// that walserver stops working on it too).
    pub(crate) fn request<T>(&self, message: T, deadline: Option<Instant>) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(deadline) = deadline {
            request.set_timeout(
                deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)),
            );
        }
        if let Some(auth) = &self.inner.auth {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        request
    }

    /// Runs `attempt` (one call) until it succeeds, fails with something other than
    /// `Unavailable`, runs out of retries, or the deadline is near.
    async fn with_retries<T, F, Fut>(&self, deadline: Instant, mut attempt: F) -> Result<T, Status>
    where
        F: FnMut(WalServiceClient<Channel>, Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let options = &self.inner.options;
        let mut retry = 0;
        loop {
            let status =
                match until(Some(deadline), attempt(self.inner.stub.clone(), self.clone())).await {
                    Ok(response) => return Ok(response.into_inner()),
                    Err(status) => status,
                };
            if status.code() != Code::Unavailable || retry >= options.max_retries {
                return Err(status);
            }
            let sleep = retry_jitter(retry_backoff(options.retry_backoff, retry));
            if Instant::now() + sleep >= deadline {
                return Err(status);
            }
            tokio::time::sleep(sleep).await;
            retry += 1;
        }
    }

    /// Gives the request this client's writer id, and its entries sequences, epochs and
    /// checksums where they have none. Stamped once, a request sent again is the same append.
    pub(crate) fn stamp(&self, request: &mut AppendRequest) {
        if request.writer_id == 0 {
            request.writer_id = self.inner.writer_id;
        }
        if self.inner.options.checksums {
            for entry in &mut request.entries {
                entry.crc32c.get_or_insert_with(|| crc32c::crc32c(&entry.data));
            }
        }
        let mut writers = self.inner.writers.lock().unwrap();
        for entry in &mut request.entries {
            if entry.sequence == 0 {
                let last = writers.last_sequence.entry(entry.namespace_id).or_default();
                *last += 1;
                entry.sequence = *last;
            }
            if entry.epoch == 0 {
                if let Some(epoch) = writers.epochs.get(&entry.namespace_id) {
                    entry.epoch = *epoch;
                }
            }
        }
    }

    async fn append_unary(
        &self,
        request: &AppendRequest,
        deadline: Instant,
    ) -> Result<Vec<u64>, Status> {
        let mut stub = self.inner.stub.clone();
        let response =
            until(Some(deadline), stub.append(self.request(request.clone(), Some(deadline))))
                .await?;
        Ok(response.into_inner().entry_ids)
    }
}

/// Ok when `entry` carries no checksum or matches it; `DataLoss` naming the entry otherwise.
pub(crate) fn check_entry_checksum(entry: &Entry) -> Result<(), Status> {
    let Some(expected) = entry.crc32c else { return Ok(()) }; // a walserver from before checksums
    let actual = crc32c::crc32c(&entry.data);
    if actual == expected {
        return Ok(());
    }
    Err(Status::data_loss(format!(
        "entry {} of namespace {}: its {} bytes do not match the crc32c stored with it ({expected}, \
         the data has {actual}): corrupted between Kafka and this client; the read stops before it",
        entry.entry_id,
        entry.namespace_id,
        entry.data.len()
    )))
}

/// The message of a `DeadlineExceeded` this side's timer gave (not walserver's answer).
pub(crate) const LOCAL_DEADLINE: &str = "walclient: the call's deadline passed";

/// Awaits `call` until `deadline` (none: forever); `DeadlineExceeded` when it passes first.
pub(crate) async fn until<T>(
    deadline: Option<Instant>,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let result = match deadline {
        None => call.await,
        Some(deadline) => tokio::time::timeout_at(deadline, call)
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded(LOCAL_DEADLINE))),
    };
    result.map_err(local_failure_code)
}

/// Gives failures that happened on this side the codes a C++ gRPC client gives them, which the
/// retry rules and the documented codes assume. tonic reports its own deadline timer as
/// `Cancelled`; a connection that broke, closed, or was reset, or a protocol failure (say,
/// plaintext to a TLS listener), as `Unknown`, `Cancelled` or `Internal`: those are
/// `Unavailable`, as in C++. Answers from walserver carry no source and keep their code.
fn local_failure_code(status: Status) -> Status {
    use std::error::Error;
    let mut transport = false;
    let mut source = status.source();
    while let Some(error) = source {
        if error.downcast_ref::<tonic::TimeoutExpired>().is_some() {
            return Status::deadline_exceeded(LOCAL_DEADLINE);
        }
        transport |= error.is::<hyper::Error>()
            || error.is::<h2::Error>()
            || error.is::<std::io::Error>()
            || error.is::<tonic::transport::Error>();
        source = error.source();
    }
    if transport || (status.code() == Code::Unknown && status.source().is_some()) {
        return Status::unavailable(format!(
            "walclient: connection to walserver failed ({:?}: {})",
            status.code(),
            status.message()
        ));
    }
    status
}

/// `first`, doubled for each retry before this one, at most 2 s.
pub(crate) fn retry_backoff(first: Duration, retry: u32) -> Duration {
    let cap = Duration::from_secs(2);
    first.saturating_mul(1u32 << retry.min(16)).min(cap)
}

/// True when an attempt after waiting `sleep` still has a second before `deadline`, the rule for
/// retrying appends and reads: with less, the attempt would most likely end DeadlineExceeded
/// rather than say what failed (an append waits for Kafka's acknowledgement; a read's catch-up
/// with Kafka gets half the time left from walserver).
pub(crate) fn attempt_fits(sleep: Duration, deadline: Instant) -> bool {
    Instant::now() + sleep + Duration::from_secs(1) < deadline
}

/// A random wait in [backoff/2, backoff], so that many clients do not retry in step.
pub(crate) fn retry_jitter(backoff: Duration) -> Duration {
    let half = backoff / 2;
    let span = (backoff - half).as_micros() as u64;
    half + Duration::from_micros(if span == 0 { 0 } else { random_u64() % (span + 1) })
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS once per process and per instance differently; mixing
    // in the time makes successive calls differ. Not for secrets: for jitter and writer ids.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.finish()
}

fn random_writer_id() -> u64 {
    loop {
        let id = random_u64();
        if id != 0 {
            return id;
        }
    }
}

#[cfg(any(feature = "tls-ring", feature = "tls-aws-lc"))]
fn read_file(path: &PathBuf, what: &str) -> Result<Vec<u8>, Status> {
    std::fs::read(path).map_err(|e| {
        Status::invalid_argument(format!("cannot read {what} {}: {e}", path.display()))
    })
}

/// The channel `options` describe, connecting lazily.
fn channel(options: &ClientOptions) -> Result<Channel, Status> {
    let target = options.target.trim();
    if target.is_empty() {
        return Err(Status::invalid_argument("no walserver address given"));
    }
    if !options.keepalive_time.is_zero()
        && (options.keepalive_time < Duration::from_secs(1) || options.keepalive_timeout.is_zero())
    {
        return Err(Status::invalid_argument(
            "keepalive_time must be 0 (no pings) or at least 1 s, and keepalive_timeout positive",
        ));
    }
    let bad_target = |e: &dyn std::fmt::Display| {
        Status::invalid_argument(format!("bad walserver address {target:?}: {e}"))
    };
    if let Some(path) = target.strip_prefix("unix://") {
        if options.tls_ca_file.is_some() {
            return Err(Status::invalid_argument("TLS is for TCP targets; a unix socket is local"));
        }
        let path = PathBuf::from(path);
        // The URI is not used to connect: the connector below dials the socket.
        let endpoint = with_transport(Endpoint::from_static("http://walserver.local"), options);
        let connector = tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        });
        return Ok(endpoint.connect_with_connector_lazy(connector));
    }
    let tls = options.tls_ca_file.is_some() || target.starts_with("https://");
    let uri = if target.contains("://") {
        target.to_string()
    } else {
        format!("{}://{target}", if tls { "https" } else { "http" })
    };
    if tls && uri.starts_with("http://") {
        return Err(Status::invalid_argument("tls_ca_file given for an http:// target"));
    }
    let mut endpoint =
        with_transport(Endpoint::from_shared(uri).map_err(|e| bad_target(&e))?, options);
    if tls {
        let Some(ca_file) = &options.tls_ca_file else {
            return Err(Status::invalid_argument("an https:// target needs tls_ca_file"));
        };
        endpoint = with_tls(endpoint, ca_file, options).map_err(|e| match e {
            TlsError::Status(status) => status,
            TlsError::Transport(e) => bad_target(&e),
        })?;
    } else if options.tls_cert_file.is_some() || options.tls_key_file.is_some() {
        return Err(Status::invalid_argument("a client certificate needs tls_ca_file too"));
    }
    Ok(endpoint.connect_lazy())
}

enum TlsError {
    Status(Status),
    #[allow(dead_code)] // not made without a TLS feature
    Transport(tonic::transport::Error),
}

/// `endpoint` verifying walserver with `ca_file`, and presenting the client certificate when
/// `options` give one.
#[cfg(any(feature = "tls-ring", feature = "tls-aws-lc"))]
fn with_tls(
    endpoint: Endpoint,
    ca_file: &PathBuf,
    options: &ClientOptions,
) -> Result<Endpoint, TlsError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(
        read_file(ca_file, "tls_ca_file").map_err(TlsError::Status)?,
    ));
    match (&options.tls_cert_file, &options.tls_key_file) {
        (Some(cert), Some(key)) => {
            config = config.identity(Identity::from_pem(
                read_file(cert, "tls_cert_file").map_err(TlsError::Status)?,
                read_file(key, "tls_key_file").map_err(TlsError::Status)?,
            ))
        }
        (None, None) => {}
        _ => {
            return Err(TlsError::Status(Status::invalid_argument(
                "tls_cert_file and tls_key_file go together",
            )))
        }
    }
    endpoint.tls_config(config).map_err(TlsError::Transport)
}

#[cfg(not(any(feature = "tls-ring", feature = "tls-aws-lc")))]
fn with_tls(_: Endpoint, _: &PathBuf, _: &ClientOptions) -> Result<Endpoint, TlsError> {
    Err(TlsError::Status(Status::invalid_argument(
        "walclient was built without TLS: enable its feature tls-ring or tls-aws-lc",
    )))
}

/// The HTTP/2 settings of the connection: keepalive as `options` say (also while no call is
/// open, so that a dead connection is found before a call waits on it), and flow-control windows
/// deep enough for a replay: walserver sends read answers of up to 1 MiB, and hyper's defaults
/// (2 MiB per stream, 5 MiB per connection) keep only two of them in flight. 8 / 16 MiB helped
/// replays of a client short of CPU (0.53-0.63 -> 0.71-0.74 of rskafka's rate); on a quiet host
/// both reach it (docs/benchmarks/2026-12-02-walpeer.md).
fn with_transport(endpoint: Endpoint, options: &ClientOptions) -> Endpoint {
    let endpoint =
        endpoint.initial_stream_window_size(8 << 20).initial_connection_window_size(16 << 20);
    if options.keepalive_time.is_zero() {
        return endpoint;
    }
    endpoint
        .http2_keep_alive_interval(options.keepalive_time)
        .keep_alive_timeout(options.keepalive_timeout)
        .keep_alive_while_idle(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_two_seconds_and_jitter_stays_in_its_half() {
        let first = Duration::from_millis(100);
        let waits: Vec<u128> = (0..7).map(|r| retry_backoff(first, r).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(retry_backoff(first, 1000), Duration::from_secs(2));
        for _ in 0..1000 {
            let wait = retry_jitter(Duration::from_millis(800));
            assert!(wait >= Duration::from_millis(400) && wait <= Duration::from_millis(800));
        }
        assert_eq!(retry_jitter(Duration::ZERO), Duration::ZERO);
    }

    #[cfg(not(any(feature = "tls-ring", feature = "tls-aws-lc")))]
    #[tokio::test]
    async fn without_a_tls_feature_tls_targets_are_refused() {
        let options = ClientOptions {
            tls_ca_file: Some("/etc/hostname".into()),
            ..ClientOptions::new("https://127.0.0.1:1")
        };
        let status = Client::connect(options).await.expect_err("connected without TLS");
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains("tls-ring or tls-aws-lc"), "{status}");
    }

    #[test]
    fn answers_keep_their_code_and_local_failures_get_grpc_codes() {
        // An answer from walserver (no source) is left as it is, Unknown included.
        for code in [Code::Unknown, Code::Cancelled, Code::NotFound, Code::FailedPrecondition] {
            assert_eq!(local_failure_code(Status::new(code, "x")).code(), code);
        }
        let timer = Status::from_error(Box::new(tonic::TimeoutExpired(())));
        assert_eq!(timer.code(), Code::Cancelled, "what tonic gives");
        assert_eq!(local_failure_code(timer).code(), Code::DeadlineExceeded);
        let broken = Status::from_error(Box::new(std::io::Error::other("connection closed")));
        assert_eq!(broken.code(), Code::Unknown, "what tonic gives");
        assert_eq!(local_failure_code(broken).code(), Code::Unavailable);
    }

    #[tokio::test]
    async fn options_that_cannot_work_are_refused_at_connect() {
        let bad = |f: fn(&mut ClientOptions)| {
            let mut options = ClientOptions::new("127.0.0.1:1");
            f(&mut options);
            options
        };
        let cases: Vec<ClientOptions> = vec![
            bad(|o| o.target = String::new()),
            bad(|o| o.target = "http://bad host:1".into()),
            bad(|o| o.auth_token = "line\nbreak".into()),
            bad(|o| o.target = "https://127.0.0.1:1".into()),
            bad(|o| o.tls_cert_file = Some("/nonexistent".into())),
            // walserver answers pings more often than once a second with GOAWAY.
            bad(|o| o.keepalive_time = Duration::from_millis(500)),
            bad(|o| o.keepalive_timeout = Duration::ZERO),
            bad(|o| {
                o.target = "unix:///tmp/x.sock".into();
                o.tls_ca_file = Some("/etc/hostname".into());
            }),
        ];
        for options in cases {
            let described = format!("{options:?}");
            let status = Client::connect(options).await.expect_err(&described);
            assert_eq!(status.code(), Code::InvalidArgument, "{described}: {status}");
        }
        // No pings at all is a choice.
        let quiet = ClientOptions { keepalive_time: Duration::ZERO, ..bad(|_| {}) };
        assert!(Client::connect(quiet).await.is_ok());
        // Lazy: a client is made without a server, and its calls say Unavailable.
        let options = ClientOptions { max_retries: 0, ..ClientOptions::new("127.0.0.1:1") };
        let client = Client::connect(options).await.unwrap();
        assert_ne!(client.writer_id(), 0);
        assert_eq!(client.get_namespace(1).await.unwrap_err().code(), Code::Unavailable);
    }
}

#[cfg(test)]
mod debug_tests {
    use super::*;
    use crate::greptime::WalserverLogStore;

    #[tokio::test]
    async fn debug_output_never_shows_the_bearer_token() {
        let options =
            ClientOptions { auth_token: "s3cret-t0ken".into(), ..ClientOptions::default() };
        let client = Client::connect(options.clone()).await.unwrap();
        let store = WalserverLogStore::new(client.clone());
        for printed in [format!("{options:?}"), format!("{client:?}"), format!("{store:?}")] {
            assert!(!printed.contains("s3cret"), "{printed}");
            assert!(
                printed.contains("<redacted>") && printed.contains("127.0.0.1:50051"),
                "{printed}"
            );
        }
        let quiet = format!("{:?}", ClientOptions::default());
        assert!(quiet.contains("auth_token: \"\""), "no token, nothing to hide: {quiet}");
    }
}

#[cfg(test)]
mod checksum_tests {
    use super::*;

    #[test]
    fn an_entry_read_must_match_its_checksum() {
        let entry = |data: &'static [u8], crc32c: Option<u32>| Entry {
            namespace_id: 7,
            entry_id: 3,
            data: Bytes::from_static(data),
            crc32c,
            ..Default::default()
        };
        assert!(check_entry_checksum(&entry(b"three", Some(crc32c::crc32c(b"three")))).is_ok());
        assert!(check_entry_checksum(&entry(b"three", None)).is_ok(), "an older walserver");
        let status = check_entry_checksum(&entry(b"thr33", Some(crc32c::crc32c(b"three"))));
        let status = status.unwrap_err();
        assert_eq!(status.code(), Code::DataLoss);
        assert!(status.message().contains("entry 3 of namespace 7"), "{status}");
        // The check value of CRC-32C (RFC 3720), as walserver computes it.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE3069283);
    }
}
