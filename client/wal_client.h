// walclient: the C++ client of walserver for datanodes.
//
// Threading: a Client is thread-safe; calls from many threads share one gRPC channel. Every
// call except AppendAsync blocks the calling thread until walserver answers or the call's
// deadline passes (ClientOptions::timeout unless the call says otherwise).
//
// Errors come back as absl::Status carrying the gRPC code of walserver's answer:
//   INVALID_ARGUMENT    malformed request: namespace id 0, no entries, entry over the size limit,
//                       data that no longer matches its checksum, two starts for one read
//   NOT_FOUND           unknown or deleted namespace
//   OUT_OF_RANGE        start or truncation point past the end, or a start below first_entry_id
//   DATA_LOSS           records that were never truncated are gone from Kafka, or an entry read
//                       does not match its checksum (see "Checksums")
//   UNAVAILABLE         Kafka or walserver unreachable; safe to retry (see below)
//   RESOURCE_EXHAUSTED  a server limit was reached; retry later
//   DEADLINE_EXCEEDED   no answer in time
//   INTERNAL            a bug or a corrupt record
//
//   FAILED_PRECONDITION the namespace was acquired by another writer (a higher epoch)
//
// Retries: calls that are safe to repeat (CreateNamespace, GetNamespace, ListNamespaces,
// Truncate, AcquireNamespace, and Read before it delivered anything) are retried on UNAVAILABLE
// with exponential backoff, within the call's one deadline. DeleteNamespace is not retried.
//
// Retry-safe appends: every entry this client appends carries the client's writer id and a
// sequence number per namespace (1, 2, 3...). Append and AppendAsync retry after UNAVAILABLE,
// and after an attempt ran out of time, with the same writer id and sequences, until the call's
// deadline; a read returns an entry appended more than once only once: the first copy at or
// after the read's start. So a retry never shows up twice, even when the first attempt was
// written and only its answer was lost, or walserver restarted in between. The ids an Append
// returns are those of the copy it wrote; when an earlier attempt's copy also made it, reads
// from before it return the earlier one.
//
// Checksums: with ClientOptions::checksums (the default) every entry this client appends
// carries the CRC-32C of its data; walserver refuses an entry whose data no longer matches
// (INVALID_ARGUMENT, nothing written) and keeps the checksum in Kafka with the entry. Every
// entry read carries its checksum back, and the client checks it: a mismatch ends the read with
// DATA_LOSS, never a silently wrong entry.
//
// Fencing: AcquireNamespace makes this client the namespace's writer with a new epoch, which
// the client then sends with every append to that namespace. A writer with an older epoch gets
// FAILED_PRECONDITION, and whatever it still manages to write is ignored by reads. A client that
// never acquires sends epoch 0, which works until someone acquires the namespace.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/retry.h"
#include "server/common/seen_sequences.h"
#include "wal/v1/wal.grpc.pb.h"

namespace wal {

class AppendStreamer;

struct ClientOptions {
  // gRPC target of walserver: "HOST:PORT" or "unix:///path/to/socket".
  std::string target = "127.0.0.1:50051";
  // Deadline of each call (retries included) unless the call says otherwise.
  std::chrono::milliseconds timeout{30000};
  // Retries of safe calls after UNAVAILABLE; 0 (or less) turns retries off. Appends retry until
  // their deadline unless retries are off (see "Retry-safe appends").
  int max_retries = 4;
  // First backoff; doubled after each retry, capped at 2 s, with jitter.
  std::chrono::milliseconds retry_backoff{100};
  // Deadline of each attempt of an Append, so that a lost answer leaves time for a retry
  // within `timeout`.
  std::chrono::milliseconds append_attempt_timeout{10000};
  // Appends travel on one AppendStream that the client's threads share (fewer calls, fewer
  // wake-ups on both sides); false: one unary Append call each. A walserver without
  // AppendStream is detected and gets unary calls either way.
  bool append_stream = true;
  // Send a CRC-32C with every entry appended, and check the one every entry read carries (see
  // "Checksums"). About 1 ms of CPU per 10 MB each way where the CPU has SSE4.2.
  bool checksums = true;
  // Identifies this client's appends (see "Retry-safe appends"); 0 picks a random id. Give two
  // clients the same id only if they never append to the same namespace, and never reuse an id
  // after the client that had it stopped: sequences start at 1 again, and reads drop an entry
  // whose sequence they already saw for its id and namespace, as a retried copy.
  uint64_t writer_id = 0;
  // HTTP/2 keepalive: ping walserver when nothing came from it for keepalive_time, and drop the
  // connection when the answer takes longer than keepalive_timeout. Its calls end UNAVAILABLE
  // and the next ones go on a new connection, so a connection cut off without a FIN (a dropped
  // NAT entry, a host that lost power) is noticed within keepalive_time + keepalive_timeout.
  // keepalive_time 0: no pings; else at least 1 s (walserver refuses faster pings). The timeout
  // leaves room for gRPC's backup poller, which reads a connection every 5 s while no thread of
  // the client waits on a call (an answer read later than keepalive_timeout drops a healthy
  // connection).
  std::chrono::milliseconds keepalive_time{10000};
  std::chrono::milliseconds keepalive_timeout{10000};
  // Sent with every call as "authorization: Bearer <auth_token>" when not empty (walserver's
  // --auth_token_file).
  std::string auth_token;
  // TLS: PEM CA certificates to verify walserver with (empty: plaintext), and this client's
  // certificate and key for servers that require one.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
};

struct CreateNamespaceResult {
  v1::Namespace ns;
  bool created = false;  // false: it existed already, `ns` is its assignment
};

struct AcquireResult {
  v1::Namespace ns;
  uint64_t epoch = 0;  // the new epoch, also in ns.epoch()
};

struct ReadOptions {
  uint64_t namespace_id = 0;
  uint64_t start_entry_id = 0;  // 0: from first_entry_id
  uint64_t limit = 0;           // 0: no limit
  bool follow = false;          // keep receiving new entries until cancelled
  // Deadline of the whole read; 0 means ClientOptions::timeout, or none for a follow read.
  std::chrono::milliseconds timeout{0};
  // Instead of start_entry_id: from the first entry appended at or after this time (ms since
  // the Unix epoch, by the clock of the walserver that wrote it), and all after it. 0: unused.
  uint64_t start_time_ms = 0;
  // Gap-tolerant recovery: records gone from Kafka and corrupt entries are reported to `on_gap`
  // (in order with the entries, on the reading thread) and the read goes on past them, instead
  // of ending with DATA_LOSS. skip_lost without on_gap: INVALID_ARGUMENT.
  bool skip_lost = false;
  std::function<void(const v1::Gap& gap)> on_gap = nullptr;
  // After UNAVAILABLE (walserver restarted, the connection dropped), open the read again past
  // the last entry it delivered, up to ClientOptions::max_retries times in a row, instead of
  // ending: the stream goes on as one read. Entries it delivered already are never delivered
  // again, also when their writer retried them and the retry lies past the resumption point
  // (each entry is known by its writer_id and sequence; the read keeps, per writer, the ranges of
  // sequences it delivered). A resumed read that does not follow ends at the end of the log as
  // seen when it resumed; one with a limit may end short of it by the copies it left out. The
  // Client must outlive the stream.
  bool resume = false;
};

// A ReadMany: several namespaces replayed on one stream.
struct ReadManyOptions {
  struct Start {
    uint64_t namespace_id = 0;
    uint64_t start_entry_id = 0;  // 0: from first_entry_id
    uint64_t limit = 0;           // 0: no limit
    uint64_t start_time_ms = 0;   // instead of start_entry_id: see ReadOptions
    bool skip_lost = false;       // see ReadOptions; gaps go to ReadManyOptions::on_gap
  };
  std::vector<Start> namespaces;  // each namespace at most once
  bool follow = false;            // after each namespace's backlog, keep receiving new entries
  // Instead of namespaces (and without follow): every namespace living in one slot, each from
  // start_entry_id or its first entry if that is higher (wal.proto, SlotRead).
  struct SlotStart {
    std::string topic;
    int32_t partition = 0;
    uint64_t start_entry_id = 0;
    bool skip_lost = false;
  };
  std::optional<SlotStart> slot;
  // Deadline of the whole read; 0 means ClientOptions::timeout, or none for a follow read.
  std::chrono::milliseconds timeout{0};
  // The gaps of namespaces read with skip_lost, in order with their entries.
  std::function<void(const v1::Gap& gap)> on_gap = nullptr;
};

class Client;

// One Read stream, pulled an entry at a time. Not thread-safe, except Cancel().
class ReadStream {
 public:
  ~ReadStream();  // cancels the stream if it is still open

  // Blocks until the next entry (true) or the end of the stream (false; see status()).
  // Entries come in entry-id order.
  bool Next(v1::Entry* entry);
  // After Next returned false: OK at the end of the log (as seen when the read began), or why
  // the stream ended. CANCELLED after Cancel().
  const absl::Status& status() const { return status_; }
  // Ends the stream from any thread; Next then returns false.
  void Cancel();
  // With ReadOptions::resume: copies of entries it had delivered, left out after resuming.
  uint64_t resumed_copies() const { return resumed_copies_; }

 private:
  friend class Client;
  ReadStream() = default;
  // Reads the next message into batch_; false at the end of the stream (status_ set), after
  // resuming the read as often as ReadOptions::resume allows.
  bool ReadBatch();
  // With resume: opens the read again past what was delivered, after a backoff that Cancel()
  // cuts short; false when it must not (cancelled, out of retries or of time).
  bool Reopen();
  // Opens the call from where the read stands.
  void Open();

  Client* client_ = nullptr;
  ReadOptions options_;  // as asked; a reopened read starts past `position_`
  std::chrono::system_clock::time_point deadline_;
  bool has_deadline_ = false;
  std::mutex mu_;  // guards ctx_ against Cancel() from another thread, and cancelled_
  std::condition_variable cancel_cv_;
  bool cancelled_ = false;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReader<v1::ReadResponse>> reader_;
  v1::ReadResponse batch_;
  int next_in_batch_ = 0;
  bool done_ = false;
  bool gaps_passed_ = true;  // the gaps of batch_ went to on_gap_
  std::function<void(const v1::Gap& gap)> on_gap_;
  bool verify_checksums_ = true;
  absl::Status status_;
  uint64_t position_ = 0;   // the next id past every entry and gap delivered (0: none yet)
  uint64_t delivered_ = 0;  // entries delivered, against options_.limit
  int retries_ = 0;         // resumptions in a row without a message in between
  SeenSequences seen_;      // with resume: the entries delivered
  uint64_t resumed_copies_ = 0;
};

// OK when `entry` carries no checksum or matches it; DATA_LOSS naming the entry otherwise.
absl::Status CheckEntryChecksum(const v1::Entry& entry);

class Client {
 public:
  // Creates a channel to walserver; connects lazily, so this succeeds without a server.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  // A client on a channel made by the caller (credentials, interceptors); options.target unused.
  static std::unique_ptr<Client> OnChannel(std::shared_ptr<grpc::Channel> channel,
                                           const ClientOptions& options);
  // Waits for the AppendAsync calls still running (each ends by its deadline). A Client must
  // outlive the AppendAsync calls it started.
  ~Client();

  // Creates a namespace. Idempotent: an existing namespace comes back with created=false and its
  // assignment. Retried on UNAVAILABLE. INVALID_ARGUMENT for id 0.
  absl::StatusOr<CreateNamespaceResult> CreateNamespace(uint64_t namespace_id);
  // The same in the slot asked for: one of walserver's topics and a partition of it, for callers
  // that place namespaces themselves. INVALID_ARGUMENT for a slot walserver does not serve,
  // FAILED_PRECONDITION if the namespace exists in another slot (or a walserver too old to know
  // the field put it elsewhere).
  absl::StatusOr<CreateNamespaceResult> CreateNamespace(uint64_t namespace_id,
                                                        const std::string& topic,
                                                        int32_t partition = 0);

  // Makes this client the namespace's writer: a new epoch, which later appends to the namespace
  // carry. Call it when a region opens, before replaying it. Retried on UNAVAILABLE (a retry at
  // worst raises the epoch once more).
  absl::StatusOr<AcquireResult> AcquireNamespace(uint64_t namespace_id);

  // Appends the request's entries (several namespaces may share one request) and returns their
  // ids in request order, once Kafka acknowledged every one. Ids increase within a namespace in
  // request order (a retry's answer excepted, when an earlier attempt wrote a later entry but not
  // an earlier one: its ids are those of the copies in the log). Entries without a sequence get the
  // next ones of this client, and without an epoch the one this client acquired. Retried as
  // "Retry-safe appends" says; on a final error a prefix may be durable. FAILED_PRECONDITION when
  // the epoch was fenced. The request is stamped in place: pass it with std::move unless it is
  // needed again (that saves a copy).
  absl::StatusOr<std::vector<uint64_t>> Append(v1::AppendRequest request);
  // Appends `entries` to one namespace.
  absl::StatusOr<std::vector<uint64_t>> Append(uint64_t namespace_id,
                                               const std::vector<std::string>& entries);

  // Like Append (retries included), but returns at once; `done` runs exactly once, on one of the
  // client's threads (the append stream's reader or timer, or a gRPC thread for unary calls),
  // with the ids or the error. No thread waits per call. `done` must not block. Appends issued one
  // after another from one thread reach walserver in order, but their ids are ordered only if each
  // waits for the previous `done`.
  void AppendAsync(v1::AppendRequest request,
                   std::function<void(absl::StatusOr<std::vector<uint64_t>>)> done);

  // Opens a Read stream. Blocks only to start the call; errors (NOT_FOUND, OUT_OF_RANGE,
  // UNAVAILABLE...) surface from ReadStream::Next/status(). Not retried, except as
  // ReadOptions::resume says.
  std::unique_ptr<ReadStream> OpenRead(const ReadOptions& options);
  // Streams entries in id order to `on_entry` on the calling thread until the end of the log as
  // seen when the read began, until on_entry returns false (then OK), or forever with follow.
  // Retried on UNAVAILABLE while no entry has been delivered; after that, resumed as
  // ReadOptions::resume says.
  absl::Status Read(const ReadOptions& options,
                    const std::function<bool(v1::Entry& entry)>& on_entry);
  // Replays several namespaces on one stream, as a datanode opens its regions: `on_entry` gets
  // each namespace's entries in id order (namespaces interleave), and `on_end` each namespace's
  // ReadEnd after its last entry: code OK when it was read to its end as seen when the read
  // began, else why it failed (NOT_FOUND, OUT_OF_RANGE, DATA_LOSS...; the others go on). With
  // follow, a ReadEnd with caught_up says its backlog was sent; its new entries follow. Both
  // run on the calling thread; returning false from either ends the read (then OK). Returns OK
  // once every namespace ended; errors of the call itself (UNAVAILABLE, DEADLINE_EXCEEDED,
  // INVALID_ARGUMENT for id 0 or a namespace named twice). Retried on UNAVAILABLE while nothing
  // was delivered.
  absl::Status ReadMany(const ReadManyOptions& options,
                        const std::function<bool(v1::Entry& entry)>& on_entry,
                        const std::function<bool(const v1::ReadEnd& end)>& on_end);

  // Reads into a vector (no follow).
  absl::StatusOr<std::vector<v1::Entry>> ReadAll(uint64_t namespace_id, uint64_t start_entry_id = 0,
                                                 uint64_t limit = 0);

  // Entries with id < entry_id become unreadable. A lower value than before, or 0, is a no-op.
  // OUT_OF_RANGE past the namespace's end. Retried on UNAVAILABLE (truncation is monotonic).
  absl::StatusOr<v1::Namespace> Truncate(uint64_t namespace_id, uint64_t entry_id);
  // Assignment and watermarks. Retried on UNAVAILABLE.
  absl::StatusOr<v1::Namespace> GetNamespace(uint64_t namespace_id);
  // Where a slot's records begin and end now, and how many namespaces live in it.
  absl::StatusOr<v1::GetSlotResponse> GetSlot(const std::string& topic, int32_t partition);
  // Every live namespace in id order, fetching page after page. Retried on UNAVAILABLE.
  absl::StatusOr<std::vector<v1::Namespace>> ListNamespaces();
  // Deletes a namespace and forgets the epoch this client acquired for it (a namespace created
  // again with the id starts above it: acquire it anew). Not retried: a retry after a lost reply
  // would answer NOT_FOUND.
  absl::Status DeleteNamespace(uint64_t namespace_id);

  v1::WalService::Stub& stub() { return *stub_; }
  uint64_t writer_id() const { return writer_id_; }

 private:
  friend class ReadStream;  // a resumed read opens its call again
  struct AsyncAppend;
  Client(const ClientOptions& options, std::unique_ptr<v1::WalService::Stub> stub);
  std::chrono::system_clock::time_point Deadline(std::chrono::milliseconds timeout) const;
  // Adds what every call carries (the bearer token).
  void Prepare(grpc::ClientContext& ctx) const;
  // Runs `attempt` (one RPC with the given deadline) until it succeeds, fails with something
  // other than UNAVAILABLE, runs out of retries, or the deadline is near.
  absl::Status WithRetries(std::chrono::system_clock::time_point deadline,
                           const std::function<grpc::Status(grpc::ClientContext&)>& attempt);
  // Runs a read's `attempt` again on a retryable failure (RetryPolicy's read rule) as long as
  // it delivered nothing: entries, gaps or ends. `attempt` sets *delivered when it did.
  absl::Status ReplayWithRetries(bool has_deadline, std::chrono::system_clock::time_point deadline,
                                 const std::function<absl::Status(bool* delivered)>& attempt);
  // Gives the request this client's writer id, and its entries sequences and epochs.
  void Stamp(v1::AppendRequest* request);
  // The deadline of one Append attempt within the call's `deadline`.
  std::chrono::system_clock::time_point AttemptDeadline(
      std::chrono::system_clock::time_point deadline) const;
  // Sends a stamped request as unary Append calls, retries included.
  void AppendUnaryAsync(v1::AppendRequest request, std::chrono::system_clock::time_point deadline,
                        std::function<void(absl::StatusOr<std::vector<uint64_t>>)> done);
  void StartAsyncAttempt(std::shared_ptr<AsyncAppend> call);
  void OnAsyncAttemptDone(std::shared_ptr<AsyncAppend> call, const grpc::Status& status);

  ClientOptions options_;
  const RetryPolicy retry_{options_.max_retries, options_.retry_backoff};
  std::unique_ptr<v1::WalService::Stub> stub_;
  uint64_t writer_id_;
  std::mutex mu_;
  std::map<uint64_t, uint64_t> last_sequence_ ABSL_GUARDED_BY(mu_);  // per namespace
  std::map<uint64_t, uint64_t> epochs_ ABSL_GUARDED_BY(mu_);         // acquired, per namespace
  std::unique_ptr<AppendStreamer> streamer_;  // null when options_.append_stream is false
};

// gRPC status -> absl::Status, keeping code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace wal
