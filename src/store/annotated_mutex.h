// Locks that both ThreadSanitizer and clang's -Wthread-safety can see.
//
// Debian's Abseil is not built with TSan, so absl::Mutex is opaque to it: TSan
// sees the data a shard guards touched from several threads with no
// happens-before edge and reports false races. std::mutex and
// std::shared_mutex are intercepted by TSan (they are pthread locks); these
// thin wrappers add the capability annotations so ABSL_GUARDED_BY and
// ABSL_*_LOCKS_REQUIRED keep type-checking under -Wthread-safety.
#ifndef EXPOSURE_FILTER_SRC_STORE_ANNOTATED_MUTEX_H_
#define EXPOSURE_FILTER_SRC_STORE_ANNOTATED_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"

namespace exposure_filter {

// Reader/writer lock (pthread_rwlock underneath).
class ABSL_LOCKABLE SharedMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void LockShared() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void UnlockShared() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class ABSL_SCOPED_LOCKABLE WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->Lock();
  }
  ~WriterLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->LockShared();
  }
  ~ReaderLock() ABSL_UNLOCK_FUNCTION() { mu_->UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// Exclusive lock with condition waits (std::mutex + std::condition_variable).
class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

  // Waits on `cv` until `done()` holds; the lock is held when it returns.
  template <typename Predicate>
  void Await(std::condition_variable& cv, Predicate done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    cv.wait(lock, done);
    lock.release();
  }
  // As Await, but gives up after `timeout`; returns done().
  template <typename Predicate>
  bool AwaitWithTimeout(std::condition_variable& cv,
                        std::chrono::milliseconds timeout, Predicate done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    const bool result = cv.wait_for(lock, timeout, done);
    lock.release();
    return result;
  }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_ANNOTATED_MUTEX_H_
