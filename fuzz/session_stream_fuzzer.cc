// Structure-aware libFuzzer harness for the Session stream's server side
// (src/server/session_stream.*, session_hub.*; docs/session-stream.md).
//
// The stream is a gRPC callback reactor with no core that runs without a
// call, so the harness drives the real one: ONE in-process server per
// process (starting a server costs far more than an input), reached through
// its in-process channel. That transport hands a message to the client only
// when the client reads, so a client that stops reading stalls the server's
// write at once and its queue fills deterministically (over TCP the HTTP/2
// windows would absorb a varying amount first). Each input opens a fresh
// stream, and its users are deleted at the end, so an input starts from the
// same store and reproduces alone.
//
// The fuzz bytes (FuzzedDataProvider) choose a sequence of steps: session
// requests (built field by field with extreme and invalid values, or parsed
// from raw bytes as a SessionRequest, any fields), RecordExposure and
// DeleteUser calls on the subscribed users (pushes, resets), the client
// stopping and resuming reading (queue overflow, resync, a second overflow),
// and sync points. A client model checks every response as it arrives:
//
//   - Answers: every request (the harness numbers them, so ids are unique)
//     is answered at most once, by the kind its request asks for (a
//     snapshot of that user or an error for a subscribe, unsubscribed
//     REQUESTED for an unsubscribe (nothing for a quiet one unless it is
//     refused; every other one is quiet), filter or error, pong, the documented
//     INVALID_ARGUMENT for none set); errors name the field. Once the
//     client has read everything, every request has its answer, except a
//     subscribe whose snapshot the protocol sends with request_id 0 (it did
//     not fit the queue, or a resync replaced it): a later snapshot of that
//     user must then arrive, with id 0 or answering a later subscribe of
//     it (the spec: a client takes a snapshot as its user's, whatever its
//     request_id). Only a stream ended RESOURCE_EXHAUSTED (second
//     overflow) may leave requests unanswered.
//   - Sequence: a push follows a snapshot of its user, at the last
//     sequence + 1; none between a resync or unsubscribed and the user's
//     next snapshot; a re-snapshot never goes back in sequence while the
//     subscription lives.
//   - Staleness guarantee / no false negative: when any pong is read,
//     every user the client holds synced claims every item acknowledged
//     for it before that ping was sent (the snapshot's filter or a pushed
//     hash). Sync points (resume reading, ping, wait for the pong) make
//     sure the check also runs with everything written so far.
//   - Liveness: a client that reads gets its pong, every resync snapshot
//     and every deferred subscribe snapshot (a stall traps).
//   - Bound: no stream's queue ever held more than --session_max_queue_*
//     allow (SessionHub's per-stream peak), plus the one answer of a request
//     read before reading paused.
//   - Push batches: odd-length inputs open the stream opted in. A
//     SessionResponse{pushes} comes only then, holds 2 to 256 pushes within
//     256 KiB, and is taken as its pushes one by one, so every check above
//     holds per push.
#include <fuzzer/FuzzedDataProvider.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "exposure_filter/session_push_batches.h"
#include "src/server/exposure_filter_server.h"
#include "src/server/session_stream.h"
#include "src/store/clock.h"

namespace exposure_filter {
namespace fuzz {
namespace {

namespace v1 = exposure::v1;

void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "session fuzz invariant violated: %s\n", what);
  __builtin_trap();
}

constexpr int64_t kNowMs = 1'700'000'000'000;
// Small bounds so a few steps reach them: a handful of pushes overflow the
// queue, the fifth user overflows a stream's subscriptions.
constexpr int64_t kQueueBytes = 4096;
constexpr int64_t kQueueMessages = 16;
constexpr int64_t kSubscriptionsPerStream = 4;
constexpr size_t kMaxIdBytes = 32;
// A step the server must finish within this (a stall is a bug; the bound
// is generous for a loaded machine under ASan).
constexpr auto kStall = std::chrono::seconds(10);

// The largest answer the harness's requests can get (a filter answer of at
// most kMaxCandidates ids or keys, an error naming a field): reading pauses
// at half the queue, but the request already read still gets its answer.
constexpr int kMaxCandidates = 64;
constexpr int64_t kMaxAnswerBytes =
    2 * kMaxCandidates * (kMaxIdBytes + 8) + 1024;

struct Server {
  ManualClock clock{kNowMs};
  std::unique_ptr<ExposureFilterServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::ExposureFilter::Stub> stub;
};

Server& TheServer() {
  static Server* const s = [] {
    auto* srv = new Server;
    ServerConfig c;
    c.listen_address = "127.0.0.1:0";
    c.shards = 4;
    c.shutdown_grace = absl::Seconds(1);
    c.limits.max_id_bytes = kMaxIdBytes;
    c.limits.max_items_per_request = 64;
    c.limits.max_candidates_per_request = kMaxCandidates;
    c.session.max_queue_bytes = kQueueBytes;
    c.session.max_queue_messages = kQueueMessages;
    c.session.max_subscriptions_per_stream = kSubscriptionsPerStream;
    auto started = ExposureFilterServer::Start(c, &srv->clock);
    Require(started.ok(), "the server starts");
    srv->server = *std::move(started);
    srv->channel = srv->server->InProcessChannel();
    srv->stub = v1::ExposureFilter::NewStub(srv->channel);
    return srv;
  }();
  return *s;
}

// The surfaces writes go to ("" is the default surface) and the users.
const char* const kSurfaces[] = {"", "h", "homefeed"};
const char* const kUsers[] = {"u1", "u2", "u3", "u4", "u5"};
using Subject = std::pair<std::string, std::string>;  // surface, user

// What the client holds for one (surface, user).
struct Held {
  enum State { kNone, kSynced, kAwaiting };
  State state = kNone;
  uint64_t last_sequence = 0;
  // The filter bytes (a FilterView points into them) and pushed hashes.
  // `known` is false after a not_modified snapshot of a version this
  // client never received (the fuzzed if_version hit a real one).
  bool known = false;
  std::shared_ptr<const std::string> bytes;
  std::optional<FilterView> view;
  std::set<uint64_t> pushed;
  // Snapshots received with request_id 0, and the highest request id a
  // snapshot of this user answered.
  int unsolicited_snapshots = 0;
  uint64_t last_answered_subscribe = 0;
};

enum class Kind { kSubscribe, kUnsubscribe, kFilter, kPing, kNone };

struct Sent {
  Kind kind;
  Subject subject;
  int answers = 0;
  // For a subscribe: the subject's id-0 snapshot count when it was sent
  // (one more, or a later subscribe's answer, covers it), and whether an
  // unsubscribe of the same subject followed it.
  int unsolicited_before = 0;
  bool unsubscribed_after = false;
  bool quiet = false;  // an unsubscribe answered only if refused
};

class StreamRun {
 public:
  explicit StreamRun(const uint8_t* data, size_t size)
      : in_(data, size), srv_(TheServer()) {
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(120));
    // Half the inputs open the stream opted into push batches, so both
    // ways of draining the queue are fuzzed with the same steps. Chosen by
    // the input's length, not a byte of it: the corpus's seeds (the
    // regression inputs among them) keep reading as the steps they were
    // written as, and a mutation that grows or shrinks an input by one
    // byte flips it.
    push_batches_ = size % 2 == 1;
    if (push_batches_) {
      ctx_.AddMetadata(kSessionPushBatchesMetadataKey,
                       kSessionPushBatchesMetadataValue);
    }
    stream_ = srv_.stub->Session(&ctx_);
    reader_ = std::thread([this] { ReadLoop(); });
    writer_ = std::thread([this] { WriteLoop(); });
  }

  void Run() {
    for (int step = 0; step < 48 && in_.remaining_bytes() > 0; ++step) {
      switch (in_.ConsumeIntegralInRange<int>(0, 12)) {
        case 0:
        case 1:
          Send(StructuredRequest());
          break;
        case 2: {
          v1::SessionRequest r;
          const std::string raw = in_.ConsumeRandomLengthString(256);
          if (r.ParseFromString(raw)) Send(std::move(r));
          break;
        }
        case 3:
        case 4:
        case 5:
          Record(WriteTarget());
          break;
        case 6:
          Delete();
          break;
        case 7:
          SetReading(false);
          break;
        case 8:
          SetReading(true);
          break;
        case 9:
          Sync();
          break;
        case 10: {  // a burst: what makes a stopped reader overflow
          const Subject subject = WriteTarget();
          const int n = in_.ConsumeIntegralInRange<int>(1, 24);
          for (int i = 0; i < n; ++i) Record(subject);
          break;
        }
        case 11:
          Send(CleanSubscribe());
          break;
        case 12: {  // a ping not waited for: its pong vouches for the
                    // writes before it, wherever it lands in the stream
          v1::SessionRequest r;
          r.mutable_ping();
          Send(std::move(r));
          break;
        }
      }
    }
    Finish();
  }

 private:
  // --- Values --------------------------------------------------------------
  // Printable ASCII: proto3 strings must be UTF-8, or the client's own
  // serialization refuses the message before the server sees it.
  std::string Text(size_t max_length) {
    std::string s = in_.ConsumeRandomLengthString(max_length);
    for (char& c : s) c = static_cast<char>(' ' + (c & 0x7f) % 95);
    return s;
  }
  std::string SurfaceName() {
    switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
      case 0:
        return "Bad!";
      case 1:
        return std::string(65, 's');  // one past the longest name
      case 2:
        return "never-written";
      default:
        return kSurfaces[in_.ConsumeIntegralInRange<int>(0, 2)];
    }
  }
  std::string UserId() {
    switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
      case 0:
        return "";
      case 1:
        return std::string(kMaxIdBytes + 1, 'u');  // one past the limit
      case 2:
        return std::string(kMaxIdBytes, 'u');  // exactly the limit
      default:
        return kUsers[in_.ConsumeIntegralInRange<int>(0, 4)];
    }
  }
  Subject WrittenSubject() {
    return {kSurfaces[in_.ConsumeIntegralInRange<int>(0, 2)],
            kUsers[in_.ConsumeIntegralInRange<int>(0, 4)]};
  }
  // Mostly a user this client subscribed to: writes to anyone else push
  // nothing, and pushes are what fill the queue.
  Subject WriteTarget() {
    if (subscribed_.empty() || in_.ConsumeIntegralInRange<int>(0, 3) == 0) {
      return WrittenSubject();
    }
    auto it = subscribed_.begin();
    std::advance(it,
                 in_.ConsumeIntegralInRange<size_t>(0, subscribed_.size() - 1));
    return *it;
  }
  // A subscribe that passes validation, so subscriptions (and their pushes)
  // are common, not one in five.
  v1::SessionRequest CleanSubscribe() {
    const Subject subject = WrittenSubject();
    subscribed_.insert(subject);
    v1::SessionRequest r;
    r.mutable_subscribe()->set_surface(subject.first);
    r.mutable_subscribe()->set_user_id(subject.second);
    if (in_.ConsumeBool()) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = last_version_.find(subject);
      if (it != last_version_.end()) {
        r.mutable_subscribe()->set_if_version(it->second);
      }
    }
    return r;
  }

  v1::SessionRequest SubscribeRequest() {
    v1::SessionRequest r;
    v1::SessionSubscribe* s = r.mutable_subscribe();
    s->set_surface(SurfaceName());
    s->set_user_id(UserId());
    switch (in_.ConsumeIntegralInRange<int>(0, 5)) {
      case 0: {  // the version this client holds, if any: not_modified
        std::lock_guard<std::mutex> lock(mu_);
        auto it = last_version_.find({s->surface(), s->user_id()});
        if (it != last_version_.end()) s->set_if_version(it->second);
        break;
      }
      case 1:
        s->set_if_version(std::string(65, 'v'));  // longer than any version
        break;
      case 2:
        s->set_if_version(Text(70));
        break;
      default:
        break;
    }
    switch (in_.ConsumeIntegralInRange<int>(0, 5)) {
      case 0:
        s->add_accepted_formats(1);  // lacks 2: FAILED_PRECONDITION
        break;
      case 1:
        for (int i = 0; i < 17; ++i) s->add_accepted_formats(2);  // > 16
        break;
      case 2:
        s->add_accepted_formats(2);
        s->add_accepted_formats(in_.ConsumeIntegral<uint32_t>());
        break;
      default:
        break;
    }
    return r;
  }

  v1::SessionRequest StructuredRequest() {
    v1::SessionRequest r;
    switch (in_.ConsumeIntegralInRange<int>(0, 4)) {
      case 0:
        return SubscribeRequest();
      case 1: {
        v1::SessionUnsubscribe* u = r.mutable_unsubscribe();
        u->set_surface(SurfaceName());
        u->set_user_id(UserId());
        // Every other one quiet: chosen by count, not by a byte of the
        // input, so the corpus's seeds keep reading as they were written.
        u->set_quiet(++unsubscribes_built_ % 2 == 0);
        break;
      }
      case 2: {
        v1::FilterRecalledRequest* f = r.mutable_filter();
        f->set_surface(SurfaceName());
        f->set_user_id(UserId());
        const int n = in_.ConsumeIntegralInRange<int>(0, kMaxCandidates + 1);
        for (int i = 0; i < n; ++i) {
          if (in_.ConsumeBool()) {
            f->add_candidate_ids(in_.ConsumeIntegralInRange<uint64_t>(0, 40));
          } else {
            f->add_candidate_keys(Text(kMaxIdBytes));
          }
        }
        f->set_mode(
            static_cast<v1::ResultMode>(in_.ConsumeIntegralInRange<int>(0, 3)));
        if (in_.ConsumeIntegralInRange<int>(0, 7) == 0) {
          (*f->mutable_min_offsets())[0] = 1;
        }
        f->set_allow_lagging(in_.ConsumeBool());
        break;
      }
      case 3:
        r.mutable_ping();
        break;
      case 4:
        break;  // none set
    }
    return r;
  }

  // --- Client actions --------------------------------------------------------
  // Numbers the request (ids unique and non-zero, so answers are matched
  // exactly) and hands it to the writer thread: a blocked write (the
  // server paused reading while this client does not read) must not block
  // the steps that follow.
  void Send(v1::SessionRequest r) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t id = ++last_id_;
    r.set_request_id(id);
    Sent s;
    switch (r.kind_case()) {
      case v1::SessionRequest::kSubscribe:
        s.kind = Kind::kSubscribe;
        s.subject = {r.subscribe().surface(), r.subscribe().user_id()};
        s.unsolicited_before = held_[s.subject].unsolicited_snapshots;
        break;
      case v1::SessionRequest::kUnsubscribe:
        s.kind = Kind::kUnsubscribe;
        s.subject = {r.unsubscribe().surface(), r.unsubscribe().user_id()};
        s.quiet = r.unsubscribe().quiet();
        if (s.quiet) quiet_pending_[id] = s.subject;
        for (auto& [sid, sent] : sent_) {
          if (sent.kind == Kind::kSubscribe && sent.subject == s.subject) {
            sent.unsubscribed_after = true;
          }
        }
        break;
      case v1::SessionRequest::kFilter:
        s.kind = Kind::kFilter;
        s.subject = {r.filter().surface(), r.filter().user_id()};
        break;
      case v1::SessionRequest::kPing:
        s.kind = Kind::kPing;
        writes_before_ping_[id] = writes_;
        break;
      case v1::SessionRequest::KIND_NOT_SET:
        s.kind = Kind::kNone;
        break;
    }
    sent_[id] = s;
    outbox_.push_back(std::move(r));
    cv_.notify_all();
  }

  void Record(const Subject& subject) {
    v1::RecordExposureRequest req;
    req.set_surface(subject.first);
    v1::Exposure* e = req.add_exposures();
    e->set_user_id(subject.second);
    std::vector<uint64_t> hashes;
    const int n = in_.ConsumeIntegralInRange<int>(1, 40);
    for (int i = 0; i < n; ++i) {
      if (in_.ConsumeIntegralInRange<int>(0, 7) == 0) {
        std::string key = Text(kMaxIdBytes);
        if (key.empty()) key = "k";
        hashes.push_back(HashItemKey(key));
        e->add_item_keys(std::move(key));
      } else {
        const uint64_t id = in_.ConsumeIntegral<uint64_t>();
        hashes.push_back(HashItemId(id));
        e->add_item_ids(id);
      }
    }
    // Now, or a little in the past: always inside the window, so applied.
    if (in_.ConsumeBool()) e->set_event_time_ms(kNowMs - 3'600'000);
    v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = srv_.stub->RecordExposure(&ctx, req, &resp);
    Require(s.ok(), "a valid RecordExposure is acknowledged");
    std::lock_guard<std::mutex> lock(mu_);
    ++writes_;
    for (uint64_t h : hashes) recorded_[subject][h] = writes_;
    touched_.insert(subject);
  }

  // The user's items stop being owed before the call: a ping already in
  // flight may be read by the server after the delete, and then its pong
  // rightly follows the reset push (an empty copy), while the call has not
  // returned yet.
  void Delete() {
    const Subject subject = WrittenSubject();
    {
      std::lock_guard<std::mutex> lock(mu_);
      recorded_[subject].clear();
    }
    DeleteUser(subject);
  }

  void DeleteUser(const Subject& subject) {
    v1::DeleteUserRequest req;
    req.set_surface(subject.first);
    req.set_user_id(subject.second);
    v1::DeleteUserResponse resp;
    grpc::ClientContext ctx;
    Require(srv_.stub->DeleteUser(&ctx, req, &resp).ok(),
            "a valid DeleteUser is acknowledged");
  }

  void SetReading(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    reading_ = on;
    cv_.notify_all();
  }

  // A ping written after every write so far was acknowledged: when its
  // pong is read, each synced user holds every item recorded for it
  // (checked by the reader, at that exact point of the stream).
  void Sync() {
    SetReading(true);
    v1::SessionRequest r;
    r.mutable_ping();
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = last_id_ + 1;
    }
    Send(std::move(r));
    std::unique_lock<std::mutex> lock(mu_);
    Require(cv_.wait_for(lock, kStall,
                         [&] { return ended_ || sent_[id].answers > 0; }),
            "a reading client gets its pong");
  }

  // Reads everything, then checks that the stream converged: every resync
  // and deferred subscribe snapshot arrived.
  void Converge() {
    Sync();
    std::unique_lock<std::mutex> lock(mu_);
    Require(cv_.wait_for(lock, kStall, [&] { return ended_ || Converged(); }),
            "a reading client gets a snapshot for every subscription a "
            "resync left awaiting and every deferred subscribe");
  }

  bool Converged() {
    for (const auto& [subject, h] : held_) {
      if (h.state == Held::kAwaiting) return false;
    }
    for (const auto& [id, s] : sent_) {
      if (s.kind != Kind::kSubscribe || s.answers > 0 || s.unsubscribed_after) {
        continue;
      }
      const Held& h = held_[s.subject];
      if (h.unsolicited_snapshots <= s.unsolicited_before &&
          h.last_answered_subscribe <= id) {
        return false;
      }
    }
    return true;
  }

  void Finish() {
    Converge();
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
      cv_.notify_all();
    }
    writer_.join();
    reader_.join();
    const grpc::Status status = stream_->Finish();
    bool overflowed = false;
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      Require(absl::StrContains(status.error_message(),
                                "--session_max_queue_bytes"),
              "a stream ends RESOURCE_EXHAUSTED only by a second overflow");
      overflowed = true;
    } else {
      Require(status.ok(), "a half-closed stream ends OK");
    }
    for (const auto& [id, s] : sent_) {
      if (s.answers > 0 || overflowed) continue;
      // A subscribe may be covered by a later snapshot of its user
      // (Converge checked it came) or not at all when unsubscribed before
      // its snapshot fit.
      Require(s.kind == Kind::kSubscribe ||
                  (s.kind == Kind::kUnsubscribe && s.quiet),
              "every request is answered");
    }
    SessionHub& hub = srv_.server->session_hub();
    Require(hub.queue_peak_messages() <= kQueueMessages + 1,
            "a stream's queue held more messages than its bound");
    Require(hub.queue_peak_bytes() <=
                std::max(kQueueBytes, largest_snapshot_) + kMaxAnswerBytes,
            "a stream's queue held more bytes than its bound");
    // The next input starts from the same store and no stream.
    for (const Subject& subject : touched_) DeleteUser(subject);
    for (int i = 0; i < 10000 && (hub.streams() > 0 || hub.queue_bytes() > 0);
         ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    Require(hub.streams() == 0, "a finished stream is released");
    Require(hub.subscriptions() == 0, "a finished stream's subscriptions go");
    Require(hub.queue_bytes() == 0, "a finished stream's queue is freed");
    hub.ResetQueuePeak();
  }

  // --- Threads -------------------------------------------------------------
  void WriteLoop() {
    while (true) {
      v1::SessionRequest r;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !outbox_.empty() || closing_; });
        if (outbox_.empty()) break;
        r = std::move(outbox_.front());
        outbox_.pop_front();
      }
      // False once the stream ended; the rest are never answered, which
      // only a stream ended RESOURCE_EXHAUSTED may do (checked at the end).
      if (!stream_->Write(r)) {
        std::lock_guard<std::mutex> lock(mu_);
        outbox_.clear();
      }
    }
    stream_->WritesDone();
  }

  void ReadLoop() {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return reading_ || closing_; });
      }
      v1::SessionResponse r;
      if (!stream_->Read(&r)) break;
      std::lock_guard<std::mutex> lock(mu_);
      Take(r);
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }

  // The client model: one response, in stream order (under mu_).
  void Take(const v1::SessionResponse& r) {
    const uint64_t id = r.request_id();
    if (r.has_snapshot()) {
      largest_snapshot_ =
          std::max(largest_snapshot_, static_cast<int64_t>(r.ByteSizeLong()));
    }
    if (id != 0) {
      TakeQuietUnsubscribesBefore(id);
      auto it = sent_.find(id);
      Require(it != sent_.end(), "an answer carries a request's id");
      Sent& s = it->second;
      Require(++s.answers == 1, "a request is answered once");
      if (r.has_error()) {
        CheckError(s, r.error());
        return;
      }
      switch (s.kind) {
        case Kind::kSubscribe:
          Require(r.has_snapshot(), "a subscribe is answered by a snapshot");
          Require(Subject{r.snapshot().surface(), r.snapshot().user_id()} ==
                      s.subject,
                  "a subscribe's snapshot is of its user");
          break;
        case Kind::kUnsubscribe:
          Require(!s.quiet, "a quiet unsubscribe is answered only if refused");
          Require(r.has_unsubscribed() &&
                      r.unsubscribed().reason() ==
                          v1::SessionUnsubscribed::REQUESTED &&
                      Subject{r.unsubscribed().surface(),
                              r.unsubscribed().user_id()} == s.subject,
                  "an unsubscribe is answered unsubscribed REQUESTED");
          break;
        case Kind::kFilter:
          Require(r.has_filter(), "a filter is answered by a filter");
          break;
        case Kind::kPing:
          Require(r.has_pong(), "a ping is answered by a pong");
          Require(r.pong().server_time_ms() == kNowMs, "pong's clock");
          CheckNoFalseNegative(writes_before_ping_[id]);
          return;
        case Kind::kNone:
          Require(false, "a request with nothing set is an error");
      }
    } else {
      Require(
          r.has_snapshot() || r.has_push() || r.has_pushes() || r.has_resync(),
          "an unsolicited message is a snapshot, push(es) or resync (no "
          "lease runs out: the clock stands still)");
    }
    if (r.has_pushes()) {
      Require(push_batches_, "push batches only on a stream that opted in");
      Require(r.pushes().pushes_size() >= 2 &&
                  r.pushes().pushes_size() <=
                      static_cast<int>(SessionStream::kMaxBatchPushes),
              "a batch holds 2 to kMaxBatchPushes pushes");
      // Each push's own bytes are what it took in the queue, as a
      // SessionResponse{push} of the same length.
      Require(r.pushes().ByteSizeLong() <= SessionStream::kMaxBatchBytes,
              "a batch is at most kMaxBatchBytes");
      // Exactly its pushes in order: the model takes them one by one.
      for (const v1::SessionPush& p : r.pushes().pushes()) TakePush(p);
    }
    if (r.has_snapshot()) TakeSnapshot(r.snapshot(), id);
    if (r.has_push()) TakePush(r.push());
    if (r.has_resync()) {
      Require(r.resync().reason() == v1::SessionResync::QUEUE_FULL,
              "resync reason");
      for (auto& [subject, h] : held_) {
        if (h.state == Held::kSynced) h.state = Held::kAwaiting;
      }
    }
    if (r.has_unsubscribed()) {
      Held& h = held_[{r.unsubscribed().surface(), r.unsubscribed().user_id()}];
      h.state = Held::kNone;
      h.known = false;
    }
  }

  // A quiet unsubscribe has no answer to mark where the server carried it
  // out; the answer to any later request does: the server reads requests
  // in order and queues each answer as it carries the request out, so
  // every push of the user queued before the unsubscribe came before that
  // answer, and none after it. From there the user is not held, as after
  // unsubscribed.
  void TakeQuietUnsubscribesBefore(uint64_t id) {
    for (auto it = quiet_pending_.begin();
         it != quiet_pending_.end() && it->first < id;
         it = quiet_pending_.erase(it)) {
      Held& h = held_[it->second];
      h.state = Held::kNone;
      h.known = false;
    }
  }

  void CheckError(const Sent& s, const v1::SessionError& e) {
    const char* prefix = "";
    switch (s.kind) {
      case Kind::kSubscribe:
        prefix = "subscribe.";
        break;
      case Kind::kUnsubscribe:
        prefix = "unsubscribe.";
        break;
      case Kind::kFilter:
        prefix = "filter.";
        break;
      case Kind::kPing:
        Require(false, "a ping is never refused");
        break;
      case Kind::kNone:
        Require(e.code() == 3 && e.message() ==
                                     "request: none of subscribe, unsubscribe, "
                                     "filter, ping is set",
                "none set: the documented INVALID_ARGUMENT");
        return;
    }
    switch (e.code()) {
      case 3:  // INVALID_ARGUMENT
      case 9:  // FAILED_PRECONDITION
        Require(absl::StartsWith(e.message(), prefix),
                "a refused request's error names its field");
        break;
      case 8:  // RESOURCE_EXHAUSTED: a subscription limit
        Require(s.kind == Kind::kSubscribe && !e.message().empty(),
                "only a subscribe is refused RESOURCE_EXHAUSTED here");
        break;
      default:
        std::fprintf(stderr, "error %d: %s\n", e.code(), e.message().c_str());
        Require(false, "an error this server gives");
    }
  }

  void TakeSnapshot(const v1::SessionSnapshot& snap, uint64_t id) {
    const Subject subject{snap.surface(), snap.user_id()};
    Held& h = held_[subject];
    if (id == 0) {
      ++h.unsolicited_snapshots;
    } else {
      h.last_answered_subscribe = std::max(h.last_answered_subscribe, id);
    }
    if (h.state != Held::kNone) {
      Require(snap.sequence() >= h.last_sequence,
              "a re-snapshot does not go back in sequence");
    }
    h.state = Held::kSynced;
    h.last_sequence = snap.sequence();
    h.pushed.clear();
    if (snap.not_modified()) {
      Require(snap.filter().empty(), "not_modified carries no bytes");
      auto it = versions_.find(snap.version());
      h.known = it != versions_.end();
      if (h.known) {
        h.bytes = it->second;
        h.view = *FilterView::Parse(*h.bytes);
      }
    } else {
      h.bytes = std::make_shared<const std::string>(snap.filter());
      absl::StatusOr<FilterView> view = FilterView::Parse(*h.bytes);
      Require(view.ok(), "a snapshot's filter parses");
      h.view = *std::move(view);
      h.known = true;
      versions_[snap.version()] = h.bytes;
    }
    last_version_[subject] = snap.version();
  }

  void TakePush(const v1::SessionPush& p) {
    Held& h = held_[{p.surface(), p.user_id()}];
    Require(h.state != Held::kNone, "a push follows its user's snapshot");
    Require(h.state != Held::kAwaiting,
            "no push between a resync and the user's next snapshot");
    Require(p.sequence() == h.last_sequence + 1,
            "a push is at the last sequence + 1 (no gap)");
    h.last_sequence = p.sequence();
    if (p.reset()) {
      Require(p.item_hashes_size() == 0, "a reset carries no items");
      h.pushed.clear();
      h.view.reset();  // the server now keeps everything
      h.bytes.reset();
    }
    h.pushed.insert(p.item_hashes().begin(), p.item_hashes().end());
  }

  // Every pong: the writes acknowledged before its ping was handed to the
  // writer (so before it was sent) are visible to each synced user.
  void CheckNoFalseNegative(uint64_t writes_before) {
    for (const auto& [subject, items] : recorded_) {
      auto it = held_.find(subject);
      if (it == held_.end()) continue;
      const Held& h = it->second;
      if (h.state != Held::kSynced || !h.known) continue;
      for (const auto& [hash, write] : items) {
        if (write > writes_before) continue;
        const bool claimed =
            h.pushed.count(hash) > 0 ||
            (h.view.has_value() && h.view->MayContainHash(hash));
        Require(claimed,
                "an acknowledged item is missing from a synced client's copy "
                "at a pong");
      }
    }
  }

  FuzzedDataProvider in_;
  Server& srv_;
  bool push_batches_ = false;
  int unsubscribes_built_ = 0;
  grpc::ClientContext ctx_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>>
      stream_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool reading_ = true;
  bool closing_ = false;
  bool ended_ = false;
  std::deque<v1::SessionRequest> outbox_;
  uint64_t last_id_ = 0;
  std::map<uint64_t, Sent> sent_;
  // Quiet unsubscribes not yet known to be carried out, by request id.
  std::map<uint64_t, Subject> quiet_pending_;
  std::map<Subject, Held> held_;
  std::map<Subject, std::string> last_version_;
  std::map<std::string, std::shared_ptr<const std::string>> versions_;
  // Per subject, each acknowledged item and the number of the write that
  // last recorded it (a ping vouches for the writes before it was sent).
  std::map<Subject, std::map<uint64_t, uint64_t>> recorded_;
  uint64_t writes_ = 0;
  std::map<uint64_t, uint64_t> writes_before_ping_;  // ping id -> writes_
  std::set<Subject> touched_;
  std::set<Subject> subscribed_;  // by CleanSubscribe (harness thread only)
  int64_t largest_snapshot_ = 0;

  std::thread reader_;
  std::thread writer_;
};

}  // namespace
}  // namespace fuzz
}  // namespace exposure_filter

// libFuzzer flags this target needs whatever scripts/fuzz.sh passes
// (libFuzzer parses argv after this hook; a flag given explicitly, later on
// the command line, wins). Both are per-input costs that gRPC's background
// threads make pathological, 94 against 11 executions per second here:
//   -entropic=0: the entropic scheduler updates a frequency per feature
//     each input hits, and a stream's input hits tens of thousands
//     (protobuf, the server's whole call path), most of the run's time;
//   -detect_leaks=0: the per-input leak check re-runs an input under malloc
//     tracing and an LSan scan whenever its mallocs and frees differ, which
//     gRPC's threads (allocating across inputs) make every input. LSan still
//     checks the whole process for leaks when it exits.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  static std::vector<char*> args;
  args.assign(*argv, *argv + *argc);
  static char entropic[] = "-entropic=0";
  static char leaks[] = "-detect_leaks=0";
  // After argv[0], before the caller's flags, so those override these.
  args.insert(args.begin() + 1, {entropic, leaks});
  args.push_back(nullptr);
  *argc = static_cast<int>(args.size()) - 1;
  *argv = args.data();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  exposure_filter::fuzz::StreamRun(data, size).Run();
  return 0;
}
