// replica-drill: checks through a RoutingFilterReplica (mode B+ with
// failover) while writes go on, for the replica kill drill
// (tests/e2e/test_replica_failover.py):
//
//   replica-drill --route=A0,A1,A2 --partitions=12 --replication_factor=2
//       --owner0=0 --bound_ms=2500
//
// Users are those whose owner 0 is --owner0, so every subscription of the
// client is on that replica's stream. Writer threads record exposures
// through the RoutingClient and note when each was acknowledged; checker
// threads check each user's acknowledged items (and never-written ones)
// through the replica. A line "mark" on stdin notes the moment (the harness
// writes it just before it kill -9s the owner) with the replica's counters;
// EOF stops the run and prints a JSON summary:
//  - checks: total, failed (any error), local / routed, and after the mark;
//  - misses: an acknowledged item kept by a check that started more than
//    --bound_ms after the acknowledgement (a silent miss); kept ones inside
//    the bound are counted apart (allowed: not applied by the copy yet);
//  - false positives: never-written items removed (Bloom FP, counted only).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "exposure_filter/partitioning.h"
#include "exposure_filter/routing_client.h"
#include "exposure_filter/routing_filter_replica.h"

ABSL_FLAG(std::vector<std::string>, route, {},
          "replica addresses in ordinal order (comma-separated)");
ABSL_FLAG(int, partitions, 12, "the servers' --partitions");
ABSL_FLAG(int, replication_factor, 2, "the servers' --replication_factor");
ABSL_FLAG(int, owner0, 0, "only users whose owner 0 is this replica");
ABSL_FLAG(int, users, 64, "users written and checked");
ABSL_FLAG(int, writers, 1, "writer threads");
ABSL_FLAG(int, checkers, 2, "checker threads");
ABSL_FLAG(int, bound_ms, 2500,
          "an item acknowledged this long before a check must be removed "
          "(the servers' --max_serving_lag + the replica's max_staleness + "
          "the lag's sampling and a fetch)");
ABSL_FLAG(int, deadline_ms, 3000, "a routed call's deadline, every owner");
ABSL_FLAG(int, per_try_timeout_ms, 1000, "one owner's try at most");
ABSL_FLAG(int, max_staleness_ms, 100, "the replica's max_staleness");
ABSL_FLAG(int, check_pause_us, 200,
          "a checker's pause between checks (the machine is shared: a "
          "recall server checks a user per request, not in a spin)");

namespace {

using exposure_filter::CheckPath;
using exposure_filter::RoutingClient;
using exposure_filter::RoutingFilterReplica;

constexpr size_t kErrorsKept = 10;
// Candidates per check: the user's newest acknowledged items, and items
// never written (their tag keeps them apart from written ones).
constexpr size_t kAckedPerCheck = 48;
constexpr int kFreshPerCheck = 16;
constexpr uint64_t kWrittenTag = 1ULL << 56;
constexpr uint64_t kFreshTag = 2ULL << 56;

struct Acked {
  uint64_t item;
  absl::Time at;  // acknowledged (steady clock)
};

struct User {
  std::string id;
  absl::Mutex mu;
  std::vector<Acked> acked ABSL_GUARDED_BY(mu);
};

absl::Time Steady() {
  return absl::UnixEpoch() +
         absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

struct Counts {
  std::atomic<uint64_t> checks{0}, failed{0}, local{0}, routed{0};
  std::atomic<uint64_t> checks_after_mark{0}, failed_after_mark{0},
      local_after_mark{0}, local_on_next_owner{0};
  std::atomic<uint64_t> misses{0}, in_bound_kept{0}, false_positives{0};
  std::atomic<uint64_t> writes_acked{0}, writes_failed{0};
  absl::Mutex mu;
  std::vector<std::string> errors ABSL_GUARDED_BY(mu);
  void Keep(std::string e) {
    absl::MutexLock lock(&mu);
    if (errors.size() < kErrorsKept) errors.push_back(std::move(e));
  }
};

void Write(const RoutingClient& router,
           std::vector<std::unique_ptr<User>>& users, int index,
           const std::atomic<bool>& stop, Counts* n) {
  std::mt19937_64 rng(index + 1);
  uint64_t next = 0;
  while (!stop.load()) {
    User& u = *users[rng() % users.size()];
    exposure::v1::RecordExposureRequest req;
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(u.id);
    const uint64_t item = kWrittenTag | (uint64_t{1} * index << 40) | next++;
    e->add_item_ids(item);
    const exposure_filter::RoutedRecordResult r = router.RecordExposure(req);
    if (!r.status().ok()) {
      n->writes_failed++;  // not acknowledged: the caller resends, not a loss
      continue;
    }
    n->writes_acked++;
    absl::MutexLock lock(&u.mu);
    u.acked.push_back({item, Steady()});
  }
}

void Check(RoutingFilterReplica& replica,
           std::vector<std::unique_ptr<User>>& users, int index, int32_t owner0,
           absl::Duration bound, absl::Duration pause,
           const std::atomic<bool>& stop, const std::atomic<bool>& marked,
           Counts* n) {
  std::mt19937_64 rng(1000 + index);
  uint64_t fresh = 0;
  std::vector<uint64_t> ids;
  std::vector<absl::Time> acked_at;
  std::vector<uint8_t> keep;
  while (!stop.load()) {
    absl::SleepFor(pause);
    User& u = *users[rng() % users.size()];
    ids.clear();
    acked_at.clear();
    const absl::Time start = Steady();
    {
      absl::MutexLock lock(&u.mu);
      const size_t from =
          u.acked.size() > kAckedPerCheck ? u.acked.size() - kAckedPerCheck : 0;
      for (size_t i = from; i < u.acked.size(); ++i) {
        ids.push_back(u.acked[i].item);
        acked_at.push_back(u.acked[i].at);
      }
    }
    const size_t written = ids.size();
    for (int i = 0; i < kFreshPerCheck; ++i) {
      ids.push_back(kFreshTag | (uint64_t{1} * index << 40) | fresh++);
    }
    keep.assign(ids.size(), 1);
    CheckPath path = CheckPath::kUnary;
    const bool after = marked.load();
    int32_t served_by = -1;
    const absl::Status s =
        replica.Check("", u.id, ids, {}, keep.data(), &path, &served_by);
    n->checks++;
    if (after) n->checks_after_mark++;
    if (!s.ok()) {
      n->failed++;
      if (after) n->failed_after_mark++;
      n->Keep(absl::StrCat(u.id, ": ", s.ToString()));
      continue;
    }
    if (path == CheckPath::kLocal) {
      n->local++;
      if (after) n->local_after_mark++;
      if (served_by != owner0) n->local_on_next_owner++;
    } else {
      n->routed++;
    }
    for (size_t i = 0; i < written; ++i) {
      if (!keep[i]) continue;
      if (acked_at[i] + bound < start) {
        n->misses++;
        n->Keep(absl::StrCat(u.id, ": item ", ids[i], " acknowledged ",
                             absl::FormatDuration(start - acked_at[i]),
                             " before the check was kept (",
                             path == CheckPath::kLocal ? "local" : "routed",
                             ")"));
      } else {
        n->in_bound_kept++;
      }
    }
    for (size_t i = written; i < ids.size(); ++i) {
      if (!keep[i]) n->false_positives++;
    }
  }
}

std::string StatsJson(const exposure_filter::RoutingReplicaStats& s) {
  std::vector<std::string> held;
  std::vector<std::string> reconnects;
  for (const auto& r : s.replicas) {
    held.push_back(absl::StrCat(r.users_held));
    reconnects.push_back(absl::StrCat(r.reconnects));
  }
  return absl::StrCat(
      "{\"local_checks\":", s.local_checks,
      ",\"routed_checks\":", s.routed_checks,
      ",\"failed_checks\":", s.failed_checks, ",\"moves\":", s.moves,
      ",\"no_owner_serving\":", s.no_owner_serving, ",\"users_held\":[",
      absl::StrJoin(held, ","), "],\"reconnects\":[",
      absl::StrJoin(reconnects, ","), "]}");
}

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' ? ' ' : c);
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  exposure_filter::RoutingOptions o;
  o.partitions = absl::GetFlag(FLAGS_partitions);
  o.replica_addresses = absl::GetFlag(FLAGS_route);
  o.replication_factor = absl::GetFlag(FLAGS_replication_factor);
  o.failover.per_try_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_per_try_timeout_ms));
  o.client.deadline = absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms));
  // One attempt per try: a dead owner moves to the next one at once.
  o.client.max_attempts = 1;
  auto router = RoutingClient::Connect(o, grpc::InsecureChannelCredentials());
  if (!router.ok()) {
    std::fprintf(stderr, "replica-drill: %s\n",
                 router.status().ToString().c_str());
    return 2;
  }
  exposure_filter::FilterReplicaOptions ro;
  ro.max_staleness = absl::Milliseconds(absl::GetFlag(FLAGS_max_staleness_ms));
  ro.ping_interval = ro.max_staleness / 5;
  ro.deadline = absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms));
  auto replica = RoutingFilterReplica::Create(router->get(), ro);
  if (!replica.ok()) {
    std::fprintf(stderr, "replica-drill: %s\n",
                 replica.status().ToString().c_str());
    return 2;
  }
  std::vector<std::unique_ptr<User>> users;
  for (int i = 0; static_cast<int>(users.size()) < absl::GetFlag(FLAGS_users);
       ++i) {
    std::string id = absl::StrCat("kill-", i);
    if ((*router)->ReplicaForUser(id) != absl::GetFlag(FLAGS_owner0)) continue;
    users.push_back(std::make_unique<User>());
    users.back()->id = std::move(id);
  }

  std::atomic<bool> stop{false};
  std::atomic<bool> marked{false};
  Counts n;
  std::vector<std::thread> threads;
  for (int w = 0; w < absl::GetFlag(FLAGS_writers); ++w) {
    threads.emplace_back([&, w] { Write(**router, users, w, stop, &n); });
  }
  const absl::Duration bound =
      absl::Milliseconds(absl::GetFlag(FLAGS_bound_ms));
  for (int c = 0; c < absl::GetFlag(FLAGS_checkers); ++c) {
    threads.emplace_back([&, c] {
      Check(**replica, users, c, absl::GetFlag(FLAGS_owner0), bound,
            absl::Microseconds(absl::GetFlag(FLAGS_check_pause_us)), stop,
            marked, &n);
    });
  }
  std::string at_mark = "null";
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "mark" && !marked.load()) {
      at_mark = StatsJson((*replica)->stats());
      marked = true;
      std::printf("marked\n");
      std::fflush(stdout);
    }
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  std::vector<std::string> errors;
  {
    absl::MutexLock lock(&n.mu);
    for (const std::string& e : n.errors) errors.push_back(Quoted(e));
  }
  std::printf(
      "%s\n",
      absl::StrCat("{\"users\":", users.size(), ",\"checks\":", n.checks.load(),
                   ",\"failed\":", n.failed.load(), ",\"local\":",
                   n.local.load(), ",\"routed\":", n.routed.load(),
                   ",\"checks_after_mark\":", n.checks_after_mark.load(),
                   ",\"failed_after_mark\":", n.failed_after_mark.load(),
                   ",\"local_after_mark\":", n.local_after_mark.load(),
                   ",\"local_on_next_owner\":", n.local_on_next_owner.load(),
                   ",\"misses\":", n.misses.load(),
                   ",\"in_bound_kept\":", n.in_bound_kept.load(),
                   ",\"false_positives\":", n.false_positives.load(),
                   ",\"writes_acked\":", n.writes_acked.load(),
                   ",\"writes_failed\":", n.writes_failed.load(),
                   ",\"at_mark\":", at_mark,
                   ",\"replica\":", StatsJson((*replica)->stats()),
                   ",\"errors\":[", absl::StrJoin(errors, ","), "]}")
          .c_str());
  return 0;
}
