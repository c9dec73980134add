// What one load-generator run measured, and how it is printed: a human table
// or one JSON object (--json) that bench/compare.sh joins into the
// side-by-side table.
#ifndef EXPOSURE_FILTER_BENCH_LOADGEN_REPORT_H_
#define EXPOSURE_FILTER_BENCH_LOADGEN_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/loadgen/ground_truth.h"

namespace exposure_filter::bench {

struct RunReport {
  std::string name;
  std::string backend;  // grpc or redis
  std::string target;
  std::string mix;
  std::string result_mode;
  int threads = 0;
  int inflight = 0;
  size_t candidates = 0;
  double seconds = 0;
  uint64_t requests = 0;              // completed OK in the measured phase
  uint64_t items = 0;                 // candidates checked or items recorded
  std::vector<int64_t> latencies_ns;  // sorted by Finish()
  std::map<std::string, uint64_t> errors;  // by status code name
  Accuracy accuracy;
  uint64_t not_modified = 0;       // GetFilter answers served from the cache
  double server_cpu_seconds = -1;  // < 0: unknown
  // The server's threads' context switches (voluntary and not) in the
  // measured phase: how often a call's work moved between threads.
  int64_t server_context_switches = -1;  // < 0: unknown
  double server_bytes_per_user = -1;

  void Finish();
  double Percentile(double q) const;
  std::string ToJson() const;
  std::string ToTable() const;
};

// utime + stime of a local process in seconds, or < 0 if unreadable.
double ProcessCpuSeconds(int pid);
// Context switches (voluntary + involuntary) of all of a local process's
// threads alive now, or < 0 if unreadable. A thread that exited takes its
// count with it, so compare processes whose threads live for the run.
int64_t ProcessContextSwitches(int pid);
// Resident set size (VmRSS) of a local process in bytes, or < 0 if
// unreadable.
int64_t ProcessRssBytes(int pid);

}  // namespace exposure_filter::bench

#endif  // EXPOSURE_FILTER_BENCH_LOADGEN_REPORT_H_
