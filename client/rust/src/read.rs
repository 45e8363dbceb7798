//! Reads as async streams of entries, retried on `Unavailable` until they delivered something.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{BoxStream, Stream, StreamExt};
use tokio::time::Instant;
use tonic::codec::Streaming;
use tonic::{Code, Status};

use crate::client::{
    attempt_fits, check_entry_checksum, retry_backoff, retry_jitter, until, Client, LOCAL_DEADLINE,
};
use crate::proto::{Entry, Gap, ReadEnd, ReadManyRequest, ReadRequest, ReadResponse, SlotRead};

/// One namespace to read: [`Client::read`].
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// The namespace.
    pub namespace_id: u64,
    /// The first entry id to return; 0: from the namespace's `first_entry_id`.
    pub start_entry_id: u64,
    /// At most this many entries; 0: no limit.
    pub limit: u64,
    /// Keep receiving entries appended after the read began, until the stream is dropped.
    pub follow: bool,
    /// Instead of `start_entry_id`: from the first entry appended at or after this time (ms
    /// since the Unix epoch, by the clock of the walserver that wrote it), and every entry after
    /// it. 0: unused. Both set: `InvalidArgument`.
    pub start_time_ms: u64,
    /// Gap-tolerant recovery: records gone from Kafka and corrupt entries become
    /// [`ReadItem::Gap`]s of [`Client::read_with_gaps`] (left out by [`Client::read`]) and the
    /// read goes on past them, instead of ending with `DataLoss`.
    pub skip_lost: bool,
    /// Deadline of the whole read, counted from the call to [`Client::read`]; `None` (or zero):
    /// [`crate::ClientOptions::timeout`], or none for a follow read or one with a
    /// `progress_timeout`.
    pub timeout: Option<Duration>,
    /// For a replay of unknown length: the read ends `DeadlineExceeded` when no message came
    /// from walserver for this long (waiting for the call to open included), instead of
    /// having one deadline for the whole read. `None` (or zero): not used.
    pub progress_timeout: Option<Duration>,
    /// After `Unavailable` (walserver restarted, the connection dropped), open the read again
    /// past the last entry it delivered, up to [`crate::ClientOptions::max_retries`] times in a
    /// row, instead of ending: the stream goes on as one read. Entries it delivered already are
    /// never delivered again, also when their writer retried them and the retry lies past the
    /// resumption point (each entry is known by its `writer_id` and `sequence`; the read keeps,
    /// per writer, the ranges of sequences it delivered). A resumed read that does not follow
    /// ends at the end of the log as seen when it resumed; one with a limit may end short of it
    /// by the copies it left out.
    pub resume: bool,
}

impl ReadOptions {
    /// The whole namespace, up to its end as seen when the read begins.
    pub fn new(namespace_id: u64) -> Self {
        ReadOptions { namespace_id, ..Default::default() }
    }
}

/// One namespace of a [`Client::read_many`].
#[derive(Clone, Debug, Default)]
pub struct ReadStart {
    /// The namespace; each at most once per read.
    pub namespace_id: u64,
    /// The first entry id to return; 0: from the namespace's `first_entry_id`.
    pub start_entry_id: u64,
    /// At most this many entries of this namespace; 0: no limit.
    pub limit: u64,
    /// Instead of `start_entry_id`: see [`ReadOptions::start_time_ms`].
    pub start_time_ms: u64,
    /// See [`ReadOptions::skip_lost`]; the gaps come as [`ReadItem::Gap`].
    pub skip_lost: bool,
}

/// Several namespaces replayed on one stream: [`Client::read_many`].
#[derive(Clone, Debug, Default)]
pub struct ReadManyOptions {
    /// The namespaces, at most 1000.
    pub namespaces: Vec<ReadStart>,
    /// After each namespace's backlog, keep receiving its new entries until the stream is
    /// dropped.
    pub follow: bool,
    /// Deadline of the whole read, counted from the call to [`Client::read_many`]; `None` (or
    /// zero): [`crate::ClientOptions::timeout`], or none for a follow read or one with a
    /// `progress_timeout`.
    pub timeout: Option<Duration>,
    /// See [`ReadOptions::progress_timeout`].
    pub progress_timeout: Option<Duration>,
}

/// Every namespace of one slot replayed on one stream: [`Client::read_slot`].
#[derive(Clone, Debug, Default)]
pub struct ReadSlotOptions {
    /// The slot: one of walserver's topics and a partition of it.
    pub topic: String,
    /// See `topic`.
    pub partition: i32,
    /// An offset of the slot: each namespace from here, or from its first entry if that is
    /// higher; 0: each from its first entry.
    pub start_entry_id: u64,
    /// See [`ReadOptions::skip_lost`]; the gaps come as [`ReadItem::Gap`].
    pub skip_lost: bool,
    /// See [`ReadManyOptions::timeout`].
    pub timeout: Option<Duration>,
    /// See [`ReadOptions::progress_timeout`].
    pub progress_timeout: Option<Duration>,
}

/// What a [`ReadManyStream`] yields.
#[derive(Clone, Debug)]
pub enum ReadItem {
    /// The next entry of one namespace (in id order within the namespace).
    Entry(Entry),
    /// With `skip_lost`: ids of one namespace the read went past (records gone from Kafka, or
    /// a corrupt entry), after the entries before them.
    Gap(Gap),
    /// One namespace's part ended, after its last entry: `code` 0 when it was read to its end
    /// as seen when the read began, else the gRPC code a read of it alone would have ended with
    /// (`NotFound`, `OutOfRange`, `DataLoss`...; the others go on). With `follow`,
    /// `caught_up` says its backlog was sent and its new entries follow.
    End(ReadEnd),
}

/// The entries of one namespace in id order, from [`Client::read`]. Ends (`None`) at the end of
/// the log as seen when the read began, or after an `Err` saying why the read failed. Dropping
/// it cancels the read on walserver.
pub struct ReadStream {
    inner: BoxStream<'static, Result<Entry, Status>>,
}

impl Stream for ReadStream {
    type Item = Result<Entry, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

/// The entries, gaps and ends of several namespaces, from [`Client::read_many`] (or of one, from
/// [`Client::read_with_gaps`]). Ends (`None`) once every namespace ended, or after an `Err` of
/// the call itself. Dropping it cancels the read.
pub struct ReadManyStream {
    inner: BoxStream<'static, Result<ReadItem, Status>>,
}

impl Stream for ReadManyStream {
    type Item = Result<ReadItem, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

/// Which call a [`Reader`] makes.
#[derive(Clone)]
enum Call {
    One(ReadRequest),
    Many(ReadManyRequest),
}

/// The state behind both streams: opens the call, retries it while nothing was delivered, and
/// hands out what each response carries, one item at a time.
struct Reader {
    client: Client,
    call: Call,
    deadline: Option<Instant>,
    progress: Option<Duration>,
    retry: u32,
    delivered: bool,
    responses: Option<Streaming<ReadResponse>>,
    items: VecDeque<ReadItem>,
    done: bool,
    /// Set for a `Read` with `resume`: where it stands, to open it again from there.
    resume: Option<Resume>,
}

/// Where a resumable read stands, and what it delivered.
#[derive(Default)]
struct Resume {
    /// The next id past every entry and gap delivered (0: none yet).
    position: u64,
    /// Entries delivered, against `limit`.
    delivered: u64,
    /// The read's limit as asked (0: none).
    limit: u64,
    /// The sequences delivered per writer id, as disjoint closed ranges (first -> last).
    seen: std::collections::HashMap<u64, std::collections::BTreeMap<u64, u64>>,
}

impl Resume {
    /// True the first time an entry of its writer and sequence is delivered.
    fn first_delivery(&mut self, entry: &Entry) -> bool {
        if entry.writer_id == 0 || entry.sequence == 0 {
            return true; // no stamp to know it by
        }
        let ranges = self.seen.entry(entry.writer_id).or_default();
        let seq = entry.sequence;
        let prev = ranges.range(..=seq).next_back().map(|(&first, &last)| (first, last));
        if matches!(prev, Some((_, last)) if last >= seq) {
            return false;
        }
        let (mut first, mut last) = (seq, seq);
        if let Some((prev_first, prev_last)) = prev {
            if prev_last + 1 == seq {
                ranges.remove(&prev_first);
                first = prev_first;
            }
        }
        if let Some(next_last) = seq.checked_add(1).and_then(|next| ranges.remove(&next)) {
            last = next_last;
        }
        ranges.insert(first, last);
        true
    }
}

impl Reader {
    fn new(
        client: &Client,
        call: Call,
        follow: bool,
        timeout: Option<Duration>,
        progress: Option<Duration>,
    ) -> Self {
        let timeout = timeout.filter(|t| !t.is_zero());
        let progress = progress.filter(|t| !t.is_zero());
        let whole = timeout.is_some() || !(follow || progress.is_some());
        let deadline = if whole { Some(client.deadline(timeout)) } else { None };
        Reader {
            client: client.clone(),
            call,
            deadline,
            progress,
            retry: 0,
            delivered: false,
            responses: None,
            items: VecDeque::new(),
            done: false,
            resume: None,
        }
    }

    async fn next(&mut self) -> Option<Result<ReadItem, Status>> {
        loop {
            if let Some(item) = self.items.pop_front() {
                if let ReadItem::Entry(entry) = &item {
                    if self.client.inner.options.checksums {
                        if let Err(status) = check_entry_checksum(entry) {
                            // Never a silently wrong entry: the read ends before it (dropping
                            // the response stream cancels the call).
                            self.responses = None;
                            self.items.clear();
                            self.done = true;
                            return Some(Err(status));
                        }
                    }
                }
                if let Some(resume) = self.resume.as_mut() {
                    match &item {
                        ReadItem::Entry(entry) => {
                            if !resume.first_delivery(entry) {
                                continue; // its writer retried it past where the read resumed
                            }
                            resume.position = entry.entry_id + 1;
                            resume.delivered += 1;
                        }
                        ReadItem::Gap(gap) => {
                            resume.position = resume.position.max(gap.to_entry_id)
                        }
                        ReadItem::End(_) => {}
                    }
                }
                self.delivered = true;
                return Some(Ok(item));
            }
            if self.done {
                return None;
            }
            let progress_at = self.progress.map(|p| Instant::now() + p);
            let wait = earliest(self.deadline, progress_at);
            let step = match self.responses.as_mut() {
                Some(responses) => until(wait, responses.message()).await,
                None => match self.open(wait).await {
                    Ok(responses) => {
                        self.responses = Some(responses);
                        continue;
                    }
                    Err(status) => Err(status),
                },
            };
            let step = step.map_err(|status| explain_progress_timeout(status, progress_at));
            match step {
                Ok(Some(response)) => {
                    self.retry = 0; // retries count in a row
                    self.items.extend(response.entries.into_iter().map(ReadItem::Entry));
                    self.items.extend(response.gaps.into_iter().map(ReadItem::Gap));
                    self.items.extend(response.ends.into_iter().map(ReadItem::End));
                }
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err(status) => {
                    self.responses = None;
                    if matches!(&self.resume, Some(r) if r.limit != 0 && r.delivered >= r.limit) {
                        // All it asked for came; only the call's end was lost.
                        self.done = true;
                        return None;
                    }
                    if let Some(sleep) = self.retry_delay(&status) {
                        tokio::time::sleep(sleep).await;
                        self.retry += 1;
                        self.resume_past_delivered();
                        continue;
                    }
                    self.done = true;
                    return Some(Err(status));
                }
            }
        }
    }

    /// Opens the call, waiting for walserver until `wait`; walserver hears only the whole-read
    /// deadline (the progress timer is this side's).
    async fn open(&self, wait: Option<Instant>) -> Result<Streaming<ReadResponse>, Status> {
        let mut stub = self.client.inner.stub.clone();
        let response = match &self.call {
            Call::One(request) => {
                until(wait, stub.read(self.client.request(*request, self.deadline))).await?
            }
            Call::Many(request) => {
                until(wait, stub.read_many(self.client.request(request.clone(), self.deadline)))
                    .await?
            }
        };
        Ok(response.into_inner())
    }

    /// A resumable read opens again past what it delivered.
    fn resume_past_delivered(&mut self) {
        let (Some(resume), Call::One(request)) = (self.resume.as_ref(), &mut self.call) else {
            return;
        };
        // Past what was delivered; a read from a time only once an entry came (a gap before its
        // first entry may lie before the time: it is reported again).
        if resume.position > 0 && (resume.delivered > 0 || request.start_time_ms == 0) {
            request.start_entry_id = resume.position;
            request.start_time_ms = 0;
        }
        if resume.limit != 0 {
            request.limit = resume.limit - resume.delivered; // above 0: see retry_delay
        }
    }

    /// How long to wait before reading again after `status`; None: the read ends with it.
    fn retry_delay(&self, status: &Status) -> Option<Duration> {
        if status.code() != Code::Unavailable
            || (self.delivered && self.resume.is_none())
            || self.retry >= self.client.inner.options.max_retries
        {
            return None;
        }
        let sleep =
            retry_jitter(retry_backoff(self.client.inner.options.retry_backoff, self.retry));
        match self.deadline {
            Some(deadline) if !attempt_fits(sleep, deadline) => None,
            _ => Some(sleep),
        }
    }

    fn into_stream(self) -> BoxStream<'static, Result<ReadItem, Status>> {
        futures_util::stream::unfold(self, |mut reader| async move {
            let item = reader.next().await?;
            Some((item, reader))
        })
        .boxed()
    }
}

/// Names the progress timer when it, this side's timer due at `progress_at`, ended the read
/// (not the whole-read deadline, nor walserver's own answer).
fn explain_progress_timeout(status: Status, progress_at: Option<Instant>) -> Status {
    match progress_at {
        Some(at)
            if status.code() == Code::DeadlineExceeded
                && status.message() == LOCAL_DEADLINE
                && Instant::now() >= at =>
        {
            Status::deadline_exceeded(
                "walclient: nothing came from walserver within the read's progress_timeout",
            )
        }
        _ => status,
    }
}

/// The earlier of two optional deadlines (none: no deadline).
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Client {
    /// Reads one namespace: its entries with id >= `start_entry_id` in id order, up to the end
    /// of the log as seen when the read began (or on and on with `follow`). The call starts on
    /// the first poll; its errors come as the stream's one `Err`: `NotFound`,
    /// `OutOfRange` (a start past the end or below `first_entry_id`), `DataLoss`,
    /// `DeadlineExceeded`, `Unavailable` (retried while no entry was delivered). Entries written
    /// by a fenced writer and retried copies are left out by walserver.
    pub fn read(&self, options: ReadOptions) -> ReadStream {
        let inner = self
            .read_with_gaps(options)
            .inner
            .filter_map(|item| async move {
                match item {
                    Ok(ReadItem::Entry(entry)) => Some(Ok(entry)),
                    Ok(ReadItem::Gap(_)) => None, // asked for with skip_lost; see read_with_gaps
                    Ok(ReadItem::End(_)) => {
                        Some(Err(Status::internal("walclient: a ReadEnd on a Read stream")))
                    }
                    Err(status) => Some(Err(status)),
                }
            })
            .boxed();
        ReadStream { inner }
    }

    /// [`Client::read`], with the gaps of a `skip_lost` read as [`ReadItem::Gap`] in order with
    /// the entries ([`ReadItem::Entry`]).
    pub fn read_with_gaps(&self, options: ReadOptions) -> ReadManyStream {
        let request = ReadRequest {
            namespace_id: options.namespace_id,
            start_entry_id: options.start_entry_id,
            limit: options.limit,
            follow: options.follow,
            start_time_ms: options.start_time_ms,
            skip_lost: options.skip_lost,
        };
        let mut reader = Reader::new(
            self,
            Call::One(request),
            options.follow,
            options.timeout,
            options.progress_timeout,
        );
        if options.resume {
            reader.resume = Some(Resume { limit: options.limit, ..Default::default() });
        }
        ReadManyStream { inner: reader.into_stream() }
    }

    /// Reads a namespace into a vector (no follow); see [`Client::read`].
    pub async fn read_all(
        &self,
        namespace_id: u64,
        start_entry_id: u64,
    ) -> Result<Vec<Entry>, Status> {
        let mut entries = Vec::new();
        let mut stream =
            self.read(ReadOptions { start_entry_id, ..ReadOptions::new(namespace_id) });
        while let Some(entry) = stream.next().await {
            entries.push(entry?);
        }
        Ok(entries)
    }

    /// Replays several namespaces on one stream, as a datanode opens its regions: each
    /// namespace's entries in id order (namespaces interleave) and, after its last entry, its
    /// [`ReadItem::End`]. Errors of the call itself come as the stream's one `Err`:
    /// `InvalidArgument` (id 0, a namespace named twice, more than 1000), `Unavailable`
    /// (retried while nothing was delivered), `DeadlineExceeded`.
    pub fn read_many(&self, options: ReadManyOptions) -> ReadManyStream {
        let request = ReadManyRequest {
            reads: options
                .namespaces
                .iter()
                .map(|start| ReadRequest {
                    namespace_id: start.namespace_id,
                    start_entry_id: start.start_entry_id,
                    limit: start.limit,
                    follow: false,
                    start_time_ms: start.start_time_ms,
                    skip_lost: start.skip_lost,
                })
                .collect(),
            follow: options.follow,
            slot: None,
        };
        let reader = Reader::new(
            self,
            Call::Many(request),
            options.follow,
            options.timeout,
            options.progress_timeout,
        );
        ReadManyStream { inner: reader.into_stream() }
    }

    /// Replays every namespace living in a slot when the read begins, on one stream, as a
    /// datanode replays a Kafka topic its regions share: each namespace from
    /// `start_entry_id` or its first entry if that is higher (what it truncated is skipped), in
    /// id order (namespaces interleave), up to the slot's end as the read began, then its
    /// [`ReadItem::End`]. Errors of the call come as the stream's one `Err`: `InvalidArgument`
    /// (a slot walserver does not serve), `OutOfRange` (a start past the slot's end),
    /// `Unavailable` (retried while nothing was delivered), `DeadlineExceeded`.
    pub fn read_slot(&self, options: ReadSlotOptions) -> ReadManyStream {
        let request = ReadManyRequest {
            reads: Vec::new(),
            follow: false,
            slot: Some(SlotRead {
                topic: options.topic,
                partition: options.partition,
                start_entry_id: options.start_entry_id,
                skip_lost: options.skip_lost,
            }),
        };
        let reader = Reader::new(
            self,
            Call::Many(request),
            false,
            options.timeout,
            options.progress_timeout,
        );
        ReadManyStream { inner: reader.into_stream() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClientOptions;

    #[tokio::test]
    async fn a_read_is_retried_only_while_the_attempt_has_a_second_after_its_wait() {
        // First wait 50-100 ms; a lazy client needs no server.
        let options = ClientOptions {
            retry_backoff: Duration::from_millis(100),
            ..ClientOptions::new("127.0.0.1:1")
        };
        let client = Client::connect(options).await.unwrap();
        let mut reader = Reader::new(&client, Call::One(ReadRequest::default()), false, None, None);
        let unavailable = Status::unavailable("Kafka is unreachable");
        reader.deadline = Some(Instant::now() + Duration::from_millis(1050));
        assert_eq!(reader.retry_delay(&unavailable), None, "the wait leaves under a second");
        reader.deadline = Some(Instant::now() + Duration::from_secs(5));
        let wait = reader.retry_delay(&unavailable).expect("a second and more is left");
        assert!(wait >= Duration::from_millis(50) && wait <= Duration::from_millis(100));
        reader.deadline = None; // a follow read without a deadline
        assert!(reader.retry_delay(&unavailable).is_some());
        assert_eq!(reader.retry_delay(&Status::not_found("no such namespace")), None);
    }
}
