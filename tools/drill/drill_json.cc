#include "tools/drill/drill_json.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace exposure_filter::drill {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

std::string Strings(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const std::string& s : v) q.push_back(Quote(s));
  return absl::StrCat("[", absl::StrJoin(q, ","), "]");
}

// Nearest-rank percentile of `v` (sorted here), 0 when empty.
double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

std::string OpJson(const LoadResult& r, Op op) {
  std::vector<double> ms;
  std::map<std::string, uint64_t> failed;
  uint64_t ok = 0;
  for (const CallRecord& c : r.calls) {
    if (c.op != op) continue;
    ms.push_back(c.latency_ms);
    if (c.code == 0) {
      ++ok;
    } else {
      ++failed[absl::StatusCodeToString(static_cast<absl::StatusCode>(c.code))];
    }
  }
  std::vector<std::string> codes;
  for (const auto& [name, n] : failed) {
    codes.push_back(absl::StrCat(Quote(name), ":", n));
  }
  return absl::StrFormat(
      R"({"total":%d,"ok":%d,"failed":%d,"failed_by_code":{%s},)"
      R"("p50_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f})",
      ms.size(), ok, ms.size() - ok, absl::StrJoin(codes, ","),
      Percentile(ms, 0.5), Percentile(ms, 0.99),
      ms.empty() ? 0.0 : *std::max_element(ms.begin(), ms.end()));
}

}  // namespace

std::string LoadJson(const LoadResult& r, const RoutingStats& stats) {
  uint64_t items = 0;
  for (const AckedExposure& e : r.acked) items += e.item_ids.size();
  std::vector<double> lagging_ms;  // staleness.lag_ms of least-stale answers
  for (const CallRecord& c : r.calls) {
    if (c.lagging) lagging_ms.push_back(c.lag_ms);
  }
  return absl::StrFormat(
      R"({"write":%s,"read":%s,"failovers":%d,"hedges":%d,)"
      R"("replica_errors":[%s],"acked_exposures":%d,"acked_items":%d,)"
      R"("stale_reads":%d,"stale_items":%d,)"
      R"("lagging_reads":%d,"lagging_max_ms":%d,"lagging_p99_ms":%.0f,)"
      R"("freshness":{"samples":%d,"dropped":%d,"p50_ms":%.2f,"p99_ms":%.2f,)"
      R"("max_ms":%.2f},"read_errors":%s,"write_errors":%s})",
      OpJson(r, Op::kWrite), OpJson(r, Op::kRead), stats.failovers,
      stats.hedges, absl::StrJoin(stats.replica_errors, ","), r.acked.size(),
      items, r.stale_reads, r.stale_items, r.lagging_reads, r.lagging_max_ms,
      Percentile(lagging_ms, 0.99), r.freshness_ms.size(), r.freshness_dropped,
      Percentile(r.freshness_ms, 0.5), Percentile(r.freshness_ms, 0.99),
      r.freshness_ms.empty()
          ? 0.0
          : *std::max_element(r.freshness_ms.begin(), r.freshness_ms.end()),
      Strings(r.read_errors), Strings(r.write_errors));
}

std::string VerifyJson(const VerifyResult& r) {
  return absl::StrFormat(
      R"({"users":%d,"items":%d,"owner_checks":%d,"missing":%d,)"
      R"("unreachable":%d,"waited_s":%.2f,"examples":%s})",
      r.users, r.items, r.owner_checks, r.missing, r.unreachable, r.waited_s,
      Strings(r.examples));
}

}  // namespace exposure_filter::drill
