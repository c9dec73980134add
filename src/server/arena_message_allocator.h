// ArenaMessageAllocator: gives each unary callback RPC's request and response
// a protobuf Arena, so parsing a request builds its messages, strings and
// repeated fields by bumping a pointer instead of one heap allocation each,
// and the whole RPC is freed at once. A RecordExposure of 50 users x 20 items
// is ~150 allocations without it.
//
// The arenas are pooled: each holder owns an initial block that Arena::Reset
// keeps, so a recycled holder parses the next request into memory that is
// already mapped and likely in cache (a fresh 64 KB+ block per call costs
// page faults and, when glibc trims it again, an madvise per call).
//
// The service takes messages from it for the hot RPCs and parses the
// received bytes into them itself (request_parser.h); the transport-ceiling
// server (bench/) registers it with the generated
// `SetMessageAllocatorFor_<Method>()`, so both parse into the same pooled
// arenas and their per-RPC costs stay comparable.
#ifndef EXPOSURE_FILTER_SRC_SERVER_ARENA_MESSAGE_ALLOCATOR_H_
#define EXPOSURE_FILTER_SRC_SERVER_ARENA_MESSAGE_ALLOCATOR_H_

#include <google/protobuf/arena.h>
#include <grpcpp/support/message_allocator.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace exposure_filter {

template <typename Request, typename Response>
class ArenaMessageAllocator final
    : public grpc::MessageAllocator<Request, Response> {
 public:
  // Each holder's initial block: a 5,000-candidate FilterRecalled is 40 KB
  // of ids (plus up to as much again while the packed field grows) and its
  // response; larger requests spill into further arena blocks, freed on
  // recycling. At most `max_pooled` idle holders are kept (about the
  // number of RPCs in flight at once); more are freed when released.
  static constexpr size_t kInitialBlockBytes = 128 << 10;
  static constexpr size_t kDefaultMaxPooled = 16;

  // `prepare`, if set, runs on every fresh request message before gRPC
  // parses into it (e.g. to reserve a repeated field's typical size).
  explicit ArenaMessageAllocator(
      std::function<void(Request*)> prepare = nullptr,
      size_t max_pooled = kDefaultMaxPooled)
      : prepare_(std::move(prepare)), max_pooled_(max_pooled) {}
  ~ArenaMessageAllocator() override {
    absl::MutexLock lock(&mu_);
    for (Holder* h : idle_) delete h;
  }

  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    Holder* h = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        h = idle_.back();
        idle_.pop_back();
      }
    }
    if (h == nullptr) h = new Holder(this);
    h->Prepare(prepare_);
    return h;
  }

 private:
  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    explicit Holder(ArenaMessageAllocator* owner)
        : owner_(owner),
          block_(new char[kInitialBlockBytes]),
          arena_(Options(block_.get())) {}

    void Prepare(const std::function<void(Request*)>& prepare) {
      Request* req = google::protobuf::Arena::CreateMessage<Request>(&arena_);
      if (prepare) prepare(req);
      this->set_request(req);
      this->set_response(
          google::protobuf::Arena::CreateMessage<Response>(&arena_));
    }

    // Called by gRPC once the RPC is done with both messages.
    void Release() override {
      arena_.Reset();  // destroys both messages, keeps the initial block
      owner_->Recycle(this);
    }

   private:
    static google::protobuf::ArenaOptions Options(char* block) {
      google::protobuf::ArenaOptions options;
      options.initial_block = block;
      options.initial_block_size = kInitialBlockBytes;
      options.max_block_size = 1 << 20;
      return options;
    }

    ArenaMessageAllocator* const owner_;
    const std::unique_ptr<char[]> block_;  // outlives arena_ (declared first)
    google::protobuf::Arena arena_;
  };

  void Recycle(Holder* h) {
    {
      absl::MutexLock lock(&mu_);
      if (idle_.size() < max_pooled_) {
        idle_.push_back(h);
        return;
      }
    }
    delete h;
  }

  const std::function<void(Request*)> prepare_;
  const size_t max_pooled_;
  absl::Mutex mu_;
  std::vector<Holder*> idle_ ABSL_GUARDED_BY(mu_);
};

// FilterRecalled requests are mostly thousands of packed fixed64 candidate
// ids. Protobuf grows the field chunk by chunk of the received buffer
// (copying what it has each time it doubles); reserving the typical size in
// the arena first makes the parse a single copy. 8,192 ids = 64 KB of the
// holder's 128 KB initial block; a bump of the arena pointer, nothing is
// touched until written.
inline constexpr int kReservedCandidateIds = 8192;

template <typename FilterRecalledRequest>
void ReserveCandidateIds(FilterRecalledRequest* req) {
  req->mutable_candidate_ids()->Reserve(kReservedCandidateIds);
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_ARENA_MESSAGE_ALLOCATOR_H_
