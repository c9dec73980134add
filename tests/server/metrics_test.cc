// Building blocks of the metrics: striped counters and histograms, the
// /proc/<pid>/stat parser, the log rate limiter, and the gRPC method table.
#include <prometheus/metric_family.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "gtest/gtest.h"
#include "src/base/log_rate_limiter.h"
#include "src/server/observability/grpc_server_metrics.h"
#include "src/server/observability/process_metrics.h"
#include "src/server/observability/striped_metrics.h"

namespace exposure_filter {
namespace {

TEST(StripedHistogramTest, BucketsAreUpperBoundInclusive) {
  StripedHistogram h({10, 100});
  for (uint64_t v : {0, 10, 11, 100, 101, 5000}) h.Observe(v);
  EXPECT_EQ(h.BucketCount(0), 2u);  // 0, 10
  EXPECT_EQ(h.BucketCount(1), 2u);  // 11, 100
  EXPECT_EQ(h.BucketCount(2), 2u);  // above the last bound
  EXPECT_EQ(h.Sum(), 0u + 10 + 11 + 100 + 101 + 5000);
}

TEST(StripedHistogramTest, ConcurrentObservationsAreAllCounted) {
  StripedHistogram h({1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.Observe(2);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.BucketCount(1), 40000u);
  EXPECT_EQ(h.Sum(), 80000u);
}

TEST(StripedHistogramTest, MergeAddsBatchedCounts) {
  StripedHistogram h({10});
  h.Merge({3, 1}, 42);
  EXPECT_EQ(h.BucketCount(0), 3u);
  EXPECT_EQ(h.BucketCount(1), 1u);
  EXPECT_EQ(h.Sum(), 42u);
}

TEST(ProcStatTest, ParsesFieldsAfterACommandWithSpacesAndParens) {
  // Fields 14-15 utime/stime, 20 threads, 22 starttime, 23 vsize, 24 rss.
  const std::string stat =
      "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
      "250 150 0 0 20 0 7 0 1000 123456789 2048 18446744073709551615";
  std::optional<ProcessStats> s = ParseProcStat(stat, 100, 4096, 1.7e9);
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(s->cpu_seconds, 4.0);
  EXPECT_EQ(s->threads, 7u);
  EXPECT_DOUBLE_EQ(s->start_time_seconds, 1.7e9 + 10.0);
  EXPECT_EQ(s->virtual_bytes, 123456789u);
  EXPECT_EQ(s->resident_bytes, 2048u * 4096);
}

TEST(ProcStatTest, RejectsTruncatedInput) {
  EXPECT_FALSE(ParseProcStat("4242 (x) S 1 2 3", 100, 4096, 0).has_value());
  EXPECT_FALSE(ParseProcStat("garbage", 100, 4096, 0).has_value());
}

TEST(LogRateLimiterTest, OnePerIntervalCountingTheSuppressed) {
  LogRateLimiter limiter(absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Allow(&suppressed, t0));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_FALSE(limiter.Allow(&suppressed, t0 + absl::Seconds(1)));
  EXPECT_FALSE(limiter.Allow(&suppressed, t0 + absl::Seconds(9)));
  EXPECT_TRUE(limiter.Allow(&suppressed, t0 + absl::Seconds(10)));
  EXPECT_EQ(suppressed, 2u);
}

TEST(GrpcServerMetricsTest, KnownMethodsFromDescriptorsUnknownPooled) {
  // Links exposure_filter.pb.cc into the generated pool, as the server's
  // handlers do.
  (void)exposure::v1::FilterRecalledRequest::descriptor();
  GrpcServerMetrics m({"exposure.v1.ExposureFilter", "no.such.Service"});
  GrpcServerMetrics::Method* known =
      m.Lookup("/exposure.v1.ExposureFilter/FilterRecalled");
  GrpcServerMetrics::Method* unknown = m.Lookup("/evil/user-42");
  EXPECT_NE(known, unknown);
  EXPECT_EQ(unknown, m.Lookup("/no.such.Service/X"));
  m.Started(known);
  m.Handled(known, 3, 1000);  // INVALID_ARGUMENT
  m.Started(unknown);
  m.Handled(unknown, 12, 1000);  // UNIMPLEMENTED
  EXPECT_EQ(m.StartedCount("exposure.v1.ExposureFilter"), 1u);
  EXPECT_EQ(m.HandledCount("exposure.v1.ExposureFilter", 3), 1u);
  EXPECT_EQ(m.HandledCount("", 12), 1u);
  for (const prometheus::MetricFamily& f : m.Collect()) {
    for (const prometheus::ClientMetric& cm : f.metric) {
      for (const auto& label : cm.label) {
        EXPECT_EQ(label.value.find("evil"), std::string::npos);
      }
    }
  }
}

// In flight from Started() until the call is released, whether or
// not a status was sent first (a client gone before the handler answered).
TEST(GrpcServerMetricsTest, InFlightCountsCallsUntilReleased) {
  (void)exposure::v1::FilterRecalledRequest::descriptor();
  GrpcServerMetrics m({"exposure.v1.ExposureFilter"});
  GrpcServerMetrics::Method* method =
      m.Lookup("/exposure.v1.ExposureFilter/GetFilter");
  m.Started(method);
  m.Started(method);
  EXPECT_EQ(m.InFlight(), 2);
  m.Handled(method, 0, 1000);
  EXPECT_EQ(m.InFlight(), 2);  // answered, not released yet
  m.Released();
  m.Released();
  EXPECT_EQ(m.InFlight(), 0);
  bool exported = false;
  for (const prometheus::MetricFamily& f : m.Collect()) {
    if (f.name != "grpc_server_in_flight_rpcs") continue;
    exported = true;
    ASSERT_EQ(f.metric.size(), 1u);
    EXPECT_EQ(f.metric[0].gauge.value, 0.0);
  }
  EXPECT_TRUE(exported);
}

}  // namespace
}  // namespace exposure_filter
