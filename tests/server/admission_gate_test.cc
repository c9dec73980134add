// AdmissionGate: the server's own overload limits, in-process.
#include "src/server/admission_gate.h"

#include <prometheus/metric_family.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;

TEST(AdmissionGateTest, NoLimitsAdmitsEverything) {
  AdmissionGate gate({});
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(gate.Admit(1 << 20).ok());
  EXPECT_EQ(gate.inflight_rpcs(), 1000u);
  EXPECT_EQ(gate.shed_by_rpcs() + gate.shed_by_bytes(), 0u);
}

TEST(AdmissionGateTest, ShedsAboveMaxInflightRpcsNamingTheFlag) {
  AdmissionGate gate({/*max_inflight_rpcs=*/2, 0});
  ASSERT_TRUE(gate.Admit(10).ok());
  ASSERT_TRUE(gate.Admit(10).ok());
  const absl::Status s = gate.Admit(10);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--max_inflight_rpcs"));
  EXPECT_EQ(gate.shed_by_rpcs(), 1u);
  EXPECT_EQ(gate.inflight_rpcs(), 2u);
  EXPECT_EQ(gate.inflight_request_bytes(), 20u);
  gate.Release(10);
  EXPECT_TRUE(gate.Admit(10).ok()) << "a released slot is free again";
}

TEST(AdmissionGateTest, ShedsAboveMaxInflightRequestBytesNamingTheFlag) {
  AdmissionGate gate({0, /*max_inflight_request_bytes=*/100});
  ASSERT_TRUE(gate.Admit(60).ok());
  const absl::Status s = gate.Admit(50);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--max_inflight_request_bytes=100"));
  EXPECT_TRUE(gate.Admit(40).ok()) << "a smaller request still fits";
  EXPECT_EQ(gate.inflight_request_bytes(), 100u);
  EXPECT_EQ(gate.inflight_rpcs(), 2u) << "a refused RPC holds no slot";
  EXPECT_EQ(gate.shed_by_bytes(), 1u);
}

TEST(AdmissionGateTest, RequestLargerThanTheByteLimitPassesAlone) {
  AdmissionGate gate({0, /*max_inflight_request_bytes=*/100});
  ASSERT_TRUE(gate.Admit(500).ok());
  EXPECT_FALSE(gate.Admit(1).ok()) << "but nothing else meanwhile";
  gate.Release(500);
  EXPECT_EQ(gate.inflight_request_bytes(), 0u);
  EXPECT_EQ(gate.inflight_rpcs(), 0u);
}

TEST(AdmissionGateTest, ConcurrentAdmitReleaseNeverExceedsTheLimit) {
  constexpr uint64_t kMax = 4;
  AdmissionGate gate({kMax, 0});
  std::atomic<uint64_t> admitted_now{0}, peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (!gate.Admit(1).ok()) continue;
        const uint64_t n = admitted_now.fetch_add(1) + 1;
        uint64_t p = peak.load();
        while (n > p && !peak.compare_exchange_weak(p, n)) {
        }
        admitted_now.fetch_sub(1);
        gate.Release(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(peak.load(), kMax);
  EXPECT_EQ(gate.inflight_rpcs(), 0u);
  EXPECT_EQ(gate.inflight_request_bytes(), 0u);
}

TEST(AdmissionGateTest, ExportsShedCountsAndLimits) {
  AdmissionGate gate({1, 0});
  ASSERT_TRUE(gate.Admit(1).ok());
  ASSERT_FALSE(gate.Admit(1).ok());
  bool found = false;
  for (const prometheus::MetricFamily& f : gate.Collect()) {
    if (f.name != "exposure_filter_rpcs_shed_total") continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      if (m.label.size() == 1 && m.label[0].value == "inflight_rpcs") {
        EXPECT_EQ(m.counter.value, 1.0);
        found = true;
      }
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace exposure_filter
