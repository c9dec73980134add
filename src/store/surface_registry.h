// SurfaceRegistry: the filter namespaces ("homefeed", "video", ...) a server
// serves. Each surface keeps separate user filters with its own FP target and
// retention. Surfaces are created on first use with the default policy, or
// from explicit overrides, up to a configured count.
#ifndef EXPOSURE_FILTER_SRC_STORE_SURFACE_REGISTRY_H_
#define EXPOSURE_FILTER_SRC_STORE_SURFACE_REGISTRY_H_

#include <cstdint>
#include <deque>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/filter/filter_policy.h"

namespace exposure_filter {

struct Surface {
  uint16_t id = 0;
  std::string name;  // "" is the default surface
  FilterPolicy policy;
};

class SurfaceRegistry {
 public:
  static constexpr size_t kMaxNameBytes = 64;

  // `overrides`: per-surface policies. Parse them with ParseSurfaceOverrides.
  static absl::StatusOr<std::unique_ptr<SurfaceRegistry>> Create(
      const FilterPolicyOptions& defaults,
      const std::vector<std::pair<std::string, FilterPolicyOptions>>& overrides,
      size_t max_surfaces);

  // Checks the name: at most 64 bytes of [a-z0-9_.-]. InvalidArgument if not.
  static absl::Status ValidateName(absl::string_view name);

  // The surface named `name`, created on first use. InvalidArgument for a bad
  // name, ResourceExhausted when max_surfaces exist already. The returned
  // pointer lives as long as the registry.
  absl::StatusOr<const Surface*> GetOrCreate(absl::string_view name);
  // nullptr if the surface does not exist (reads need not create it).
  const Surface* Find(absl::string_view name) const;
  const Surface* ById(uint16_t id) const;
  // The policy `name` has or would get when created; does not create it.
  const FilterPolicy& PolicyFor(absl::string_view name) const;
  std::vector<const Surface*> All() const;
  size_t max_surfaces() const { return max_surfaces_; }

 private:
  SurfaceRegistry(FilterPolicy default_policy, size_t max_surfaces)
      : default_policy_(std::move(default_policy)),
        max_surfaces_(max_surfaces) {}
  const Surface* AddLocked(absl::string_view name, const FilterPolicy& policy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FilterPolicy default_policy_;
  const size_t max_surfaces_;
  mutable absl::Mutex mu_;
  // deque: pointers to elements stay valid as surfaces are added.
  std::deque<Surface> surfaces_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, const Surface*> by_name_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, FilterPolicy> overrides_ ABSL_GUARDED_BY(mu_);
};

// Parses "name:key=value:key=value;name2:..." with keys fp_rate, retention,
// slice_span; durations take absl syntax (720h, 90m) or days (30d).
absl::StatusOr<std::vector<std::pair<std::string, FilterPolicyOptions>>>
ParseSurfaceOverrides(absl::string_view spec,
                      const FilterPolicyOptions& defaults);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_SURFACE_REGISTRY_H_
