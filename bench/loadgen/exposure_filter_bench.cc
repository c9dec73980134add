// exposure-filter-bench: a load generator for exposure-filter (and for the
// seed-004 Redis block-list baseline), in the spirit of redis-benchmark and
// ghz. It preloads users with known exposures, drives a weighted RPC mix from
// threads x in-flight workers for a bounded time or request count after a
// warm-up, and reports rate, latency percentiles, errors by status code,
// false positives / negatives against its own ground truth, and the server's
// CPU per request when --server_pid names a local process.
//
//   exposure-filter-bench --target=127.0.0.1:50051 --mix=filter
//       --users=200 --exposures_per_user=2000 --candidates=5000 --duration=10s
//   exposure-filter-bench --backend=redis --target=127.0.0.1:6379 ...
//   exposure-filter-bench --mix=filter=6,get_filter_cached=2,record=1,delete=1
//       --rate=700 --duration=10m --report_interval=1m --server_pid=PID
//
// --rate holds the total request rate (bench/soak.sh runs at ~70% of the
// measured capacity); --report_interval prints a line per interval (rate,
// p50/p99, errors by code, server RSS) during the measured phase.
//
// Traffic goes only to --target. Every run is bounded by --duration (and
// --requests), plus the preload.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/loadgen/ground_truth.h"
#include "bench/loadgen/interval_stats.h"
#include "bench/loadgen/pacer.h"
#include "bench/loadgen/redis_block_list.h"
#include "bench/loadgen/report.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/filter_view.h"
#include "src/server/config/transport_tuning.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "server address (host:port)");
ABSL_FLAG(std::string, backend, "grpc",
          "grpc (exposure.v1 server or the ceiling server) or redis "
          "(seed-004 block list; filter only)");
ABSL_FLAG(std::string, name, "", "label for the report");
ABSL_FLAG(std::string, mix, "filter",
          "weighted RPC mix, e.g. filter=9,record=1. filter = FilterRecalled; "
          "get_filter = GetFilter + local check; get_filter_cached = the same "
          "with if_version revalidation of a per-worker cache; record = "
          "RecordExposure of --record_users x --record_items fresh items; "
          "delete = DeleteUser of one of the users record writes to");
ABSL_FLAG(std::string, result_mode, "keep_mask", "keep_mask or kept_ids");
ABSL_FLAG(std::string, surface, "bench", "surface name");
ABSL_FLAG(int, users, 200, "users checked (preloaded with exposures)");
ABSL_FLAG(int, exposures_per_user, 2000, "exposures preloaded per user");
ABSL_FLAG(bool, preload, true, "record the users' exposures before the run");
ABSL_FLAG(absl::Duration, preload_spread, absl::Hours(24 * 28),
          "preloaded event times are spread over this much of the past");
ABSL_FLAG(int, candidates, 5000, "candidates per FilterRecalled / check");
ABSL_FLAG(double, exposed_fraction, 0.5,
          "fraction of candidates the user was already shown");
ABSL_FLAG(int, record_users, 50, "users per RecordExposure call");
ABSL_FLAG(int, record_items, 20, "items per user per RecordExposure call");
ABSL_FLAG(int, writer_users, 100000,
          "users record and delete pick from (bench-w0 .. bench-wN-1); "
          "fewer, with deletes in the mix, lets memory reach a steady state");
ABSL_FLAG(int, threads, 2, "client threads (one channel each)");
ABSL_FLAG(int, inflight, 4, "RPCs in flight per thread");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "measured phase");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(2), "unmeasured warm-up");
ABSL_FLAG(int64_t, requests, 0, "stop after this many requests (0 = no cap)");
ABSL_FLAG(int, server_pid, 0,
          "local server pid, for CPU per request and RSS per interval");
ABSL_FLAG(double, rate, 0,
          "total requests/s over all workers (0 = as fast as they go)");
ABSL_FLAG(absl::Duration, report_interval, absl::ZeroDuration(),
          "print one line per interval of the measured phase (0 = none); "
          "with --json each line is a JSON object before the summary");
ABSL_FLAG(bool, json, false, "print one JSON object instead of a table");
ABSL_FLAG(int, http2_max_frame_size, 64 << 10, "client channel argument");
ABSL_FLAG(int, tcp_read_chunk_size, 64 << 10, "client channel argument");
ABSL_FLAG(int, tcp_min_read_chunk_size, 16 << 10, "client channel argument");
ABSL_FLAG(int, tcp_max_read_chunk_size, 4 << 20, "client channel argument");

namespace exposure_filter::bench {
namespace {

namespace v1 = exposure::v1;
using Clock = std::chrono::steady_clock;

enum class Op { kFilter, kGetFilter, kGetFilterCached, kRecord, kDelete };

struct MixEntry {
  Op op;
  int weight;
};

absl::StatusOr<std::vector<MixEntry>> ParseMix(const std::string& spec) {
  std::vector<MixEntry> mix;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, '=');
    int weight = 1;
    if (!kv.second.empty() &&
        (!absl::SimpleAtoi(kv.second, &weight) || weight < 0)) {
      return absl::InvalidArgumentError("--mix: bad weight in " +
                                        std::string(part));
    }
    Op op;
    if (kv.first == "filter")
      op = Op::kFilter;
    else if (kv.first == "get_filter")
      op = Op::kGetFilter;
    else if (kv.first == "get_filter_cached")
      op = Op::kGetFilterCached;
    else if (kv.first == "record")
      op = Op::kRecord;
    else if (kv.first == "delete")
      op = Op::kDelete;
    else
      return absl::InvalidArgumentError("--mix: unknown RPC " + kv.first);
    if (weight > 0) mix.push_back({op, weight});
  }
  if (mix.empty()) return absl::InvalidArgumentError("--mix: empty");
  return mix;
}

struct Options {
  std::string target, backend, surface;
  std::vector<MixEntry> mix;
  bool keep_mask = true;
  uint32_t users = 0, exposures = 0;
  size_t candidates = 0;
  double exposed_fraction = 0;
  int record_users = 0, record_items = 0, writer_users = 0;
  int threads = 0, inflight = 0;
  int64_t max_requests = 0;
  TransportTuning transport;
};

std::shared_ptr<grpc::Channel> MakeChannel(const Options& o) {
  grpc::ChannelArguments args;
  ApplyTransportTuning(o.transport, &args);
  args.SetMaxReceiveMessageSize(64 << 20);
  // Each channel gets its own TCP connection, as separate client processes
  // would.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(),
                                   args);
}

std::string CodeName(grpc::StatusCode c) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  const int i = static_cast<int>(c);
  return i >= 0 && i <= 16 ? kNames[i] : "CODE_" + std::to_string(i);
}

// Records every benchmark user's exposures, spread over the past, in
// RecordExposure calls of up to 50,000 items.
absl::Status PreloadGrpc(const Options& o, absl::Duration spread) {
  std::atomic<uint32_t> next{0};
  absl::Mutex mu;
  absl::Status first_error;
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  // 7 event times across the spread, so the exposures land in (up to) every
  // live slice of the default 30-day / 5-day window.
  constexpr int kTimes = 7;
  const int64_t step_ms = absl::ToInt64Milliseconds(spread) / kTimes;
  std::vector<std::thread> workers;
  for (int t = 0; t < std::max(1, o.threads); ++t) {
    workers.emplace_back([&] {
      auto stub = v1::ExposureFilter::NewStub(MakeChannel(o));
      for (uint32_t u; (u = next.fetch_add(1)) < o.users;) {
        v1::RecordExposureRequest req;
        req.set_surface(o.surface);
        for (int g = kTimes - 1; g >= 0; --g) {  // oldest first, as a stream
          v1::Exposure* e = req.add_exposures();
          e->set_user_id(UserName(u));
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
        if (!s.ok()) {
          absl::MutexLock lock(&mu);
          if (first_error.ok()) {
            first_error =
                absl::UnavailableError("preload: " + CodeName(s.error_code()) +
                                       " " + s.error_message());
          }
          return;
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  return first_error;
}

absl::Status PreloadRedis(const Options& o) {
  std::string host;
  int port = 0;
  std::pair<std::string, std::string> hp = absl::StrSplit(o.target, ':');
  host = hp.first;
  if (!absl::SimpleAtoi(hp.second, &port)) {
    return absl::InvalidArgumentError("--target: host:port expected");
  }
  RedisBlockListClient client;
  if (absl::Status s = client.Connect(host, port); !s.ok()) return s;
  std::vector<uint64_t> ids;
  for (uint32_t u = 0; u < o.users; ++u) {
    ids.clear();
    for (uint32_t j = 0; j < o.exposures; ++j) ids.push_back(ExposedId(u, j));
    if (absl::Status s =
            client.Store(o.surface + ":" + UserName(u), BuildBlockList(ids));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// One worker's running totals, merged at the end.
struct WorkerResult {
  uint64_t requests = 0, items = 0, not_modified = 0;
  std::vector<int64_t> latencies_ns;
  std::map<std::string, uint64_t> errors;
  Accuracy accuracy;
};

struct Phase {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  std::atomic<int64_t> measured_requests{0};
  Pacer* pacer = nullptr;
  IntervalStats* intervals = nullptr;  // null: no per-interval lines
};

struct CachedFilter {
  std::string version;
  std::string bytes;
  std::optional<FilterView> view;
};

class Worker {
 public:
  Worker(const Options& o, Phase* phase, uint64_t seed,
         std::shared_ptr<grpc::Channel> channel)
      : o_(o), phase_(phase), rng_(seed) {
    if (channel) stub_ = v1::ExposureFilter::NewStub(channel);
    for (const MixEntry& m : o.mix) total_weight_ += m.weight;
  }

  absl::Status ConnectRedis() {
    std::pair<std::string, std::string> hp = absl::StrSplit(o_.target, ':');
    int port = 0;
    if (!absl::SimpleAtoi(hp.second, &port)) {
      return absl::InvalidArgumentError("--target: host:port expected");
    }
    redis_ = std::make_unique<RedisBlockListClient>();
    return redis_->Connect(hp.first, port);
  }

  void Run() {
    while (!phase_->stop.load(std::memory_order_relaxed)) {
      const bool measuring = phase_->measuring.load(std::memory_order_relaxed);
      const Op op = PickOp();
      phase_->pacer->Wait();
      const Clock::time_point start = Clock::now();
      grpc::StatusCode code = grpc::StatusCode::OK;
      uint64_t items = 0;
      Accuracy acc;
      bool not_modified = false;
      switch (op) {
        case Op::kFilter:
          code = redis_ ? RedisFilter(&items, &acc) : Filter(&items, &acc);
          break;
        case Op::kGetFilter:
        case Op::kGetFilterCached:
          code = GetFilter(op == Op::kGetFilterCached, &items, &acc,
                           &not_modified);
          break;
        case Op::kRecord:
          code = Record(&items);
          break;
        case Op::kDelete:
          code = Delete(&items);
          break;
      }
      const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             Clock::now() - start)
                             .count();
      if (!measuring) continue;
      if (code != grpc::StatusCode::OK) {
        ++result_.errors[CodeName(code)];
        if (phase_->intervals) phase_->intervals->AddError(CodeName(code));
        continue;
      }
      if (phase_->intervals) phase_->intervals->AddOk(ns);
      ++result_.requests;
      result_.items += items;
      result_.not_modified += not_modified;
      result_.accuracy.Merge(acc);
      result_.latencies_ns.push_back(ns);
      if (o_.max_requests > 0 &&
          phase_->measured_requests.fetch_add(1) + 1 >= o_.max_requests) {
        phase_->stop.store(true);
      }
    }
  }

  WorkerResult& result() { return result_; }

 private:
  Op PickOp() {
    int r = static_cast<int>(rng_() % total_weight_);
    for (const MixEntry& m : o_.mix) {
      if ((r -= m.weight) < 0) return m.op;
    }
    return o_.mix.back().op;
  }

  uint32_t PickUser() { return static_cast<uint32_t>(rng_() % o_.users); }
  std::string WriterName() {
    return "bench-w" + std::to_string(rng_() % o_.writer_users);
  }

  static void Deadline(grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(10));
  }

  grpc::StatusCode Filter(uint64_t* items, Accuracy* acc) {
    const uint32_t u = PickUser();
    MakeCandidates(u, o_.exposures, o_.candidates, o_.exposed_fraction, rng_,
                   &batch_);
    v1::FilterRecalledRequest req;
    req.set_surface(o_.surface);
    req.set_user_id(UserName(u));
    req.mutable_candidate_ids()->Add(batch_.ids.begin(), batch_.ids.end());
    req.set_mode(o_.keep_mask ? v1::KEEP_MASK : v1::KEPT_IDS);
    v1::FilterRecalledResponse resp;
    grpc::ClientContext ctx;
    Deadline(&ctx);
    grpc::Status s = stub_->FilterRecalled(&ctx, req, &resp);
    if (!s.ok()) return s.error_code();
    keep_.assign(batch_.ids.size(), 0);
    if (o_.keep_mask) {
      const std::string& mask = resp.keep_mask();
      if (mask.size() != (batch_.ids.size() + 7) / 8)
        return grpc::StatusCode::DATA_LOSS;
      for (size_t i = 0; i < batch_.ids.size(); ++i) {
        keep_[i] = (static_cast<unsigned char>(mask[i / 8]) >> (i % 8)) & 1;
      }
    } else {
      // Survivors come back in request order: walk both lists.
      size_t j = 0;
      for (size_t i = 0; i < batch_.ids.size() &&
                         j < static_cast<size_t>(resp.kept_ids_size());
           ++i) {
        if (batch_.ids[i] == resp.kept_ids(static_cast<int>(j))) {
          keep_[i] = 1;
          ++j;
        }
      }
    }
    acc->Add(batch_, keep_.data());
    *items = batch_.ids.size();
    return grpc::StatusCode::OK;
  }

  grpc::StatusCode GetFilter(bool cached, uint64_t* items, Accuracy* acc,
                             bool* not_modified) {
    const uint32_t u = PickUser();
    v1::GetFilterRequest req;
    req.set_surface(o_.surface);
    req.set_user_id(UserName(u));
    CachedFilter* entry = nullptr;
    if (cached) {
      entry = &cache_[u];
      if (entry->view.has_value()) req.set_if_version(entry->version);
    }
    v1::GetFilterResponse resp;
    grpc::ClientContext ctx;
    Deadline(&ctx);
    grpc::Status s = stub_->GetFilter(&ctx, req, &resp);
    if (!s.ok()) return s.error_code();
    CachedFilter local;
    if (entry == nullptr) entry = &local;
    if (resp.not_modified() && entry->view.has_value()) {
      *not_modified = true;
    } else {
      entry->version = resp.version();
      entry->bytes = std::move(*resp.mutable_filter());
      absl::StatusOr<FilterView> view = FilterView::Parse(entry->bytes);
      if (!view.ok()) {
        entry->view.reset();
        return grpc::StatusCode::DATA_LOSS;  // reported under errors
      }
      entry->view = *std::move(view);
    }
    MakeCandidates(u, o_.exposures, o_.candidates, o_.exposed_fraction, rng_,
                   &batch_);
    keep_.resize(batch_.ids.size());
    entry->view->KeepMaskIds(batch_.ids, keep_.data());
    acc->Add(batch_, keep_.data());
    *items = batch_.ids.size();
    return grpc::StatusCode::OK;
  }

  grpc::StatusCode Record(uint64_t* items) {
    v1::RecordExposureRequest req;
    req.set_surface(o_.surface);
    for (int i = 0; i < o_.record_users; ++i) {
      v1::Exposure* e = req.add_exposures();
      // Writers use their own users so the checked users' truth stays fixed.
      e->set_user_id(WriterName());
      for (int j = 0; j < o_.record_items; ++j) e->add_item_ids(rng_());
    }
    v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    Deadline(&ctx);
    grpc::Status s = stub_->RecordExposure(&ctx, req, &resp);
    if (!s.ok()) return s.error_code();
    *items = static_cast<uint64_t>(o_.record_users) * o_.record_items;
    return grpc::StatusCode::OK;
  }

  // Forgets one of the record writers' users (never a checked user, whose
  // ground truth must stay fixed); a user not (yet) written is fine too.
  grpc::StatusCode Delete(uint64_t* items) {
    v1::DeleteUserRequest req;
    req.set_surface(o_.surface);
    req.set_user_id(WriterName());
    v1::DeleteUserResponse resp;
    grpc::ClientContext ctx;
    Deadline(&ctx);
    grpc::Status s = stub_->DeleteUser(&ctx, req, &resp);
    if (!s.ok()) return s.error_code();
    *items = resp.existed() ? 1 : 0;
    return grpc::StatusCode::OK;
  }

  grpc::StatusCode RedisFilter(uint64_t* items, Accuracy* acc) {
    const uint32_t u = PickUser();
    MakeCandidates(u, o_.exposures, o_.candidates, o_.exposed_fraction, rng_,
                   &batch_);
    keep_.resize(batch_.ids.size());
    absl::Status s = redis_->Filter(o_.surface + ":" + UserName(u), batch_.ids,
                                    keep_.data(), &scratch_);
    if (!s.ok()) return static_cast<grpc::StatusCode>(s.code());
    acc->Add(batch_, keep_.data());
    *items = batch_.ids.size();
    return grpc::StatusCode::OK;
  }

  const Options& o_;
  Phase* phase_;
  FastRng rng_;
  std::unique_ptr<v1::ExposureFilter::Stub> stub_;
  std::unique_ptr<RedisBlockListClient> redis_;
  int total_weight_ = 0;
  CandidateBatch batch_;
  std::vector<uint8_t> keep_;
  std::vector<uint64_t> scratch_;
  absl::flat_hash_map<uint32_t, CachedFilter> cache_;
  WorkerResult result_;
};

double ServerBytesPerUser(const Options& o) {
  auto stub = v1::ExposureFilter::NewStub(MakeChannel(o));
  v1::GetServerStatsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!stub->GetServerStats(&ctx, {}, &resp).ok()) return -1;
  for (const v1::SurfaceStats& s : resp.surface_stats()) {
    if (s.surface() == o.surface && s.users() > 0) {
      return static_cast<double>(s.bytes()) / s.users();
    }
  }
  return -1;
}

int Main() {
  Options o;
  o.target = absl::GetFlag(FLAGS_target);
  o.backend = absl::GetFlag(FLAGS_backend);
  o.surface = absl::GetFlag(FLAGS_surface);
  const std::string mode = absl::GetFlag(FLAGS_result_mode);
  absl::StatusOr<std::vector<MixEntry>> mix =
      ParseMix(absl::GetFlag(FLAGS_mix));
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "exposure-filter-bench: %s\n", msg.c_str());
    return 2;
  };
  if (!mix.ok()) return fail(std::string(mix.status().message()));
  o.mix = *mix;
  if (mode != "keep_mask" && mode != "kept_ids") {
    return fail("--result_mode must be keep_mask or kept_ids");
  }
  o.keep_mask = mode == "keep_mask";
  const int users = absl::GetFlag(FLAGS_users);
  const int exposures = absl::GetFlag(FLAGS_exposures_per_user);
  const int candidates = absl::GetFlag(FLAGS_candidates);
  o.exposed_fraction = absl::GetFlag(FLAGS_exposed_fraction);
  o.record_users = absl::GetFlag(FLAGS_record_users);
  o.record_items = absl::GetFlag(FLAGS_record_items);
  o.writer_users = absl::GetFlag(FLAGS_writer_users);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.inflight = absl::GetFlag(FLAGS_inflight);
  o.max_requests = absl::GetFlag(FLAGS_requests);
  if (users <= 0 || exposures < 0 || candidates <= 0 || o.threads <= 0 ||
      o.inflight <= 0 || o.record_users <= 0 || o.record_items <= 0 ||
      o.writer_users <= 0 ||
      !(o.exposed_fraction >= 0 && o.exposed_fraction <= 1) ||
      o.max_requests < 0) {
    return fail(
        "--users, --candidates, --threads, --inflight, --record_*, "
        "--writer_users must be positive, --exposures_per_user and --requests "
        ">= 0, "
        "--exposed_fraction in [0, 1]");
  }
  o.users = static_cast<uint32_t>(users);
  o.exposures = static_cast<uint32_t>(exposures);
  o.candidates = static_cast<size_t>(candidates);
  o.transport.http2_max_frame_size = absl::GetFlag(FLAGS_http2_max_frame_size);
  o.transport.tcp_read_chunk_size = absl::GetFlag(FLAGS_tcp_read_chunk_size);
  o.transport.tcp_min_read_chunk_size =
      absl::GetFlag(FLAGS_tcp_min_read_chunk_size);
  o.transport.tcp_max_read_chunk_size =
      absl::GetFlag(FLAGS_tcp_max_read_chunk_size);
  if (absl::Status s = o.transport.Validate(); !s.ok())
    return fail(std::string(s.message()));
  const bool redis = o.backend == "redis";
  if (!redis && o.backend != "grpc")
    return fail("--backend must be grpc or redis");
  if (redis) {
    for (const MixEntry& m : o.mix) {
      if (m.op != Op::kFilter)
        return fail("--backend=redis supports --mix=filter only");
    }
  }

  RunReport report;
  report.name = absl::GetFlag(FLAGS_name);
  report.backend = o.backend;
  report.target = o.target;
  report.mix = absl::GetFlag(FLAGS_mix);
  report.result_mode = mode;
  report.threads = o.threads;
  report.inflight = o.inflight;
  report.candidates = o.candidates;

  if (absl::GetFlag(FLAGS_preload) && o.exposures > 0) {
    absl::Status s = redis
                         ? PreloadRedis(o)
                         : PreloadGrpc(o, absl::GetFlag(FLAGS_preload_spread));
    if (!s.ok()) return fail(std::string(s.message()));
  }
  if (!redis) report.server_bytes_per_user = ServerBytesPerUser(o);

  const double rate = absl::GetFlag(FLAGS_rate);
  const absl::Duration report_interval = absl::GetFlag(FLAGS_report_interval);
  if (rate < 0 || report_interval < absl::ZeroDuration()) {
    return fail("--rate and --report_interval must not be negative");
  }
  const bool json = absl::GetFlag(FLAGS_json);
  Pacer pacer(rate);
  IntervalStats intervals;
  Phase phase;
  phase.pacer = &pacer;
  if (report_interval > absl::ZeroDuration()) phase.intervals = &intervals;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < o.threads; ++t) {
    std::shared_ptr<grpc::Channel> channel = redis ? nullptr : MakeChannel(o);
    for (int i = 0; i < o.inflight; ++i) {
      workers.push_back(
          std::make_unique<Worker>(o, &phase, 1000 * t + i + 1, channel));
      if (redis) {
        if (absl::Status s = workers.back()->ConnectRedis(); !s.ok()) {
          return fail(std::string(s.message()));
        }
      }
    }
  }
  std::vector<std::thread> threads;
  for (auto& w : workers) threads.emplace_back([&w] { w->Run(); });
  absl::SleepFor(absl::GetFlag(FLAGS_warmup));
  const int pid = absl::GetFlag(FLAGS_server_pid);
  const double cpu0 = ProcessCpuSeconds(pid);
  const int64_t switches0 = ProcessContextSwitches(pid);
  const Clock::time_point t0 = Clock::now();
  phase.measuring.store(true);
  const absl::Time begin = absl::Now();
  const absl::Time deadline = begin + absl::GetFlag(FLAGS_duration);
  absl::Time interval_start = begin;
  int interval_index = 0;
  // Ends the current interval: one line with what completed in it.
  auto report_interval_line = [&](absl::Time end) {
    const double len = absl::ToDoubleSeconds(end - interval_start);
    const double elapsed = absl::ToDoubleSeconds(end - begin);
    const int64_t rss = ProcessRssBytes(pid);
    IntervalStats::Snapshot snap = intervals.Take();
    const std::string line = json ? IntervalJson(++interval_index, elapsed, len,
                                                 std::move(snap), rss) +
                                        "\n"
                                  : IntervalLine(++interval_index, elapsed, len,
                                                 std::move(snap), rss);
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
    interval_start = end;
  };
  while (!phase.stop.load() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
    const absl::Time now = absl::Now();
    if (phase.intervals && now - interval_start >= report_interval) {
      report_interval_line(now);
    }
  }
  phase.measuring.store(false);
  // The last, partial interval (unless it is empty of time).
  if (phase.intervals && absl::Now() - interval_start > absl::Seconds(1)) {
    report_interval_line(absl::Now());
  }
  const Clock::time_point t1 = Clock::now();
  const double cpu1 = ProcessCpuSeconds(pid);
  const int64_t switches1 = ProcessContextSwitches(pid);
  phase.stop.store(true);
  for (std::thread& t : threads) t.join();

  report.seconds = std::chrono::duration<double>(t1 - t0).count();
  if (cpu0 >= 0 && cpu1 >= 0) report.server_cpu_seconds = cpu1 - cpu0;
  if (switches0 >= 0 && switches1 >= 0) {
    report.server_context_switches = switches1 - switches0;
  }
  for (auto& w : workers) {
    WorkerResult& r = w->result();
    report.requests += r.requests;
    report.items += r.items;
    report.not_modified += r.not_modified;
    report.accuracy.Merge(r.accuracy);
    for (const auto& [code, n] : r.errors) report.errors[code] += n;
    report.latencies_ns.insert(report.latencies_ns.end(),
                               r.latencies_ns.begin(), r.latencies_ns.end());
  }
  report.Finish();
  std::fputs((json ? report.ToJson() + "\n" : report.ToTable()).c_str(),
             stdout);
  return report.requests > 0 ? 0 : 1;
}

}  // namespace
}  // namespace exposure_filter::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "exposure-filter-bench: load generator for exposure-filter and the "
      "seed-004 Redis baseline.\nUsage: exposure-filter-bench "
      "--target=host:port "
      "--mix=filter [--json] ...");
  absl::ParseCommandLine(argc, argv);
  return exposure_filter::bench::Main();
}
