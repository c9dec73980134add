// librdkafka's own log lines and errors, routed to spdlog (librdkafka would
// print them to stderr), errors rate limited: a broker that is down repeats
// its connection error every few hundred ms. One instance per process,
// shared by the consumer (kafka_ingest.cc) and the producer
// (exposure_log_producer.cc); it is never destroyed, so it outlives every
// librdkafka handle that calls it.
#ifndef EXPOSURE_FILTER_SRC_INGEST_KAFKA_EVENT_LOGGER_H_
#define EXPOSURE_FILTER_SRC_INGEST_KAFKA_EVENT_LOGGER_H_

namespace RdKafka {
class EventCb;
}  // namespace RdKafka

namespace exposure_filter {

RdKafka::EventCb& KafkaEventLogger();

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_INGEST_KAFKA_EVENT_LOGGER_H_
