// main() of every GoogleTest binary: gtest_main's, plus the skip rule of
// environment_skip.h. A test that skipped for any other reason is failed
// before its result is printed, so the binary exits 1 and ctest (which
// counts gtest's "[  SKIPPED ]" as skipped) sees a failure.
#include <mutex>
#include <string>

#include "gtest/gtest.h"
#include "tests/common/environment_skip.h"

namespace exposure_filter {
namespace {

class FailUndocumentedSkips : public testing::EmptyTestEventListener {
 public:
  void OnTestStart(const testing::TestInfo&) override {
    std::lock_guard<std::mutex> lock(mu_);
    undocumented_skip_ = false;
    reason_.clear();
  }
  // May run on any thread that reports a result; must not report one itself
  // (gtest would call it again).
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.skipped() || IsEnvironmentSkip(result.message())) return;
    std::lock_guard<std::mutex> lock(mu_);
    undocumented_skip_ = true;
    reason_ = result.message();
  }
  // gtest calls end events in reverse order of registration, so this runs
  // before the result printer: the failure added here is what it prints.
  void OnTestEnd(const testing::TestInfo&) override {
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!undocumented_skip_) return;
      reason = reason_;
    }
    ADD_FAILURE()
        << "skipped, but not for a documented environment reason "
           "(tests/common/environment_skip.h): \""
        << reason
        << "\". An empty reason is the implicit skip after a fatal failure "
           "in SetUpTestSuite: check per test (SetUp) instead, so that a "
           "broken check fails.";
  }

 private:
  std::mutex mu_;
  bool undocumented_skip_ = false;
  std::string reason_;
};

}  // namespace
}  // namespace exposure_filter

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  testing::UnitTest::GetInstance()->listeners().Append(
      new exposure_filter::FailUndocumentedSkips);
  return RUN_ALL_TESTS();
}
