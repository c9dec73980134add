#include "bench/loadgen/interval_stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace exposure_filter::bench {
namespace {

// Microseconds at quantile q of unsorted latencies (sorted in place); NaN
// when the interval completed nothing.
double PercentileUs(std::vector<int64_t>& ns, double q) {
  if (ns.empty()) return NAN;
  const size_t i = std::min(ns.size() - 1, static_cast<size_t>(q * ns.size()));
  std::nth_element(ns.begin(), ns.begin() + i, ns.end());
  return ns[i] / 1e3;
}

std::string Num(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

}  // namespace

std::string IntervalJson(int index, double elapsed_s, double seconds,
                         IntervalStats::Snapshot s, int64_t server_rss_bytes) {
  std::string errs;
  for (const auto& [code, n] : s.errors) {
    absl::StrAppend(&errs, errs.empty() ? "" : ",", "\"", code, "\":", n);
  }
  const double p50 = PercentileUs(s.latencies_ns, 0.5);
  const double p99 = PercentileUs(s.latencies_ns, 0.99);
  return absl::StrCat(
      "{\"interval\":", index, ",\"unix_s\":",
      absl::StrFormat("%.3f",
                      absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())),
      ",\"elapsed_s\":", Num(elapsed_s), ",\"seconds\":", Num(seconds),
      ",\"requests\":", s.requests,
      ",\"requests_per_s\":", Num(seconds > 0 ? s.requests / seconds : 0),
      ",\"p50_us\":", Num(p50), ",\"p99_us\":", Num(p99), ",\"errors\":{", errs,
      "}", ",\"server_rss_bytes\":",
      server_rss_bytes >= 0 ? absl::StrCat(server_rss_bytes) : "null", "}");
}

std::string IntervalLine(int index, double elapsed_s, double seconds,
                         IntervalStats::Snapshot s, int64_t server_rss_bytes) {
  std::string errs;
  for (const auto& [code, n] : s.errors) {
    absl::StrAppend(&errs, " ", code, "=", n);
  }
  const double p50 = PercentileUs(s.latencies_ns, 0.5);
  const double p99 = PercentileUs(s.latencies_ns, 0.99);
  return absl::StrFormat(
      "  [%3d] t=%6.0fs %8.0f req/s  p50 %6.0f us  p99 %7.0f us  rss %s  "
      "errors:%s\n",
      index, elapsed_s, seconds > 0 ? s.requests / seconds : 0, p50, p99,
      server_rss_bytes >= 0
          ? absl::StrFormat("%.1f MiB", server_rss_bytes / 1048576.0)
          : std::string("?"),
      errs.empty() ? " none" : errs);
}

}  // namespace exposure_filter::bench
