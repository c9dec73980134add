// FilePrefetcher: reads a file into the page cache ahead of a reader that
// walks a mapping of it front to back (recovery's snapshot and log
// segments).
//
// Why (measured, docs/durability.md "Snapshot and restart time"): a mapped
// snapshot read cold, by page faults alone, recovered 10 M users in
// 47.8-61.7 s and spent twice the user CPU of a warm run (32.5-33.1 s
// against 14.1-20.4 s); with this thread asking the kernel for the file ahead
// of the decoder, the alternated cold runs took 29.6-29.7 s and the CPU of
// a warm one (16.5-17.3 s). Few voluntary context switches either way, so
// it is not simply time spent waiting for the disk; why faulting a cold
// mapping costs that CPU is not established.
//
// It only hints (posix_fadvise POSIX_FADV_WILLNEED: the kernel starts the
// reads, nothing is copied into this process), so correctness never depends
// on it and its errors are ignored: the reader meets any real I/O error
// itself. The pages it brings in are the ones the mapping would have
// faulted in anyway, so it adds no memory beyond what recovery already
// touched.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_FILE_PREFETCHER_H_
#define EXPOSURE_FILTER_SRC_PERSIST_FILE_PREFETCHER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace exposure_filter {

class FilePrefetcher {
 public:
  // Starts prefetching `path` on a thread of its own (does nothing if the
  // file cannot be opened).
  explicit FilePrefetcher(const std::string& path);
  // Stops at the next chunk and joins: a reader that finishes (or fails)
  // early does not wait for the rest of the file.
  ~FilePrefetcher();
  FilePrefetcher(const FilePrefetcher&) = delete;
  FilePrefetcher& operator=(const FilePrefetcher&) = delete;

  // Blocks until every chunk has been requested from the kernel (the reads
  // themselves may still be in flight).
  void Wait();

  // One posix_fadvise call covers this much: the device's readahead size
  // here (read_ahead_kb 8192), so no call asks for more than the kernel
  // queues at once; 4.66 GB is ~560 calls.
  static constexpr uint64_t kChunkBytes = uint64_t{8} << 20;

 private:
  void Run(int fd);

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_FILE_PREFETCHER_H_
