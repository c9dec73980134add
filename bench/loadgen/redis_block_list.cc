#include "bench/loadgen/redis_block_list.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "exposure_filter/item_hash.h"

namespace exposure_filter::bench {
namespace {

template <typename Visit>
inline void ForEachBit(uint64_t h, Visit&& visit) {
  const uint32_t h1 = static_cast<uint32_t>(h);
  const uint32_t h2 = static_cast<uint32_t>(h >> 32) | 1;
  uint32_t x = h1;
  for (int i = 0; i < RedisBloomBlock::kProbes; ++i) {
    visit(x % RedisBloomBlock::kBits);
    x += h2;
  }
}

absl::Status ReplyError(redisContext* ctx, redisReply* r, const char* what) {
  std::string msg = r == nullptr ? std::string(ctx->errstr)
                                 : std::string(r->str ? r->str : "?", r->len);
  if (r != nullptr) freeReplyObject(r);
  return absl::UnavailableError(absl::StrCat("redis ", what, ": ", msg));
}

}  // namespace

void RedisBloomBlock::Add(uint64_t item_hash) {
  ForEachBit(item_hash, [this](uint32_t b) {
    bits_[b >> 3] = static_cast<char>(bits_[b >> 3] | (1 << (b & 7)));
  });
}

bool RedisBloomBlock::MayContain(const char* block, uint64_t item_hash) {
  bool all = true;
  ForEachBit(item_hash, [&](uint32_t b) {
    all &= (static_cast<unsigned char>(block[b >> 3]) >> (b & 7)) & 1;
  });
  return all;
}

std::vector<std::string> BuildBlockList(absl::Span<const uint64_t> ids) {
  std::vector<std::string> blocks;
  for (size_t begin = 0; begin < ids.size(); begin += kRedisBlockItems) {
    RedisBloomBlock block;
    const size_t end = std::min(ids.size(), begin + kRedisBlockItems);
    for (size_t i = begin; i < end; ++i) block.Add(HashItemId(ids[i]));
    blocks.push_back(block.bytes());
  }
  std::reverse(blocks.begin(), blocks.end());
  if (blocks.size() > kRedisMaxBlocks) blocks.resize(kRedisMaxBlocks);
  return blocks;
}

RedisBlockListClient::~RedisBlockListClient() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

absl::Status RedisBlockListClient::Connect(const std::string& host, int port) {
  timeval timeout{5, 0};
  ctx_ = redisConnectWithTimeout(host.c_str(), port, timeout);
  if (ctx_ == nullptr || ctx_->err) {
    return absl::UnavailableError(
        absl::StrCat("redis connect ", host, ":", port, ": ",
                     ctx_ ? ctx_->errstr : "out of memory"));
  }
  return absl::OkStatus();
}

absl::Status RedisBlockListClient::Store(
    const std::string& user, const std::vector<std::string>& blocks) {
  redisAppendCommand(ctx_, "DEL %b", user.data(), user.size());
  for (const std::string& b : blocks) {
    redisAppendCommand(ctx_, "RPUSH %b %b", user.data(), user.size(), b.data(),
                       b.size());
  }
  for (size_t i = 0; i < blocks.size() + 1; ++i) {
    void* reply = nullptr;
    if (redisGetReply(ctx_, &reply) != REDIS_OK) {
      return ReplyError(ctx_, nullptr, "store");
    }
    auto* r = static_cast<redisReply*>(reply);
    if (r->type == REDIS_REPLY_ERROR) return ReplyError(ctx_, r, "store");
    freeReplyObject(r);
  }
  return absl::OkStatus();
}

absl::Status RedisBlockListClient::Filter(const std::string& user,
                                          absl::Span<const uint64_t> ids,
                                          uint8_t* keep,
                                          std::vector<uint64_t>* scratch) {
  auto* r = static_cast<redisReply*>(redisCommand(
      ctx_, "LRANGE %b 0 %d", user.data(), user.size(), kRedisMaxBlocks - 1));
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) {
    return ReplyError(ctx_, r, "LRANGE");
  }
  // Hash once; test the newest block first (recent exposures are the most
  // likely repeats).
  scratch->resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) (*scratch)[i] = HashItemId(ids[i]);
  std::fill(keep, keep + ids.size(), uint8_t{1});
  for (size_t b = 0; b < r->elements; ++b) {
    const redisReply* e = r->element[b];
    if (e->type != REDIS_REPLY_STRING || e->len != RedisBloomBlock::kBytes) {
      freeReplyObject(r);
      return absl::DataLossError("redis: malformed Bloom block");
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (keep[i] && RedisBloomBlock::MayContain(e->str, (*scratch)[i])) {
        keep[i] = 0;
      }
    }
  }
  freeReplyObject(r);
  return absl::OkStatus();
}

}  // namespace exposure_filter::bench
