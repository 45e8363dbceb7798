#include "client/wal_client.h"

#include <algorithm>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "client/append_streamer.h"
#include "client/retry.h"
#include "grpcpp/alarm.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "server/common/crc32c.h"
#include "server/common/read_file.h"

namespace wal {

using std::chrono::system_clock;

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share their numbering.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

namespace {

uint64_t RandomWriterId() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) | rd();
  return id;
}

}  // namespace

Client::Client(const ClientOptions& options, std::unique_ptr<v1::WalService::Stub> stub)
    : options_(options),
      stub_(std::move(stub)),
      writer_id_(options.writer_id != 0 ? options.writer_id : RandomWriterId()) {
  if (!options_.append_stream) return;
  AppendStreamer::Options streamer;
  streamer.retry = retry_;
  streamer.attempt_timeout = options_.append_attempt_timeout;
  streamer.prepare = [this](grpc::ClientContext& ctx) { Prepare(ctx); };
  streamer_ = std::make_unique<AppendStreamer>(
      stub_.get(), std::move(streamer),
      [this](v1::AppendRequest request, system_clock::time_point deadline,
             AppendStreamer::Done done) {
        AppendUnaryAsync(std::move(request), deadline, std::move(done));
      });
}

Client::~Client() { streamer_.reset(); }

namespace {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ClientOptions& o) {
  if (o.tls_ca_file.empty()) {
    if (!o.tls_cert_file.empty() || !o.tls_key_file.empty()) {
      return absl::InvalidArgumentError("a client certificate needs tls_ca_file too");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  auto ca = ReadWholeFile(o.tls_ca_file, "tls_ca_file");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *ca;
  if (!o.tls_cert_file.empty()) {
    auto cert = ReadWholeFile(o.tls_cert_file, "tls_cert_file");
    if (!cert.ok()) return cert.status();
    auto key = ReadWholeFile(o.tls_key_file, "tls_key_file");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("no walserver address given");
  auto credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  if (options.keepalive_time.count() != 0 &&
      (options.keepalive_time < std::chrono::seconds(1) || options.keepalive_timeout.count() < 1)) {
    return absl::InvalidArgumentError(
        "keepalive_time must be 0 (no pings) or at least 1 s, and keepalive_timeout positive");
  }
  grpc::ChannelArguments args;
  // Entries up to the server's limit (64 MiB by default) travel whole; the server enforces it.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  if (options.keepalive_time.count() != 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_time.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options.keepalive_timeout.count()));
    // Also on an idle channel, without limit: a dead connection is found before a call waits on
    // it.
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  auto channel = grpc::CreateCustomChannel(options.target, *credentials, args);
  return OnChannel(std::move(channel), options);
}

void Client::Prepare(grpc::ClientContext& ctx) const {
  if (!options_.auth_token.empty())
    ctx.AddMetadata("authorization", "Bearer " + options_.auth_token);
}

std::unique_ptr<Client> Client::OnChannel(std::shared_ptr<grpc::Channel> channel,
                                          const ClientOptions& options) {
  return std::unique_ptr<Client>(new Client(options, v1::WalService::NewStub(channel)));
}

system_clock::time_point Client::Deadline(std::chrono::milliseconds timeout) const {
  return system_clock::now() + (timeout.count() == 0 ? options_.timeout : timeout);
}

absl::Status Client::WithRetries(system_clock::time_point deadline,
                                 const std::function<grpc::Status(grpc::ClientContext&)>& attempt) {
  for (int retry = 0;; ++retry) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    Prepare(ctx);
    const grpc::Status status = attempt(ctx);
    const auto wait =
        retry_.Next(RetryPolicy::Kind::kCall, FromGrpcStatus(status).code(), retry, deadline);
    if (!wait) return FromGrpcStatus(status);
    std::this_thread::sleep_for(*wait);
  }
}

void Client::Stamp(v1::AppendRequest* request) {
  if (request->writer_id() == 0) request->set_writer_id(writer_id_);
  // Outside the lock: checksums of large entries take a while.
  if (options_.checksums) {
    for (v1::Entry& e : *request->mutable_entries()) {
      if (!e.has_crc32c()) e.set_crc32c(Crc32c(e.data()));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (v1::Entry& e : *request->mutable_entries()) {
    if (e.sequence() == 0) e.set_sequence(++last_sequence_[e.namespace_id()]);
    if (e.epoch() == 0) {
      auto it = epochs_.find(e.namespace_id());
      if (it != epochs_.end()) e.set_epoch(it->second);
    }
  }
}

system_clock::time_point Client::AttemptDeadline(system_clock::time_point deadline) const {
  return std::min(deadline, system_clock::now() + options_.append_attempt_timeout);
}

absl::StatusOr<AcquireResult> Client::AcquireNamespace(uint64_t namespace_id) {
  v1::AcquireNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  v1::AcquireNamespaceResponse response;
  absl::Status s = WithRetries(Deadline(options_.timeout), [&](grpc::ClientContext& ctx) {
    return stub_->AcquireNamespace(&ctx, request, &response);
  });
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t& epoch = epochs_[namespace_id];
    epoch = std::max(epoch, response.epoch());
  }
  return AcquireResult{response.namespace_(), response.epoch()};
}

absl::StatusOr<CreateNamespaceResult> Client::CreateNamespace(uint64_t namespace_id) {
  return CreateNamespace(namespace_id, "", 0);
}

absl::StatusOr<CreateNamespaceResult> Client::CreateNamespace(uint64_t namespace_id,
                                                              const std::string& topic,
                                                              int32_t partition) {
  v1::CreateNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  request.set_topic(topic);
  request.set_partition(partition);
  v1::CreateNamespaceResponse response;
  absl::Status s = WithRetries(Deadline(options_.timeout), [&](grpc::ClientContext& ctx) {
    return stub_->CreateNamespace(&ctx, request, &response);
  });
  if (!s.ok()) return s;
  const v1::Namespace& ns = response.namespace_();
  if (!topic.empty() && (ns.topic() != topic || ns.partition() != partition)) {
    // A walserver older than the slot field ignores it.
    return absl::FailedPreconditionError(
        absl::StrCat("namespace ", namespace_id, " is in ", ns.topic(), "[", ns.partition(),
                     "], not in the slot asked for, ", topic, "[", partition,
                     "]: walserver does not know the field (an older version)"));
  }
  return CreateNamespaceResult{ns, response.created()};
}

absl::StatusOr<std::vector<uint64_t>> Client::Append(v1::AppendRequest request) {
  Stamp(&request);
  const system_clock::time_point deadline = Deadline(options_.timeout);
  if (streamer_) {
    std::promise<absl::StatusOr<std::vector<uint64_t>>> answered;
    streamer_->Append(std::move(request), deadline,
                      [&answered](absl::StatusOr<std::vector<uint64_t>> ids) {
                        answered.set_value(std::move(ids));
                      });
    return answered.get_future().get();
  }
  const auto first_attempt = std::chrono::steady_clock::now();
  for (int retry = 0;; ++retry) {
    if (retry > 0) MarkRetry(&request, first_attempt);
    grpc::ClientContext ctx;
    ctx.set_deadline(AttemptDeadline(deadline));
    Prepare(ctx);
    v1::AppendResponse response;
    const grpc::Status status = stub_->Append(&ctx, request, &response);
    if (status.ok()) {
      return std::vector<uint64_t>(response.entry_ids().begin(), response.entry_ids().end());
    }
    const auto delay =
        retry_.Next(RetryPolicy::Kind::kAppend, FromGrpcStatus(status).code(), retry, deadline);
    if (!delay) return FromGrpcStatus(status);
    std::this_thread::sleep_for(*delay);
  }
}

absl::StatusOr<std::vector<uint64_t>> Client::Append(uint64_t namespace_id,
                                                     const std::vector<std::string>& entries) {
  v1::AppendRequest request;
  for (const std::string& data : entries) {
    v1::Entry* e = request.add_entries();
    e->set_namespace_id(namespace_id);
    e->set_data(data);
  }
  return Append(std::move(request));
}

// One AppendAsync call, alive until `done` has run.
struct Client::AsyncAppend {
  v1::AppendRequest request;
  system_clock::time_point deadline;
  int retry = 0;
  std::chrono::steady_clock::time_point first_attempt;
  std::unique_ptr<grpc::ClientContext> ctx ABSL_GUARDED_BY(handoff);  // one per attempt
  v1::AppendResponse response;
  std::function<void(absl::StatusOr<std::vector<uint64_t>>)> done;
  // Wakes the next attempt after a retry delay, on a gRPC thread; replaced for each retry.
  std::unique_ptr<grpc::Alarm> retry_alarm;
  // gRPC already orders an attempt's set-up before its callback, but inside a library that
  // ThreadSanitizer cannot see. Taking this lock on both sides makes the order visible, so a
  // retry that rebuilds `ctx` on another thread is not reported as a race.
  std::mutex handoff;
};

void Client::AppendAsync(v1::AppendRequest request,
                         std::function<void(absl::StatusOr<std::vector<uint64_t>>)> done) {
  Stamp(&request);
  const system_clock::time_point deadline = Deadline(options_.timeout);
  if (streamer_) {
    streamer_->Append(std::move(request), deadline, std::move(done));
    return;
  }
  AppendUnaryAsync(std::move(request), deadline, std::move(done));
}

void Client::AppendUnaryAsync(v1::AppendRequest request, system_clock::time_point deadline,
                              std::function<void(absl::StatusOr<std::vector<uint64_t>>)> done) {
  auto call = std::make_shared<AsyncAppend>();
  call->request = std::move(request);
  call->deadline = deadline;
  // Earlier when the append stream already tried it.
  call->first_attempt = std::chrono::steady_clock::now() -
                        std::chrono::milliseconds(call->request.first_attempt_age_ms());
  call->done = std::move(done);
  StartAsyncAttempt(std::move(call));
}

void Client::StartAsyncAttempt(std::shared_ptr<AsyncAppend> call) {
  grpc::ClientContext* ctx;
  {
    std::lock_guard<std::mutex> lock(call->handoff);
    call->ctx = std::make_unique<grpc::ClientContext>();
    call->ctx->set_deadline(AttemptDeadline(call->deadline));
    Prepare(*call->ctx);
    if (call->retry > 0) MarkRetry(&call->request, call->first_attempt);
    call->response.Clear();
    ctx = call->ctx.get();  // read under the lock too: the next retry replaces it
  }
  AsyncAppend* raw = call.get();
  stub_->async()->Append(ctx, &raw->request, &raw->response,
                         [this, call = std::move(call)](grpc::Status status) mutable {
                           OnAsyncAttemptDone(std::move(call), status);
                         });
}

void Client::OnAsyncAttemptDone(std::shared_ptr<AsyncAppend> call, const grpc::Status& status) {
  { std::lock_guard<std::mutex> lock(call->handoff); }
  if (status.ok()) {
    call->done(std::vector<uint64_t>(call->response.entry_ids().begin(),
                                     call->response.entry_ids().end()));
    return;  // `call` and its context go here, inside the callback, as gRPC allows
  }
  const auto delay = retry_.Next(RetryPolicy::Kind::kAppend, FromGrpcStatus(status).code(),
                                 call->retry++, call->deadline);
  if (!delay) {
    call->done(FromGrpcStatus(status));
    return;
  }
  // The gRPC thread must not block: an alarm starts the next attempt. The alarm's callback holds
  // the call until it fires, then hands it on (so the call does not keep itself alive).
  AsyncAppend* raw = call.get();
  raw->retry_alarm = std::make_unique<grpc::Alarm>();
  raw->retry_alarm->Set(
      system_clock::now() + *delay, [this, call = std::move(call), status](bool fired) mutable {
        std::shared_ptr<AsyncAppend> next = std::move(call);
        if (!fired) {
          next->done(FromGrpcStatus(status));  // cancelled: not expected, the call owns its alarm
          return;
        }
        StartAsyncAttempt(std::move(next));
      });
}

ReadStream::~ReadStream() {
  if (!done_) {
    Cancel();
    reader_->Finish();
  }
}

bool ReadStream::Next(v1::Entry* entry) {
  for (;;) {
    while (next_in_batch_ >= batch_.entries_size()) {
      if (!gaps_passed_) {  // a message's gaps come after its entries
        gaps_passed_ = true;
        for (const v1::Gap& gap : batch_.gaps()) {
          position_ = std::max(position_, gap.to_entry_id());
          if (on_gap_) on_gap_(gap);
        }
      }
      if (done_) return false;
      batch_.Clear();
      next_in_batch_ = 0;
      if (!ReadBatch()) return false;
      gaps_passed_ = batch_.gaps().empty();
    }
    entry->Swap(batch_.mutable_entries(next_in_batch_++));
    if (verify_checksums_) {
      if (absl::Status s = CheckEntryChecksum(*entry); !s.ok()) {
        ctx_->TryCancel();
        reader_->Finish();
        done_ = true;
        gaps_passed_ = true;  // they lie after the corrupt entry
        status_ = std::move(s);
        return false;
      }
    }
    if (options_.resume && !seen_.Add(entry->writer_id(), entry->sequence())) {
      ++resumed_copies_;  // its writer retried it, and the retry lies past where the read resumed
      continue;
    }
    position_ = entry->entry_id() + 1;
    ++delivered_;
    return true;
  }
}

bool ReadStream::ReadBatch() {
  for (;;) {
    if (reader_->Read(&batch_)) {
      retries_ = 0;
      return true;
    }
    status_ = FromGrpcStatus(reader_->Finish());
    if (!options_.resume || !absl::IsUnavailable(status_) || !Reopen()) {
      done_ = true;
      return false;
    }
  }
}

bool ReadStream::Reopen() {
  if (options_.limit != 0 && delivered_ >= options_.limit) {
    status_ = absl::OkStatus();  // all it asked for came; only the call's end was lost
    return false;
  }
  const auto sleep =
      client_->retry_.Next(RetryPolicy::Kind::kRead, absl::StatusCode::kUnavailable, retries_,
                           has_deadline_ ? deadline_ : system_clock::time_point::max());
  if (!sleep) return false;
  ++retries_;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (cancel_cv_.wait_for(lock, *sleep, [this] { return cancelled_; })) {
      status_ = absl::CancelledError("the read was cancelled");
      return false;
    }
  }
  Open();
  return true;
}

void ReadStream::Open() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  client_->Prepare(*ctx);
  if (has_deadline_) ctx->set_deadline(deadline_);
  v1::ReadRequest request;
  request.set_namespace_id(options_.namespace_id);
  // Past what was delivered; a read from a time only once an entry came (a gap before its first
  // entry may lie before the time: it is reported again).
  if (position_ > 0 && (delivered_ > 0 || options_.start_time_ms == 0)) {
    request.set_start_entry_id(position_);
  } else {
    request.set_start_entry_id(options_.start_entry_id);
    request.set_start_time_ms(options_.start_time_ms);
  }
  if (options_.limit != 0) request.set_limit(options_.limit - delivered_);
  request.set_follow(options_.follow);
  request.set_skip_lost(options_.skip_lost);
  // The call just ended goes before its context (the reader refers to it). The new context is
  // in place before the call starts, which may wait to connect: Cancel() reaches it meanwhile.
  reader_.reset();
  grpc::ClientContext* started = ctx.get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ctx_ = std::move(ctx);
    if (cancelled_) ctx_->TryCancel();
  }
  reader_ = client_->stub_->Read(started, request);
}

absl::Status CheckEntryChecksum(const v1::Entry& entry) {
  if (!entry.has_crc32c()) return absl::OkStatus();  // a walserver from before checksums
  const uint32_t actual = Crc32c(entry.data());
  if (actual == entry.crc32c()) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("entry ", entry.entry_id(), " of namespace ", entry.namespace_id(), ": its ",
                   entry.data().size(), " bytes do not match the crc32c stored with it (",
                   entry.crc32c(), ", the data has ", actual,
                   "): corrupted between Kafka and this client; the read stops before it"));
}

void ReadStream::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (ctx_) ctx_->TryCancel();
  cancel_cv_.notify_all();
}

std::unique_ptr<ReadStream> Client::OpenRead(const ReadOptions& options) {
  std::unique_ptr<ReadStream> stream(new ReadStream());
  stream->client_ = this;
  stream->options_ = options;
  stream->verify_checksums_ = options_.checksums;
  stream->on_gap_ = options.on_gap;
  if (options.skip_lost && !options.on_gap) {
    // What the read went past would be thrown away unseen: not a way to recover.
    stream->ctx_ = std::make_unique<grpc::ClientContext>();
    stream->done_ = true;
    stream->status_ =
        absl::InvalidArgumentError("skip_lost needs on_gap, to hear what the read went past");
    return stream;
  }
  stream->has_deadline_ = options.timeout.count() != 0 || !options.follow;
  stream->deadline_ = Deadline(options.timeout);
  stream->Open();
  return stream;
}

absl::Status Client::Read(const ReadOptions& options,
                          const std::function<bool(v1::Entry& entry)>& on_entry) {
  const bool has_deadline = options.timeout.count() != 0 || !options.follow;
  const system_clock::time_point deadline = Deadline(options.timeout);
  return ReplayWithRetries(has_deadline, deadline, [&](bool* delivered) {
    ReadOptions attempt = options;
    if (has_deadline) {
      attempt.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::max(deadline - system_clock::now(), system_clock::duration(1)));
    }
    // A resumable stream has retried already.
    *delivered = options.resume;
    if (options.on_gap) {
      attempt.on_gap = [&](const v1::Gap& gap) {
        *delivered = true;
        options.on_gap(gap);
      };
    }
    std::unique_ptr<ReadStream> stream = OpenRead(attempt);
    v1::Entry entry;
    while (stream->Next(&entry)) {
      *delivered = true;
      if (!on_entry(entry)) return absl::OkStatus();  // the stream's destructor cancels it
    }
    return stream->status();
  });
}

absl::Status Client::ReplayWithRetries(
    bool has_deadline, system_clock::time_point deadline,
    const std::function<absl::Status(bool* delivered)>& attempt) {
  for (int retry = 0;; ++retry) {
    bool delivered = false;
    const absl::Status status = attempt(&delivered);
    if (delivered) return status;  // a retry would deliver it again
    const auto wait = retry_.Next(RetryPolicy::Kind::kRead, status.code(), retry,
                                  has_deadline ? deadline : system_clock::time_point::max());
    if (!wait) return status;
    std::this_thread::sleep_for(*wait);
  }
}

absl::Status Client::ReadMany(const ReadManyOptions& options,
                              const std::function<bool(v1::Entry& entry)>& on_entry,
                              const std::function<bool(const v1::ReadEnd& end)>& on_end) {
  v1::ReadManyRequest request;
  for (const ReadManyOptions::Start& start : options.namespaces) {
    v1::ReadRequest* read = request.add_reads();
    read->set_namespace_id(start.namespace_id);
    read->set_start_entry_id(start.start_entry_id);
    read->set_limit(start.limit);
    read->set_start_time_ms(start.start_time_ms);
    read->set_skip_lost(start.skip_lost);
  }
  request.set_follow(options.follow);
  if (options.slot) {
    v1::SlotRead* slot = request.mutable_slot();
    slot->set_topic(options.slot->topic);
    slot->set_partition(options.slot->partition);
    slot->set_start_entry_id(options.slot->start_entry_id);
    slot->set_skip_lost(options.slot->skip_lost);
    if (options.slot->skip_lost && !options.on_gap) {
      return absl::InvalidArgumentError(
          "skip_lost for a slot needs ReadManyOptions::on_gap, to hear what the read went past");
    }
  }
  for (const ReadManyOptions::Start& start : options.namespaces) {
    if (start.skip_lost && !options.on_gap) {
      return absl::InvalidArgumentError(
          absl::StrCat("skip_lost for namespace ", start.namespace_id,
                       " needs ReadManyOptions::on_gap, to hear what the read went past"));
    }
  }
  const bool has_deadline = options.timeout.count() != 0 || !options.follow;
  const system_clock::time_point deadline = Deadline(options.timeout);
  return ReplayWithRetries(has_deadline, deadline, [&](bool* delivered) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (has_deadline) ctx.set_deadline(deadline);
    auto reader = stub_->ReadMany(&ctx, request);
    v1::ReadResponse batch;
    bool stopped = false;
    while (!stopped && reader->Read(&batch)) {
      for (v1::Entry& entry : *batch.mutable_entries()) {
        if (options_.checksums) {
          if (absl::Status s = CheckEntryChecksum(entry); !s.ok()) {
            ctx.TryCancel();
            reader->Finish();
            return s;
          }
        }
        *delivered = true;
        if (!on_entry(entry)) {
          stopped = true;
          break;
        }
      }
      if (!stopped && options.on_gap) {
        for (const v1::Gap& gap : batch.gaps()) {
          *delivered = true;
          options.on_gap(gap);
        }
      }
      for (const v1::ReadEnd& end : batch.ends()) {
        if (stopped) break;
        *delivered = true;
        if (!on_end(end)) stopped = true;
      }
    }
    if (stopped) {
      ctx.TryCancel();
      reader->Finish();
      return absl::OkStatus();
    }
    return FromGrpcStatus(reader->Finish());
  });
}

absl::StatusOr<std::vector<v1::Entry>> Client::ReadAll(uint64_t namespace_id,
                                                       uint64_t start_entry_id, uint64_t limit) {
  std::vector<v1::Entry> entries;
  ReadOptions options;
  options.namespace_id = namespace_id;
  options.start_entry_id = start_entry_id;
  options.limit = limit;
  absl::Status status = Read(options, [&](v1::Entry& e) {
    entries.push_back(std::move(e));
    return true;
  });
  if (!status.ok()) return status;
  return entries;
}

absl::StatusOr<v1::Namespace> Client::Truncate(uint64_t namespace_id, uint64_t entry_id) {
  v1::TruncateRequest request;
  request.set_namespace_id(namespace_id);
  request.set_entry_id(entry_id);
  v1::TruncateResponse response;
  absl::Status s = WithRetries(Deadline(options_.timeout), [&](grpc::ClientContext& ctx) {
    return stub_->Truncate(&ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.namespace_();
}

absl::StatusOr<v1::Namespace> Client::GetNamespace(uint64_t namespace_id) {
  v1::GetNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  v1::GetNamespaceResponse response;
  absl::Status s = WithRetries(Deadline(options_.timeout), [&](grpc::ClientContext& ctx) {
    return stub_->GetNamespace(&ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.namespace_();
}

absl::StatusOr<v1::GetSlotResponse> Client::GetSlot(const std::string& topic, int32_t partition) {
  v1::GetSlotRequest request;
  request.set_topic(topic);
  request.set_partition(partition);
  v1::GetSlotResponse response;
  absl::Status s = WithRetries(Deadline(options_.timeout), [&](grpc::ClientContext& ctx) {
    return stub_->GetSlot(&ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<std::vector<v1::Namespace>> Client::ListNamespaces() {
  std::vector<v1::Namespace> all;
  v1::ListNamespacesRequest request;
  const system_clock::time_point deadline = Deadline(options_.timeout);
  do {
    v1::ListNamespacesResponse response;
    absl::Status s = WithRetries(deadline, [&](grpc::ClientContext& ctx) {
      response.Clear();
      return stub_->ListNamespaces(&ctx, request, &response);
    });
    if (!s.ok()) return s;
    for (v1::Namespace& ns : *response.mutable_namespaces()) all.push_back(std::move(ns));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return all;
}

absl::Status Client::DeleteNamespace(uint64_t namespace_id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(options_.timeout));
  Prepare(ctx);
  v1::DeleteNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  v1::DeleteNamespaceResponse response;
  absl::Status status = FromGrpcStatus(stub_->DeleteNamespace(&ctx, request, &response));
  if (status.ok()) {
    // A namespace created again with this id starts above this epoch: the writer must acquire
    // it anew.
    std::lock_guard<std::mutex> lock(mu_);
    epochs_.erase(namespace_id);
  }
  return status;
}

}  // namespace wal
