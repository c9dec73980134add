// Shared by the persist tests: a temporary directory, file helpers and a
// store (registry + clock) that can be rebuilt to simulate a restart.
#ifndef EXPOSURE_FILTER_TESTS_PERSIST_PERSIST_TEST_UTIL_H_
#define EXPOSURE_FILTER_TESTS_PERSIST_PERSIST_TEST_UTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"

namespace exposure_filter::testing_util {

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "ef_persist_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

// A surface registry and store on a manual clock: what a server holds.
struct StoreUnderTest {
  explicit StoreUnderTest(ManualClock* clock, int shards = 4,
                          FilterPolicyOptions defaults = {}) {
    auto registry = SurfaceRegistry::Create(defaults, {}, /*max_surfaces=*/8);
    EXPECT_TRUE(registry.ok()) << registry.status();
    surfaces = *std::move(registry);
    store = std::make_unique<ShardedFilterStore>(shards, clock, surfaces.get());
  }
  const Surface& surface(const std::string& name) {
    return **surfaces->GetOrCreate(name);
  }
  std::unique_ptr<SurfaceRegistry> surfaces;
  std::unique_ptr<ShardedFilterStore> store;
};

}  // namespace exposure_filter::testing_util

#endif  // EXPOSURE_FILTER_TESTS_PERSIST_PERSIST_TEST_UTIL_H_
