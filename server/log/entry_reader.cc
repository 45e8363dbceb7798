#include "server/log/entry_reader.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/common/deadline.h"
#include "server/kafka/admin.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"

namespace wal {
namespace {

// `wide` for FetchSize::kWide, and the same with narrower fetches for kNarrow.
std::array<KafkaProperties, 2> PropertiesByFetchSize(KafkaProperties wide,
                                                     const ReaderOptions& options) {
  KafkaProperties narrow = wide;
  int64_t configured = 1 << 20;  // librdkafka's default
  if (auto it = wide.find("fetch.message.max.bytes"); it != wide.end()) {
    (void)absl::SimpleAtoi(it->second, &configured);
  }
  narrow["fetch.message.max.bytes"] =
      std::to_string(std::min(configured, options.narrow_fetch_bytes));
  return {std::move(wide), std::move(narrow)};
}

std::chrono::milliseconds FetchWait(const KafkaProperties& properties) {
  int wait_ms = Consumer::kDefaultFetchWaitMs;
  if (auto it = properties.find("fetch.wait.max.ms"); it != properties.end()) {
    (void)absl::SimpleAtoi(it->second, &wait_ms);
  }
  return std::chrono::milliseconds(wait_ms);
}

}  // namespace

int64_t ReaderFetchBytes(const KafkaProperties& producer_properties) {
  // librdkafka takes the codec from compression.codec or its alias compression.type, for every
  // topic or (prefixed "topic.") for the default topic, in any case: uncompressed only when every
  // one of them given says none.
  bool uncompressed = false;
  for (const auto& [key, value] : producer_properties) {
    if (!absl::EndsWith(key, "compression.codec") && !absl::EndsWith(key, "compression.type")) {
      continue;
    }
    if (!absl::EqualsIgnoreCase(value, "none")) return int64_t{64} << 10;
    uncompressed = true;
  }
  return uncompressed ? int64_t{1} << 20 : int64_t{64} << 10;
}

EntryReader::EntryReader(KafkaProperties properties, ReaderOptions options, MetaStore* meta,
                         Metrics* metrics, std::string name)
    : properties_(PropertiesByFetchSize(std::move(properties), options)),
      fetch_wait_(FetchWait(properties_[0])),
      name_(std::move(name)),
      meta_(meta) {
  // Reads are started by gRPC's threads, which learn of this reader through gRPC's
  // synchronisation, invisible to ThreadSanitizer in Debian's uninstrumented libgrpc. Everything
  // set here is published through mu_ as well, which Launch takes before anything else.
  std::lock_guard<std::mutex> publish(mu_);
  context_.options = options;
  context_.truncated_before = [meta](uint64_t id, int64_t incarnation) {
    return meta->TruncatedBefore(id, incarnation);
  };
  context_.metrics = metrics;
}

EntryReader::~EntryReader() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return running_ == 0 && scans_running_ == 0; });
  for (auto& idle : idle_consumers_) idle.clear();
}

absl::Status EntryReader::Start(ReadParams params, std::shared_ptr<ReadSink> sink) {
  return Launch(sink, [this, params, sink] { return Run(params, sink); });
}

absl::Status EntryReader::StartMany(std::vector<ReadParams> reads, std::shared_ptr<ReadSink> sink) {
  return Launch(sink, [this, reads = std::move(reads), sink] { return RunMany(reads, sink); });
}

absl::Status EntryReader::StartSlot(Slot slot, ReadParams params, std::shared_ptr<ReadSink> sink) {
  return Launch(
      sink, [this, slot = std::move(slot), params, sink] { return RunSlot(slot, params, sink); });
}

namespace {

// Collects the first entry of each namespace of a slot read whose members each take one.
class FirstEntrySink final : public ReadSink {
 public:
  bool Send(ReadBatch batch) override {
    const v1::ReadResponse response = batch.ToResponse();
    std::lock_guard<std::mutex> lock(mu_);
    for (const v1::Entry& e : response.entries()) {
      std::optional<int64_t>& first = firsts_[e.namespace_id()];
      const auto id = static_cast<int64_t>(e.entry_id());
      first = first ? std::min(*first, id) : id;
    }
    // An entry still incomplete at the read's end (ReadParams::for_pruner): needed from its start.
    for (const v1::Gap& gap : response.gaps()) {
      std::optional<int64_t>& first = firsts_[gap.namespace_id()];
      const auto id = static_cast<int64_t>(gap.from_entry_id());
      first = first ? std::min(*first, id) : id;
    }
    for (const v1::ReadEnd& end : response.ends()) {
      firsts_.try_emplace(end.namespace_id());  // none, if no entry came
      if (end.code() != 0 && failed_.ok()) {
        failed_ = absl::Status(static_cast<absl::StatusCode>(end.code()),
                               absl::StrCat("namespace ", end.namespace_id(), ": ", end.message()));
      }
    }
    return true;
  }
  bool cancelled() const override { return false; }
  void Finish(absl::Status status) override {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = status.ok() ? failed_ : std::move(status);
    done_.notify_all();
  }
  // Waits for Finish (the read ends by its deadline).
  absl::StatusOr<EntryReader::FirstEntries> Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return finished_.has_value(); });
    if (!finished_->ok()) return *finished_;
    return firsts_;
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  EntryReader::FirstEntries firsts_;
  absl::Status failed_;
  std::optional<absl::Status> finished_;
};

}  // namespace

absl::StatusOr<EntryReader::FirstEntries> EntryReader::FirstEntriesOf(const Slot& slot,
                                                                      int64_t end_at_least,
                                                                      Clock::time_point deadline) {
  auto sink = std::make_shared<FirstEntrySink>();
  ReadParams params;
  params.limit = 1;
  params.for_pruner = true;
  params.slot_end_at_least = end_at_least;
  params.deadline = deadline;
  if (absl::Status s = StartSlot(slot, params, sink); !s.ok()) return s;
  return sink->Wait();
}

absl::Status EntryReader::Launch(std::shared_ptr<ReadSink> sink,
                                 std::function<absl::Status()> run) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (context_.stopping) return absl::UnavailableError("walserver is shutting down");
    if (running_ >= context_.options.max_concurrent_reads) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many concurrent reads (", context_.options.max_concurrent_reads, "); retry later"));
    }
    ++running_;
  }
  std::thread([this, sink = std::move(sink), run = std::move(run)] {
    ++context_.metrics->reads_in_progress;
    absl::Status status = run();
    --context_.metrics->reads_in_progress;
    sink->Finish(std::move(status));
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) idle_cv_.notify_all();
  }).detach();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Consumer>> EntryReader::AcquireConsumer(FetchSize size) {
  const auto kind = static_cast<size_t>(size);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& idle = idle_consumers_[kind];
    const Clock::time_point now = Clock::now();
    for (auto it = idle.rbegin(); it != idle.rend(); ++it) {
      if (it->ready_at > now) continue;
      auto consumer = std::move(it->consumer);
      idle.erase(std::next(it).base());
      return consumer;
    }
  }
  return Consumer::Create(
      properties_[kind],
      absl::StrCat(name_, size == FetchSize::kNarrow ? "-narrow-reader-" : "-reader-",
                   consumers_made_++));
}

void EntryReader::ReleaseConsumer(std::unique_ptr<Consumer> consumer, FetchSize size,
                                  bool fetch_may_wait) {
  if (!consumer->Unassign().ok()) return;  // a consumer in doubt is not reused
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  auto& idle = idle_consumers_[static_cast<size_t>(size)];
  if (idle.size() < context_.options.max_idle_consumers) {
    idle.push_back(IdleConsumer{std::move(consumer), fetch_may_wait ? now + fetch_wait_ : now});
  }
}

void EntryReader::Join(const std::shared_ptr<ReadMember>& member, bool shared) {
  std::lock_guard<std::mutex> lock(mu_);
  const Slot& key = member->slot();
  auto it = scans_.find(key);
  if (shared && it != scans_.end() && it->second->TryJoin(member)) return;
  // No scan of the slot, or it is past this read's start: a new one (the old one, if any,
  // finishes on its own; only the newest is joinable). A read that fell behind its scan gets
  // one nobody else joins, so that it cannot hold others up again.
  auto scan =
      std::make_shared<SlotScan>(static_cast<ScanHost*>(this), &context_, member->slot(), shared);
  scan->TryJoin(member);
  if (shared) scans_[key] = scan;
  ++scans_running_;
  ++context_.metrics->read_scans;
  std::thread([scan] { scan->Run(); }).detach();
}

void EntryReader::ScanEnded(SlotScan* scan) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = scans_.begin(); it != scans_.end(); ++it) {
    if (it->second.get() == scan) {
      scans_.erase(it);
      break;
    }
  }
  if (--scans_running_ == 0) idle_cv_.notify_all();
}

absl::StatusOr<Watermarks> EntryReader::QueryEnds(const Slot& slot, Clock::time_point stop_at,
                                                  SlotsSeen* seen) {
  // A leader cut off from the other brokers keeps answering with the high watermark it had at
  // the cut until it hears it was replaced, although this server's writer already has
  // acknowledgements from the new leader past it: a read ending there would miss them. Such an
  // answer is asked again, for 5 s counted from the first short answer any read of the slot
  // got, so that reads short of time add up to it; after that short answers are taken (the
  // topic may have been made again) until one is not short, or until the writer acknowledges
  // more in the slot, which starts the wait again. One call waits 5 s at most in all, and at
  // most half the time it has left, however many of its slots are short.
  constexpr auto kStaleEndWait = std::chrono::seconds(5);
  constexpr auto kStaleEndRetry = std::chrono::milliseconds(100);
  const int64_t acknowledged =
      context_.options.acknowledged_end ? context_.options.acknowledged_end(slot) : 0;
  Clock::time_point ask_by = stop_at;
  std::optional<Watermarks> short_end;
  while (true) {
    absl::StatusOr<Watermarks> marks =
        QueryWatermarks(meta_->watermarks_client(), slot, Within(ask_by, kKafkaRequestTimeout));
    // A question asked again that fails in the little time left takes the short answer.
    if (!marks.ok()) return short_end ? absl::StatusOr<Watermarks>(*short_end) : marks;
    const Clock::time_point now = Clock::now();
    Clock::time_point given_up_at;
    {
      std::lock_guard<std::mutex> lock(stale_ends_mu_);
      if (marks->high >= acknowledged) {
        stale_ends_.erase(slot);
        return marks;
      }
      StaleEnd& stale = stale_ends_.try_emplace(slot, StaleEnd{now, acknowledged}).first->second;
      if (acknowledged > stale.acknowledged) stale = StaleEnd{now, acknowledged};
      given_up_at = stale.since + kStaleEndWait;
    }
    short_end = *marks;
    if (!seen->stale_wait_until) {
      seen->stale_wait_until = std::min(HalfwayTo(stop_at), now + kStaleEndWait);
    }
    ask_by = std::min(given_up_at, *seen->stale_wait_until);
    if (now + kStaleEndRetry >= ask_by) return marks;
    if (context_.stopping) return absl::UnavailableError("walserver is shutting down");
    std::this_thread::sleep_for(kStaleEndRetry);
  }
}

absl::StatusOr<int64_t> EntryReader::LowWatermark(const Slot& slot, Clock::time_point deadline) {
  auto marks =
      QueryWatermarks(meta_->watermarks_client(), slot, Within(deadline, kKafkaRequestTimeout));
  if (!marks.ok()) return marks.status();
  return marks->low;
}

absl::Status EntryReader::PrunedOrLost(const Slot& slot, int64_t from, int64_t low,
                                       Clock::time_point deadline) {
  // The pruner records its point before deleting; another server's record may not be read yet.
  if (low > meta_->PrunedBefore(slot)) {
    if (absl::Status s = meta_->CatchUp(Within(deadline, kKafkaRequestTimeout)); !s.ok()) {
      return s;
    }
  }
  if (low <= meta_->PrunedBefore(slot)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "records ", from, " to ", low - 1, " of ", slot.topic, "[", slot.partition,
      "] are gone from Kafka although no namespace truncated them (retention set on the topic?); "
      "walserver pruned only below ",
      meta_->PrunedBefore(slot)));
}

Clock::time_point EntryReader::CatchUpBy(Clock::time_point stop_at) {
  // A read sees every change to the namespace made before it began, through any server
  // (creation, truncation, a new epoch): one round trip to the metadata topic. It gets half the
  // time left at most (librdkafka may overrun a query's timeout), so that with Kafka down the
  // caller still hears UNAVAILABLE before its deadline.
  return Within(HalfwayTo(stop_at), kKafkaRequestTimeout);
}

void EntryReader::CheckIndex(const Slot& slot, const Watermarks& marks, int64_t indexed_end,
                             Clock::time_point stop_at, SlotsSeen* seen) {
  SlotIndex& index = context_.slot_indexes.Of(slot);
  bool dropped = false;
  if (context_.options.topic_ids) {
    auto id = seen->topic_ids.find(slot.topic);
    if (id == seen->topic_ids.end()) {
      // Bounded tighter than the read (half the time left, as the catch-up): without an answer
      // the read goes on, only slower.
      id = seen->topic_ids
               .emplace(slot.topic, QueryTopicId(meta_->watermarks_client(), slot.topic,
                                                 Within(HalfwayTo(stop_at), kTopicIdTimeout)))
               .first;
    }
    // A topic made again has another id. Its end alone cannot tell: it may have grown past
    // what the index covers.
    if (id->second.ok()) {
      dropped = index.OnLog(*id->second);
    } else {
      index.LogWentBack();  // which log this is cannot be told: trust none of the index
      dropped = true;
    }
  }
  if (marks.high < indexed_end) {
    index.LogWentBack();
    dropped = true;
  }
  if (dropped) ++context_.metrics->read_index_drops;
  index.ForgetBelow(marks.low);
}

absl::StatusOr<std::shared_ptr<ReadMember>> EntryReader::MakeMember(
    const ReadParams& params, const std::shared_ptr<ReadSink>& sink, Clock::time_point stop_at,
    SlotsSeen* seen, std::shared_ptr<DeliveryBell> bell) {
  std::optional<NamespaceState> ns = meta_->Get(params.namespace_id);
  if (!ns && params.slot_read) return nullptr;  // deleted since the slot's namespaces were listed
  if (!ns) {
    return absl::NotFoundError(absl::StrCat("namespace ", params.namespace_id,
                                            " not found; create it with CreateNamespace"));
  }
  // The end of the log as seen now bounds a read without follow.
  auto known = seen->marks.find(ns->slot);
  if (known == seen->marks.end()) {
    // Before the query: ends only grow.
    const int64_t indexed_end = context_.slot_indexes.Of(ns->slot).covered_end();
    absl::StatusOr<Watermarks> marks = QueryEnds(ns->slot, stop_at, seen);
    if (!marks.ok()) return marks.status();
    if (context_.options.slot_index) CheckIndex(ns->slot, *marks, indexed_end, stop_at, seen);
    known = seen->marks.emplace(ns->slot, *marks).first;
  }
  const Watermarks& marks = known->second;
  const int64_t end = marks.high;
  const int64_t first = ns->first_entry_id();
  if (params.start_entry_id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::OutOfRangeError(absl::StrCat("start_entry_id ", params.start_entry_id,
                                              " is past the end ", end, " of namespace ",
                                              params.namespace_id));
  }
  int64_t start = params.start_entry_id == 0 ? first : static_cast<int64_t>(params.start_entry_id);
  if (params.start_time_ms != 0 && context_.options.offsets_for_times) {
    // Kafka's index of record times skips what is older: no record before this offset has a
    // time at or after start_time_ms, and an entry's record is timed after it was encoded. The
    // member then starts at the first entry encoded at or after that time.
    absl::StatusOr<int64_t> at =
        OffsetForTime(meta_->watermarks_client(), ns->slot, params.start_time_ms,
                      Within(stop_at, kKafkaRequestTimeout));
    if (!at.ok()) return at.status();
    start = *at < 0 ? end : std::clamp(*at, first, end);
    // Kafka answers only from the records still there: at the low watermark the time may lie
    // in records gone, which the loss check below must see (DATA_LOSS, or a gap).
    if (start <= marks.low) start = first;
  }
  if (start < first && params.slot_read) start = first;
  if (start > end && params.slot_read) return nullptr;
  if (start < first) {
    return absl::OutOfRangeError(absl::StrCat("start_entry_id ", start, " is below first_entry_id ",
                                              first, " of namespace ", params.namespace_id,
                                              " (truncated); use 0 to read from the first entry"));
  }
  if (start > end) {
    return absl::OutOfRangeError(absl::StrCat("start_entry_id ", start, " is past the end ", end,
                                              " of namespace ", params.namespace_id));
  }
  int64_t scan_from = start;
  absl::Status lost;
  if (start < marks.low) {
    lost = PrunedOrLost(ns->slot, start, marks.low, stop_at);
    if (!lost.ok() && !(absl::IsDataLoss(lost) && params.skip_lost)) return lost;
    // Pruned on purpose: the namespace has no entry below the new low watermark. Lost, with
    // skip_lost: the read says so with a gap and starts there.
    scan_from = marks.low;
  }
  if (start == end && !params.follow) return nullptr;
  auto member = std::make_shared<ReadMember>(&context_, params, sink, *ns, scan_from, end, stop_at,
                                             std::move(bell));
  if (!lost.ok()) member->AddGap(start, marks.low, v1::Gap::LOST, std::string(lost.message()));
  return member;
}

absl::Status EntryReader::Run(const ReadParams& params, const std::shared_ptr<ReadSink>& sink) {
  // Stop a little before the caller's deadline, so the caller learns why.
  const auto stop_at = AnswerBy(params.deadline);
  if (absl::Status s = meta_->CatchUp(CatchUpBy(stop_at)); !s.ok()) return s;
  SlotsSeen seen;
  absl::StatusOr<std::shared_ptr<ReadMember>> member =
      MakeMember(params, sink, stop_at, &seen, nullptr);
  if (!member.ok()) return member.status();
  if (*member == nullptr) return absl::OkStatus();  // nothing to read
  Join(*member, /*shared=*/true);
  return (*member)->Deliver([this, &member] { Join(*member, /*shared=*/false); });
}

namespace {

// Adds a namespace's end to `message`, which may hold other namespaces' ends.
void AddEnd(uint64_t namespace_id, const absl::Status& status, bool caught_up, ReadBatch* message) {
  v1::ReadEnd* end = message->AddEnd();
  end->set_namespace_id(namespace_id);
  end->set_code(static_cast<int32_t>(status.code()));
  end->set_message(std::string(status.message()));
  end->set_caught_up(caught_up);
}

}  // namespace

absl::Status EntryReader::RunMany(const std::vector<ReadParams>& reads,
                                  const std::shared_ptr<ReadSink>& sink) {
  if (reads.empty()) return absl::OkStatus();
  // One deadline for the call.
  const auto stop_at = AnswerBy(reads.front().deadline);
  if (absl::Status s = meta_->CatchUp(CatchUpBy(stop_at)); !s.ok()) return s;
  SlotsSeen seen;
  return ServeMany(reads, stop_at, &seen, sink);
}

absl::Status EntryReader::RunSlot(const Slot& slot, const ReadParams& params,
                                  const std::shared_ptr<ReadSink>& sink) {
  const auto stop_at = AnswerBy(params.deadline);
  if (absl::Status s = meta_->CatchUp(CatchUpBy(stop_at)); !s.ok()) return s;
  // The slot's end before its namespaces are listed: one created after the listing starts at or
  // past it, so the read leaves out none it could have had entries of up to that end.
  SlotsSeen seen;
  const int64_t indexed_end = context_.slot_indexes.Of(slot).covered_end();
  absl::StatusOr<Watermarks> marks = QueryEnds(slot, stop_at, &seen);
  if (!marks.ok()) return marks.status();
  if (context_.options.slot_index) CheckIndex(slot, *marks, indexed_end, stop_at, &seen);
  seen.marks.emplace(slot, *marks);
  if (marks->high < params.slot_end_at_least) {
    return absl::UnavailableError(absl::StrCat("the end of ", slot.topic, "[", slot.partition,
                                               "] was found at ", marks->high, ", below ",
                                               params.slot_end_at_least,
                                               " queried before (a leader that has not heard yet "
                                               "that it was replaced); read again"));
  }
  if (params.start_entry_id > static_cast<uint64_t>(marks->high)) {
    return absl::OutOfRangeError(absl::StrCat("start_entry_id ", params.start_entry_id,
                                              " is past the end ", marks->high, " of ", slot.topic,
                                              "[", slot.partition, "]"));
  }
  std::vector<ReadParams> reads;
  for (const NamespaceState& ns : meta_->InSlot(slot)) {
    // Created (or truncated) past the end: nothing of it to read.
    if (ns.first_entry_id() >= marks->high) continue;
    ReadParams read = params;
    read.namespace_id = ns.namespace_id;
    read.slot_read = true;
    reads.push_back(read);
  }
  return ServeMany(reads, stop_at, &seen, sink);
}

absl::Status EntryReader::ServeMany(const std::vector<ReadParams>& reads, Clock::time_point stop_at,
                                    SlotsSeen* seen, const std::shared_ptr<ReadSink>& sink) {
  if (reads.empty()) return absl::OkStatus();  // a slot with no namespace
  auto bell = std::make_shared<DeliveryBell>();
  // The namespaces share one budget of queued bytes, which one of them may fill while the
  // others leave it room. Batches of half a share, smaller than a Read's, keep the client busy
  // while the scan goes on (every member would otherwise send at the end); a read that fills
  // them grows its batches (ReadMember::GrowBatch).
  const size_t share = std::max(kReadManyMinQueueBytes, kReadManyQueueBytes / reads.size());
  auto budget = std::make_shared<QueueBudget>(kReadManyQueueBytes);
  std::vector<std::shared_ptr<ReadMember>> members;
  // The ends of the namespaces that end at once go out together once the others' scans have
  // started: one message each, written one after another, held up the scan of a datanode's
  // ReadMany of 999 empty regions and one big one
  // (docs/benchmarks/2026-12-05-fetch-size-replay.md). Ends take a few bytes each: those of a
  // ReadMany's 1,000 namespaces, or of a slot read's many more, are far under a message's limit.
  ReadBatch ends;
  for (ReadParams params : reads) {
    if (sink->cancelled()) return absl::CancelledError("read cancelled");
    if (context_.stopping) return absl::UnavailableError("walserver is shutting down");
    params.queue_bytes = share;
    params.batch_bytes = std::min(context_.options.batch_bytes, share / 2);
    params.call_budget = budget;
    absl::StatusOr<std::shared_ptr<ReadMember>> member =
        MakeMember(params, sink, stop_at, seen, bell);
    // A namespace that cannot be read (or has nothing to read) ends at once; the others go on.
    if (!member.ok() || *member == nullptr) {
      AddEnd(params.namespace_id, member.ok() ? absl::OkStatus() : member.status(),
             /*caught_up=*/false, &ends);
      // A slot of very many namespaces: its ends go in messages well under gRPC's limit.
      if (ends.end_count() >= kMaxEndsPerMessage && !sink->Send(std::exchange(ends, ReadBatch()))) {
        return absl::CancelledError("read cancelled");
      }
      continue;
    }
    members.push_back(*std::move(member));
  }
  // Joined together, so that the members of one slot share its scan from the start.
  for (const auto& member : members) Join(member, /*shared=*/true);
  const auto send_ends = [&sink, &ends] {
    return ends.empty() || sink->Send(std::exchange(ends, ReadBatch()));
  };
  if (!send_ends()) return absl::CancelledError("read cancelled");

  // Round robin, one batch per member per turn, so that no namespace starves the others. The
  // ends of one turn go out together after it (each after its namespace's last entry).
  while (!members.empty()) {
    const uint64_t rung = bell->rung();
    bool progress = false;
    for (auto it = members.begin(); it != members.end();) {
      const std::shared_ptr<ReadMember>& member = *it;
      absl::Status status;
      // A member taken off its scan goes back to a shared one: the members of one call must not
      // each get a scan (and a consumer) of their own.
      const ReadMember::Step step =
          member->DeliverNext([this, &member] { Join(member, /*shared=*/true); }, &status);
      if (step == ReadMember::Step::kDone) {
        progress = true;
        if (absl::IsCancelled(status) && sink->cancelled()) return status;
        AddEnd(member->namespace_id(), status, /*caught_up=*/false, &ends);
        it = members.erase(it);
        continue;
      }
      if (step == ReadMember::Step::kProgress) progress = true;
      if (step == ReadMember::Step::kWaiting && member->TakeCaughtUp()) {
        progress = true;
        AddEnd(member->namespace_id(), absl::OkStatus(), /*caught_up=*/true, &ends);
      }
      ++it;
    }
    if (!send_ends()) return absl::CancelledError("read cancelled");
    // Members finish on their own at cancellation, deadline and shutdown (their scans look every
    // 100 ms); the timeout only bounds a missed ring.
    if (!progress) bell->WaitPast(rung, std::chrono::milliseconds(100));
  }
  return absl::OkStatus();
}

}  // namespace wal
