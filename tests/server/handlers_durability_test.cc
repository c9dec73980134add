// The RPC edge's durability promise: RecordExposure answers OK
// only once the write-ahead log holds the write. Checked on the log file
// itself, right after the answer: no close, snapshot or sync thread has
// written it (snapshots are off, and under always and never no thread
// flushes the log), so only the handler's commit can have put it there.
// tests/persist/wal_durability_test.cc checks what each --fsync policy then
// promises about that file; this checks that the handler asks for it.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/persist/store_durability.h"
#include "src/persist/wal_reader.h"
#include "src/persist/wal_record.h"
#include "src/server/config/server_config.h"
#include "src/server/exposure_filter_handlers.h"
#include "tests/persist/persist_test_util.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using ::testing::Contains;
using testing_util::kStartMs;
using testing_util::ReadFile;
using testing_util::StoreUnderTest;
using testing_util::TempDir;

// The users of the RecordExposure records in the data dir's newest log
// segment, in order.
std::vector<std::string> LoggedUsers(const std::string& data_dir) {
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(data_dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("wal-", 0) == 0) newest = std::max(newest, name);
  }
  std::vector<std::string> users;
  if (newest.empty()) return users;
  const uint64_t seq = std::stoull(newest.substr(4, newest.find('.') - 4));
  ReplayWalSegment(ReadFile(data_dir + "/" + newest), seq, /*newest=*/true,
                   [&](const WalRecord& r) {
                     if (r.type == kWalRecordExposure) {
                       users.push_back(std::string(r.user_id));
                     }
                   });
  return users;
}

TEST(HandlersDurabilityTest, AcknowledgedRecordExposureIsInTheLogFile) {
  for (FsyncPolicy policy : {FsyncPolicy::kAlways, FsyncPolicy::kNever}) {
    TempDir tmp;
    ManualClock clock(kStartMs);
    StoreUnderTest s(&clock);
    DurabilityOptions o;
    o.data_dir = tmp.path() + "/data";
    o.fsync = policy;
    o.snapshot_interval = absl::ZeroDuration();
    o.snapshot_wal_bytes = 0;
    auto d = StoreDurability::Open(o, s.surfaces.get(), s.store.get());
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_TRUE((*d)->Recover().ok());
    ExposureFilterHandlers handlers(s.surfaces.get(), s.store.get(),
                                    RequestLimits{});
    handlers.AttachDurability(d->get());
    for (int i = 0; i < 3; ++i) {
      const std::string user = absl::StrCat("user", i);
      exposure::v1::RecordExposureRequest req;
      exposure::v1::Exposure* e = req.add_exposures();
      e->set_user_id(user);
      e->add_item_ids(100 + i);
      exposure::v1::RecordExposureResponse resp;
      ASSERT_TRUE(handlers.RecordExposure(req, &resp).ok());
      EXPECT_THAT(LoggedUsers(o.data_dir), Contains(user))
          << "--fsync=" << FsyncPolicyName(policy) << ": RecordExposure of "
          << user
          << " answered OK but the write is not in the write-ahead log: an "
             "acknowledged write must be committed to the log first";
    }
  }
}

}  // namespace
}  // namespace exposure_filter
