#include "bench/loadgen/feed_recall.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/loadgen/redis_block_list.h"
#include "bench/loadgen/redis_tracking_cache.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/exposure_filter_client.h"
#include "exposure_filter/filter_cache.h"
#include "exposure_filter/item_hash.h"
#include "src/server/config/transport_tuning.h"

namespace exposure_filter::bench {

namespace v1 = exposure::v1;

std::string UserOf(const FeedOptions& o, uint32_t u) {
  return absl::StrCat(o.user_prefix, u);
}
std::string RedisKey(const FeedOptions& o, const std::string& user) {
  return absl::StrCat(o.surface, ":", user);
}

absl::Status HostPort(const std::string& target, std::string* host, int* port) {
  std::pair<std::string, std::string> hp = absl::StrSplit(target, ':');
  *host = hp.first;
  if (!absl::SimpleAtoi(hp.second, port)) {
    return absl::InvalidArgumentError("--target: host:port expected");
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> MakeChannel(const FeedOptions& o) {
  grpc::ChannelArguments args;
  ApplyTransportTuning(TransportTuning{}, &args);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // own connection
  return grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(),
                                   args);
}

namespace {

void DecodeMask(const std::string& mask, size_t n, uint8_t* keep) {
  for (size_t i = 0; i < n; ++i) {
    keep[i] = (static_cast<unsigned char>(mask[i / 8]) >> (i % 8)) & 1;
  }
}

class SessionRecall : public Recall {
 public:
  SessionRecall(const FeedOptions& o, FilterReplica* replica, bool forget)
      : o_(o), replica_(replica), forget_(forget) {}
  absl::Status Check(const std::string& user, const std::vector<uint64_t>& ids,
                     bool first, uint8_t* keep, bool* hit) override {
    CheckPath path = CheckPath::kStream;
    absl::Status s = replica_->Check(o_.surface, user, ids, {}, keep, &path);
    // A session's first check after Forget subscribes and waits for the
    // snapshot before answering locally: a fetch, as a cache miss is.
    *hit = path == CheckPath::kLocal && (!forget_ || !first);
    return s;
  }
  void EndSession(const std::string& user) override {
    if (forget_) replica_->Forget(o_.surface, user);
  }
  void Shown(const std::string& user,
             const std::vector<uint64_t>& ids) override {
    if (o_.note_shown) replica_->NoteShown(o_.surface, user, ids);
  }

 private:
  const FeedOptions& o_;
  FilterReplica* replica_;
  bool forget_;
};

class ModeARecall : public Recall {
 public:
  explicit ModeARecall(const FeedOptions& o)
      : o_(o), stub_(v1::ExposureFilter::NewStub(MakeChannel(o))) {}
  absl::Status Check(const std::string& user, const std::vector<uint64_t>& ids,
                     bool /*first*/, uint8_t* keep, bool* hit) override {
    *hit = false;
    req_.Clear();
    req_.set_surface(o_.surface);
    req_.set_user_id(user);
    req_.set_mode(v1::KEEP_MASK);
    req_.mutable_candidate_ids()->Add(ids.begin(), ids.end());
    v1::FilterRecalledResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    grpc::Status s = stub_->FilterRecalled(&ctx, req_, &resp);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          s.error_message());
    }
    if (resp.keep_mask().size() != (ids.size() + 7) / 8) {
      return absl::DataLossError("keep_mask of the wrong size");
    }
    DecodeMask(resp.keep_mask(), ids.size(), keep);
    return absl::OkStatus();
  }

 private:
  const FeedOptions& o_;
  std::unique_ptr<v1::ExposureFilter::Stub> stub_;
  v1::FilterRecalledRequest req_;
};

class ModeBRecall : public Recall {
 public:
  ModeBRecall(const FeedOptions& o, bool forget)
      : o_(o),
        client_(MakeChannel(o), ClientOptions{}),
        cache_(&client_, FilterCacheOptions{}),
        forget_(forget) {}
  absl::Status Check(const std::string& user, const std::vector<uint64_t>& ids,
                     bool /*first*/, uint8_t* keep, bool* hit) override {
    const uint64_t before = cache_.stats().not_modified;
    absl::StatusOr<std::shared_ptr<const PulledFilter>> f =
        cache_.Get(o_.surface, user);
    if (!f.ok()) return f.status();
    *hit = cache_.stats().not_modified > before;
    (*f)->view().KeepMaskIds(ids, keep);
    return absl::OkStatus();
  }
  void EndSession(const std::string& user) override {
    if (forget_) cache_.Invalidate(o_.surface, user);
  }

 private:
  const FeedOptions& o_;
  ExposureFilterClient client_;
  FilterCache cache_;
  bool forget_;
};

// Mode A on a Session stream: one stream per thread, one request at a
// time; the stream holds no subscription, so only answers come back.
class StreamARecall : public Recall {
 public:
  explicit StreamARecall(const FeedOptions& o)
      : o_(o), stub_(v1::ExposureFilter::NewStub(MakeChannel(o))) {
    stream_ = stub_->Session(&ctx_);
  }
  ~StreamARecall() override {
    stream_->WritesDone();
    v1::SessionResponse ignored;
    while (stream_->Read(&ignored)) {
    }
    stream_->Finish().ok();
  }
  absl::Status Check(const std::string& user, const std::vector<uint64_t>& ids,
                     bool /*first*/, uint8_t* keep, bool* hit) override {
    *hit = false;
    req_.Clear();
    req_.set_request_id(++next_id_);
    v1::FilterRecalledRequest* f = req_.mutable_filter();
    f->set_surface(o_.surface);
    f->set_user_id(user);
    f->set_mode(v1::KEEP_MASK);
    f->mutable_candidate_ids()->Add(ids.begin(), ids.end());
    if (!stream_->Write(req_)) return absl::UnavailableError("stream ended");
    v1::SessionResponse resp;
    while (stream_->Read(&resp)) {
      if (resp.request_id() != next_id_) continue;
      if (resp.has_error()) {
        return absl::Status(static_cast<absl::StatusCode>(resp.error().code()),
                            resp.error().message());
      }
      if (!resp.has_filter() ||
          resp.filter().keep_mask().size() != (ids.size() + 7) / 8) {
        return absl::DataLossError("not a KEEP_MASK filter answer");
      }
      DecodeMask(resp.filter().keep_mask(), ids.size(), keep);
      return absl::OkStatus();
    }
    return absl::UnavailableError("stream ended");
  }

 private:
  const FeedOptions& o_;
  std::unique_ptr<v1::ExposureFilter::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>>
      stream_;
  v1::SessionRequest req_;
  uint64_t next_id_ = 0;
};

class RedisRecall : public Recall {
 public:
  explicit RedisRecall(const FeedOptions& o) : o_(o) {}
  absl::Status Connect() {
    std::string host;
    int port = 0;
    if (absl::Status s = HostPort(o_.target, &host, &port); !s.ok()) return s;
    return client_.Connect(host, port);
  }
  absl::Status Check(const std::string& user, const std::vector<uint64_t>& ids,
                     bool /*first*/, uint8_t* keep, bool* hit) override {
    *hit = false;
    return client_.Filter(RedisKey(o_, user), ids, keep, &scratch_);
  }

 private:
  const FeedOptions& o_;
  RedisBlockListClient client_;
  std::vector<uint64_t> scratch_;
};

class RedisCachedRecall : public Recall {
 public:
  RedisCachedRecall(const FeedOptions& o, bool forget)
      : o_(o), forget_(forget) {}
  absl::Status Connect() {
    std::string host;
    int port = 0;
    if (absl::Status s = HostPort(o_.target, &host, &port); !s.ok()) return s;
    return cache_.Connect(host, port);
  }
  absl::Status Check(const std::string& user, const std::vector<uint64_t>& ids,
                     bool /*first*/, uint8_t* keep, bool* hit) override {
    hashes_.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) hashes_[i] = HashItemId(ids[i]);
    return cache_.Filter(RedisKey(o_, user), hashes_, keep, hit);
  }
  void EndSession(const std::string& user) override {
    if (forget_) cache_.Forget(RedisKey(o_, user));
  }
  uint64_t invalidations() const override { return cache_.invalidations(); }

 private:
  const FeedOptions& o_;
  bool forget_;
  RedisTrackingCache cache_;
  std::vector<uint64_t> hashes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Recall>> MakeRecall(const FeedOptions& o,
                                                   FilterReplica* replica) {
  if (o.system == "session") {
    return std::make_unique<SessionRecall>(o, replica, o.forget);
  } else if (o.system == "mode_a") {
    return std::make_unique<ModeARecall>(o);
  } else if (o.system == "mode_b") {
    return std::make_unique<ModeBRecall>(o, o.forget);
  } else if (o.system == "stream_a") {
    return std::make_unique<StreamARecall>(o);
  } else if (o.system == "redis") {
    auto r = std::make_unique<RedisRecall>(o);
    if (absl::Status s = r->Connect(); !s.ok()) return s;
    return r;
  } else if (o.system == "redis_cached") {
    auto r = std::make_unique<RedisCachedRecall>(o, o.forget);
    if (absl::Status s = r->Connect(); !s.ok()) return s;
    return r;
  }
  return absl::InvalidArgumentError("--system: unknown system " + o.system);
}

}  // namespace exposure_filter::bench
