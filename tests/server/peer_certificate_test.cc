// Typed client identities: the names CertificateIdentities reads from real
// certificates (made with openssl), the typed policy forms, and the
// decisions between them; above all that a name of one subjectAltName type
// never holds the roles granted to another type of the same spelling.
#include "src/server/security/peer_certificate.h"

#include <grpcpp/security/auth_context.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/security/authorization_policy.h"
#include "src/server/security/caller_identity.h"
#include "tests/server/test_certificates.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kReaderUri[] =
    "spiffe://example.test/ns/recall/sa/recall-server";
constexpr char kWriterDns[] = "exposure-logger.example.test";

// The identities of a certificate made with `subject` and `extension`
// (test_certificates.h); fails the test if openssl cannot make it.
absl::StatusOr<std::vector<std::string>> IdentitiesOf(
    const std::string& name, const std::string& subject,
    const std::string& extension = "") {
  absl::StatusOr<std::string> pem =
      MakeSelfSignedCertificate(name, subject, extension);
  EXPECT_TRUE(pem.ok()) << pem.status();
  if (!pem.ok()) return pem.status();
  return CertificateIdentities(*pem);
}

std::vector<std::string> Identities(const std::string& name,
                                    const std::string& subject,
                                    const std::string& extension = "") {
  absl::StatusOr<std::vector<std::string>> ids =
      IdentitiesOf(name, subject, extension);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<std::string>{};
}

// --- reading certificates ---------------------------------------------------

TEST(CertificateIdentitiesTest, EverySubjectAltNameTypeIsTyped) {
  EXPECT_THAT(
      Identities("all-types", "/CN=oncall-admin",
                 "subjectAltName=DNS:Exposure-Logger.Example.TEST,"
                 "URI:spiffe://example.test/ns/recall/sa/recall-server,"
                 "email:ops@example.test,IP:10.0.0.7,IP:2001:db8:0:0::1"),
      ElementsAre("dns:exposure-logger.example.test",
                  "uri:spiffe://example.test/ns/recall/sa/recall-server",
                  "email:ops@example.test", "ip:10.0.0.7", "ip:2001:db8::1",
                  "cn:oncall-admin"));
}

TEST(CertificateIdentitiesTest, CommonNameAloneIsOneIdentity) {
  EXPECT_THAT(Identities("cn-only", "/O=example/CN=oncall-admin"),
              ElementsAre("cn:oncall-admin"));
  EXPECT_THAT(Identities("no-names", "/O=example"), IsEmpty());
}

TEST(CertificateIdentitiesTest, OtherSubjectAltNameTypesProveNothing) {
  EXPECT_THAT(Identities("other-types", "/O=example",
                         "subjectAltName=RID:1.2.3.4,"
                         "otherName:1.3.6.1.4.1.311.20.2.3;UTF8:u@example,"
                         "DNS:a.example"),
              ElementsAre("dns:a.example"));
}

TEST(CertificateIdentitiesTest, UnparsableCertificateProvesNoIdentity) {
  EXPECT_FALSE(CertificateIdentities("").ok());
  EXPECT_FALSE(CertificateIdentities("not a certificate").ok());
  absl::StatusOr<std::string> pem =
      MakeSelfSignedCertificate("truncated", "/CN=oncall-admin");
  ASSERT_TRUE(pem.ok()) << pem.status();
  // Cut in the middle of the base64 body: the DER does not decode.
  const std::string truncated =
      pem->substr(0, pem->size() / 2) + "\n-----END CERTIFICATE-----\n";
  EXPECT_EQ(CertificateIdentities(truncated).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CertificateIdentitiesTest, MalformedNamesProveNoIdentity) {
  // Raw DER for the subjectAltName extension (OID 2.5.29.17), names that
  // openssl's config syntax would not let through. Each certificate also
  // has a CN, which it must not prove either: one bad name voids all.
  struct Case {
    const char* name;
    const char* extension;
    const char* error;
  };
  for (const Case& c : {
           // SEQUENCE { dNSName "a\0b" }
           Case{"san-nul", "2.5.29.17=DER:30058203610062", "control byte"},
           // NULL instead of a SEQUENCE of names
           Case{"san-undecodable", "2.5.29.17=DER:0500", "does not decode"},
           // SEQUENCE { iPAddress 5 bytes }
           Case{"san-ip-5-bytes", "2.5.29.17=DER:300787050102030405",
                "5 bytes"},
       }) {
    absl::StatusOr<std::vector<std::string>> ids =
        IdentitiesOf(c.name, "/CN=oncall-admin", c.extension);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name;
    EXPECT_THAT(std::string(ids.status().message()), HasSubstr(c.error))
        << c.name;
  }
  absl::StatusOr<std::vector<std::string>> two_cns =
      IdentitiesOf("two-cns", "/CN=oncall-admin/CN=reader");
  EXPECT_THAT(std::string(two_cns.status().message()),
              HasSubstr("more than one subject common name"));
}

// --- typed policy -----------------------------------------------------------

constexpr char kTypedPolicy[] = R"(
read   uri:spiffe://example.test/ns/recall/sa/recall-server
write  dns:Exposure-Logger.example.test
admin  cn:oncall-admin
read   ip:10.0.0.7
read   ip:2001:DB8:0:0::1
write  email:logger@example.test
)";

AuthorizationPolicy TypedPolicy() {
  absl::StatusOr<AuthorizationPolicy> p =
      AuthorizationPolicy::Parse(kTypedPolicy, "test");
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

bool Holds(const std::vector<std::string>& identities, Role role) {
  return TypedPolicy().Grantee(identities, role) != nullptr;
}

TEST(TypedPolicyTest, EachKindGrantsToItsOwnSubjectAltNameType) {
  EXPECT_TRUE(Holds(Identities("uri", "/O=x",
                               "subjectAltName=URI:" + std::string(kReaderUri)),
                    Role::kRead));
  EXPECT_TRUE(Holds(Identities("dns", "/O=x",
                               "subjectAltName=DNS:" + std::string(kWriterDns)),
                    Role::kWrite));
  EXPECT_TRUE(Holds(
      Identities("email", "/O=x", "subjectAltName=email:logger@example.test"),
      Role::kWrite));
  EXPECT_TRUE(Holds(Identities("ip4", "/O=x", "subjectAltName=IP:10.0.0.7"),
                    Role::kRead));
  // Written differently in the policy and the certificate: one address.
  EXPECT_TRUE(Holds(Identities("ip6", "/O=x", "subjectAltName=IP:2001:db8::1"),
                    Role::kRead));
  EXPECT_TRUE(Holds(Identities("cn", "/CN=oncall-admin"), Role::kAdmin));
}

TEST(TypedPolicyTest, DnsNamesCompareCaseInsensitively) {
  EXPECT_TRUE(
      Holds(Identities("dns-upper", "/O=x",
                       "subjectAltName=DNS:EXPOSURE-LOGGER.Example.Test"),
            Role::kWrite));
  // Only DNS names: a URI, an e-mail address or a CN differing in case
  // from a grant is another name.
  EXPECT_FALSE(
      Holds(Identities("uri-upper", "/O=x",
                       "subjectAltName=URI:SPIFFE://EXAMPLE.TEST/ns/recall/sa/"
                       "recall-server"),
            Role::kRead));
  EXPECT_FALSE(Holds(Identities("cn-upper", "/CN=OnCall-Admin"), Role::kAdmin));
}

TEST(TypedPolicyTest, EmailOrUriSanSpelledAsTheGrantedDnsNameIsDenied) {
  EXPECT_FALSE(
      Holds(Identities("email-as-dns", "/O=x",
                       "subjectAltName=email:" + std::string(kWriterDns)),
            Role::kWrite));
  EXPECT_FALSE(
      Holds(Identities("uri-as-dns", "/O=x",
                       "subjectAltName=URI:" + std::string(kWriterDns)),
            Role::kWrite));
}

TEST(TypedPolicyTest, DnsSanSpelledAsTheGrantedUriIsDenied) {
  EXPECT_FALSE(
      Holds(Identities("dns-as-uri", "/O=x",
                       "subjectAltName=DNS:" + std::string(kReaderUri)),
            Role::kRead));
}

TEST(TypedPolicyTest, NamesSpelledAsOtherKindsAreDenied) {
  // A DNS name that reads as the granted IP address, a CN equal to the
  // granted DNS name, a DNS name equal to the granted CN.
  EXPECT_FALSE(
      Holds(Identities("dns-as-ip", "/O=x", "subjectAltName=DNS:10.0.0.7"),
            Role::kRead));
  EXPECT_FALSE(
      Holds(Identities("cn-as-dns", "/CN=exposure-logger.example.test"),
            Role::kWrite));
  EXPECT_FALSE(
      Holds(Identities("dns-as-cn", "/O=x", "subjectAltName=DNS:oncall-admin"),
            Role::kAdmin));
}

TEST(TypedPolicyTest, UntypedSanIsRefusedNamingTheTypedForm) {
  struct Case {
    const char* line;
    const char* suggestion;
  };
  for (const Case& c : {
           Case{"write san:exposure-logger.example.test\n",
                "write \"dns:exposure-logger.example.test\""},
           Case{"read san:spiffe://example.test/ns/recall/sa/recall-server\n",
                "write \"uri:spiffe://example.test/ns/recall/sa/"
                "recall-server\""},
           Case{"write san:logger@example.test\n",
                "write \"email:logger@example.test\""},
           Case{"read san:10.0.0.7\n", "write \"ip:10.0.0.7\""},
       }) {
    const absl::Status s = AuthorizationPolicy::Parse(c.line, "f").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.line;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("f line 1: identity \"san:"))
        << c.line;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("does not say which subjectAltName type"))
        << c.line;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.suggestion)) << c.line;
  }
}

TEST(TypedPolicyTest, BadTypedValuesNameTheLine) {
  const absl::Status ip =
      AuthorizationPolicy::Parse("read ip:10.0.0.7\nread ip:10.0.0.300\n", "f")
          .status();
  EXPECT_THAT(std::string(ip.message()),
              HasSubstr("f line 2: identity \"ip:10.0.0.300\": not an IPv4 "
                        "or IPv6 address"));
  const absl::Status wildcard =
      AuthorizationPolicy::Parse("read dns:*.example.test\n", "f").status();
  EXPECT_THAT(std::string(wildcard.message()),
              HasSubstr("f line 1: identity \"dns:*.example.test\": "
                        "wildcards are not supported"));
  const absl::Status kind =
      AuthorizationPolicy::Parse("read spiffe:x\n", "f").status();
  EXPECT_THAT(std::string(kind.message()),
              HasSubstr("must be dns:<name>, uri:<uri>, email:<address>, "
                        "ip:<address> or cn:<common name>"));
}

// --- from the AuthContext ---------------------------------------------------

// An AuthContext with fixed properties, as gRPC's TLS layer fills one.
class FakeAuthContext final : public grpc::AuthContext {
 public:
  explicit FakeAuthContext(std::multimap<std::string, std::string> properties)
      : properties_(std::move(properties)) {}
  bool IsPeerAuthenticated() const override { return true; }
  std::vector<grpc::string_ref> GetPeerIdentity() const override { return {}; }
  std::string GetPeerIdentityPropertyName() const override { return ""; }
  std::vector<grpc::string_ref> FindPropertyValues(
      const std::string& name) const override {
    std::vector<grpc::string_ref> values;
    auto [begin, end] = properties_.equal_range(name);
    for (auto it = begin; it != end; ++it) values.emplace_back(it->second);
    return values;
  }
  grpc::AuthPropertyIterator begin() const override { return NoProperties(); }
  grpc::AuthPropertyIterator end() const override { return NoProperties(); }
  void AddProperty(const std::string&, const grpc::string_ref&) override {}
  bool SetPeerIdentityPropertyName(const std::string&) override {
    return false;
  }

 private:
  struct NoProperties : grpc::AuthPropertyIterator {};
  const std::multimap<std::string, std::string> properties_;
};

TEST(CallerIdentitiesTest, TypesComeFromTheCertificateNotGrpcsUntypedList) {
  // gRPC lists the e-mail SAN as plain "exposure-logger.example.test"; the
  // certificate says it is an e-mail address.
  absl::StatusOr<std::string> pem = MakeSelfSignedCertificate(
      "ctx-email", "/CN=logger",
      "subjectAltName=email:" + std::string(kWriterDns));
  ASSERT_TRUE(pem.ok()) << pem.status();
  const FakeAuthContext context({{"x509_pem_cert", *pem},
                                 {"x509_subject_alternative_name", kWriterDns},
                                 {"x509_common_name", "logger"}});
  EXPECT_THAT(CallerIdentities(context),
              ElementsAre("email:exposure-logger.example.test", "cn:logger"));
  CallerIdentityCache cache;
  EXPECT_THAT(*cache.Get(context),
              ElementsAre("email:exposure-logger.example.test", "cn:logger"));
  EXPECT_EQ(cache.Get(context), cache.Get(context));  // parsed once
  EXPECT_THAT(CallerIdentities(FakeAuthContext({})), IsEmpty());
}

TEST(CallerIdentitiesTest, UnreadableCertificateIsNoIdentityAndIsLogged) {
  std::ostringstream log;
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  const FakeAuthContext context(
      {{"x509_pem_cert", "-----BEGIN CERTIFICATE-----\nAAAA\n"},
       {"x509_subject_alternative_name", kWriterDns},
       {"x509_common_name", "oncall-admin"}});
  EXPECT_THAT(CallerIdentities(context), IsEmpty());
  spdlog::set_default_logger(previous);
  EXPECT_THAT(log.str(), HasSubstr("event=client_certificate_unreadable "
                                   "error=\"not a PEM certificate\""));
}

}  // namespace
}  // namespace exposure_filter
