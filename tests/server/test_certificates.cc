#include "tests/server/test_certificates.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace exposure_filter {

absl::StatusOr<std::string> TestCertificateDir() {
  static const absl::StatusOr<std::string>* const dir =
      []() -> absl::StatusOr<std::string>* {
    char tmpl[] = "/tmp/ef_tls_test_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      return new absl::StatusOr<std::string>(
          absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno))));
    }
    auto* made = new absl::StatusOr<std::string>(tmpl);
    std::atexit([] {
      const std::string cmd = absl::StrCat("rm -rf ", *TestCertificateDir());
      (void)std::system(cmd.c_str());
    });
    return made;
  }();
  return *dir;
}

absl::StatusOr<std::string> MakeSelfSignedCertificate(
    const std::string& name, const std::string& subject,
    const std::string& extension) {
  absl::StatusOr<std::string> dir = TestCertificateDir();
  if (!dir.ok()) return dir.status();
  const std::string path = absl::StrCat(*dir, "/", name);
  std::string cmd = absl::StrCat(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
      "-nodes -days 2 -subj '",
      subject, "' -keyout ", path, ".key -out ", path, ".pem");
  if (!extension.empty()) absl::StrAppend(&cmd, " -addext '", extension, "'");
  absl::StrAppend(&cmd, " 2>/dev/null");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("failed: ", cmd));
  }
  std::ifstream in(absl::StrCat(path, ".pem"));
  std::stringstream pem;
  pem << in.rdbuf();
  return pem.str();
}

}  // namespace exposure_filter
