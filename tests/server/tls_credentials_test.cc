// TLS configuration: the --tls_* flags and their pairing rules, and the PEM
// checks of ServerCredentialsFor on files made at test time with Debian's
// openssl. The handshakes themselves are tested end to end in
// tests/e2e/test_tls.py.
#include "src/server/security/tls_credentials.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/config/server_flags.h"
#include "tests/server/test_certificates.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_client_ca);
ABSL_DECLARE_FLAG(bool, tls_require_client_cert);

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TlsOptions Tls(std::string cert, std::string key, std::string client_ca = "") {
  TlsOptions tls;
  tls.cert_file = std::move(cert);
  tls.key_file = std::move(key);
  tls.client_ca_file = std::move(client_ca);
  return tls;
}

// A directory with two EC key pairs and their self-signed certificates,
// made once per process; Files() says what went wrong if it could not be.
struct TlsFiles {
  std::string dir;
  std::string error;  // empty when every file was made
};

const TlsFiles& Files() {
  static const TlsFiles* const files = [] {
    auto* f = new TlsFiles;
    for (const char* name : {"a", "b"}) {
      absl::StatusOr<std::string> pem =
          MakeSelfSignedCertificate(name, absl::StrCat("/CN=", name));
      if (!pem.ok()) {
        f->error = std::string(pem.status().message());
        return f;
      }
    }
    f->dir = *TestCertificateDir();
    std::ofstream(absl::StrCat(f->dir, "/garbage.pem")) << "not a PEM file\n";
    return f;
  }();
  return *files;
}

// Checks the files in every test's SetUp, so that a failure to make them
// fails each test. (An ASSERT in SetUpTestSuite would not: gtest reports
// the suite's tests as skipped.)
class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Files().error.empty())
        << "cannot make the test certificates: " << Files().error;
  }
  static std::string Path(const std::string& name) {
    return absl::StrCat(Files().dir, "/", name);
  }
};

TEST_F(TlsFilesTest, PlaintextWithoutCertificate) {
  TlsOptions tls;
  EXPECT_TRUE(ServerCredentialsFor(tls).ok());
  EXPECT_STREQ(TlsModeName(tls), "plaintext");
}

TEST_F(TlsFilesTest, MatchingCertificateAndKeyLoad) {
  TlsOptions tls = Tls(Path("a.pem"), Path("a.key"));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      ServerCredentialsFor(tls);
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_NE(*creds, nullptr);
  EXPECT_STREQ(TlsModeName(tls), "tls");
}

TEST_F(TlsFilesTest, ClientCaTurnsOnMutualTls) {
  TlsOptions tls = Tls(Path("a.pem"), Path("a.key"), Path("b.pem"));
  EXPECT_TRUE(ServerCredentialsFor(tls).ok());
  EXPECT_STREQ(TlsModeName(tls), "mtls");
  tls.require_client_cert = false;
  EXPECT_STREQ(TlsModeName(tls), "tls+optional-client-cert");
}

TEST_F(TlsFilesTest, MissingFileNamesFlagAndPath) {
  const absl::Status s =
      ServerCredentialsFor(Tls(Path("none.pem"), Path("a.key"))).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("--tls_cert=" + Path("none.pem")));
  EXPECT_THAT(Message(s), HasSubstr("No such file"));
}

TEST_F(TlsFilesTest, DirectoryIsUnreadable) {
  const absl::Status s =
      ServerCredentialsFor(Tls(Path("a.pem"), Path(""))).status();
  EXPECT_THAT(Message(s), HasSubstr("--tls_key="));
  EXPECT_THAT(Message(s), HasSubstr("cannot read"));
}

TEST_F(TlsFilesTest, GarbageIsNotACertificate) {
  const absl::Status s =
      ServerCredentialsFor(Tls(Path("garbage.pem"), Path("a.key"))).status();
  EXPECT_THAT(Message(s), HasSubstr("--tls_cert=" + Path("garbage.pem")));
  EXPECT_THAT(Message(s), HasSubstr("no PEM certificate"));
}

TEST_F(TlsFilesTest, CertificateIsNotAKey) {
  const absl::Status s =
      ServerCredentialsFor(Tls(Path("a.pem"), Path("a.pem"))).status();
  EXPECT_THAT(Message(s), HasSubstr("--tls_key=" + Path("a.pem")));
  EXPECT_THAT(Message(s), HasSubstr("private key"));
}

TEST_F(TlsFilesTest, KeyOfAnotherCertificateIsRejected) {
  const absl::Status s =
      ServerCredentialsFor(Tls(Path("a.pem"), Path("b.key"))).status();
  EXPECT_THAT(Message(s), HasSubstr("does not match the first certificate"));
}

TEST_F(TlsFilesTest, GarbageClientCaIsRejected) {
  const absl::Status s = ServerCredentialsFor(Tls(Path("a.pem"), Path("a.key"),
                                                  Path("garbage.pem")))
                             .status();
  EXPECT_THAT(Message(s), HasSubstr("--tls_client_ca="));
}

TEST_F(TlsFilesTest, KeyOrClientCaWithoutCertificateIsRejected) {
  EXPECT_FALSE(ServerCredentialsFor(Tls("", Path("a.key"))).ok());
  EXPECT_FALSE(ServerCredentialsFor(Tls("", "", Path("a.pem"))).ok());
}

class TlsFlagsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("EXPOSURE_FILTER_TLS_CERT");
    unsetenv("EXPOSURE_FILTER_TLS_KEY");
    unsetenv("EXPOSURE_FILTER_TLS_REQUIRE_CLIENT_CERT");
  }
  absl::FlagSaver saver_;
};

TEST_F(TlsFlagsTest, DefaultIsPlaintext) {
  absl::StatusOr<ServerConfig> config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->tls.enabled());
  EXPECT_THAT(config->Summary(), HasSubstr("tls=plaintext"));
}

TEST_F(TlsFlagsTest, CertificateAndKeyGoTogether) {
  absl::SetFlag(&FLAGS_tls_cert, "/etc/server.pem");
  EXPECT_THAT(Message(ConfigFromFlags().status()),
              HasSubstr("--tls_cert and --tls_key must be given together"));
  absl::SetFlag(&FLAGS_tls_cert, "");
  absl::SetFlag(&FLAGS_tls_key, "/etc/server.key");
  EXPECT_EQ(ConfigFromFlags().status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TlsFlagsTest, ClientCaNeedsServerCertificate) {
  absl::SetFlag(&FLAGS_tls_client_ca, "/etc/ca.pem");
  EXPECT_THAT(Message(ConfigFromFlags().status()),
              HasSubstr("--tls_client_ca (mutual TLS) needs --tls_cert"));
}

TEST_F(TlsFlagsTest, EnvironmentSetsTlsFlags) {
  setenv("EXPOSURE_FILTER_TLS_CERT", "/etc/server.pem", 1);
  setenv("EXPOSURE_FILTER_TLS_KEY", "/etc/server.key", 1);
  setenv("EXPOSURE_FILTER_TLS_REQUIRE_CLIENT_CERT", "false", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  absl::StatusOr<ServerConfig> config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tls.cert_file, "/etc/server.pem");
  EXPECT_EQ(config->tls.key_file, "/etc/server.key");
  EXPECT_FALSE(config->tls.require_client_cert);
}

}  // namespace
}  // namespace exposure_filter
