#include "bench/loadgen/feed_writer.h"

#include <time.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/loadgen/ground_truth.h"

namespace exposure_filter::bench {

double ThreadCpuSeconds(pthread_t thread) {
  clockid_t id;
  if (pthread_getcpuclockid(thread, &id) != 0) return 0;
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return 0;
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

FeedWriter::FeedWriter(FeedWriterOptions options, WriteSink sink)
    : options_(std::move(options)), sink_(std::move(sink)) {
  writer_ = std::thread([this] { WriterLoop(); });
  background_ = std::thread([this] { BackgroundLoop(); });
}

FeedWriter::~FeedWriter() { Stop(); }

void FeedWriter::Stop() {
  stop_background_.store(true);
  if (background_.joinable()) background_.join();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

void FeedWriter::Submit(WriteEntry* entry) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    entry->ticket->status = absl::CancelledError("writer stopped");
    entry->ticket->done.Notify();
    return;
  }
  Enqueue(entry);
}

void FeedWriter::Enqueue(WriteEntry* entry) {
  if (queue_.empty()) oldest_queued_ = absl::Now();
  queue_.push_back(entry);
}

void FeedWriter::WriterLoop() {
  std::vector<WriteEntry*> batch;
  while (true) {
    batch.clear();
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, nothing left
      if (options_.linger > absl::ZeroDuration()) {
        auto full = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || queue_.size() >= options_.max_batch_users;
        };
        mu_.AwaitWithDeadline(absl::Condition(&full),
                              oldest_queued_ + options_.linger);
      }
      while (!queue_.empty() && batch.size() < options_.max_batch_users) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
      // Entries left behind (a full call) start the next call's linger.
      if (!queue_.empty()) oldest_queued_ = absl::Now();
    }
    const absl::Status s = sink_(batch);
    const auto acked = std::chrono::steady_clock::now();
    uint64_t sessions = 0, background = 0;
    for (WriteEntry* e : batch) {
      if (e->ticket == nullptr) {
        ++background;
        delete e;
        continue;
      }
      ++sessions;
      e->ticket->status = s;
      e->ticket->acked = acked;
      e->ticket->done.Notify();
    }
    absl::MutexLock lock(&mu_);
    ++stats_.calls;
    stats_.failed_calls += !s.ok();
    stats_.users += batch.size();
    stats_.session_users += sessions;
    stats_.background_users += background;
    background_queued_ -= background;
  }
}

void FeedWriter::BackgroundLoop() {
  if (options_.background_users_per_s <= 0) return;
  FastRng rng(0xbac6);
  const absl::Time start = absl::Now();
  uint64_t issued = 0;
  while (!stop_background_.load()) {
    absl::SleepFor(absl::Milliseconds(1));
    const auto due =
        static_cast<uint64_t>(absl::ToDoubleSeconds(absl::Now() - start) *
                              options_.background_users_per_s);
    for (; issued < due; ++issued) {
      auto e = std::make_unique<WriteEntry>();
      e->user = absl::StrCat(options_.background_prefix,
                             rng() % options_.background_user_pool);
      e->ids.resize(options_.background_items);
      for (uint64_t& id : e->ids) id = rng();
      absl::MutexLock lock(&mu_);
      if (background_queued_ >= options_.max_background_queued) {
        ++stats_.background_dropped;
        continue;
      }
      ++background_queued_;
      Enqueue(e.release());
    }
  }
}

FeedWriterStats FeedWriter::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

double FeedWriter::WriterThreadCpuSeconds() const {
  double s = 0;
  // const_cast: native_handle() is not const, reading the clock is.
  auto& w = const_cast<std::thread&>(writer_);
  auto& b = const_cast<std::thread&>(background_);
  if (w.joinable()) s += ThreadCpuSeconds(w.native_handle());
  if (b.joinable()) s += ThreadCpuSeconds(b.native_handle());
  return s;
}

}  // namespace exposure_filter::bench
