// The real server on a real filesystem that fills up or turns read-only
// while it serves. A tmpfs mounted by the test is the data_dir;
// mounting needs root (CI runs as root), so elsewhere these tests skip.
//
// What must hold: writes answer UNAVAILABLE naming the error and the path;
// every acknowledged write is there after the failure and after a restart;
// reads keep working from memory; a write refused up front leaves nothing
// in memory; when space returns (a file deleted, the filesystem grown) or
// the filesystem turns writable again, writes resume without a restart.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tests/common/environment_skip.h"

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNowMs = 1'700'000'000'000;
constexpr char kSurface[] = "homefeed";
// Items per RecordExposure call: ~0.9 KB of log each, so a few hundred KB
// of free space takes a few hundred calls.
constexpr int kItemsPerCall = 100;

// A tmpfs of `size` mounted on a fresh directory; unmounted (lazily, with
// anything mounted over it) when destroyed.
class Tmpfs {
 public:
  explicit Tmpfs(const std::string& size) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "ef_disk_fault_XXXXXX")
            .string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      error_ = absl::StrCat("mkdtemp: ", std::strerror(errno));
      return;
    }
    path_ = tmpl;
    if (::geteuid() != 0) {
      error_ = "mounting a tmpfs needs root (CI runs as root)";
    } else if (::mount("tmpfs", path_.c_str(), "tmpfs", 0,
                       absl::StrCat("size=", size).c_str()) != 0) {
      error_ =
          absl::StrCat("mount -t tmpfs ", path_, ": ", std::strerror(errno));
    } else {
      mounted_ = true;
    }
  }
  ~Tmpfs() {
    for (auto it = overlays_.rbegin(); it != overlays_.rend(); ++it) {
      ::umount2(it->c_str(), MNT_DETACH);
    }
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  bool ok() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

  bool Resize(const std::string& size) {
    return ::mount(nullptr, path_.c_str(), nullptr, MS_REMOUNT,
                   absl::StrCat("size=", size).c_str()) == 0;
  }
  // Mounts a read-only view of `dir` over itself. Files the server has
  // open stay writable through the mount below (the kernel refuses to
  // remount a filesystem read-only while files are open for writing), so
  // the fault shows when the server next creates a file: a log segment.
  bool MakeReadOnly(const std::string& dir) {
    if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return false;
    }
    overlays_.push_back(dir);
    return ::mount(nullptr, dir.c_str(), nullptr,
                   MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0;
  }
  bool MakeWritable(const std::string& dir) {
    return ::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_BIND,
                   nullptr) == 0;
  }
  uint64_t FreeBytes() const {
    struct statvfs st;
    if (::statvfs(path_.c_str(), &st) != 0) return 0;
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }
  // Takes all free space but `leave` bytes with a file.
  bool Fill(const std::string& name, uint64_t leave) {
    const uint64_t free = FreeBytes();
    if (free <= leave) return true;
    const int fd = ::open((path_ + "/" + name).c_str(),
                          O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    const bool ok =
        ::posix_fallocate(fd, 0, static_cast<off_t>(free - leave)) == 0;
    ::close(fd);
    return ok;
  }

 private:
  std::string path_;
  std::string error_;
  bool mounted_ = false;
  std::vector<std::string> overlays_;
};

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(60));
}

class DiskFaultServerTest : public ::testing::Test {
 protected:
  void StartServer(const std::string& data_dir) {
    ServerConfig c;
    c.durability.data_dir = data_dir;
    // Acknowledged means fdatasynced: the strictest reading of the check
    // that no acknowledged write is lost.
    c.durability.fsync = FsyncPolicy::kAlways;
    c.durability.snapshot_interval = absl::ZeroDuration();
    c.durability.snapshot_wal_bytes = 0;
    c.listen_address = "127.0.0.1:0";
    c.shards = 4;
    c.shutdown_grace = absl::Seconds(2);
    absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
        ExposureFilterServer::Start(c, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials());
    stub_ = exposure::v1::ExposureFilter::NewStub(channel);
    health_ = grpc::health::v1::Health::NewStub(channel);
  }
  void StopServer() {
    stub_.reset();
    health_.reset();
    server_.reset();
  }

  // Call `n` of the sequence: user u<n % 16>, items [n * 100, n * 100 + 100).
  grpc::Status Record(int n) {
    exposure::v1::RecordExposureRequest req;
    req.set_surface(kSurface);
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(absl::StrCat("u", n % 16));
    for (int i = 0; i < kItemsPerCall; ++i) {
      e->add_item_ids(static_cast<uint64_t>(n) * kItemsPerCall + i);
    }
    exposure::v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub_->RecordExposure(&ctx, req, &resp);
    if (s.ok()) acknowledged_.push_back(n);
    return s;
  }
  // Records calls next_, next_ + 1, ... until one fails (at most `limit`).
  grpc::Status RecordUntilRefused(int limit) {
    for (int i = 0; i < limit; ++i) {
      grpc::Status s = Record(next_++);
      if (!s.ok()) return s;
    }
    return grpc::Status::OK;
  }
  grpc::Status RecordNewUser(const std::string& user) {
    exposure::v1::RecordExposureRequest req;
    req.set_surface(kSurface);
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(1);
    exposure::v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return stub_->RecordExposure(&ctx, req, &resp);
  }
  bool UserExists(const std::string& user) {
    exposure::v1::GetUserStatsRequest req;
    req.set_surface(kSurface);
    req.set_user_id(user);
    exposure::v1::GetUserStatsResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub_->GetUserStats(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.exists();
  }
  // How many of call n's items FilterRecalled removes (100: all recorded).
  int Remembered(int n) {
    exposure::v1::FilterRecalledRequest req;
    req.set_surface(kSurface);
    req.set_user_id(absl::StrCat("u", n % 16));
    for (int i = 0; i < kItemsPerCall; ++i) {
      req.add_candidate_ids(static_cast<uint64_t>(n) * kItemsPerCall + i);
    }
    exposure::v1::FilterRecalledResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub_->FilterRecalled(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return static_cast<int>(resp.removed_count());
  }
  int ForgottenAcknowledged() {
    int forgotten = 0;
    for (int n : acknowledged_) forgotten += Remembered(n) != kItemsPerCall;
    return forgotten;
  }
  exposure::v1::GetServerStatsResponse Stats() {
    exposure::v1::GetServerStatsResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub_->GetServerStats(
        &ctx, exposure::v1::GetServerStatsRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
  bool Serving() {
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("exposure.v1.ExposureFilter");
    grpc::health::v1::HealthCheckResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return health_->Check(&ctx, req, &resp).ok() &&
           resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }
  // Polls `pred` until it holds or kPatience has passed: the server retries
  // a failed log every second on its own; the deadline only bounds a broken
  // run and is generous for sanitizer builds on a loaded machine.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (absl::Now() < deadline) {
      if (pred()) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return pred();
  }
  bool WaitWritable() {
    return WaitFor([&] { return Stats().wal_writable(); });
  }

  ManualClock clock_{kNowMs};
  // Declared before the server: unmounted after it has shut down.
  std::unique_ptr<Tmpfs> fs_;
  std::unique_ptr<ExposureFilterServer> server_;
  std::unique_ptr<exposure::v1::ExposureFilter::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::vector<int> acknowledged_;
  int next_ = 0;
};

TEST_F(DiskFaultServerTest, FullDiskRefusesWritesAndResumesWhenSpaceReturns) {
  fs_ = std::make_unique<Tmpfs>("4m");
  Tmpfs& fs = *fs_;
  if (!fs.ok()) GTEST_SKIP() << kSkipNoTmpfs << ": " << fs.error();
  const std::string data_dir = fs.path() + "/data";
  StartServer(data_dir);
  ASSERT_TRUE(RecordUntilRefused(20).ok());

  // The disk fills up with someone else's file; the log takes what is left.
  ASSERT_TRUE(fs.Fill("filler", /*leave=*/64 << 10));
  grpc::Status refused = RecordUntilRefused(5000);
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("No space left on device"));
  EXPECT_THAT(refused.error_message(), HasSubstr(data_dir));

  // Later writes are refused before they touch memory.
  refused = RecordNewUser("late");
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("No space left on device"));
  EXPECT_FALSE(UserExists("late"));
  // Reads, stats and health carry on.
  EXPECT_EQ(ForgottenAcknowledged(), 0);
  EXPECT_TRUE(Serving());
  exposure::v1::GetServerStatsResponse stats = Stats();
  EXPECT_TRUE(stats.durable());
  EXPECT_FALSE(stats.wal_writable());
  EXPECT_THAT(stats.wal_error(), HasSubstr("No space left on device"));

  // Space returns: writes resume by themselves.
  ASSERT_EQ(::unlink((fs.path() + "/filler").c_str()), 0);
  ASSERT_TRUE(WaitWritable());
  ASSERT_TRUE(RecordUntilRefused(20).ok());
  EXPECT_EQ(ForgottenAcknowledged(), 0);

  // Full again; this time the filesystem is grown under the server.
  ASSERT_TRUE(fs.Fill("filler2", /*leave=*/64 << 10));
  refused = RecordUntilRefused(5000);
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  ASSERT_TRUE(fs.Resize("16m"));
  ASSERT_TRUE(WaitWritable());
  ASSERT_TRUE(RecordUntilRefused(20).ok());
  EXPECT_EQ(server_->durability()->stats().wal.failures, 2u);
  EXPECT_EQ(server_->durability()->stats().wal.recoveries, 2u);
  EXPECT_GE(server_->durability()->disk_errors().Get(DiskOp::kWalWrite,
                                                     DiskErrorKind::kNoSpace),
            2u);

  // Restart from the directory: every acknowledged write is back.
  StopServer();
  StartServer(data_dir);
  EXPECT_FALSE(server_->recovery().corrupt) << server_->recovery().corruption;
  EXPECT_EQ(ForgottenAcknowledged(), 0);
  EXPECT_GT(acknowledged_.size(), 40u);
}

TEST_F(DiskFaultServerTest, ReadOnlyDataDirRefusesWritesUntilWritableAgain) {
  fs_ = std::make_unique<Tmpfs>("16m");
  Tmpfs& fs = *fs_;
  if (!fs.ok()) GTEST_SKIP() << kSkipNoTmpfs << ": " << fs.error();
  const std::string data_dir = fs.path() + "/data";
  StartServer(data_dir);
  ASSERT_TRUE(RecordUntilRefused(20).ok());

  ASSERT_TRUE(fs.MakeReadOnly(data_dir)) << std::strerror(errno);
  // The next segment cannot be created: the log fails.
  EXPECT_FALSE(server_->durability()->Snapshot().ok());
  const grpc::Status refused = RecordNewUser("late");
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("Read-only file system"));
  EXPECT_THAT(refused.error_message(), HasSubstr(data_dir));
  EXPECT_FALSE(UserExists("late"));
  EXPECT_EQ(ForgottenAcknowledged(), 0);
  EXPECT_TRUE(Serving());
  EXPECT_FALSE(Stats().wal_writable());
  // Still read-only after a recovery attempt of its own: waits for the
  // server's retry to fail (a fixed sleep raced it on a slow machine).
  EXPECT_TRUE(WaitFor([&] {
    return server_->durability()->disk_errors().Get(
               DiskOp::kWalCreate, DiskErrorKind::kReadOnly) >= 2u;
  })) << "the server never retried the read-only log";
  EXPECT_FALSE(Stats().wal_writable());

  ASSERT_TRUE(fs.MakeWritable(data_dir)) << std::strerror(errno);
  ASSERT_TRUE(WaitWritable());
  ASSERT_TRUE(RecordUntilRefused(20).ok());

  StopServer();
  StartServer(data_dir);
  EXPECT_FALSE(server_->recovery().corrupt) << server_->recovery().corruption;
  EXPECT_EQ(ForgottenAcknowledged(), 0);
  EXPECT_EQ(acknowledged_.size(), 40u);
}

}  // namespace
}  // namespace exposure_filter
