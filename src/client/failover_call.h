// One routed call that fails over between a user's R owners inside one
// deadline, optionally hedged (routing_client.h; docs/clients.md).
//
// Owners are tried in order (owner 0 first). Each try is a gRPC callback-API
// call with its own ClientContext whose deadline is
//   min(call deadline, try start + per_try_timeout),
// so a hanging owner costs at most per_try_timeout. A try that ends in
// UNAVAILABLE (server says so, connection refused or lost), in CANCELLED
// (by a server shutting down) or in DEADLINE_EXCEEDED before the call's
// deadline (its per-try timeout) moves on to the next owner; any other code
// ends the call at once, except a FAILED_PRECONDITION whose owner hint shows
// another replication factor with the same P and N: the placement changed, the
// owner list is recomputed and the call goes on with the owners not tried yet.
// With hedging (hedge_delay > 0) a try still running hedge_delay after the
// last start gets company: the next owner is sent the same request; the
// first OK answer wins and the others are cancelled.
// A try is told whether it goes to the last owner of the list (a failover or
// a hedge alike): no owner is left after it, so the routing client lets
// that one answer from a lagging copy (allow_lagging) rather than fail.
// With `last_resort_pass` (lag-gated reads), when every owner has failed and
// time is left, each earlier owner that answered UNAVAILABLE is tried once
// more as a last owner, in order: the last owner in placement order may be
// the one that is down while an earlier one only lagged, and that one's
// least-stale answer beats a failed read.
// The caller's thread waits on a mutex; the tries complete on gRPC's threads.
// Every try is finished (cancelled if need be) before Run returns, since the
// callbacks write into this frame.
#ifndef EXPOSURE_FILTER_SRC_CLIENT_FAILOVER_CALL_H_
#define EXPOSURE_FILTER_SRC_CLIENT_FAILOVER_CALL_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "exposure_filter/exposure_filter_client.h"

namespace exposure_filter {
namespace internal {

struct FailoverPolicy {
  absl::Duration deadline;         // the whole call, every try included
  absl::Duration per_try_timeout;  // <= 0: a try may use the whole deadline
  absl::Duration hedge_delay;      // <= 0: no hedging
  // Retry owners that answered UNAVAILABLE as last owners once all failed.
  bool last_resort_pass = false;
};

// What a call reports to the client's counters.
struct FailoverEvents {
  std::function<void(int32_t replica)> replica_error;  // a try failed
  std::function<void()> failover;  // next owner tried after a failure
  std::function<void()> hedge;     // next owner tried while one is running
  // Given the failing status, the owner list to go on with (the placement
  // changed), or an empty vector: stop.
  std::function<std::vector<int32_t>(const absl::Status&)> replan;
  // The error the call ends with when `replica` answered it and no owner is
  // left to try (routing diagnosis of an owner hint).
  std::function<absl::Status(int32_t replica, absl::Status)> diagnose;
};

// Starts `Response`'s RPC on `replica` with `context`, writing `response` and
// calling `done` once (from any thread). `last_owner`: `replica` is the last
// of two or more owners. Runs on the caller's thread.
template <typename Response>
using StartTry = std::function<void(
    int32_t replica, bool last_owner, grpc::ClientContext* context,
    Response* response, std::function<void(grpc::Status)> done)>;

template <typename Response>
absl::StatusOr<Response> RunWithFailover(std::vector<int32_t> owners,
                                         const FailoverPolicy& policy,
                                         const StartTry<Response>& start,
                                         const FailoverEvents& events,
                                         int32_t* answered_by = nullptr) {
  struct Try {
    int32_t replica = -1;
    bool last_owner = false;     // told it was the last owner
    bool call_deadline = false;  // its deadline is the call's, not a per-try
    grpc::ClientContext context;
    Response response;
    grpc::Status status;  // written by the callback, under Shared::mu
  };
  struct Shared {
    absl::Mutex mu;
    std::deque<size_t> finished ABSL_GUARDED_BY(mu);  // indices into tries
    size_t done ABSL_GUARDED_BY(mu) = 0;
  };
  Shared shared;
  std::vector<std::unique_ptr<Try>> tries;  // stable addresses
  const absl::Time deadline = absl::Now() + policy.deadline;
  const bool hedging = policy.hedge_delay > absl::ZeroDuration();
  size_t next = 0;  // the next owner to try
  int outstanding = 0;
  absl::Time hedge_at = absl::InfiniteFuture();

  // The owners the last-resort pass still has to try, once planned.
  std::deque<int32_t> last_resort;
  bool last_resort_planned = false;

  auto launch_replica = [&](int32_t replica, bool last_owner) {
    const size_t index = tries.size();
    Try& t = *tries.emplace_back(std::make_unique<Try>());
    t.replica = replica;
    t.last_owner = last_owner;
    absl::Time try_deadline = deadline;
    if (policy.per_try_timeout > absl::ZeroDuration()) {
      try_deadline = std::min(deadline, absl::Now() + policy.per_try_timeout);
    }
    t.call_deadline = try_deadline == deadline;
    t.context.set_deadline(absl::ToChronoTime(try_deadline));
    ++outstanding;
    if (hedging) hedge_at = absl::Now() + policy.hedge_delay;
    start(t.replica, last_owner, &t.context, &t.response,
          [&shared, &t, index](grpc::Status s) {
            absl::MutexLock lock(&shared.mu);
            t.status = std::move(s);
            shared.finished.push_back(index);
            ++shared.done;
          });
  };
  auto launch = [&]() {
    const int32_t replica = owners[next++];
    // One owner (R = 1) is no "last try": such servers gate no reads.
    launch_replica(replica, owners.size() > 1 && next == owners.size());
  };

  std::vector<std::string> failures;  // "replica r: CODE: message"
  absl::StatusOr<Response> result =
      absl::UnavailableError("no owner");  // replaced below
  launch();
  while (true) {
    size_t index = tries.size();  // none
    grpc::Status status;
    {
      absl::MutexLock lock(&shared.mu);
      const bool any = shared.mu.AwaitWithDeadline(
          absl::Condition(
              +[](std::deque<size_t>* q) { return !q->empty(); },
              &shared.finished),
          hedge_at);
      if (any) {
        index = shared.finished.front();
        shared.finished.pop_front();
        status = tries[index]->status;
      }
    }
    if (index == tries.size()) {  // the hedge timer fired
      if (next < owners.size() && absl::Now() < deadline) {
        launch();
        events.hedge();
      } else {
        hedge_at = absl::InfiniteFuture();
      }
      continue;
    }
    --outstanding;
    Try& t = *tries[index];
    if (status.ok()) {
      result = std::move(t.response);
      if (answered_by != nullptr) *answered_by = t.replica;
      break;
    }
    absl::Status error = StatusFromCall(status, t.context);
    events.replica_error(t.replica);
    failures.push_back(absl::StrCat("replica ", t.replica, ": ",
                                    absl::StatusCodeToString(error.code()),
                                    ": ", error.message()));
    // A try that ran to the call's own deadline and ended DEADLINE_EXCEEDED
    // with less than kDeadlineSkew left ends the call's time too: gRPC
    // times the deadline on its own clock, converted from absl::Now()'s
    // with a skew of microseconds, and was seen in CI to fire
    // before absl::Now() reached `deadline`; the next owner then got a
    // call already out of time. A DEADLINE_EXCEEDED with more time left
    // came from elsewhere (a proxy's timeout) and fails over as before.
    constexpr absl::Duration kDeadlineSkew = absl::Milliseconds(1);
    const absl::Time now = absl::Now();
    const bool in_time =
        t.call_deadline && error.code() == absl::StatusCode::kDeadlineExceeded
            ? now + kDeadlineSkew < deadline
            : now < deadline;
    // DEADLINE_EXCEEDED is a per-try timeout while the call has time left,
    // else the call's own deadline: then no owner is started any more.
    // CANCELLED: this loop cancels tries only after the call has its answer
    // (losing hedges), so one seen here came from the server: gRPC cancels
    // the calls that reach a server just as it shuts down (the failover
    // drill saw "CANCELLED" 0 ms after a SIGTERM). Every RPC is safe to
    // repeat, so the next owner gets it.
    bool go_on = error.code() == absl::StatusCode::kUnavailable ||
                 error.code() == absl::StatusCode::kDeadlineExceeded ||
                 error.code() == absl::StatusCode::kCancelled;
    if (!go_on && error.code() == absl::StatusCode::kFailedPrecondition) {
      std::vector<int32_t> replanned = events.replan(error);
      if (replanned.size() > next) {
        // Owner i is (p + i) mod N whatever R, so the new list extends or
        // truncates the old one: the first `next` were tried already.
        owners = std::move(replanned);
        go_on = true;
      }
    }
    if (!go_on) {
      result = events.diagnose(t.replica, std::move(error));
      break;
    }
    if (next < owners.size() && in_time) {
      launch();
      events.failover();
      continue;
    }
    if (outstanding > 0) continue;  // a hedged try may still answer
    if (policy.last_resort_pass && !last_resort_planned && in_time &&
        owners.size() > 1) {
      last_resort_planned = true;
      for (const auto& tried : tries) {
        if (tried->last_owner ||
            tried->status.error_code() != grpc::StatusCode::UNAVAILABLE ||
            std::find(last_resort.begin(), last_resort.end(), tried->replica) !=
                last_resort.end()) {
          continue;
        }
        last_resort.push_back(tried->replica);
      }
    }
    if (!last_resort.empty() && in_time) {
      const int32_t replica = last_resort.front();
      last_resort.pop_front();
      launch_replica(replica, /*last_owner=*/true);
      events.failover();
      continue;
    }
    std::vector<std::string> untried;
    for (size_t i = next; i < owners.size(); ++i) {
      untried.push_back(absl::StrCat(owners[i]));
    }
    const std::string tried = absl::StrJoin(failures, "; ");
    if (tries.size() == 1 && untried.empty()) {
      // One owner (R = 1): its error as it came, as without failover.
      result = events.diagnose(t.replica, std::move(error));
    } else if (!untried.empty()) {
      result = absl::DeadlineExceededError(
          absl::StrCat("deadline of ", absl::FormatDuration(policy.deadline),
                       " reached before owners ", absl::StrJoin(untried, ", "),
                       " were tried: ", tried));
    } else if (!in_time) {
      result = absl::DeadlineExceededError(
          absl::StrCat("deadline of ", absl::FormatDuration(policy.deadline),
                       " reached; every owner was tried: ", tried));
    } else {
      // A last-resort retry of an owner shows in `tried` as its second
      // failure; the count is of owners.
      result = absl::UnavailableError(
          absl::StrCat("every owner failed (", std::min(next, owners.size()),
                       " of ", owners.size(), " tried): ", tried));
    }
    break;
  }
  // Cancel the tries still running (losing hedges; cancelling a finished
  // one is a no-op) outside the lock, in case gRPC runs a callback inline,
  // then wait for their callbacks, which write into `tries` and `shared`.
  if (outstanding > 0) {
    for (auto& t : tries) t->context.TryCancel();
  }
  struct AllDone {
    const size_t* done;
    size_t launched;
    bool operator()() const { return *done == launched; }
  };
  absl::MutexLock lock(&shared.mu);
  const AllDone all_done{&shared.done, tries.size()};
  shared.mu.Await(absl::Condition(&all_done, &AllDone::operator()));
  return result;
}

}  // namespace internal
}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_CLIENT_FAILOVER_CALL_H_
