#include "bench/loadgen/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace exposure_filter::bench {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string Num(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

}  // namespace

void RunReport::Finish() {
  std::sort(latencies_ns.begin(), latencies_ns.end());
}

double RunReport::Percentile(double q) const {
  if (latencies_ns.empty()) return NAN;
  const size_t i = std::min(latencies_ns.size() - 1,
                            static_cast<size_t>(q * latencies_ns.size()));
  return latencies_ns[i] / 1e3;  // microseconds
}

std::string RunReport::ToJson() const {
  const double rps = seconds > 0 ? requests / seconds : 0;
  std::string errs;
  for (const auto& [code, n] : errors) {
    absl::StrAppend(&errs, errs.empty() ? "" : ",", JsonString(code), ":", n);
  }
  const double cpu_us = server_cpu_seconds >= 0 && requests > 0
                            ? server_cpu_seconds * 1e6 / requests
                            : NAN;
  return absl::StrCat(
      "{\"name\":", JsonString(name), ",\"backend\":", JsonString(backend),
      ",\"target\":", JsonString(target), ",\"mix\":", JsonString(mix),
      ",\"result_mode\":", JsonString(result_mode), ",\"threads\":", threads,
      ",\"inflight\":", inflight, ",\"candidates\":", candidates,
      ",\"seconds\":", Num(seconds), ",\"requests\":", requests,
      ",\"requests_per_s\":", Num(rps),
      ",\"items_per_s\":", Num(seconds > 0 ? items / seconds : 0),
      ",\"latency_us\":{\"p50\":", Num(Percentile(0.5)),
      ",\"p90\":", Num(Percentile(0.9)), ",\"p99\":", Num(Percentile(0.99)),
      ",\"p999\":", Num(Percentile(0.999)), "},\"errors\":{", errs, "}",
      ",\"fresh_checked\":", accuracy.fresh,
      ",\"false_positives\":", accuracy.false_positives, ",\"fp_rate\":",
      Num(accuracy.fresh ? double(accuracy.false_positives) / accuracy.fresh
                         : NAN),
      ",\"exposed_checked\":", accuracy.exposed,
      ",\"false_negatives\":", accuracy.false_negatives,
      ",\"not_modified\":", not_modified,
      ",\"server_cpu_us_per_request\":", Num(cpu_us),
      ",\"server_context_switches_per_request\":",
      Num(server_context_switches >= 0 && requests > 0
              ? static_cast<double>(server_context_switches) / requests
              : NAN),
      ",\"server_bytes_per_user\":",
      Num(server_bytes_per_user >= 0 ? server_bytes_per_user : NAN), "}");
}

std::string RunReport::ToTable() const {
  std::ostringstream o;
  const double rps = seconds > 0 ? requests / seconds : 0;
  o << absl::StrFormat(
      "%-22s %s (%s) mix=%s mode=%s threads=%d x inflight=%d\n", name, target,
      backend, mix, result_mode, threads, inflight);
  o << absl::StrFormat(
      "  requests     %10llu in %.2f s  = %.0f req/s, %.0f items/s\n",
      static_cast<unsigned long long>(requests), seconds, rps,
      seconds > 0 ? items / seconds : 0);
  o << absl::StrFormat(
      "  latency us   p50 %.0f  p90 %.0f  p99 %.0f  p999 %.0f\n",
      Percentile(0.5), Percentile(0.9), Percentile(0.99), Percentile(0.999));
  if (accuracy.fresh + accuracy.exposed > 0) {
    o << absl::StrFormat(
        "  accuracy     fp %llu / %llu fresh (%.4f%%), fn %llu / %llu "
        "exposed\n",
        static_cast<unsigned long long>(accuracy.false_positives),
        static_cast<unsigned long long>(accuracy.fresh),
        accuracy.fresh ? 100.0 * accuracy.false_positives / accuracy.fresh
                       : 0.0,
        static_cast<unsigned long long>(accuracy.false_negatives),
        static_cast<unsigned long long>(accuracy.exposed));
  }
  if (not_modified > 0) {
    o << "  not_modified " << not_modified << " (cached filter revalidated)\n";
  }
  if (server_cpu_seconds >= 0 && requests > 0) {
    o << absl::StrFormat("  server CPU   %.1f us/request\n",
                         server_cpu_seconds * 1e6 / requests);
  }
  if (server_context_switches >= 0 && requests > 0) {
    o << absl::StrFormat("  server ctxsw %.2f context switches/request\n",
                         static_cast<double>(server_context_switches) /
                             static_cast<double>(requests));
  }
  if (server_bytes_per_user >= 0) {
    o << absl::StrFormat("  server bytes %.0f per user (all-in)\n",
                         server_bytes_per_user);
  }
  for (const auto& [code, n] : errors)
    o << "  error " << code << ": " << n << "\n";
  return o.str();
}

double ProcessCpuSeconds(int pid) {
  if (pid <= 0) return -1;
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return -1;
  // Fields after the parenthesised command name; utime and stime are fields
  // 14 and 15 (1-based), i.e. 12 and 13 after the name.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> f =
      absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
  if (f.size() < 13) return -1;
  const double ticks = std::stod(f[11]) + std::stod(f[12]);
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int64_t ProcessContextSwitches(int pid) {
  if (pid <= 0) return -1;
  std::error_code ec;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  int64_t total = 0;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream in(task.path() / "status");
    for (std::string line; std::getline(in, line);) {
      if (line.find("ctxt_switches:") == std::string::npos) continue;
      std::vector<std::string> f =
          absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      int64_t n = 0;
      if (f.size() >= 2 && absl::SimpleAtoi(f.back(), &n)) total += n;
    }
  }
  return ec ? -1 : total;
}

int64_t ProcessRssBytes(int pid) {
  if (pid <= 0) return -1;
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::vector<std::string> f =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t kb = 0;
    if (f.size() >= 2 && absl::SimpleAtoi(f[1], &kb)) return kb * 1024;
  }
  return -1;
}

}  // namespace exposure_filter::bench
