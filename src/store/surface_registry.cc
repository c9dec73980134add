#include "src/store/surface_registry.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace exposure_filter {
namespace {

// absl::ParseDuration plus a "d" (24h) suffix, since retentions are in days.
bool ParseDays(absl::string_view text, absl::Duration* out) {
  double days;
  if (absl::ConsumeSuffix(&text, "d") && absl::SimpleAtod(text, &days) &&
      days >= 0) {
    *out = absl::Hours(24) * days;
    return true;
  }
  return false;
}

bool ParseDurationOrDays(absl::string_view text, absl::Duration* out) {
  return ParseDays(text, out) || absl::ParseDuration(text, out);
}

}  // namespace

absl::Status SurfaceRegistry::ValidateName(absl::string_view name) {
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("surface: ", name.size(), " bytes exceeds the limit of ",
                     kMaxNameBytes));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          "surface: only [a-z0-9_.-] are allowed (e.g. \"homefeed\")");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SurfaceRegistry>> SurfaceRegistry::Create(
    const FilterPolicyOptions& defaults,
    const std::vector<std::pair<std::string, FilterPolicyOptions>>& overrides,
    size_t max_surfaces) {
  absl::StatusOr<FilterPolicy> def = FilterPolicy::Create(defaults);
  if (!def.ok()) return def.status();
  if (max_surfaces < 1 || max_surfaces > 65535) {
    return absl::InvalidArgumentError("max_surfaces must be in [1, 65535]");
  }
  if (overrides.size() > max_surfaces) {
    return absl::InvalidArgumentError("more surface overrides than max_surfaces");
  }
  std::unique_ptr<SurfaceRegistry> r(
      new SurfaceRegistry(*std::move(def), max_surfaces));
  absl::MutexLock lock(&r->mu_);
  for (const auto& [name, opts] : overrides) {
    if (absl::Status s = ValidateName(name); !s.ok()) return s;
    absl::StatusOr<FilterPolicy> p = FilterPolicy::Create(opts);
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("surface \"", name, "\": ", p.status().message()));
    }
    if (!r->overrides_.emplace(name, *std::move(p)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("surface \"", name, "\" configured twice"));
    }
  }
  return r;
}

const Surface* SurfaceRegistry::AddLocked(absl::string_view name,
                                          const FilterPolicy& policy) {
  Surface& s = surfaces_.emplace_back(
      Surface{static_cast<uint16_t>(surfaces_.size()), std::string(name),
              policy});
  by_name_.emplace(s.name, &s);
  return &s;
}

absl::StatusOr<const Surface*> SurfaceRegistry::GetOrCreate(
    absl::string_view name) {
  if (const Surface* s = Find(name)) return s;
  if (absl::Status st = ValidateName(name); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  if (auto it = by_name_.find(name); it != by_name_.end()) return it->second;
  if (surfaces_.size() >= max_surfaces_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "surface: the server already holds ", max_surfaces_,
        " surfaces (--max_surfaces)"));
  }
  auto ov = overrides_.find(name);
  return AddLocked(name, ov != overrides_.end() ? ov->second : default_policy_);
}

const Surface* SurfaceRegistry::Find(absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const Surface* SurfaceRegistry::ById(uint16_t id) const {
  absl::ReaderMutexLock lock(&mu_);
  return id < surfaces_.size() ? &surfaces_[id] : nullptr;
}

const FilterPolicy& SurfaceRegistry::PolicyFor(absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = overrides_.find(name);
  // Overrides are never erased, so the reference outlives the lock.
  return it != overrides_.end() ? it->second : default_policy_;
}

std::vector<const Surface*> SurfaceRegistry::All() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<const Surface*> all;
  for (const Surface& s : surfaces_) all.push_back(&s);
  return all;
}

absl::StatusOr<std::vector<std::pair<std::string, FilterPolicyOptions>>>
ParseSurfaceOverrides(absl::string_view spec,
                      const FilterPolicyOptions& defaults) {
  std::vector<std::pair<std::string, FilterPolicyOptions>> out;
  for (absl::string_view entry : absl::StrSplit(spec, ';', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    FilterPolicyOptions opts = defaults;
    for (size_t i = 1; i < parts.size(); ++i) {
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
      bool ok = false;
      if (kv.first == "fp_rate") {
        ok = absl::SimpleAtod(kv.second, &opts.fp_rate);
      } else if (kv.first == "retention") {
        ok = ParseDurationOrDays(kv.second, &opts.retention);
      } else if (kv.first == "slice_span") {
        ok = ParseDurationOrDays(kv.second, &opts.slice_span);
      }
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat(
            "surfaces: cannot parse \"", parts[i], "\" in \"", entry,
            "\"; expected fp_rate=0.01, retention=30d or slice_span=5d"));
      }
    }
    out.emplace_back(std::string(parts[0]), opts);
  }
  return out;
}

}  // namespace exposure_filter
