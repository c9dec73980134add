// Authorization below the transport: the --authz_policy parser,
// the RPC -> role table, RpcAuthorizer's decisions and messages, the denial
// counters, the audit line's format, and the flags. The handshakes, the
// real certificates and the audit lines of a running server are tested end
// to end in tests/e2e/test_authorization.py.
#include <google/protobuf/descriptor.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/config/server_flags.h"
#include "src/server/security/admin_audit.h"
#include "src/server/security/authorization_metrics.h"
#include "src/server/security/authorization_policy.h"
#include "src/server/security/caller_identity.h"
#include "src/server/security/rpc_authorizer.h"
#include "src/server/security/rpc_roles.h"

ABSL_DECLARE_FLAG(std::string, authz_policy);
ABSL_DECLARE_FLAG(bool, audit_hash_user_ids);

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

constexpr char kPolicy[] = R"(# test policy
read        uri:spiffe://example.org/ns/recall/sa/recall-server
write       dns:logger.example

read,admin  cn:oncall
  # indented comment, blank lines

read        dns:both.example
write       dns:both.example
)";

AuthorizationPolicy TestPolicy() {
  absl::StatusOr<AuthorizationPolicy> p =
      AuthorizationPolicy::Parse(kPolicy, "test");
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

// --- policy -----------------------------------------------------------------

TEST(AuthorizationPolicyTest, GrantsEachIdentityItsRoles) {
  const AuthorizationPolicy p = TestPolicy();
  EXPECT_EQ(p.identities(), 4u);
  const std::vector<std::string> reader = {
      "uri:spiffe://example.org/ns/recall/sa/recall-server"};
  EXPECT_NE(p.Grantee(reader, Role::kRead), nullptr);
  EXPECT_EQ(p.Grantee(reader, Role::kWrite), nullptr);
  EXPECT_EQ(p.Grantee(reader, Role::kAdmin), nullptr);
  const std::vector<std::string> oncall = {"cn:oncall"};
  EXPECT_NE(p.Grantee(oncall, Role::kRead), nullptr);
  EXPECT_NE(p.Grantee(oncall, Role::kAdmin), nullptr);
  EXPECT_EQ(p.Grantee(oncall, Role::kWrite), nullptr);
}

TEST(AuthorizationPolicyTest, LinesForOneIdentityAddUp) {
  const AuthorizationPolicy p = TestPolicy();
  const std::vector<std::string> both = {"dns:both.example"};
  EXPECT_NE(p.Grantee(both, Role::kRead), nullptr);
  EXPECT_NE(p.Grantee(both, Role::kWrite), nullptr);
  EXPECT_EQ(p.Grantee(both, Role::kAdmin), nullptr);
}

TEST(AuthorizationPolicyTest, GranteeIsTheIdentityThatHoldsTheRole) {
  const AuthorizationPolicy p = TestPolicy();
  const std::vector<std::string> ids = {"dns:pod.example", "dns:logger.example",
                                        "cn:logger"};
  const std::string* grantee = p.Grantee(ids, Role::kWrite);
  ASSERT_NE(grantee, nullptr);
  EXPECT_EQ(*grantee, "dns:logger.example");
}

TEST(AuthorizationPolicyTest, SanAndCnAreDistinct) {
  // A certificate whose CN happens to equal a granted SAN value gets
  // nothing from it.
  const AuthorizationPolicy p = TestPolicy();
  EXPECT_EQ(p.Grantee({"cn:logger.example"}, Role::kWrite), nullptr);
  EXPECT_EQ(p.Grantee({"dns:oncall"}, Role::kAdmin), nullptr);
}

TEST(AuthorizationPolicyTest, UnknownRoleNamesTheLine) {
  const absl::Status s =
      AuthorizationPolicy::Parse("read dns:a\n\n# c\nreed dns:b\n", "--p=f")
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("--p=f line 4: unknown role \"reed\""));
}

TEST(AuthorizationPolicyTest, ThirdFieldNamesTheLine) {
  const absl::Status s =
      AuthorizationPolicy::Parse("read dns:a extra\n", "f").status();
  EXPECT_THAT(Message(s), HasSubstr("f line 1: expected"));
  EXPECT_THAT(Message(s), HasSubstr("got 3 fields"));
}

TEST(AuthorizationPolicyTest, MissingIdentityNamesTheLine) {
  const absl::Status s =
      AuthorizationPolicy::Parse("read dns:a\nadmin\n", "f").status();
  EXPECT_THAT(Message(s), HasSubstr("f line 2: expected"));
}

TEST(AuthorizationPolicyTest, IdentityWithoutKindNamesTheLine) {
  for (const char* bad :
       {"read reader.example\n", "read san:\n", "read dns:\n",
        "read spiffe://example.org/x\n", "read DNS:reader.example\n"}) {
    const absl::Status s = AuthorizationPolicy::Parse(bad, "f").status();
    EXPECT_THAT(Message(s), HasSubstr("f line 1: identity"));
    EXPECT_THAT(Message(s), HasSubstr("must be dns:<name>, uri:<uri>, "
                                      "email:<address>, ip:<address> or "
                                      "cn:<common name>"));
  }
}

TEST(AuthorizationPolicyTest, ByteOrderMarkAtTheStartIsNotPartOfARole) {
  absl::StatusOr<AuthorizationPolicy> p = AuthorizationPolicy::Parse(
      "\xEF\xBB\xBF"
      "admin cn:ops\n",
      "f");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(p->Grantee({"cn:ops"}, Role::kAdmin), nullptr);
  // Anywhere else it is a byte of a role name, shown escaped.
  const absl::Status s = AuthorizationPolicy::Parse(
                             "read cn:a\n\xEF\xBB\xBF"
                             "admin cn:b\n",
                             "f")
                             .status();
  EXPECT_THAT(Message(s),
              HasSubstr("f line 2: unknown role \"\\xef\\xbb\\xbf"));
}

TEST(AuthorizationPolicyTest, ControlByteInAnIdentityNamesTheLineAndByte) {
  const absl::Status s =
      AuthorizationPolicy::Parse(std::string("read cn:a\nadmin cn:o\0ps\n", 24),
                                 "f")
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("f line 2: control byte \\x00 in "
                                    "\"admin cn:o\\x00ps\""));
}

TEST(AuthorizationPolicyTest, EmptyRoleInListIsAnError) {
  const absl::Status s =
      AuthorizationPolicy::Parse("read,,admin cn:x\n", "f").status();
  EXPECT_THAT(Message(s), HasSubstr("f line 1: unknown role \"\""));
}

TEST(AuthorizationPolicyTest, PolicyThatGrantsNothingIsAnError) {
  const absl::Status s =
      AuthorizationPolicy::Parse("# nothing yet\n\n", "f").status();
  EXPECT_THAT(Message(s), HasSubstr("f: grants no role to any identity"));
}

TEST(AuthorizationPolicyTest, UnreadableFileNamesFlagAndPath) {
  const absl::Status s =
      AuthorizationPolicy::Load("/nonexistent/ef-policy").status();
  EXPECT_THAT(Message(s),
              HasSubstr("--authz_policy=/nonexistent/ef-policy: cannot read"));
  const absl::Status dir = AuthorizationPolicy::Load("/tmp").status();
  EXPECT_THAT(Message(dir), HasSubstr("--authz_policy=/tmp: cannot read"));
}

// --- which RPC needs which role ---------------------------------------------

TEST(RpcRolesTest, EveryExposureFilterMethodHasARole) {
  // A method added to the proto without a line in rpc_roles.cc would need
  // admin and be labelled "unknown": this test makes someone decide.
  // Through a message of the same .proto file, which links it in.
  const google::protobuf::ServiceDescriptor* service =
      exposure::v1::DeleteUserRequest::descriptor()->file()->FindServiceByName(
          "ExposureFilter");
  ASSERT_NE(service, nullptr);
  EXPECT_EQ(static_cast<size_t>(service->method_count()), kNumRoleRpcs);
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string path = absl::StrCat("/", service->full_name(), "/",
                                          service->method(i)->name());
    const RpcAccess access = AccessFor(path);
    EXPECT_NE(access.index, 0u) << path;
    EXPECT_EQ(access.rpc, service->method(i)->name());
    EXPECT_FALSE(access.open) << path;
  }
}

TEST(RpcRolesTest, RolesFollowTheClientKinds) {
  auto role = [](const char* method) {
    return AccessFor(absl::StrCat("/exposure.v1.ExposureFilter/", method)).role;
  };
  for (const char* m :
       {"FilterRecalled", "GetFilter", "GetUserStats", "Explain"}) {
    EXPECT_EQ(role(m), Role::kRead) << m;
  }
  EXPECT_EQ(role("RecordExposure"), Role::kWrite);
  for (const char* m : {"DeleteUser", "AddTracedUsers", "RemoveTracedUsers",
                        "ListTracedUsers", "GetServerStats"}) {
    EXPECT_EQ(role(m), Role::kAdmin) << m;
  }
}

TEST(RpcRolesTest, HealthAndReflectionAreOpen) {
  EXPECT_TRUE(AccessFor("/grpc.health.v1.Health/Check").open);
  EXPECT_TRUE(AccessFor("/grpc.health.v1.Health/Watch").open);
  EXPECT_TRUE(AccessFor("/grpc.reflection.v1alpha.ServerReflection/"
                        "ServerReflectionInfo")
                  .open);
}

TEST(RpcRolesTest, AnyOtherPathNeedsAdminAndIsUnknown) {
  for (const char* path :
       {"/exposure.v1.ExposureFilter/Nope", "/exposure.v1.ExposureFilterX/Get",
        "/other.Service/DeleteUser", "", "/", "/grpc.health.v1.HealthX/Check",
        "/exposure.v1.ExposureFilter/"}) {
    const RpcAccess access = AccessFor(path);
    EXPECT_FALSE(access.open) << path;
    EXPECT_EQ(access.role, Role::kAdmin) << path;
    EXPECT_EQ(access.index, 0u) << path;
    EXPECT_EQ(access.rpc, "unknown") << path;
  }
}

// --- decisions --------------------------------------------------------------

class RpcAuthorizerTest : public ::testing::Test {
 protected:
  AuthorizationMetrics metrics_{true};
  AdminAudit audit_{false};
  RpcAuthorizer authorizer_{TestPolicy(), &metrics_, &audit_};

  grpc::Status Call(const char* method, std::vector<std::string> identities) {
    return authorizer_.Authorize(
        absl::StrCat("/exposure.v1.ExposureFilter/", method), identities);
  }
};

TEST_F(RpcAuthorizerTest, EachIdentityMayCallExactlyItsRpcs) {
  const std::vector<std::string> reader = {
      "uri:spiffe://example.org/ns/recall/sa/recall-server"};
  const std::vector<std::string> writer = {"dns:logger.example"};
  const std::vector<std::string> admin = {"cn:oncall"};
  const char* kReads[] = {"FilterRecalled", "GetFilter", "GetUserStats",
                          "Explain"};
  const char* kAdmins[] = {"DeleteUser", "AddTracedUsers", "RemoveTracedUsers",
                           "ListTracedUsers", "GetServerStats"};
  for (const char* m : kReads) {
    EXPECT_TRUE(Call(m, reader).ok()) << m;
    EXPECT_FALSE(Call(m, writer).ok()) << m;
    EXPECT_TRUE(Call(m, admin).ok()) << m;  // the policy grants it read too
  }
  EXPECT_FALSE(Call("RecordExposure", reader).ok());
  EXPECT_TRUE(Call("RecordExposure", writer).ok());
  EXPECT_FALSE(Call("RecordExposure", admin).ok());
  for (const char* m : kAdmins) {
    EXPECT_FALSE(Call(m, reader).ok()) << m;
    EXPECT_FALSE(Call(m, writer).ok()) << m;
    EXPECT_TRUE(Call(m, admin).ok()) << m;
  }
}

TEST_F(RpcAuthorizerTest, DenialNamesTheRpcAndRoleButNoGrantee) {
  const grpc::Status s = Call("DeleteUser", {"dns:logger.example"});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("DeleteUser needs role \"admin\""));
  EXPECT_THAT(s.error_message(), HasSubstr("dns:logger.example"));
  EXPECT_THAT(s.error_message(), Not(HasSubstr("oncall")));
  EXPECT_THAT(s.error_message(), Not(HasSubstr("spiffe")));
}

TEST_F(RpcAuthorizerTest, CallerWithoutCertificateIsToldSo) {
  const grpc::Status s = Call("FilterRecalled", {});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(),
              HasSubstr("FilterRecalled needs role \"read\"; the client "
                        "presented no certificate"));
}

TEST_F(RpcAuthorizerTest, HealthAndReflectionNeedNoIdentity) {
  EXPECT_TRUE(authorizer_.Authorize("/grpc.health.v1.Health/Check", {}).ok());
  EXPECT_TRUE(authorizer_
                  .Authorize("/grpc.reflection.v1alpha.ServerReflection/"
                             "ServerReflectionInfo",
                             {})
                  .ok());
}

TEST_F(RpcAuthorizerTest, UnknownMethodNeedsAdmin) {
  EXPECT_FALSE(
      authorizer_.Authorize("/exposure.v1.ExposureFilter/Nope", {"cn:x"}).ok());
  EXPECT_TRUE(
      authorizer_.Authorize("/exposure.v1.ExposureFilter/Nope", {"cn:oncall"})
          .ok());
}

TEST_F(RpcAuthorizerTest, DenialsAreCountedByRpc) {
  const size_t delete_user =
      AccessFor("/exposure.v1.ExposureFilter/DeleteUser").index;
  const size_t record =
      AccessFor("/exposure.v1.ExposureFilter/RecordExposure").index;
  Call("DeleteUser", {"dns:logger.example"});
  Call("DeleteUser", {});
  Call("RecordExposure", {"cn:oncall"});
  Call("RecordExposure", {"dns:logger.example"});  // allowed: not counted
  authorizer_.Authorize("/x.Y/Z", {});
  EXPECT_EQ(metrics_.denied(delete_user), 2u);
  EXPECT_EQ(metrics_.denied(record), 1u);
  EXPECT_EQ(metrics_.denied(0), 1u);
}

TEST(AuthorizationMetricsTest, ExportsEverySeriesWithRpcAndRoleLabels) {
  AuthorizationMetrics metrics(true);
  metrics.CountDenied(AccessFor("/exposure.v1.ExposureFilter/Explain").index);
  const std::vector<prometheus::MetricFamily> families = metrics.Collect();
  ASSERT_EQ(families.size(), 2u);
  EXPECT_EQ(families[0].name, "exposure_filter_authorization_enabled");
  EXPECT_EQ(families[0].metric[0].gauge.value, 1);
  EXPECT_EQ(families[1].name, "exposure_filter_rpcs_denied_total");
  ASSERT_EQ(families[1].metric.size(), kNumRoleRpcs + 1);
  double explain = -1;
  for (const prometheus::ClientMetric& m : families[1].metric) {
    ASSERT_EQ(m.label.size(), 2u);
    EXPECT_EQ(m.label[0].name, "rpc");
    EXPECT_EQ(m.label[1].name, "role");
    if (m.label[0].value == "Explain") {
      EXPECT_EQ(m.label[1].value, "read");
      explain = m.counter.value;
    }
  }
  EXPECT_EQ(explain, 1);
  EXPECT_EQ(AuthorizationMetrics(false).Collect()[0].metric[0].gauge.value, 0);
}

// --- startup checks ---------------------------------------------------------

class AuthorizerCreateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ef_authz_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    (void)std::system(absl::StrCat("rm -rf ", dir_).c_str());
  }
  std::string Write(const char* name, const std::string& text) {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::ofstream(path) << text;
    return path;
  }
  static TlsOptions Mtls() {
    TlsOptions tls;
    tls.cert_file = "server.pem";
    tls.key_file = "server.key";
    tls.client_ca_file = "ca.pem";
    return tls;
  }
  AuthorizationMetrics metrics_{true};
  AdminAudit audit_{false};
  std::string dir_;
};

TEST_F(AuthorizerCreateTest, PolicyWithoutMutualTlsIsRefused) {
  AuthorizationOptions options;
  options.policy_file = Write("policy", kPolicy);
  TlsOptions plaintext;
  const absl::Status s =
      RpcAuthorizer::Create(options, plaintext, &metrics_, &audit_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("--authz_policy=" + options.policy_file +
                                    " needs mutual TLS"));
  EXPECT_THAT(Message(s), HasSubstr("the serving port is plaintext"));
  TlsOptions tls_only = Mtls();
  tls_only.client_ca_file.clear();
  EXPECT_THAT(
      Message(RpcAuthorizer::Create(options, tls_only, &metrics_, &audit_)
                  .status()),
      HasSubstr("the serving port is tls,"));
}

TEST_F(AuthorizerCreateTest, BadPolicyFailsNamingTheLine) {
  AuthorizationOptions options;
  options.policy_file = Write("policy", "read dns:a\nadmin: cn:ops\n");
  const absl::Status s =
      RpcAuthorizer::Create(options, Mtls(), &metrics_, &audit_).status();
  EXPECT_THAT(Message(s), HasSubstr("--authz_policy=" + options.policy_file +
                                    " line 2: unknown role \"admin:\""));
}

TEST_F(AuthorizerCreateTest, GoodPolicyWithMutualTlsLoads) {
  AuthorizationOptions options;
  options.policy_file = Write("policy", kPolicy);
  absl::StatusOr<std::shared_ptr<RpcAuthorizer>> a =
      RpcAuthorizer::Create(options, Mtls(), &metrics_, &audit_);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->policy().identities(), 4u);
}

// --- audit line -------------------------------------------------------------

TEST(AdminAuditTest, LineHasEveryFieldInOrder) {
  AdminAuditRecord r;
  r.rpc = "DeleteUser";
  r.identity = "uri:spiffe://example.org/ops";
  r.peer = "ipv4:10.0.0.7:51234";
  r.has_surface = true;
  r.surface = "homefeed";
  r.users = {"u42"};
  EXPECT_EQ(AdminAudit(false).Format(r),
            "event=audit rpc=DeleteUser "
            "identity=\"uri:spiffe://example.org/ops\" "
            "peer=\"ipv4:10.0.0.7:51234\" surface=\"homefeed\" users=\"u42\" "
            "outcome=OK");
}

TEST(AdminAuditTest, DeniedCallWithoutRequestHasDashesAndDetail) {
  AdminAuditRecord r;
  r.rpc = "ListTracedUsers";
  r.code = 7;
  r.detail = "ListTracedUsers needs role \"admin\"";
  EXPECT_EQ(AdminAudit(false).Format(r),
            "event=audit rpc=ListTracedUsers identity=\"-\" peer=- surface=- "
            "users=- outcome=PERMISSION_DENIED "
            "detail=\"ListTracedUsers needs role \\x22admin\\x22\"");
}

TEST(AdminAuditTest, UserIdsCannotForgeFields) {
  AdminAuditRecord r;
  r.rpc = "AddTracedUsers";
  r.users = {"a,b", "c\" outcome=OK", "d\ne"};
  EXPECT_THAT(AdminAudit(false).Format(r),
              HasSubstr("users=\"a\\x2cb,c\\x22 outcome=OK,d\\x0ae\""));
}

TEST(AdminAuditTest, HashedUserIdsAreSha256Prefixes) {
  AdminAuditRecord r;
  r.rpc = "DeleteUser";
  r.users = {"u42", "abc"};
  // sha256("abc") = ba7816bf8f01cfea414140de5dae2223...
  const std::string line = AdminAudit(true).Format(r);
  EXPECT_THAT(line, HasSubstr(",sha256:ba7816bf8f01cfea\""));
  EXPECT_THAT(line, Not(HasSubstr("u42")));
}

// Every audited RPC: with hashing on, a status message that names a user of
// the request carries the pseudonym, never the raw id (the DeleteUser of a
// user another partition owns is the one seen in practice).
TEST(AdminAuditTest, HashedUserIdsAreHashedInTheDetailOfEveryAuditedRpc) {
  for (absl::string_view rpc :
       {"DeleteUser", "AddTracedUsers", "RemoveTracedUsers", "ListTracedUsers",
        "GetServerStats"}) {
    AdminAuditRecord r;
    r.rpc = rpc;
    r.users = {"alice-secret-0", "abc", "alice"};
    r.code = 9;  // FAILED_PRECONDITION
    r.detail =
        "user_id: user \"alice-secret-0\" is in partition 7 (owners 1, 2); "
        "users[1]: \"abc\" and \"alice\"";
    const std::string line = AdminAudit(true).Format(r);
    EXPECT_THAT(line, Not(HasSubstr("alice"))) << rpc << ": " << line;
    EXPECT_THAT(line, Not(HasSubstr("\\x22abc\\x22"))) << rpc;
    // sha256("abc") = ba7816bf8f01cfea...
    EXPECT_THAT(line, HasSubstr("users[1]: \\x22sha256:ba7816bf8f01cfea\\x22"))
        << rpc << ": " << line;
    EXPECT_THAT(line, HasSubstr("is in partition 7")) << rpc;
    // Without hashing the detail is the message as it was.
    EXPECT_THAT(AdminAudit(false).Format(r),
                HasSubstr("\\x22alice-secret-0\\x22 is in partition 7"));
  }
}

// --- identities -------------------------------------------------------------

TEST(CallerIdentityTest, LoggedIdentityPrefersTheGrantee) {
  const std::vector<std::string> ids = {"dns:a", "dns:b", "cn:c"};
  EXPECT_EQ(LoggedIdentity(ids, &ids[1]), "dns:b");
  EXPECT_EQ(LoggedIdentity(ids, nullptr), "dns:a");
  EXPECT_EQ(LoggedIdentity({}, nullptr), "-");
}

// --- flags ------------------------------------------------------------------

class AuthorizationFlagsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("EXPOSURE_FILTER_AUTHZ_POLICY");
    unsetenv("EXPOSURE_FILTER_AUDIT_HASH_USER_IDS");
  }
  absl::FlagSaver saver_;
};

TEST_F(AuthorizationFlagsTest, OffByDefault) {
  absl::StatusOr<ServerConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->authorization.enabled());
  EXPECT_FALSE(c->authorization.audit_hash_user_ids);
}

TEST_F(AuthorizationFlagsTest, EnvironmentSetsPolicyAndHashing) {
  setenv("EXPOSURE_FILTER_AUTHZ_POLICY", "/etc/ef/policy", 1);
  setenv("EXPOSURE_FILTER_AUDIT_HASH_USER_IDS", "true", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  absl::StatusOr<ServerConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->authorization.policy_file, "/etc/ef/policy");
  EXPECT_TRUE(c->authorization.audit_hash_user_ids);
}

}  // namespace
}  // namespace exposure_filter
