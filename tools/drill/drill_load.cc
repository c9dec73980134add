#include "tools/drill/drill_load.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace exposure_filter::drill {
namespace {

using exposure::v1::FilterRecalledRequest;
using exposure::v1::RecordExposureRequest;

constexpr size_t kErrorsKept = 20;
// Item ids: the top byte says who made them, so load items, never-written
// candidates and probe items can never collide (the rest is a counter).
constexpr uint64_t kLoadItemTag = 0x01ULL << 56;   // | thread << 48 | n
constexpr uint64_t kFreshItemTag = 0x02ULL << 56;  // | thread << 48 | n
constexpr uint64_t kProbeItemTag = 0x03ULL << 56;  // | n
constexpr int kProbeUsers = 64;

int64_t MonotonicNs() {
  // libstdc++'s steady_clock is CLOCK_MONOTONIC, as is Python's
  // time.monotonic(): the harness's event times and these line up.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string UserName(int u) { return absl::StrCat("drill-", u); }

void KeepError(std::vector<std::string>* errors, std::string text) {
  if (errors->size() < kErrorsKept) errors->push_back(std::move(text));
}

// One worker: its own users, their acknowledged items, its own results.
class Worker {
 public:
  Worker(const LoadOptions& options, const RoutingClient* router, int index)
      : options_(options),
        router_(router),
        index_(index),
        rng_(options.seed * 7919 + index) {
    for (int u = index; u < options.users; u += options.threads) {
      users_.push_back(u);
    }
    history_.resize(users_.size());
  }

  void Run(const std::atomic<bool>& stop) {
    if (users_.empty()) return;
    std::bernoulli_distribution write(options_.write_fraction);
    while (!stop.load(std::memory_order_relaxed)) {
      if (write(rng_)) {
        Write();
      } else {
        Read();
      }
    }
  }

  LoadResult& result() { return result_; }

 private:
  struct Acked {
    uint64_t item;
    absl::Time at;
  };

  size_t PickUser() {
    return std::uniform_int_distribution<size_t>(0, users_.size() - 1)(rng_);
  }

  void Write() {
    RecordExposureRequest request;
    std::vector<size_t> local;  // request.exposures(i)'s local user
    std::uniform_int_distribution<int> items(options_.min_items,
                                             options_.max_items);
    for (int i = 0; i < options_.users_per_write; ++i) {
      const size_t l = PickUser();
      local.push_back(l);
      exposure::v1::Exposure* e = request.add_exposures();
      e->set_user_id(UserName(users_[l]));
      for (int k = items(rng_); k > 0; --k) {
        e->add_item_ids(kLoadItemTag |
                        uint64_t{static_cast<uint32_t>(index_)} << 48 |
                        next_item_++);
      }
    }
    const int64_t start = MonotonicNs();
    const RoutedRecordResult r = router_->RecordExposure(request);
    const float ms = static_cast<float>(MonotonicNs() - start) / 1e6f;
    const absl::Time now = absl::Now();
    absl::StatusCode code = absl::StatusCode::kOk;
    for (const OwnerWrite& w : r.owners) {
      if (!w.status.ok()) {
        code = w.status.code();
        KeepError(&result_.write_errors, w.status.ToString());
        continue;  // not acknowledged: not ours to check afterwards
      }
      for (int i : w.exposures) {
        const exposure::v1::Exposure& e = request.exposures(i);
        result_.acked.push_back(
            {e.user_id(), {e.item_ids().begin(), e.item_ids().end()}});
        for (uint64_t item : e.item_ids()) {
          history_[local[i]].push_back({item, now});
        }
      }
    }
    result_.calls.push_back(
        {start, ms, Op::kWrite, static_cast<uint8_t>(code), false});
  }

  void Read() {
    const size_t l = PickUser();
    FilterRecalledRequest request;
    request.set_user_id(UserName(users_[l]));
    // Old acknowledged items: every copy should have applied them by now.
    const absl::Time old = absl::Now() - options_.stale_after;
    const std::vector<Acked>& h = history_[l];
    const size_t old_count =
        std::partition_point(h.begin(), h.end(),
                             [old](const Acked& a) { return a.at <= old; }) -
        h.begin();
    absl::flat_hash_set<uint64_t> expected_gone;
    for (int i = 0; i < options_.acked_per_read && old_count > 0; ++i) {
      const uint64_t item =
          h[std::uniform_int_distribution<size_t>(0, old_count - 1)(rng_)].item;
      if (expected_gone.insert(item).second) request.add_candidate_ids(item);
    }
    for (int i = 0; i < options_.fresh_per_read; ++i) {
      request.add_candidate_ids(kFreshItemTag |
                                uint64_t{static_cast<uint32_t>(index_)} << 48 |
                                next_fresh_++);
    }
    const int64_t start = MonotonicNs();
    const auto response = router_->FilterRecalled(request);
    const float ms = static_cast<float>(MonotonicNs() - start) / 1e6f;
    CallRecord& call = result_.calls.emplace_back(
        CallRecord{start, ms, Op::kRead,
                   static_cast<uint8_t>(response.status().code()), false});
    if (!response.ok()) {
      KeepError(
          &result_.read_errors,
          absl::StrCat(request.user_id(), ": ", response.status().ToString()));
      return;
    }
    if (response->has_staleness()) {
      call.lag_ms = static_cast<int32_t>(response->staleness().lag_ms());
      call.partition = static_cast<int32_t>(response->staleness().partition());
    }
    if (response->staleness().lagging()) {
      call.lagging = true;
      ++result_.lagging_reads;
      result_.lagging_max_ms =
          std::max(result_.lagging_max_ms,
                   static_cast<int64_t>(response->staleness().lag_ms()));
    }
    uint64_t missed = 0;
    for (uint64_t kept : response->kept_ids())
      missed += expected_gone.count(kept);
    if (missed > 0) {
      call.stale = true;
      ++result_.stale_reads;
      result_.stale_items += missed;
    }
  }

  const LoadOptions& options_;
  const RoutingClient* const router_;
  const int index_;
  std::mt19937_64 rng_;
  std::vector<int> users_;
  std::vector<std::vector<Acked>> history_;  // by local user, ack order
  uint64_t next_item_ = 0;
  uint64_t next_fresh_ = 0;
  LoadResult result_;
};

// Freshness: a probe write through the router, then every owner polled
// directly until the item is filtered there.
class FreshnessProbe {
 public:
  FreshnessProbe(const LoadOptions& options, const RoutingClient* router,
                 std::vector<std::unique_ptr<ExposureFilterClient>> direct)
      : options_(options), router_(router), direct_(std::move(direct)) {}

  void Run(const std::atomic<bool>& stop) {
    for (uint64_t n = 0; !stop.load(std::memory_order_relaxed); ++n) {
      const absl::Time next = absl::Now() + options_.freshness_interval;
      Sample(n, stop);
      absl::SleepFor(std::max(absl::ZeroDuration(), next - absl::Now()));
    }
  }

  LoadResult& result() { return result_; }

 private:
  void Sample(uint64_t n, const std::atomic<bool>& stop) {
    const std::string user = absl::StrCat("probe-", n % kProbeUsers);
    const uint64_t item = kProbeItemTag | n;
    RecordExposureRequest request;
    exposure::v1::Exposure* e = request.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(item);
    const RoutedRecordResult r = router_->RecordExposure(request);
    if (!r.status().ok()) {
      ++result_.freshness_dropped;
      return;
    }
    const absl::Time acked = absl::Now();
    result_.acked.push_back({user, {item}});
    for (int32_t owner : router_->OwnersForUser(user)) {
      while (true) {
        if (stop.load(std::memory_order_relaxed) ||
            absl::Now() - acked > options_.probe_give_up) {
          ++result_.freshness_dropped;
          return;
        }
        FilterRecalledRequest f;
        f.set_user_id(user);
        f.add_candidate_ids(item);
        const auto out = direct_[owner]->FilterRecalled(f);
        if (!out.ok()) {  // the owner is down: this sample measures nothing
          ++result_.freshness_dropped;
          return;
        }
        if (out->kept_ids_size() == 0) break;
        absl::SleepFor(absl::Microseconds(500));
      }
    }
    result_.freshness_ms.push_back(
        absl::ToDoubleMilliseconds(absl::Now() - acked));
  }

  const LoadOptions& options_;
  const RoutingClient* const router_;
  std::vector<std::unique_ptr<ExposureFilterClient>> direct_;
  LoadResult result_;
};

void Merge(LoadResult&& from, LoadResult* to) {
  to->calls.insert(to->calls.end(), from.calls.begin(), from.calls.end());
  std::move(from.acked.begin(), from.acked.end(),
            std::back_inserter(to->acked));
  to->stale_reads += from.stale_reads;
  to->lagging_reads += from.lagging_reads;
  to->lagging_max_ms = std::max(to->lagging_max_ms, from.lagging_max_ms);
  to->stale_items += from.stale_items;
  for (auto& e : from.read_errors) KeepError(&to->read_errors, std::move(e));
  for (auto& e : from.write_errors) KeepError(&to->write_errors, std::move(e));
  to->freshness_ms.insert(to->freshness_ms.end(), from.freshness_ms.begin(),
                          from.freshness_ms.end());
  to->freshness_dropped += from.freshness_dropped;
}

}  // namespace

absl::Status RunLoad(const LoadOptions& options, const std::atomic<bool>& stop,
                     LoadResult* result, std::vector<StatsSample>* samples) {
  auto router = RoutingClient::Connect(options.routing,
                                       grpc::InsecureChannelCredentials());
  if (!router.ok()) return router.status();
  ClientOptions probe_client;
  probe_client.deadline = options.probe_deadline;
  probe_client.max_attempts = 1;
  std::vector<std::unique_ptr<ExposureFilterClient>> direct;
  for (const std::string& address : options.routing.replica_addresses) {
    auto c = ExposureFilterClient::Connect(
        address, grpc::InsecureChannelCredentials(), probe_client);
    if (!c.ok()) return c.status();
    direct.push_back(*std::move(c));
  }

  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < options.threads; ++t) {
    workers.push_back(std::make_unique<Worker>(options, router->get(), t));
  }
  FreshnessProbe probe(options, router->get(), std::move(direct));
  std::vector<std::thread> threads;
  for (auto& w : workers) {
    threads.emplace_back([&w, &stop] { w->Run(stop); });
  }
  threads.emplace_back([&probe, &stop] { probe.Run(stop); });
  while (!stop.load()) {
    samples->push_back({MonotonicNs(), (*router)->stats()});
    absl::SleepFor(absl::Milliseconds(100));
  }
  for (std::thread& t : threads) t.join();
  samples->push_back({MonotonicNs(), (*router)->stats()});
  for (auto& w : workers) Merge(std::move(w->result()), result);
  Merge(std::move(probe.result()), result);
  return absl::OkStatus();
}

}  // namespace exposure_filter::drill
