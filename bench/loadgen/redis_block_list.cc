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

absl::Status RedisBlockListClient::Fetch(const std::string& user,
                                         std::vector<std::string>* blocks) {
  auto* r = static_cast<redisReply*>(redisCommand(
      ctx_, "LRANGE %b 0 %d", user.data(), user.size(), kRedisMaxBlocks - 1));
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) {
    return ReplyError(ctx_, r, "LRANGE");
  }
  blocks->clear();
  for (size_t b = 0; b < r->elements; ++b) {
    const redisReply* e = r->element[b];
    if (e->type != REDIS_REPLY_STRING || e->len != RedisBloomBlock::kBytes) {
      freeReplyObject(r);
      return absl::DataLossError("redis: malformed Bloom block");
    }
    blocks->emplace_back(e->str, e->len);
  }
  freeReplyObject(r);
  return absl::OkStatus();
}

void FilterByBlocks(const std::vector<std::string>& blocks,
                    absl::Span<const uint64_t> hashes, uint8_t* keep) {
  std::fill(keep, keep + hashes.size(), uint8_t{1});
  for (const std::string& block : blocks) {
    for (size_t i = 0; i < hashes.size(); ++i) {
      if (keep[i] && RedisBloomBlock::MayContain(block.data(), hashes[i])) {
        keep[i] = 0;
      }
    }
  }
}

absl::Status RedisBlockListClient::SetNewestCount(const std::string& user,
                                                  uint32_t n) {
  const std::string count_key = user + ":n";
  auto* r = static_cast<redisReply*>(
      redisCommand(ctx_, "SET %b %u", count_key.data(), count_key.size(), n));
  if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
    return ReplyError(ctx_, r, "SET");
  }
  freeReplyObject(r);
  return absl::OkStatus();
}

absl::Status RedisBlockListClient::Record(absl::Span<const UserItems> batch) {
  std::vector<std::string> count_keys;
  count_keys.reserve(batch.size());
  for (const UserItems& u : batch) {
    count_keys.push_back(*u.user + ":n");
    redisAppendCommand(ctx_, "LINDEX %b 0", u.user->data(), u.user->size());
    redisAppendCommand(ctx_, "INCRBY %b %u", count_keys.back().data(),
                       count_keys.back().size(),
                       static_cast<unsigned>(u.ids.size()));
  }
  // Round trip 1's answers: the newest block, and the count after adding.
  std::vector<std::string> blocks(batch.size());
  std::vector<bool> fresh_block(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    void* reply = nullptr;
    if (redisGetReply(ctx_, &reply) != REDIS_OK) {
      return ReplyError(ctx_, nullptr, "LINDEX");
    }
    auto* r = static_cast<redisReply*>(reply);
    if (r->type == REDIS_REPLY_STRING && r->len == RedisBloomBlock::kBytes) {
      blocks[i].assign(r->str, r->len);
    } else if (r->type != REDIS_REPLY_NIL) {
      return ReplyError(ctx_, r, "LINDEX");
    }
    freeReplyObject(r);
    if (redisGetReply(ctx_, &reply) != REDIS_OK) {
      return ReplyError(ctx_, nullptr, "INCRBY");
    }
    r = static_cast<redisReply*>(reply);
    if (r->type != REDIS_REPLY_INTEGER) return ReplyError(ctx_, r, "INCRBY");
    const long long before =
        r->integer - static_cast<long long>(batch[i].ids.size());
    freeReplyObject(r);
    fresh_block[i] = blocks[i].empty() || before >= kRedisBlockItems;
  }
  // Round trip 2: the updated or new blocks.
  size_t replies = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::string& user = *batch[i].user;
    if (fresh_block[i]) blocks[i].assign(RedisBloomBlock::kBytes, '\0');
    for (uint64_t id : batch[i].ids) {
      const uint64_t h = HashItemId(id);
      ForEachBit(h, [&](uint32_t b) {
        blocks[i][b >> 3] =
            static_cast<char>(blocks[i][b >> 3] | (1 << (b & 7)));
      });
    }
    if (fresh_block[i]) {
      redisAppendCommand(ctx_, "LPUSH %b %b", user.data(), user.size(),
                         blocks[i].data(), blocks[i].size());
      redisAppendCommand(ctx_, "LTRIM %b 0 %d", user.data(), user.size(),
                         kRedisMaxBlocks - 1);
      redisAppendCommand(ctx_, "SET %b %u", count_keys[i].data(),
                         count_keys[i].size(),
                         static_cast<unsigned>(batch[i].ids.size()));
      replies += 3;
    } else {
      redisAppendCommand(ctx_, "LSET %b 0 %b", user.data(), user.size(),
                         blocks[i].data(), blocks[i].size());
      replies += 1;
    }
  }
  for (size_t i = 0; i < replies; ++i) {
    void* reply = nullptr;
    if (redisGetReply(ctx_, &reply) != REDIS_OK) {
      return ReplyError(ctx_, nullptr, "record");
    }
    auto* r = static_cast<redisReply*>(reply);
    if (r->type == REDIS_REPLY_ERROR) return ReplyError(ctx_, r, "record");
    freeReplyObject(r);
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter::bench
