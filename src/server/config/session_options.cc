#include "src/server/config/session_options.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace exposure_filter {

absl::Status SessionOptions::Validate() const {
  for (auto [name, value] :
       {std::pair{"session_max_streams", max_streams},
        {"session_max_subscriptions_per_stream", max_subscriptions_per_stream},
        {"session_max_subscriptions", max_subscriptions},
        {"session_max_queue_bytes", max_queue_bytes},
        {"session_max_queue_messages", max_queue_messages}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be at least 1, got ", value));
    }
  }
  if (max_subscriptions_per_stream > max_subscriptions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--session_max_subscriptions_per_stream=", max_subscriptions_per_stream,
        " exceeds --session_max_subscriptions=", max_subscriptions));
  }
  // Four messages at least: the watermarks at a half and a quarter of the
  // budget must leave room for an answer and a resync notice.
  if (max_queue_messages < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session_max_queue_messages must be at least 4, got ",
                     max_queue_messages));
  }
  if (subscription_idle_timeout <= absl::ZeroDuration() ||
      subscription_idle_timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session_subscription_idle_timeout must be positive "
                     "and finite, got ",
                     absl::FormatDuration(subscription_idle_timeout)));
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter
