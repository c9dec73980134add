#include "src/server/malformed_message.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/wire_format_lite.h>

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace exposure_filter {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// Protobuf's own default recursion limit for nested messages and groups.
constexpr int kMaxDepth = 100;

class WireWalker {
 public:
  explicit WireWalker(absl::string_view wire)
      : size_(static_cast<int>(wire.size())),
        in_(reinterpret_cast<const uint8_t*>(wire.data()), size_) {}

  std::string Walk(const Descriptor& type) {
    in_.PushLimit(size_);
    return Message(type, "", 0);
  }

 private:
  // The first defect of the message that ends at the current limit.
  std::string Message(const Descriptor& type, const std::string& prefix,
                      int depth) {
    // Elements seen so far per repeated field, for "[i]" in the path.
    absl::flat_hash_map<int, int> elements;
    while (in_.BytesUntilLimit() > 0) {
      const int at = in_.CurrentPosition();
      const uint32_t tag = in_.ReadTag();
      const int number = WireFormatLite::GetTagFieldNumber(tag);
      if (tag == 0 || number == 0) {
        return absl::StrCat(prefix.empty() ? "" : prefix + ": ",
                            "invalid field tag at byte ", at);
      }
      const FieldDescriptor* field = type.FindFieldByNumber(number);
      std::string path =
          field == nullptr
              ? absl::StrCat(prefix, prefix.empty() ? "" : ".", "field ",
                             number)
              : absl::StrCat(prefix, prefix.empty() ? "" : ".", field->name());
      if (field != nullptr && field->is_repeated()) {
        absl::StrAppend(&path, "[", elements[number], "]");
      }
      const WireFormatLite::WireType wire_type =
          WireFormatLite::GetTagWireType(tag);
      if (wire_type == WireFormatLite::WIRETYPE_END_GROUP) {
        return absl::StrCat(path, ": unexpected end-group tag at byte ", at);
      }
      std::string defect;
      // Strings, messages and packed repeated scalars have rules of their
      // own; anything else (including a field sent with another wire type
      // than its own, which protobuf keeps as an unknown field) only has to
      // be well-formed.
      if (field != nullptr &&
          wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
          (field->type() == FieldDescriptor::TYPE_STRING ||
           field->type() == FieldDescriptor::TYPE_MESSAGE ||
           (field->is_repeated() && field->is_packable()))) {
        defect = LengthDelimited(*field, path, depth, &elements[number]);
      } else if (!WireFormatLite::SkipField(&in_, tag)) {
        defect =
            absl::StrCat(path,
                         wire_type > WireFormatLite::WIRETYPE_FIXED32
                             ? absl::StrCat(": invalid wire type ", wire_type)
                             : ": truncated or malformed value",
                         " at byte ", at);
      } else if (field != nullptr) {
        ++elements[number];
      }
      if (!defect.empty()) return defect;
    }
    return "";
  }

  // A string, a nested message or a packed repeated scalar of `field`.
  std::string LengthDelimited(const FieldDescriptor& field,
                              const std::string& path, int depth,
                              int* elements) {
    const int at = in_.CurrentPosition();
    int length = 0;
    if (!in_.ReadVarintSizeAsInt(&length) || length > in_.BytesUntilLimit()) {
      return absl::StrCat(path, ": length runs past the end of the message",
                          " at byte ", at);
    }
    switch (field.type()) {
      case FieldDescriptor::TYPE_STRING: {
        std::string value;
        in_.ReadString(&value, length);
        ++*elements;
        // proto3 strings must be UTF-8; protobuf's parser rejects others.
        if (field.file()->syntax() ==
                google::protobuf::FileDescriptor::SYNTAX_PROTO3 &&
            !google::protobuf::internal::IsStructurallyValidUTF8(value.data(),
                                                                 length)) {
          return absl::StrCat(path,
                              ": invalid UTF-8 in a string field (send text "
                              "as UTF-8; arbitrary bytes do not fit a string)");
        }
        return "";
      }
      case FieldDescriptor::TYPE_MESSAGE: {
        if (depth + 1 >= kMaxDepth) {
          return absl::StrCat(path, ": nested deeper than ", kMaxDepth);
        }
        ++*elements;
        const CodedInputStream::Limit limit = in_.PushLimit(length);
        std::string defect = Message(*field.message_type(), path, depth + 1);
        in_.PopLimit(limit);
        return defect;
      }
      default:
        break;
    }
    // A packed repeated scalar: whole fixed-size values, or valid varints.
    const std::string packed = path.substr(0, path.rfind('['));
    const int fixed = FixedSize(field.type());
    if (fixed > 0) {
      if (length % fixed != 0) {
        return absl::StrCat(packed, ": packed field of ", length,
                            " bytes is not a whole number of ", fixed,
                            "-byte values");
      }
      in_.Skip(length);
      return "";
    }
    const CodedInputStream::Limit limit = in_.PushLimit(length);
    uint64_t value = 0;
    while (in_.BytesUntilLimit() > 0) {
      if (!in_.ReadVarint64(&value)) {
        in_.PopLimit(limit);
        return absl::StrCat(packed, ": malformed varint in a packed field");
      }
    }
    in_.PopLimit(limit);
    return "";
  }

  static int FixedSize(FieldDescriptor::Type type) {
    switch (type) {
      case FieldDescriptor::TYPE_FIXED64:
      case FieldDescriptor::TYPE_SFIXED64:
      case FieldDescriptor::TYPE_DOUBLE:
        return 8;
      case FieldDescriptor::TYPE_FIXED32:
      case FieldDescriptor::TYPE_SFIXED32:
      case FieldDescriptor::TYPE_FLOAT:
        return 4;
      default:
        return 0;
    }
  }

  const int size_;
  CodedInputStream in_;
};

}  // namespace

std::string DescribeMalformedMessage(absl::string_view wire,
                                     const Descriptor& type) {
  return WireWalker(wire).Walk(type);
}

}  // namespace exposure_filter
