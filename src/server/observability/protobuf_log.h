// RouteProtobufLogsToSpdlog: libprotobuf logs to stderr on its own, one
// ERROR line for every request whose string field is not UTF-8 ("String
// field ... contains invalid UTF-8 data when parsing a protocol buffer").
// The client already gets INVALID_ARGUMENT naming the field
// (request_parser.h), so that line is for the operator only, and any client
// could otherwise flood the log with it. This sends protobuf's lines through
// spdlog in the server's format, warnings and errors at most one line per
// interval with the count held back, fatal ones always.
#ifndef EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_PROTOBUF_LOG_H_
#define EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_PROTOBUF_LOG_H_

namespace exposure_filter {

// Process-wide (google::protobuf::SetLogHandler); call once from main().
void RouteProtobufLogsToSpdlog();

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_PROTOBUF_LOG_H_
