#include "src/store/surface_registry.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using Overrides = std::vector<std::pair<std::string, FilterPolicyOptions>>;

// absl::string_view is not std::string_view here; gmock's string matchers
// want a std::string.
std::string Message(const absl::Status& s) { return std::string(s.message()); }

// Defaults chosen so that both example overrides below give valid policies
// (at most 8 live slices) and differ from the defaults in every field they
// set.
FilterPolicyOptions TestDefaults() {
  FilterPolicyOptions d;
  d.fp_rate = 0.01;
  d.retention = absl::Hours(24 * 6);
  d.slice_span = absl::Hours(24 * 2);
  return d;
}

std::unique_ptr<SurfaceRegistry> MakeRegistry(const Overrides& overrides,
                                              size_t max_surfaces) {
  absl::StatusOr<std::unique_ptr<SurfaceRegistry>> r =
      SurfaceRegistry::Create(TestDefaults(), overrides, max_surfaces);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

TEST(SurfaceRegistryTest, ValidateNameAcceptsLowercaseDigitsAndPunctuation) {
  EXPECT_TRUE(SurfaceRegistry::ValidateName("").ok());
  EXPECT_TRUE(SurfaceRegistry::ValidateName("homefeed").ok());
  EXPECT_TRUE(SurfaceRegistry::ValidateName("a.b-c_9").ok());
  EXPECT_TRUE(SurfaceRegistry::ValidateName(std::string(64, 'z')).ok());
}

TEST(SurfaceRegistryTest, ValidateNameRejectsBadCharactersAndLength) {
  const std::vector<std::string> bad = {"Homefeed",
                                        "home feed",
                                        "home/feed",
                                        "na\xc3\xafve",
                                        std::string("a\0b", 3),
                                        std::string(65, 'z')};
  for (const std::string& name : bad) {
    const absl::Status s = SurfaceRegistry::ValidateName(name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(Message(s), StartsWith("surface: ")) << name;
  }
  EXPECT_THAT(Message(SurfaceRegistry::ValidateName(std::string(65, 'z'))),
              HasSubstr("65"));
}

TEST(SurfaceRegistryTest, GetOrCreateReturnsTheSameSurfaceForAName) {
  std::unique_ptr<SurfaceRegistry> r = MakeRegistry({}, 4);
  const Surface* a = *r->GetOrCreate("homefeed");
  const Surface* b = *r->GetOrCreate("video");
  const Surface* def = *r->GetOrCreate("");
  EXPECT_EQ(*r->GetOrCreate("homefeed"), a);
  EXPECT_EQ(a->name, "homefeed");
  EXPECT_EQ(def->name, "");
  // Ids are dense, in creation order, and resolve back.
  EXPECT_EQ(a->id, 0);
  EXPECT_EQ(b->id, 1);
  EXPECT_EQ(def->id, 2);
  EXPECT_EQ(r->ById(1), b);
  EXPECT_EQ(r->ById(3), nullptr);
  EXPECT_EQ(r->Find("video"), b);
  EXPECT_EQ(r->All(), (std::vector<const Surface*>{a, b, def}));
}

TEST(SurfaceRegistryTest, GetOrCreateRejectsABadName) {
  std::unique_ptr<SurfaceRegistry> r = MakeRegistry({}, 4);
  absl::StatusOr<const Surface*> s = r->GetOrCreate("Bad Name");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r->All().empty());
}

TEST(SurfaceRegistryTest, GetOrCreateRespectsMaxSurfaces) {
  std::unique_ptr<SurfaceRegistry> r = MakeRegistry({}, 2);
  ASSERT_TRUE(r->GetOrCreate("a").ok());
  ASSERT_TRUE(r->GetOrCreate("b").ok());
  absl::StatusOr<const Surface*> c = r->GetOrCreate("c");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(c.status()), StartsWith("surface: "));
  EXPECT_EQ(r->Find("c"), nullptr);
  // Existing surfaces stay reachable at the limit.
  EXPECT_TRUE(r->GetOrCreate("a").ok());
  EXPECT_EQ(r->max_surfaces(), 2u);
}

TEST(SurfaceRegistryTest, CreateRejectsABadMaxSurfaces) {
  EXPECT_EQ(SurfaceRegistry::Create(TestDefaults(), {}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SurfaceRegistry::Create(TestDefaults(), {}, 65536).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SurfaceRegistryTest, ParsedOverridesApplyToTheirSurfaces) {
  absl::StatusOr<Overrides> ov = ParseSurfaceOverrides(
      "video:fp_rate=0.001:retention=7d;news:slice_span=1d", TestDefaults());
  ASSERT_TRUE(ov.ok()) << ov.status();
  ASSERT_EQ(ov->size(), 2u);
  EXPECT_EQ((*ov)[0].first, "video");
  EXPECT_EQ((*ov)[0].second.fp_rate, 0.001);
  EXPECT_EQ((*ov)[0].second.retention, absl::Hours(24 * 7));
  EXPECT_EQ((*ov)[0].second.slice_span, TestDefaults().slice_span);
  EXPECT_EQ((*ov)[1].first, "news");
  EXPECT_EQ((*ov)[1].second.fp_rate, TestDefaults().fp_rate);
  EXPECT_EQ((*ov)[1].second.slice_span, absl::Hours(24));

  std::unique_ptr<SurfaceRegistry> r = MakeRegistry(*ov, 8);
  ASSERT_NE(r, nullptr);
  const Surface* video = *r->GetOrCreate("video");
  EXPECT_EQ(video->policy.fp_rate(), 0.001);
  EXPECT_EQ(video->policy.retention_ms(), 7 * 86'400'000LL);
  EXPECT_EQ(video->policy.slice_span_ms(), 2 * 86'400'000LL);
  const Surface* news = *r->GetOrCreate("news");
  EXPECT_EQ(news->policy.fp_rate(), 0.01);
  EXPECT_EQ(news->policy.retention_ms(), 6 * 86'400'000LL);
  EXPECT_EQ(news->policy.slice_span_ms(), 86'400'000LL);
  // Everything else gets the defaults.
  const Surface* other = *r->GetOrCreate("homefeed");
  EXPECT_EQ(other->policy.fp_rate(), 0.01);
  EXPECT_EQ(other->policy.retention_ms(), 6 * 86'400'000LL);
  EXPECT_EQ(other->policy.slice_span_ms(), 2 * 86'400'000LL);
}

TEST(SurfaceRegistryTest, ParseAcceptsAbslDurationsAndEmptySpec) {
  absl::StatusOr<Overrides> ov =
      ParseSurfaceOverrides("a:retention=72h:slice_span=90m;b", TestDefaults());
  ASSERT_TRUE(ov.ok()) << ov.status();
  ASSERT_EQ(ov->size(), 2u);
  EXPECT_EQ((*ov)[0].second.retention, absl::Hours(72));
  EXPECT_EQ((*ov)[0].second.slice_span, absl::Minutes(90));
  EXPECT_EQ((*ov)[1].first, "b");
  EXPECT_EQ((*ov)[1].second.retention, TestDefaults().retention);

  absl::StatusOr<Overrides> empty = ParseSurfaceOverrides("", TestDefaults());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(SurfaceRegistryTest, MalformedOverridesAreInvalidArgument) {
  for (const char* spec :
       {"video:fp_rate=abc", "video:fp_rate", "video:colour=blue",
        "video:retention=", "video:retention=7 days", "video:retention=-1d",
        "video:slice_span=1w", "video:fp_rate=0.01:", "video::retention=7d"}) {
    absl::StatusOr<Overrides> ov = ParseSurfaceOverrides(spec, TestDefaults());
    EXPECT_EQ(ov.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_THAT(Message(ov.status()), StartsWith("surfaces: ")) << spec;
  }
}

TEST(SurfaceRegistryTest, CreateRejectsInvalidOverrides) {
  auto parse = [](const char* spec) {
    absl::StatusOr<Overrides> ov = ParseSurfaceOverrides(spec, TestDefaults());
    EXPECT_TRUE(ov.ok()) << spec << ": " << ov.status();
    return ov.ok() ? *ov : Overrides{};
  };
  // Parses, but names or policies the registry cannot accept.
  for (const char* spec :
       {"Video:fp_rate=0.01", "video:fp_rate=0.9", "video:retention=1d",
        "video:slice_span=1h", "video;video",
        // Durations that saturate to infinity must not overflow the
        // live-slice arithmetic into an accepted policy.
        "video:retention=inf", "video:retention=1e300d",
        "video:retention=inf:slice_span=inf"}) {
    absl::StatusOr<std::unique_ptr<SurfaceRegistry>> r =
        SurfaceRegistry::Create(TestDefaults(), parse(spec), 8);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << spec;
  }
  EXPECT_THAT(Message(SurfaceRegistry::Create(TestDefaults(),
                                              parse("video:fp_rate=0.9"), 8)
                          .status()),
              HasSubstr("\"video\""));
  // More overrides than surfaces allowed.
  EXPECT_EQ(SurfaceRegistry::Create(TestDefaults(), parse("a;b;c"), 2)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SurfaceRegistryTest, PolicyForDoesNotCreate) {
  absl::StatusOr<Overrides> ov =
      ParseSurfaceOverrides("video:fp_rate=0.001", TestDefaults());
  ASSERT_TRUE(ov.ok());
  std::unique_ptr<SurfaceRegistry> r = MakeRegistry(*ov, 8);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->PolicyFor("video").fp_rate(), 0.001);
  EXPECT_EQ(r->PolicyFor("homefeed").fp_rate(), 0.01);
  EXPECT_EQ(r->Find("video"), nullptr);
  EXPECT_EQ(r->Find("homefeed"), nullptr);
  EXPECT_TRUE(r->All().empty());
  // The policy it reports is the one the surface gets.
  EXPECT_EQ((*r->GetOrCreate("video"))->policy.fp_rate(), 0.001);
}

}  // namespace
}  // namespace exposure_filter
