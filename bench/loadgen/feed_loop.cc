// exposure-filter-feed-bench: the feed loop a recall server runs, the same
// for every system (docs/performance.md, "The feed loop"). Sessions of K
// requests per user; each request checks --candidates for the user (half
// exposed earlier, plus every item shown earlier in the session), then
// --shown of its survivors are shown and handed to ONE shared writer thread
// that batches many users per call (feed_writer.h); the session's next
// request waits for that write's acknowledgement, and each client thread
// serves --sessions_per_thread sessions at once meanwhile. A background
// generator adds other users' exposures through the same writer at a steady
// rate.
//
// Systems (--system):
//   session       FilterReplica (one per process, shared by the threads)
//   mode_a        unary FilterRecalled, KEEP_MASK
//   mode_b        FilterCache (GetFilter with if_version) + local check
//   stream_a      mode A sent on a Session stream (SessionRequest.filter),
//                 one stream per client thread
//   redis         seed-004 Redis block list, LRANGE per request
//   redis_cached  the same with Redis client-side caching (CLIENT TRACKING
//                 with REDIRECT to an invalidation subscriber)
// Writes go to the server by RecordExposure (many users per call) or to
// Redis as pipelined block-list updates (RedisBlockListClient::Record).
//
// Measured: recall requests/s; CPU per request of this process (without
// its writer and background threads) and of --server_pid; bytes on the
// wire per request (TCP_INFO byte counters of every TCP socket of this
// process: recalls and writes, both directions); hit ratio (the check used
// a local copy); staleness (a write's acknowledgement -> the start of the
// first check of the session that removed the item); false negatives (an
// item recorded by an earlier request of the session that a later request
// kept), split at --staleness_bound; FP rate against ground truth.
//
//   exposure-filter-feed-bench --system=session --target=127.0.0.1:50051
//       --session_requests=10 --server_pid=PID --duration=5s
//
// Traffic goes only to --target. Every run is bounded by --duration plus
// --warmup and the preload.
#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/loadgen/feed_recall.h"
#include "bench/loadgen/feed_writer.h"
#include "bench/loadgen/ground_truth.h"
#include "bench/loadgen/redis_block_list.h"
#include "bench/loadgen/report.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/filter_replica.h"

ABSL_FLAG(std::string, system, "session",
          "session, mode_a, mode_b, stream_a, redis or redis_cached");
ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "server or redis-server address (host:port)");
ABSL_FLAG(std::string, name, "", "label for the report");
ABSL_FLAG(std::string, surface, "feed", "surface (Redis: key prefix)");
ABSL_FLAG(std::string, user_prefix, "feed-u",
          "checked users are <prefix><n>; give each run its own, so every "
          "system starts from the same preloaded users");
ABSL_FLAG(int, users, 1000, "checked users (preloaded with exposures)");
ABSL_FLAG(int, exposures_per_user, 2000, "exposures preloaded per user");
ABSL_FLAG(bool, preload, true, "record the users' exposures first");
ABSL_FLAG(int, candidates, 5000, "candidates per request");
ABSL_FLAG(double, exposed_fraction, 0.5,
          "fraction of the candidates (beyond the session's shown items) "
          "the user was shown before the run");
ABSL_FLAG(int, session_requests, 10, "K: requests per session");
ABSL_FLAG(int, shown, 20, "survivors shown and recorded per request");
ABSL_FLAG(bool, forget_after_session, true,
          "drop the user's local copy when its session ends (a recall "
          "server sees a user's next session much later); false keeps it");
ABSL_FLAG(int, threads, 2, "client threads");
ABSL_FLAG(uint64_t, replica_index_bytes,
          exposure_filter::FilterReplicaOptions{}.max_index_bytes,
          "session: FilterReplicaOptions::max_index_bytes (0: no runs filed "
          "for repeated checks)");
ABSL_FLAG(bool, note_shown, true,
          "session: hand each request's shown items to the replica too "
          "(FilterReplica::NoteShown), so the session's next check removes "
          "them before the server's push arrives");
ABSL_FLAG(int, sessions_per_thread, 16,
          "sessions each client thread runs at once, serving another while "
          "one waits for its write (1: the write's latency is the loop's)");
ABSL_FLAG(double, background_users_per_s, 1000,
          "other users' writes per second through the shared writer");
ABSL_FLAG(int, background_items, 20, "items per background user write");
ABSL_FLAG(int, writer_users, 100000, "background users bench-w0..N-1");
ABSL_FLAG(int, max_batch_users, 1000, "users per writer call at most");
ABSL_FLAG(absl::Duration, writer_linger, absl::ZeroDuration(),
          "how long the writer lets the oldest queued write wait for others "
          "to join its call (a Kafka producer's linger.ms)");
ABSL_FLAG(absl::Duration, staleness_bound, absl::Milliseconds(100),
          "false negatives are split at this age of the write");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(5), "measured phase");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(2), "unmeasured warm-up");
ABSL_FLAG(int, server_pid, 0, "server (or redis-server) pid, for its CPU");

namespace exposure_filter::bench {
namespace {

namespace v1 = exposure::v1;
using Clock = std::chrono::steady_clock;

using Options = FeedOptions;

// --- Preload ---------------------------------------------------------------

absl::Status PreloadGrpc(const Options& o) {
  auto stub = v1::ExposureFilter::NewStub(MakeChannel(o));
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  // 7 event times over 28 days, so exposures land in every live slice, as
  // exposure-filter-bench preloads.
  constexpr int kTimes = 7;
  const int64_t step_ms = int64_t{28} * 24 * 3600 * 1000 / kTimes;
  for (uint32_t u = 0; u < o.users; ++u) {
    v1::RecordExposureRequest req;
    req.set_surface(o.surface);
    for (int g = kTimes - 1; g >= 0; --g) {
      v1::Exposure* e = req.add_exposures();
      e->set_user_id(UserOf(o, u));
      e->set_event_time_ms(now_ms - g * step_ms - 1000);
      for (uint32_t j = g; j < o.exposures; j += kTimes) {
        e->add_item_ids(ExposedId(u, j));
      }
    }
    v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    grpc::Status s = stub->RecordExposure(&ctx, req, &resp);
    if (!s.ok()) return absl::UnavailableError("preload: " + s.error_message());
  }
  return absl::OkStatus();
}

absl::Status PreloadRedis(const Options& o) {
  std::string host;
  int port = 0;
  if (absl::Status s = HostPort(o.target, &host, &port); !s.ok()) return s;
  RedisBlockListClient client;
  if (absl::Status s = client.Connect(host, port); !s.ok()) return s;
  std::vector<uint64_t> ids;
  for (uint32_t u = 0; u < o.users; ++u) {
    ids.clear();
    for (uint32_t j = 0; j < o.exposures; ++j) ids.push_back(ExposedId(u, j));
    const std::string key = RedisKey(o, UserOf(o, u));
    if (absl::Status s = client.Store(key, BuildBlockList(ids)); !s.ok()) {
      return s;
    }
    // BuildBlockList fills blocks of 1,000 from the oldest item: the newest
    // block holds the remainder (or a full block).
    const uint32_t newest =
        o.exposures == 0 ? 0 : o.exposures - (o.exposures - 1) / 1000 * 1000;
    if (absl::Status s = client.SetNewestCount(key, newest); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// --- Bytes on the wire -----------------------------------------------------

// Bytes sent (acknowledged) plus received on every TCP socket this process
// holds now, from the kernel's TCP_INFO counters.
uint64_t ProcessTcpBytes() {
  uint64_t total = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  while (dirent* d = readdir(dir)) {
    int fd = 0;
    if (!absl::SimpleAtoi(d->d_name, &fd)) continue;
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    if (len < offsetof(tcp_info, tcpi_bytes_received) + sizeof(uint64_t)) {
      continue;
    }
    total += info.tcpi_bytes_acked + info.tcpi_bytes_received;
  }
  closedir(dir);
  return total;
}

// --- The loop --------------------------------------------------------------

double SelfThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Phase {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
};

struct ThreadResult {
  uint64_t requests = 0, hits = 0, sessions = 0;
  uint64_t fn_within = 0, fn_outside = 0;  // shown items kept
  uint64_t unresolved = 0;  // kept by a session's last check, probed
  double check_cpu_s = 0;   // this thread's CPU inside Check, measuring
  std::vector<int64_t> check_ns;
  std::vector<int64_t> write_ns;  // handed to the writer -> acknowledged
  std::vector<int64_t> staleness_ns;
  std::map<std::string, uint64_t> errors;
  std::map<std::string, std::string> error_messages;  // the first, by code
  Accuracy accuracy;  // preloaded history and fresh candidates
};

class SessionThread {
 public:
  SessionThread(const Options& o, Phase* phase, int index, Recall* recall,
                FeedWriter* writer)
      : o_(o),
        phase_(phase),
        index_(index),
        recall_(recall),
        writer_(writer),
        rng_(0xfeed0000u + index) {}

  // Runs --sessions_per_thread sessions at once, in turn: a session whose
  // write is in flight waits while the thread serves the others, as a
  // recall server serves many users at once. The writer acknowledges in
  // submission order, so the session at the front is the next one ready.
  void Run() {
    std::deque<std::unique_ptr<Session>> sessions;
    for (int i = 0; i < o_.sessions_per_thread; ++i) {
      sessions.push_back(std::make_unique<Session>());
      StartSession(sessions.back().get());
    }
    while (!phase_->stop.load()) {
      std::unique_ptr<Session> s = std::move(sessions.front());
      sessions.pop_front();
      if (s->ticket != nullptr && !FinishWrite(s.get())) {
        EndSession(s.get());
      } else if (s->r == o_.k) {
        EndSession(s.get());
      } else {
        Request(s.get());
      }
      sessions.push_back(std::move(s));
    }
    // Writes still in flight point into the sessions.
    for (auto& s : sessions) {
      if (s->ticket != nullptr) s->ticket->done.WaitForNotification();
    }
  }

  ThreadResult& result() { return result_; }

 private:
  struct Shown {
    uint64_t id;
    Clock::time_point acked;
    bool resolved;  // a check already removed it (staleness sampled)
  };
  struct Session {
    std::string user;
    uint32_t u = 0;
    int r = 0;  // requests done
    std::vector<Shown> shown;
    WriteEntry entry;
    std::unique_ptr<WriteTicket> ticket;  // the write in flight, if any
    Clock::time_point submitted;
    bool measured = false;  // the write was submitted while measuring
  };

  void Error(const absl::Status& s) {
    if (phase_->measuring.load()) {
      const std::string code = absl::StatusCodeToString(s.code());
      ++result_.errors[code];
      result_.error_messages.emplace(code, std::string(s.message()));
    }
    // Do not spin on a dead backend.
    absl::SleepFor(absl::Milliseconds(10));
  }

  // The thread's users are index, index + threads, ...: no two sessions
  // of the run share a user at once (--users >= threads *
  // sessions_per_thread).
  void StartSession(Session* s) {
    const uint32_t per_thread = std::max<uint32_t>(1, o_.users / o_.threads);
    s->u = static_cast<uint32_t>(index_ + o_.threads * (next_ % per_thread)) %
           o_.users;
    ++next_;
    s->user = UserOf(o_, s->u);
    s->r = 0;
    s->shown.clear();
  }

  void EndSession(Session* s) {
    recall_->EndSession(s->user);
    if (phase_->measuring.load()) ++result_.sessions;
    StartSession(s);
  }

  // Waits for the session's write; false if it failed.
  bool FinishWrite(Session* s) {
    WriteTicket& ticket = *s->ticket;
    ticket.done.WaitForNotification();
    const bool ok = ticket.status.ok();
    if (s->measured && ok) {
      result_.write_ns.push_back((ticket.acked - s->submitted).count());
    }
    if (ok) {
      for (uint64_t id : s->entry.ids)
        s->shown.push_back({id, ticket.acked, false});
    } else {
      Error(ticket.status);
    }
    s->ticket.reset();
    return ok;
  }

  // One feed request: check, score, show --shown survivors and hand them
  // to the writer.
  void Request(Session* s) {
    const bool measuring = phase_->measuring.load();
    // Candidates: the session's shown items (a recall source that keeps
    // returning them), then the rest, half exposed before the run.
    const size_t carried = std::min(s->shown.size(), o_.candidates);
    MakeCandidates(s->u, o_.exposures, o_.candidates - carried,
                   o_.exposed_fraction, rng_, &batch_);
    ids_.resize(o_.candidates);
    for (size_t i = 0; i < carried; ++i) ids_[i] = s->shown[i].id;
    std::copy(batch_.ids.begin(), batch_.ids.end(), ids_.begin() + carried);
    keep_.assign(o_.candidates, 1);
    bool hit = false;
    const double cpu0 = SelfThreadCpuSeconds();
    const Clock::time_point t0 = Clock::now();
    absl::Status st =
        recall_->Check(s->user, ids_, s->r == 0, keep_.data(), &hit);
    const Clock::time_point t1 = Clock::now();
    if (measuring) result_.check_cpu_s += SelfThreadCpuSeconds() - cpu0;
    if (!st.ok()) {
      Error(st);
      s->r = o_.k;  // the session ends
      return;
    }
    ++s->r;
    if (measuring) {
      ++result_.requests;
      result_.hits += hit;
      result_.check_ns.push_back((t1 - t0).count());
      result_.accuracy.Add(batch_, keep_.data() + carried);
    }
    for (size_t i = 0; i < carried; ++i) {
      Shown& item = s->shown[i];
      if (keep_[i]) {
        if (measuring) {
          ++(t0 - item.acked <= o_.bound ? result_.fn_within
                                         : result_.fn_outside);
        }
      } else if (!item.resolved) {
        item.resolved = true;
        if (measuring)
          result_.staleness_ns.push_back((t0 - item.acked).count());
      }
    }
    if (s->r == o_.k) ProbeUnresolved(*s, measuring);
    // Show --shown survivors (never one shown before) and record them.
    s->entry.user = o_.redis() ? RedisKey(o_, s->user) : s->user;
    s->entry.ids.clear();
    for (size_t i = carried;
         i < ids_.size() && s->entry.ids.size() < static_cast<size_t>(o_.shown);
         ++i) {
      if (keep_[i]) s->entry.ids.push_back(ids_[i]);
    }
    // Recall-side work, counted with the checks.
    const double cpu1 = SelfThreadCpuSeconds();
    recall_->Shown(s->user, s->entry.ids);
    if (measuring) result_.check_cpu_s += SelfThreadCpuSeconds() - cpu1;
    s->ticket = std::make_unique<WriteTicket>();
    s->entry.ticket = s->ticket.get();
    s->measured = measuring;
    s->submitted = Clock::now();
    writer_->Submit(&s->entry);
  }

  // Items the session's last check kept although recorded earlier: probe
  // them (every millisecond, at most 2 s) until a check removes them, so
  // their staleness is measured too.
  void ProbeUnresolved(const Session& s, bool measuring) {
    std::vector<size_t> open;
    for (size_t i = 0; i < s.shown.size(); ++i) {
      if (!s.shown[i].resolved) open.push_back(i);
    }
    // The last check's own items (recorded after it) are not open: only
    // items it saw and kept.
    std::vector<uint64_t> ids;
    std::vector<uint8_t> keep;
    const Clock::time_point give_up = Clock::now() + std::chrono::seconds(2);
    while (!open.empty() && Clock::now() < give_up) {
      ids.clear();
      for (size_t i : open) ids.push_back(s.shown[i].id);
      keep.assign(ids.size(), 1);
      bool hit = false;
      const Clock::time_point t0 = Clock::now();
      if (!recall_->Check(s.user, ids, false, keep.data(), &hit).ok()) break;
      std::vector<size_t> still;
      for (size_t j = 0; j < open.size(); ++j) {
        if (keep[j]) {
          still.push_back(open[j]);
        } else if (measuring) {
          result_.staleness_ns.push_back((t0 - s.shown[open[j]].acked).count());
        }
      }
      open.swap(still);
      if (!open.empty()) absl::SleepFor(absl::Milliseconds(1));
    }
    if (measuring) result_.unresolved += open.size();
  }

  const Options& o_;
  Phase* phase_;
  const int index_;
  Recall* recall_;
  FeedWriter* writer_;
  FastRng rng_;
  uint64_t next_ = 0;  // sessions started
  CandidateBatch batch_;
  std::vector<uint64_t> ids_;
  std::vector<uint8_t> keep_;
  ThreadResult result_;
};

// --- Sinks -----------------------------------------------------------------

WriteSink GrpcSink(const Options& o) {
  auto stub = std::shared_ptr<v1::ExposureFilter::Stub>(
      v1::ExposureFilter::NewStub(MakeChannel(o)));
  const std::string surface = o.surface;
  return [stub, surface](absl::Span<WriteEntry* const> batch) {
    v1::RecordExposureRequest req;
    req.set_surface(surface);
    for (const WriteEntry* w : batch) {
      v1::Exposure* e = req.add_exposures();
      e->set_user_id(w->user);
      e->mutable_item_ids()->Add(w->ids.begin(), w->ids.end());
    }
    v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    grpc::Status s = stub->RecordExposure(&ctx, req, &resp);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          s.error_message());
    }
    return absl::OkStatus();
  };
}

absl::StatusOr<WriteSink> RedisSink(const Options& o) {
  std::string host;
  int port = 0;
  if (absl::Status s = HostPort(o.target, &host, &port); !s.ok()) return s;
  auto client = std::make_shared<RedisBlockListClient>();
  if (absl::Status s = client->Connect(host, port); !s.ok()) return s;
  return WriteSink([client](absl::Span<WriteEntry* const> batch) {
    // One read-modify-write per user and batch: two updates of the same
    // block in one pipeline would both start from the same old block, and
    // the second would drop the first's items. Only background users can
    // repeat within a batch (a session has one write in flight).
    absl::node_hash_map<std::string, std::vector<uint64_t>>
        merged;  // stable keys
    std::vector<const std::string*> order;
    for (const WriteEntry* w : batch) {
      auto [it, inserted] = merged.try_emplace(w->user);
      if (inserted) order.push_back(&it->first);
      it->second.insert(it->second.end(), w->ids.begin(), w->ids.end());
    }
    std::vector<RedisBlockListClient::UserItems> items;
    items.reserve(order.size());
    for (const std::string* user : order) {
      items.push_back({user, merged.find(*user)->second});
    }
    return client->Record(items);
  });
}

double Percentile(std::vector<int64_t>& v, double q) {
  if (v.empty()) return -1;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i] / 1e6;  // milliseconds
}

std::string Num(double v) {
  return v < 0 ? "null" : absl::StrFormat("%.6g", v);
}

int Main() {
  Options o;
  o.system = absl::GetFlag(FLAGS_system);
  o.target = absl::GetFlag(FLAGS_target);
  o.surface = absl::GetFlag(FLAGS_surface);
  o.user_prefix = absl::GetFlag(FLAGS_user_prefix);
  const int users = absl::GetFlag(FLAGS_users);
  const int exposures = absl::GetFlag(FLAGS_exposures_per_user);
  const int candidates = absl::GetFlag(FLAGS_candidates);
  o.exposed_fraction = absl::GetFlag(FLAGS_exposed_fraction);
  o.k = absl::GetFlag(FLAGS_session_requests);
  o.shown = absl::GetFlag(FLAGS_shown);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.sessions_per_thread = absl::GetFlag(FLAGS_sessions_per_thread);
  o.forget = absl::GetFlag(FLAGS_forget_after_session);
  o.note_shown = absl::GetFlag(FLAGS_note_shown);
  o.bound = std::chrono::duration_cast<Clock::duration>(
      absl::ToChronoNanoseconds(absl::GetFlag(FLAGS_staleness_bound)));
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "exposure-filter-feed-bench: %s\n", msg.c_str());
    return 2;
  };
  static const char* kSystems[] = {"session",  "mode_a", "mode_b",
                                   "stream_a", "redis",  "redis_cached"};
  if (std::find(std::begin(kSystems), std::end(kSystems), o.system) ==
      std::end(kSystems)) {
    return fail(
        "--system: one of session, mode_a, mode_b, stream_a, redis, "
        "redis_cached");
  }
  if (users <= 0 || exposures < 0 || candidates <= 0 || o.k <= 0 ||
      o.shown < 0 || o.threads <= 0 || o.sessions_per_thread <= 0 ||
      users < o.threads * o.sessions_per_thread ||
      !(o.exposed_fraction >= 0 && o.exposed_fraction <= 1) ||
      absl::GetFlag(FLAGS_background_users_per_s) < 0 ||
      absl::GetFlag(FLAGS_writer_users) <= 0 ||
      absl::GetFlag(FLAGS_max_batch_users) <= 0 ||
      absl::GetFlag(FLAGS_writer_linger) < absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_background_items) <= 0) {
    return fail(
        "--users (>= --threads x --sessions_per_thread), --candidates, "
        "--session_requests, --threads, --sessions_per_thread, --writer_users, "
        "--max_batch_users, --background_items "
        "must be positive; --exposures_per_user, --shown, "
        "--background_users_per_s, --writer_linger >= 0; --exposed_fraction "
        "in [0, 1]");
  }
  o.users = static_cast<uint32_t>(users);
  o.exposures = static_cast<uint32_t>(exposures);
  o.candidates = static_cast<size_t>(candidates);

  if (absl::GetFlag(FLAGS_preload) && o.exposures > 0) {
    absl::Status s = o.redis() ? PreloadRedis(o) : PreloadGrpc(o);
    if (!s.ok()) return fail(std::string(s.message()));
  }

  // The writer: one thread, many users per call.
  WriteSink sink;
  if (o.redis()) {
    absl::StatusOr<WriteSink> r = RedisSink(o);
    if (!r.ok()) return fail(std::string(r.status().message()));
    sink = *std::move(r);
  } else {
    sink = GrpcSink(o);
  }
  FeedWriterOptions wo;
  wo.max_batch_users = absl::GetFlag(FLAGS_max_batch_users);
  wo.linger = absl::GetFlag(FLAGS_writer_linger);
  wo.background_users_per_s = absl::GetFlag(FLAGS_background_users_per_s);
  wo.background_items = absl::GetFlag(FLAGS_background_items);
  wo.background_user_pool = absl::GetFlag(FLAGS_writer_users);
  // Background users are other users: never a checked one.
  wo.background_prefix = o.redis() ? RedisKey(o, "bench-w") : "bench-w";
  FeedWriter writer(wo, std::move(sink));

  std::unique_ptr<FilterReplica> replica;
  if (o.system == "session") {
    FilterReplicaOptions ro;
    ro.max_index_bytes = absl::GetFlag(FLAGS_replica_index_bytes);
    absl::StatusOr<std::unique_ptr<FilterReplica>> r =
        FilterReplica::Connect(MakeChannel(o), ro);
    if (!r.ok()) return fail(std::string(r.status().message()));
    replica = *std::move(r);
  }
  std::vector<std::unique_ptr<Recall>> recalls;
  for (int t = 0; t < o.threads; ++t) {
    absl::StatusOr<std::unique_ptr<Recall>> r = MakeRecall(o, replica.get());
    if (!r.ok()) return fail(std::string(r.status().message()));
    recalls.push_back(*std::move(r));
  }

  Phase phase;
  std::vector<std::unique_ptr<SessionThread>> sessions;
  for (int t = 0; t < o.threads; ++t) {
    sessions.push_back(std::make_unique<SessionThread>(
        o, &phase, t, recalls[t].get(), &writer));
  }
  std::vector<std::thread> threads;
  for (auto& s : sessions) threads.emplace_back([&s] { s->Run(); });
  auto session_threads_cpu = [&threads] {
    double cpu = 0;
    for (std::thread& t : threads) cpu += ThreadCpuSeconds(t.native_handle());
    return cpu;
  };

  absl::SleepFor(absl::GetFlag(FLAGS_warmup));
  const int server_pid = absl::GetFlag(FLAGS_server_pid);
  const FeedWriterStats w0 = writer.stats();
  const double server0 = ProcessCpuSeconds(server_pid);
  const double self0 = ProcessCpuSeconds(getpid());
  const double writer0 = writer.WriterThreadCpuSeconds();
  const double sessions0 = session_threads_cpu();
  const uint64_t bytes0 = ProcessTcpBytes();
  const FilterReplicaStats r0 =
      replica ? replica->stats() : FilterReplicaStats{};
  const Clock::time_point t0 = Clock::now();
  phase.measuring.store(true);
  absl::SleepFor(absl::GetFlag(FLAGS_duration));
  phase.measuring.store(false);
  const Clock::time_point t1 = Clock::now();
  const uint64_t bytes1 = ProcessTcpBytes();
  const double writer1 = writer.WriterThreadCpuSeconds();
  const double sessions1 = session_threads_cpu();
  const double self1 = ProcessCpuSeconds(getpid());
  const double server1 = ProcessCpuSeconds(server_pid);
  const FeedWriterStats w1 = writer.stats();
  const FilterReplicaStats r1 =
      replica ? replica->stats() : FilterReplicaStats{};
  phase.stop.store(true);
  for (std::thread& t : threads) t.join();
  writer.Stop();

  ThreadResult all;
  for (auto& s : sessions) {
    ThreadResult& r = s->result();
    all.requests += r.requests;
    all.hits += r.hits;
    all.sessions += r.sessions;
    all.fn_within += r.fn_within;
    all.fn_outside += r.fn_outside;
    all.unresolved += r.unresolved;
    all.check_cpu_s += r.check_cpu_s;
    all.accuracy.Merge(r.accuracy);
    all.check_ns.insert(all.check_ns.end(), r.check_ns.begin(),
                        r.check_ns.end());
    all.write_ns.insert(all.write_ns.end(), r.write_ns.begin(),
                        r.write_ns.end());
    all.staleness_ns.insert(all.staleness_ns.end(), r.staleness_ns.begin(),
                            r.staleness_ns.end());
    for (const auto& [code, n] : r.errors) all.errors[code] += n;
    all.error_messages.insert(r.error_messages.begin(), r.error_messages.end());
  }
  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  const double n = static_cast<double>(all.requests);
  auto per_request_us = [&](double cpu) {
    return all.requests == 0 || cpu < 0 ? -1 : cpu * 1e6 / n;
  };
  // The recall side's CPU: the session threads' CPU inside Check, plus
  // every other thread but the writers (gRPC's, the replica's stream
  // reader, the invalidation reader). Left out: the writer and background
  // threads, and the load generator's own work on the session threads
  // (drawing candidates, scoring answers against ground truth).
  const double loadgen_cpu = self1 - self0;
  const double client_cpu = loadgen_cpu - (writer1 - writer0) -
                            (sessions1 - sessions0) + all.check_cpu_s;
  const double writer_cpu = writer1 - writer0;
  const double server_cpu =
      server0 >= 0 && server1 >= 0 ? server1 - server0 : -1;
  std::string errs, messages;
  for (const auto& [code, count] : all.errors) {
    absl::StrAppend(&errs, errs.empty() ? "" : ",", "\"", code, "\":", count);
  }
  for (const auto& [code, text] : all.error_messages) {
    std::string quoted;
    for (char c : text) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
    absl::StrAppend(&messages, messages.empty() ? "" : ",", "\"", code, "\":\"",
                    quoted, "\"");
  }
  uint64_t invalidations = 0;
  for (const auto& r : recalls) invalidations += r->invalidations();
  const uint64_t stale_samples = all.staleness_ns.size();
  const double fp_rate =
      all.accuracy.fresh ? static_cast<double>(all.accuracy.false_positives) /
                               all.accuracy.fresh
                         : -1;
  std::string json = absl::StrCat(
      "{\"name\":\"", absl::GetFlag(FLAGS_name), "\",\"system\":\"", o.system,
      "\",\"target\":\"", o.target, "\",\"session_requests\":", o.k,
      ",\"threads\":", o.threads, ",\"note_shown\":",
      o.system == "session" && o.note_shown ? "true" : "false",
      ",\"sessions_per_thread\":", o.sessions_per_thread,
      ",\"writer_linger_ms\":",
      Num(absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_writer_linger))),
      ",\"candidates\":", o.candidates, ",\"users\":", o.users,
      ",\"seconds\":", Num(seconds), ",\"requests\":", all.requests,
      ",\"sessions\":", all.sessions,
      ",\"requests_per_s\":", Num(seconds > 0 ? n / seconds : 0),
      ",\"check_ms\":{\"p50\":", Num(Percentile(all.check_ns, 0.5)),
      ",\"p99\":", Num(Percentile(all.check_ns, 0.99)), "}",
      ",\"write_ms\":{\"p50\":", Num(Percentile(all.write_ns, 0.5)),
      ",\"p99\":", Num(Percentile(all.write_ns, 0.99)), "}",
      ",\"client_cpu_us_per_request\":", Num(per_request_us(client_cpu)),
      ",\"writer_cpu_us_per_request\":", Num(per_request_us(writer_cpu)),
      ",\"loadgen_cpu_us_per_request\":", Num(per_request_us(loadgen_cpu)),
      ",\"server_cpu_us_per_request\":", Num(per_request_us(server_cpu)),
      ",\"wire_bytes_per_request\":",
      Num(all.requests ? (bytes1 - bytes0) / n : -1),
      ",\"hit_ratio\":", Num(all.requests ? all.hits / n : -1),
      ",\"staleness_ms\":{\"samples\":", stale_samples,
      ",\"p50\":", Num(Percentile(all.staleness_ns, 0.5)),
      ",\"p99\":", Num(Percentile(all.staleness_ns, 0.99)),
      ",\"max\":", Num(Percentile(all.staleness_ns, 1.0)), "}",
      ",\"fn_within_bound\":", all.fn_within,
      ",\"fn_outside_bound\":", all.fn_outside,
      ",\"fn_unresolved\":", all.unresolved, ",\"staleness_bound_ms\":",
      Num(absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_staleness_bound))),
      ",\"history_false_negatives\":", all.accuracy.false_negatives,
      ",\"fresh_checked\":", all.accuracy.fresh,
      ",\"false_positives\":", all.accuracy.false_positives,
      ",\"fp_rate\":", Num(fp_rate), ",\"writer_calls\":", w1.calls - w0.calls,
      ",\"writer_users_per_call\":",
      Num(w1.calls > w0.calls
              ? static_cast<double>(w1.users - w0.users) / (w1.calls - w0.calls)
              : -1),
      ",\"background_users_per_s\":",
      Num((w1.background_users - w0.background_users) / seconds),
      ",\"background_dropped\":", w1.background_dropped,
      ",\"failed_writes\":", w1.failed_calls,
      ",\"replica\":{\"local\":", r1.local_checks - r0.local_checks,
      ",\"stream\":", r1.stream_checks - r0.stream_checks,
      ",\"unary\":", r1.unary_checks - r0.unary_checks,
      ",\"not_synced\":", r1.not_synced - r0.not_synced,
      ",\"stale\":", r1.stale - r0.stale, ",\"aging\":", r1.aging - r0.aging,
      ",\"snapshots\":", r1.snapshots - r0.snapshots,
      ",\"resyncs\":", r1.resyncs - r0.resyncs,
      ",\"indexed\":", r1.indexed_checks - r0.indexed_checks,
      ",\"index_bytes\":", r1.index_bytes, "}",
      ",\"redis_invalidations\":", invalidations, ",\"errors\":{", errs,
      "},\"error_messages\":{", messages, "}}\n");
  // One JSON object; bench/feed_table.py prints the table.
  std::fputs(json.c_str(), stdout);
  return all.requests > 0 ? 0 : 1;
}

}  // namespace
}  // namespace exposure_filter::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "exposure-filter-feed-bench: the feed loop (check, show, record "
      "through a shared batching writer) against the server or the Redis "
      "block list.\nUsage: exposure-filter-feed-bench --system=session "
      "--target=host:port [--session_requests=10] ...");
  absl::ParseCommandLine(argc, argv);
  // As the server does (src/server/main.cc): Debian's Abseil keeps the
  // mutex deadlock graph on, which a recall server would not run with; it
  // showed in the client's profile on every Check's lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return exposure_filter::bench::Main();
}
