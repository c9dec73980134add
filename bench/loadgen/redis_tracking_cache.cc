#include "bench/loadgen/redis_tracking_cache.h"

#include <sys/socket.h>

#include "absl/strings/str_cat.h"

namespace exposure_filter::bench {
namespace {

// Checks a reply; hands it to *out, or frees it.
absl::Status Checked(redisContext* ctx, void* reply, const std::string& what,
                     redisReply** out = nullptr) {
  auto* r = static_cast<redisReply*>(reply);
  if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
    std::string msg =
        r == nullptr ? std::string(ctx->errstr) : std::string(r->str, r->len);
    if (r != nullptr) freeReplyObject(r);
    return absl::UnavailableError(absl::StrCat("redis ", what, ": ", msg));
  }
  if (out != nullptr) {
    *out = r;
  } else {
    freeReplyObject(r);
  }
  return absl::OkStatus();
}

}  // namespace

RedisTrackingCache::~RedisTrackingCache() {
  stopping_.store(true);
  // The reader blocks in read(): shutting the socket down wakes it.
  if (subscriber_ != nullptr) shutdown(subscriber_->fd, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  if (subscriber_ != nullptr) redisFree(subscriber_);
}

absl::Status RedisTrackingCache::Connect(const std::string& host, int port) {
  if (absl::Status s = data_.Connect(host, port); !s.ok()) return s;
  timeval timeout{5, 0};
  subscriber_ = redisConnectWithTimeout(host.c_str(), port, timeout);
  if (subscriber_ == nullptr || subscriber_->err) {
    return absl::UnavailableError("redis connect (invalidation subscriber)");
  }
  redisReply* id = nullptr;
  if (absl::Status s =
          Checked(subscriber_, redisCommand(subscriber_, "CLIENT ID"),
                  "CLIENT ID", &id);
      !s.ok()) {
    return s;
  }
  const long long subscriber_id = id->integer;
  freeReplyObject(id);
  if (absl::Status s =
          Checked(subscriber_,
                  redisCommand(subscriber_, "SUBSCRIBE __redis__:invalidate"),
                  "SUBSCRIBE");
      !s.ok()) {
    return s;
  }
  // No read timeout on the subscriber: it waits for invalidations.
  redisSetTimeout(subscriber_, timeval{0, 0});
  if (absl::Status s = Checked(
          data_.context(),
          redisCommand(data_.context(), "CLIENT TRACKING on REDIRECT %lld",
                       subscriber_id),
          "CLIENT TRACKING");
      !s.ok()) {
    return s;
  }
  reader_ = std::thread([this] { ReadInvalidations(); });
  return absl::OkStatus();
}

void RedisTrackingCache::ReadInvalidations() {
  while (!stopping_.load()) {
    void* reply = nullptr;
    if (redisGetReply(subscriber_, &reply) != REDIS_OK) return;
    auto* r = static_cast<redisReply*>(reply);
    // ["message", "__redis__:invalidate", [key, ...] or nil (flush all)]
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
      const redisReply* keys = r->element[2];
      absl::MutexLock lock(&mu_);
      if (keys->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < keys->elements; ++i) {
          std::string key(keys->element[i]->str, keys->element[i]->len);
          copies_.erase(key);
          if (auto it = fetching_.find(key); it != fetching_.end()) {
            it->second = true;
          }
        }
      } else {
        copies_.clear();
        for (auto& [key, invalidated] : fetching_) invalidated = true;
      }
      invalidations_.fetch_add(1, std::memory_order_relaxed);
    }
    freeReplyObject(r);
  }
}

absl::Status RedisTrackingCache::Filter(const std::string& user,
                                        absl::Span<const uint64_t> hashes,
                                        uint8_t* keep, bool* hit) {
  std::shared_ptr<const Blocks> blocks;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = copies_.find(user); it != copies_.end()) {
      blocks = it->second;
    } else {
      fetching_[user] = false;
    }
  }
  *hit = blocks != nullptr;
  if (!*hit) {
    auto fetched = std::make_shared<Blocks>();
    absl::Status s = data_.Fetch(user, fetched.get());
    absl::MutexLock lock(&mu_);
    auto it = fetching_.find(user);
    const bool invalidated = it == fetching_.end() || it->second;
    if (it != fetching_.end()) fetching_.erase(it);
    if (!s.ok()) return s;
    if (!invalidated) copies_[user] = fetched;
    blocks = std::move(fetched);
  }
  FilterByBlocks(*blocks, hashes, keep);
  return absl::OkStatus();
}

void RedisTrackingCache::Forget(const std::string& user) {
  absl::MutexLock lock(&mu_);
  copies_.erase(user);
}

}  // namespace exposure_filter::bench
