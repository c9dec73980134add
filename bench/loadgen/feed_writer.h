// The exposure logger of the feed loop (exposure-filter-feed-bench): ONE
// writer thread shared by every session, as a production logger batches
// the feed's exposures. A session hands its user's shown items over and
// waits for the write's acknowledgement (the user's next feed request
// comes after the write); the writer takes everything queued (up to
// `max_batch_users` users) into one call, so a call carries many users
// whenever they are waiting. With a `linger`, it first waits that long
// after the oldest queued entry for more to arrive (a Kafka producer's
// linger.ms): a production logger batches the exposures of a whole fleet,
// where a feed loop of a few dozen sessions would otherwise send a call
// per handful of users. A background generator adds other users' exposures
// at a steady rate through the same writer, without waiting.
#ifndef EXPOSURE_FILTER_BENCH_LOADGEN_FEED_WRITER_H_
#define EXPOSURE_FILTER_BENCH_LOADGEN_FEED_WRITER_H_

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace exposure_filter::bench {

// One user's items in a write; `ticket` is null for background writes.
struct WriteTicket {
  absl::Notification done;
  absl::Status status;
  std::chrono::steady_clock::time_point acked;
};
struct WriteEntry {
  std::string user;
  std::vector<uint64_t> ids;
  WriteTicket* ticket = nullptr;
};

// Writes one batch (many users) and returns once it is acknowledged.
using WriteSink = std::function<absl::Status(absl::Span<WriteEntry* const>)>;

struct FeedWriterOptions {
  size_t max_batch_users = 1000;
  // How long the oldest queued entry may wait for others to join its call
  // (0: send what is queued as soon as the previous call returns).
  absl::Duration linger = absl::ZeroDuration();
  double background_users_per_s = 0;
  int background_items = 20;
  uint32_t background_user_pool = 100000;  // bench-w0 .. bench-wN-1
  std::string background_prefix = "bench-w";
  // Background entries queued beyond this are dropped (counted): the
  // writer fell behind the rate asked for.
  size_t max_background_queued = 20000;
};

struct FeedWriterStats {
  uint64_t calls = 0;
  uint64_t users = 0;  // user entries written (sessions and background)
  uint64_t session_users = 0;
  uint64_t background_users = 0;
  uint64_t background_dropped = 0;
  uint64_t failed_calls = 0;
};

class FeedWriter {
 public:
  FeedWriter(FeedWriterOptions options, WriteSink sink);
  ~FeedWriter();  // stops both threads

  // Queues a session's write; the caller waits on entry->ticket->done.
  void Submit(WriteEntry* entry);
  void Stop();

  FeedWriterStats stats() const;
  // CPU seconds of the writer and background threads (for the client's
  // CPU without its writers).
  double WriterThreadCpuSeconds() const;

 private:
  void WriterLoop();
  void Enqueue(WriteEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BackgroundLoop();

  const FeedWriterOptions options_;
  const WriteSink sink_;
  mutable absl::Mutex mu_;
  std::deque<WriteEntry*> queue_ ABSL_GUARDED_BY(mu_);
  // When the oldest entry of queue_ was queued (the linger's start).
  absl::Time oldest_queued_ ABSL_GUARDED_BY(mu_);
  // Background entries are owned here until written.
  size_t background_queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  FeedWriterStats stats_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_background_{false};
  std::thread writer_;
  std::thread background_;
};

// CPU seconds a thread of this process has used.
double ThreadCpuSeconds(pthread_t thread);

}  // namespace exposure_filter::bench

#endif  // EXPOSURE_FILTER_BENCH_LOADGEN_FEED_WRITER_H_
