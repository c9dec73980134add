// failover-drill: load and check for the failover drill.
//
//   failover-drill --mode=load --route=A0,A1,A2 --partitions=12
//       --replication_factor=2 --acked_out=acked.tsv --calls_out=calls.csv
//     drives RecordExposure + FilterRecalled through the RoutingClient until
//     stdin is closed (or --duration_s), then prints a JSON summary;
//   failover-drill --mode=verify --route=... --acked_in=acked.tsv
//     checks every acknowledged exposure on every owner of its user and
//     prints a JSON summary.
// tests/e2e/test_failover.py and bench/failover_drill.sh run it while they
// kill and restart the replicas (drill_load.h, drill_verify.h).
#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tools/drill/drill_json.h"
#include "tools/drill/drill_load.h"
#include "tools/drill/drill_verify.h"

ABSL_FLAG(std::string, mode, "load", "load or verify");
ABSL_FLAG(std::vector<std::string>, route, {},
          "replica addresses in ordinal order (comma-separated)");
ABSL_FLAG(int, partitions, 12, "the servers' --partitions");
ABSL_FLAG(int, replication_factor, 2, "the servers' --replication_factor");
ABSL_FLAG(int, threads, 4, "load: concurrent callers");
ABSL_FLAG(int, users, 2000, "load: users written and read");
ABSL_FLAG(double, write_fraction, 0.4, "load: share of RecordExposure calls");
ABSL_FLAG(int, deadline_ms, 1000, "load: deadline of a whole routed call");
ABSL_FLAG(int, per_try_timeout_ms, 250, "load: one owner's try at most");
ABSL_FLAG(int, max_attempts, 1,
          "load: gRPC attempts on the same replica inside one try");
ABSL_FLAG(int, stale_after_ms, 2000,
          "load: a read missing an item acknowledged this long ago is stale");
ABSL_FLAG(double, duration_s, 0, "load: run this long (0: until stdin EOF)");
ABSL_FLAG(uint64_t, seed, 1, "load: random seed");
ABSL_FLAG(std::string, acked_out, "", "load: acknowledged exposures (TSV)");
ABSL_FLAG(std::string, calls_out, "",
          "load: every call (CSV start_ns,op,latency_ms,code,stale,lagging,"
          "lag_ms,partition)");
ABSL_FLAG(std::string, samples_out, "",
          "load: client counters every 100 ms (CSV)");
ABSL_FLAG(std::string, acked_in, "", "verify: acknowledged exposures (TSV)");
ABSL_FLAG(double, catch_up_s, 60, "verify: how long copies may catch up");

namespace {

using exposure_filter::drill::AckedExposure;
using exposure_filter::drill::LoadResult;

bool WriteAcked(const std::string& path, const std::vector<AckedExposure>& a) {
  std::ofstream out(path);
  for (const AckedExposure& e : a) {
    out << e.user_id << '\t' << absl::StrJoin(e.item_ids, ",") << '\n';
  }
  return out.good();
}

bool ReadAcked(const std::string& path, std::vector<AckedExposure>* a) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    if (cols.size() != 2) return false;
    AckedExposure& e = a->emplace_back();
    e.user_id = cols[0];
    for (absl::string_view id : absl::StrSplit(cols[1], ',')) {
      uint64_t v = 0;
      if (!absl::SimpleAtoi(id, &v)) return false;
      e.item_ids.push_back(v);
    }
  }
  return true;
}

int Load(const std::vector<std::string>& route) {
  exposure_filter::drill::LoadOptions o;
  o.routing.partitions = absl::GetFlag(FLAGS_partitions);
  o.routing.replica_addresses = route;
  o.routing.replication_factor = absl::GetFlag(FLAGS_replication_factor);
  o.routing.failover.per_try_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_per_try_timeout_ms));
  o.routing.client.deadline =
      absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms));
  o.routing.client.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.users = absl::GetFlag(FLAGS_users);
  o.write_fraction = absl::GetFlag(FLAGS_write_fraction);
  o.stale_after = absl::Milliseconds(absl::GetFlag(FLAGS_stale_after_ms));
  o.seed = absl::GetFlag(FLAGS_seed);

  std::atomic<bool> stop{false};
  const double duration = absl::GetFlag(FLAGS_duration_s);
  std::thread stopper([&stop, duration] {
    if (duration > 0) {
      absl::SleepFor(absl::Seconds(duration));
    } else {
      while (std::fgetc(stdin) != EOF) {
      }
    }
    stop = true;
  });
  LoadResult result;
  std::vector<exposure_filter::drill::StatsSample> samples;
  const absl::Status s = RunLoad(o, stop, &result, &samples);
  stop = true;
  stopper.join();
  if (!s.ok()) {
    std::fprintf(stderr, "failover-drill: %s\n", s.ToString().c_str());
    return 2;
  }
  if (!absl::GetFlag(FLAGS_acked_out).empty() &&
      !WriteAcked(absl::GetFlag(FLAGS_acked_out), result.acked)) {
    std::fprintf(stderr, "failover-drill: cannot write --acked_out\n");
    return 2;
  }
  if (!absl::GetFlag(FLAGS_calls_out).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_calls_out));
    out << "start_ns,op,latency_ms,code,stale,lagging,lag_ms,partition\n";
    for (const auto& c : result.calls) {
      out << c.start_ns << ','
          << (c.op == exposure_filter::drill::Op::kRead ? "read" : "write")
          << ',' << c.latency_ms << ',' << static_cast<int>(c.code) << ','
          << (c.stale ? 1 : 0) << ',' << (c.lagging ? 1 : 0) << ',' << c.lag_ms
          << ',' << c.partition << '\n';
    }
  }
  if (!absl::GetFlag(FLAGS_samples_out).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_samples_out));
    out << "t_ns,failovers,hedges,replica_errors\n";
    for (const auto& smp : samples) {
      out << smp.t_ns << ',' << smp.stats.failovers << ',' << smp.stats.hedges
          << ',' << absl::StrJoin(smp.stats.replica_errors, ";") << '\n';
    }
  }
  std::printf("%s\n",
              exposure_filter::drill::LoadJson(
                  result, samples.empty() ? exposure_filter::RoutingStats{}
                                          : samples.back().stats)
                  .c_str());
  return 0;
}

int Verify(const std::vector<std::string>& route) {
  std::vector<AckedExposure> acked;
  if (!ReadAcked(absl::GetFlag(FLAGS_acked_in), &acked)) {
    std::fprintf(stderr, "failover-drill: cannot read --acked_in %s\n",
                 absl::GetFlag(FLAGS_acked_in).c_str());
    return 2;
  }
  exposure_filter::drill::VerifyOptions o;
  o.partitions = absl::GetFlag(FLAGS_partitions);
  o.replication_factor = absl::GetFlag(FLAGS_replication_factor);
  o.replica_addresses = route;
  o.catch_up = absl::Seconds(absl::GetFlag(FLAGS_catch_up_s));
  const auto r = exposure_filter::drill::VerifyAcked(o, acked);
  std::printf("%s\n", exposure_filter::drill::VerifyJson(r).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> route = absl::GetFlag(FLAGS_route);
  if (route.empty()) {
    std::fprintf(stderr,
                 "failover-drill: --route: give the replica addresses\n");
    return 2;
  }
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "load") return Load(route);
  if (mode == "verify") return Verify(route);
  std::fprintf(stderr, "failover-drill: --mode: \"%s\" is not load or verify\n",
               mode.c_str());
  return 2;
}
