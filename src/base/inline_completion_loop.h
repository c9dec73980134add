// RunAsLoop: starting gRPC operations from a loop that a completion of
// those operations re-enters.
//
// gRPC's callback API may run a reaction inline, inside the call that
// started the operation (a write that completes at once, on a thread with
// no callback context of gRPC's own). A writer whose OnWriteDone starts the
// next write from the queue would then recurse once per queued message:
// thousands deep for a full queue. RunAsLoop(owner, step) runs step() in a
// loop instead; a RunAsLoop for the same owner made on this thread while
// the loop runs (from inside a step) only asks the loop for one more round.
#ifndef EXPOSURE_FILTER_SRC_BASE_INLINE_COMPLETION_LOOP_H_
#define EXPOSURE_FILTER_SRC_BASE_INLINE_COMPLETION_LOOP_H_

namespace exposure_filter {
namespace inline_completion_internal {
// The owner whose loop runs on this thread, and whether a re-entry asked
// for another round.
inline thread_local const void* running = nullptr;
inline thread_local bool again = false;
}  // namespace inline_completion_internal

template <typename Step>
void RunAsLoop(const void* owner, Step&& step) {
  namespace in = inline_completion_internal;
  if (in::running == owner) {
    in::again = true;
    return;
  }
  // Another owner's loop may be running below us on this thread (a write
  // of one stream completing inside another's): restored on the way out.
  const void* const outer = in::running;
  const bool outer_again = in::again;
  in::running = owner;
  do {
    in::again = false;
    step();
  } while (in::again);
  in::running = outer;
  in::again = outer_again;
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_BASE_INLINE_COMPLETION_LOOP_H_
