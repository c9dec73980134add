#include "src/server/security/peer_certificate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace exposure_filter {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct GeneralNamesFree {
  void operator()(GENERAL_NAMES* names) const { GENERAL_NAMES_free(names); }
};

// The bytes of an IA5String or a UTF-8 common name, refused if any is a
// control byte or NUL: "logger.example\0.attacker" must not become a name
// a C-string comparison, or a log line, would cut short.
absl::StatusOr<std::string> PrintableName(absl::string_view what,
                                          const unsigned char* data,
                                          int length) {
  if (data == nullptr || length <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  }
  std::string name(reinterpret_cast<const char*>(data),
                   static_cast<size_t>(length));
  for (const char c : name) {
    if (absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " contains a control byte"));
    }
  }
  return name;
}

absl::StatusOr<std::string> IpText(const ASN1_OCTET_STRING* ip) {
  const int length = ASN1_STRING_length(ip);
  const int family =
      length == 4 ? AF_INET : (length == 16 ? AF_INET6 : AF_UNSPEC);
  char text[INET6_ADDRSTRLEN];
  if (family == AF_UNSPEC || inet_ntop(family, ASN1_STRING_get0_data(ip), text,
                                       sizeof(text)) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "IP address subjectAltName of ", length, " bytes (not 4 or 16)"));
  }
  return std::string(text);
}

// Appends the typed identities of the subjectAltName extension, if any.
absl::Status AddSubjectAltNames(X509* cert, std::vector<std::string>* out) {
  int critical = 0;
  std::unique_ptr<GENERAL_NAMES, GeneralNamesFree> names(
      static_cast<GENERAL_NAMES*>(
          X509_get_ext_d2i(cert, NID_subject_alt_name, &critical, nullptr)));
  if (names == nullptr) {
    // -1: no such extension, a certificate with a CN only. -2: several,
    // which RFC 5280 forbids. Otherwise it is there and does not decode.
    if (critical == -1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        critical == -2 ? "more than one subjectAltName extension"
                       : "the subjectAltName extension does not decode");
  }
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    switch (name->type) {
      case GEN_DNS: {
        absl::StatusOr<std::string> dns = PrintableName(
            "DNS subjectAltName", ASN1_STRING_get0_data(name->d.dNSName),
            ASN1_STRING_length(name->d.dNSName));
        if (!dns.ok()) return dns.status();
        // DNS names are case-insensitive (RFC 4343); the policy lowercases
        // its dns: names the same way.
        out->push_back(absl::StrCat("dns:", absl::AsciiStrToLower(*dns)));
        break;
      }
      case GEN_URI: {
        absl::StatusOr<std::string> uri = PrintableName(
            "URI subjectAltName",
            ASN1_STRING_get0_data(name->d.uniformResourceIdentifier),
            ASN1_STRING_length(name->d.uniformResourceIdentifier));
        if (!uri.ok()) return uri.status();
        out->push_back(absl::StrCat("uri:", *uri));
        break;
      }
      case GEN_EMAIL: {
        absl::StatusOr<std::string> email = PrintableName(
            "e-mail subjectAltName", ASN1_STRING_get0_data(name->d.rfc822Name),
            ASN1_STRING_length(name->d.rfc822Name));
        if (!email.ok()) return email.status();
        out->push_back(absl::StrCat("email:", *email));
        break;
      }
      case GEN_IPADD: {
        absl::StatusOr<std::string> ip = IpText(name->d.iPAddress);
        if (!ip.ok()) return ip.status();
        out->push_back(absl::StrCat("ip:", *ip));
        break;
      }
      default:
        // otherName, x400Address, directoryName, ediPartyName,
        // registeredID: no policy form names them, so they grant nothing.
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status AddCommonName(X509* cert, std::vector<std::string>* out) {
  const X509_NAME* subject = X509_get_subject_name(cert);
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index < 0) return absl::OkStatus();
  // Which of several CNs a policy line meant is a guess (gRPC and OpenSSL
  // tools pick different ones): such a subject proves none.
  if (X509_NAME_get_index_by_NID(subject, NID_commonName, index) >= 0) {
    return absl::InvalidArgumentError("more than one subject common name");
  }
  const ASN1_STRING* data =
      X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) {
    return absl::InvalidArgumentError(
        "the subject common name is not a string");
  }
  absl::StatusOr<std::string> cn =
      PrintableName("the subject common name", utf8, length);
  OPENSSL_free(utf8);
  if (!cn.ok()) return cn.status();
  out->push_back(absl::StrCat("cn:", *cn));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> CertificateIdentities(
    absl::string_view pem) {
  // gRPC hands over one certificate of a few KB; the bound keeps the int
  // length BIO_new_mem_buf takes honest.
  if (pem.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("certificate of ", pem.size(), " bytes"));
  }
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509, X509Free> cert(
      bio == nullptr ? nullptr
                     : PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("not a PEM certificate");
  }
  std::vector<std::string> identities;
  absl::Status status = AddSubjectAltNames(cert.get(), &identities);
  if (status.ok()) status = AddCommonName(cert.get(), &identities);
  ERR_clear_error();
  if (!status.ok()) return status;
  return identities;
}

}  // namespace exposure_filter
