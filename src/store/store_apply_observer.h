// StoreApplyObserver: what else wants to hear of each change the store
// applies, besides the write-ahead log: the session stream's subscription
// hub (src/server/session_hub.h) pushes every applied write to the clients
// subscribed to the user.
//
// OnRecord / OnDelete have StoreJournal's contract (called under the user's
// shard lock, right after the change, so per user they arrive in the order
// the changes were applied, and nothing that reads the user under its lock
// can fall between a change and its report; quick, no call back into the
// store). OnWritesReleased follows at the end of every Record and
// DeleteUser call that may have reported something, once the store holds
// no lock: the place for work that must not run under a shard lock (handing
// queued messages to the network).
#ifndef EXPOSURE_FILTER_SRC_STORE_STORE_APPLY_OBSERVER_H_
#define EXPOSURE_FILTER_SRC_STORE_STORE_APPLY_OBSERVER_H_

#include "src/store/store_journal.h"

namespace exposure_filter {

class StoreApplyObserver : public StoreJournal {
 public:
  virtual void OnWritesReleased() = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_STORE_APPLY_OBSERVER_H_
