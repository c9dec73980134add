// FilePrefetcher (src/persist/file_prefetcher.h): recovery's read-ahead hint.
#include "src/persist/file_prefetcher.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/environment_skip.h"
#include "tests/persist/persist_test_util.h"

namespace exposure_filter {
namespace {

using testing_util::TempDir;

// Pages of `path` in the page cache, out of all its pages (mincore(2) on a
// mapping: it reports the page cache, it does not read the file).
double ResidentFraction(const std::string& path, size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  EXPECT_NE(addr, MAP_FAILED);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  EXPECT_EQ(::mincore(addr, size, vec.data()), 0);
  ::munmap(addr, size);
  size_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return double(resident) / double(vec.size());
}

// Writes `size` bytes, makes them durable and asks the kernel to drop them
// from the page cache (clean pages go at once on a disk file system).
void WriteColdFile(const std::string& path, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const std::string block(1 << 20, 'x');
  for (size_t done = 0; done < size; done += block.size()) {
    ASSERT_EQ(::write(fd, block.data(), block.size()),
              static_cast<ssize_t>(block.size()));
  }
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
}

TEST(FilePrefetcherTest, BringsEveryChunkOfAColdFileIntoThePageCache) {
  TempDir dir;
  const std::string path = dir.path() + "/snapshot.efs";
  // Several chunks and a partial last one: every chunk must be requested.
  const size_t size = 3 * FilePrefetcher::kChunkBytes + (1 << 20);
  WriteColdFile(path, size);
  if (ResidentFraction(path, size) > 0.5) {
    GTEST_SKIP() << kSkipNoPageCacheDrop << " (" << dir.path() << ")";
  }
  FilePrefetcher prefetch(path);
  prefetch.Wait();
  // The hint only queues the reads: wait for them to land. A generous
  // deadline, not a speed check (32 MiB lands in ~0.2 s on the shared
  // machine); without the hint nothing reads the file and this fails.
  double resident = 0;
  for (int i = 0; i < 300 && resident < 1.0; ++i) {
    resident = ResidentFraction(path, size);
    if (resident < 1.0) ::usleep(100'000);
  }
  EXPECT_EQ(resident, 1.0);
}

TEST(FilePrefetcherTest, AFileThatCannotBeOpenedIsNoError) {
  TempDir dir;
  // The reader reports the missing file; the hint just does nothing.
  FilePrefetcher prefetch(dir.path() + "/missing.efs");
  prefetch.Wait();
}

}  // namespace
}  // namespace exposure_filter
