#include "src/server/arena_message_allocator.h"

#include <vector>

#include "exposure/v1/exposure_filter.pb.h"
#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

using exposure::v1::FilterRecalledRequest;
using exposure::v1::FilterRecalledResponse;
using Allocator =
    ArenaMessageAllocator<FilterRecalledRequest, FilterRecalledResponse>;

TEST(ArenaMessageAllocatorTest, RecycledHolderHandsOutFreshMessages) {
  Allocator allocator(&ReserveCandidateIds<FilterRecalledRequest>);
  auto* first = allocator.AllocateMessages();
  first->request()->set_user_id("alice");
  for (uint64_t i = 0; i < 10000; ++i) first->request()->add_candidate_ids(i);
  first->response()->set_keep_mask(std::string(1250, '\xff'));
  first->Release();
  // The pool hands the same holder back, reset: nothing of the last call.
  auto* second = allocator.AllocateMessages();
  EXPECT_EQ(second, first);
  EXPECT_TRUE(second->request()->user_id().empty());
  EXPECT_EQ(second->request()->candidate_ids_size(), 0);
  EXPECT_GE(second->request()->candidate_ids().Capacity(),
            kReservedCandidateIds);
  EXPECT_TRUE(second->response()->keep_mask().empty());
  EXPECT_NE(second->request()->GetArena(), nullptr);
  second->Release();
}

TEST(ArenaMessageAllocatorTest, KeepsAtMostMaxPooledIdleHolders) {
  Allocator allocator(nullptr, /*max_pooled=*/2);
  std::vector<
      grpc::MessageHolder<FilterRecalledRequest, FilterRecalledResponse>*>
      held;
  for (int i = 0; i < 4; ++i) held.push_back(allocator.AllocateMessages());
  for (auto* h : held) h->Release();  // two pooled, two freed (ASan checks)
  auto* a = allocator.AllocateMessages();
  auto* b = allocator.AllocateMessages();
  EXPECT_NE(a, b);
  EXPECT_TRUE(a == held[0] || a == held[1]);
  EXPECT_TRUE(b == held[0] || b == held[1]);
  a->Release();
  b->Release();
}

}  // namespace
}  // namespace exposure_filter
