// ExposureLogProducer against librdkafka's mock cluster, no
// server: every message lands in the partition its key's owners consume,
// every call's callback runs exactly once (OK or naming its failures), from
// concurrent callers too, and Close answers the calls still waiting. Waits
// poll with generous deadlines; nothing here measures time.
#include "src/ingest/exposure_log_producer.h"

#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "exposure_filter/partitioning.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/kafka/kafka_mock_cluster.h"

namespace exposure_filter {
namespace {

constexpr int kPartitions = 6;
constexpr char kTopic[] = "exposures";

// Polls `pred` every 10 ms for up to a minute.
template <typename Pred>
bool WaitUntil(Pred pred) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!pred() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

LogMessage Message(const std::string& user, bool del = false) {
  LogMessage m;
  m.key = user;
  m.value = absl::StrCat("value-of-", user);
  if (del) m.op = kLogOpDeleteUser;
  m.what = user;
  return m;
}

class ExposureLogProducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = KafkaMockCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    ASSERT_TRUE(cluster_->CreateTopic(kTopic, kPartitions).ok());
  }
  std::unique_ptr<ExposureLogProducer> Start(
      absl::Duration timeout,
      std::vector<std::pair<std::string, std::string>> config = {},
      std::function<void(bool)> on_writable = nullptr) {
    ExposureLogProducerOptions o;
    o.on_writable = std::move(on_writable);
    o.brokers = cluster_->bootstrap_servers();
    o.topic = kTopic;
    o.partitions = kPartitions;
    o.produce_timeout = timeout;
    o.librdkafka_config = std::move(config);
    auto p = ExposureLogProducer::Start(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }
  // Everything in the topic: (partition, key, ef-op header or "").
  struct Read {
    int32_t partition;
    std::string key;
    std::string op;
    int64_t offset = -1;
  };
  std::vector<Read> ReadAll(size_t want) {
    std::string err;
    std::unique_ptr<RdKafka::Conf> conf(
        RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    conf->set("bootstrap.servers", cluster_->bootstrap_servers(), err);
    conf->set("group.id", "reader", err);
    std::unique_ptr<RdKafka::KafkaConsumer> c(
        RdKafka::KafkaConsumer::create(conf.get(), err));
    std::vector<RdKafka::TopicPartition*> tps;
    for (int p = 0; p < kPartitions; ++p) {
      tps.push_back(RdKafka::TopicPartition::create(
          kTopic, p, RdKafka::Topic::OFFSET_BEGINNING));
    }
    c->assign(tps);
    for (RdKafka::TopicPartition* tp : tps) delete tp;
    std::vector<Read> out;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (out.size() < want && absl::Now() < deadline) {
      std::unique_ptr<RdKafka::Message> m(c->consume(100));
      if (m->err() != RdKafka::ERR_NO_ERROR) continue;
      Read r{m->partition(), *m->key(), "", m->offset()};
      if (m->headers() != nullptr) {
        const RdKafka::Headers::Header h = m->headers()->get_last(kLogOpHeader);
        if (h.err() == RdKafka::ERR_NO_ERROR) {
          r.op.assign(static_cast<const char*>(h.value()), h.value_size());
        }
      }
      out.push_back(std::move(r));
    }
    c->close();
    return out;
  }

  std::unique_ptr<KafkaMockCluster> cluster_;
};

TEST_F(ExposureLogProducerTest, MessagesLandInTheirKeysPartitionWithTheOp) {
  auto producer = Start(absl::Seconds(30));
  ASSERT_NE(producer, nullptr);
  std::vector<LogMessage> messages;
  for (int u = 0; u < 20; ++u)
    messages.push_back(Message(absl::StrCat("u", u)));
  messages.push_back(Message("u3", /*del=*/true));
  absl::Notification done;
  std::vector<LogDeliveryFailure> failures;
  WrittenOffsets written;
  producer->Produce(std::move(messages),
                    [&](std::vector<LogDeliveryFailure> f, WrittenOffsets w) {
                      failures = std::move(f);
                      written = std::move(w);
                      done.Notify();
                    });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_TRUE(failures.empty());
  const std::vector<Read> got = ReadAll(21);
  ASSERT_EQ(got.size(), 21u);
  int deletes = 0;
  // The call's token: per partition, the offset of its last
  // message there, as a reader of the topic sees it.
  WrittenOffsets last_read;
  for (const Read& r : got) {
    EXPECT_EQ(r.partition, KafkaPartitionForKey(r.key, kPartitions)) << r.key;
    int64_t& last = last_read.try_emplace(r.partition, r.offset).first->second;
    last = std::max(last, r.offset);
    if (!r.op.empty()) {
      EXPECT_EQ(r.op, kLogOpDeleteUser);
      EXPECT_EQ(r.key, "u3");
      ++deletes;
    }
  }
  EXPECT_EQ(deletes, 1);
  EXPECT_EQ(written, last_read);
  const ExposureLogProducerStats s = producer->stats();
  EXPECT_EQ(s.messages_acked, 21u);
  EXPECT_EQ(s.messages_in_flight, 0u);
  EXPECT_EQ(s.calls, 1u);
  EXPECT_EQ(s.latency_buckets.back(), 1u);
}

TEST_F(ExposureLogProducerTest, ConcurrentCallersEachGetOneAnswer) {
  auto producer = Start(absl::Seconds(30));
  ASSERT_NE(producer, nullptr);
  constexpr int kThreads = 4, kCalls = 50;
  std::atomic<int> answered{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        std::vector<LogMessage> m = {Message(absl::StrCat("t", t, "-", i)),
                                     Message(absl::StrCat("x", t, "-", i))};
        producer->Produce(std::move(m), [&](std::vector<LogDeliveryFailure> f,
                                            WrittenOffsets) {
          if (!f.empty()) failed.fetch_add(1);
          answered.fetch_add(1);
        });
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (answered.load() < kThreads * kCalls && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(answered.load(), kThreads * kCalls);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(producer->stats().messages_acked, 2u * kThreads * kCalls);
}

TEST_F(ExposureLogProducerTest, CloseAnswersEveryWaitingCallWithItsFailures) {
  // The broker is down and the produce timeout long: the call would wait
  // 10 min; Close (shutdown) must answer it, naming both messages.
  auto producer = Start(absl::Minutes(10));
  ASSERT_NE(producer, nullptr);
  cluster_->SetBrokerDown(1);
  absl::Notification done;
  std::vector<LogDeliveryFailure> failures;
  producer->Produce({Message("a"), Message("b")},
                    [&](std::vector<LogDeliveryFailure> f, WrittenOffsets) {
                      failures = std::move(f);
                      done.Notify();
                    });
  EXPECT_FALSE(done.HasBeenNotified());
  // Shutdown waits 1 s for the broker, then purges: the call is answered.
  producer->Close(absl::Seconds(1));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_EQ(failures.size(), 2u);
  // And a call after Close fails at once, inline.
  bool answered = false;
  producer->Produce({Message("c")},
                    [&](std::vector<LogDeliveryFailure> f, WrittenOffsets) {
                      answered = f.size() == 1;
                    });
  EXPECT_TRUE(answered);
}

// CheckRecordSizes counts a record as librdkafka does: at message.max.bytes
// exactly it passes and librdkafka takes it; one byte more and both refuse
// it, with and without the ef-op header.
TEST_F(ExposureLogProducerTest, RecordSizeCheckAgreesWithLibrdkafkasLimit) {
  constexpr int kMaxMessageBytes = 2000;
  auto producer =
      Start(absl::Seconds(30),
            {{"message.max.bytes", absl::StrCat(kMaxMessageBytes)}});
  ASSERT_NE(producer, nullptr);
  EXPECT_EQ(producer->max_message_bytes(), kMaxMessageBytes);
  for (const bool with_op : {false, true}) {
    SCOPED_TRACE(with_op ? "with the ef-op header" : "no header");
    LogMessage fits = Message("size-user", with_op);
    fits.value.resize(fits.value.size() + kMaxMessageBytes -
                          ExposureLogProducer::RecordBytes(fits),
                      'x');
    ASSERT_EQ(ExposureLogProducer::RecordBytes(fits), kMaxMessageBytes);
    LogMessage over = fits;
    over.value.push_back('x');
    over.what = "the big one";
    EXPECT_TRUE(producer->CheckRecordSizes({fits}).ok());
    const absl::Status refused = producer->CheckRecordSizes({fits, over});
    EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
    EXPECT_EQ(refused.message().find("the big one: its Kafka record would be "
                                     "2001 bytes, more than the exposure log "
                                     "producer's message.max.bytes=2000"),
              0u)
        << refused;
    // librdkafka's own verdict on the same two records.
    absl::Notification done;
    std::vector<LogDeliveryFailure> failures;
    producer->Produce({fits, over},
                      [&](std::vector<LogDeliveryFailure> f, WrittenOffsets) {
                        failures = std::move(f);
                        done.Notify();
                      });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_EQ(failures[0].index, 1u) << failures[0].error;
  }
}

// A fatal idempotence error (what librdkafka raises when it loses a
// partition's sequence) does not leave the producer refusing writes until
// a restart: the call it held is answered, saying why, writes are refused
// while it is rebuilt (on_writable(false), the server's NOT_SERVING), and
// once a new handle reaches the brokers writes are taken again. The broker
// is down across the error so the rebuild visibly waits for it.
TEST_F(ExposureLogProducerTest, AFatalErrorRebuildsTheProducer) {
  absl::Mutex mu;
  std::vector<bool> changes;
  std::string refused_while_rebuilding;
  ExposureLogProducer* raw = nullptr;
  auto producer = Start(absl::Minutes(10), {}, [&](bool writable) {
    // A call made while writes are refused fails inline, before any
    // Kafka round trip.
    std::string refusal;
    if (!writable) {
      raw->Produce({Message("during")},
                   [&](std::vector<LogDeliveryFailure> f, WrittenOffsets) {
                     refusal = f.size() == 1 ? f[0].error : "answered OK";
                   });
    }
    absl::MutexLock lock(&mu);
    changes.push_back(writable);
    if (!writable) refused_while_rebuilding = refusal;
  });
  ASSERT_NE(producer, nullptr);
  raw = producer.get();
  EXPECT_TRUE(producer->stats().writable);

  cluster_->SetBrokerDown(1);
  absl::Notification held_done;
  std::vector<LogDeliveryFailure> held_failures;
  producer->Produce({Message("held")},
                    [&](std::vector<LogDeliveryFailure> f, WrittenOffsets) {
                      held_failures = std::move(f);
                      held_done.Notify();
                    });
  producer->RaiseFatalErrorForTesting("sequence lost in this test");

  // The call in flight is answered (never OK: Kafka did not acknowledge
  // it), naming the rebuild and the fatal error.
  ASSERT_TRUE(held_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_EQ(held_failures.size(), 1u);
  EXPECT_THAT(held_failures[0].error,
              ::testing::HasSubstr("the exposure log producer is being "
                                   "rebuilt after a fatal Kafka error"));
  EXPECT_THAT(held_failures[0].error,
              ::testing::HasSubstr("sequence lost in this test"));
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<bool>* c) { return !c->empty(); }, &changes),
        absl::Seconds(60)));
    EXPECT_EQ(changes, std::vector<bool>{false});
    EXPECT_THAT(refused_while_rebuilding,
                ::testing::HasSubstr("being rebuilt after a fatal Kafka "
                                     "error (test_fatal_error: sequence "
                                     "lost in this test): not sent"));
  }
  // The broker is still down: the new handle cannot see the topic, so
  // writes stay refused.
  EXPECT_FALSE(producer->stats().writable);
  EXPECT_EQ(producer->stats().rebuilds, 0u);

  cluster_->SetBrokerUp(1);
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<bool>* c) { return c->size() >= 2; }, &changes),
        absl::Seconds(60)));
    EXPECT_EQ(changes, (std::vector<bool>{false, true}));
  }
  EXPECT_TRUE(producer->stats().writable);
  EXPECT_EQ(producer->stats().rebuilds, 1u);

  absl::Notification done;
  std::vector<LogDeliveryFailure> failures;
  WrittenOffsets written;
  producer->Produce({Message("after")},
                    [&](std::vector<LogDeliveryFailure> f, WrittenOffsets w) {
                      failures = std::move(f);
                      written = std::move(w);
                      done.Notify();
                    });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_TRUE(failures.empty()) << failures[0].error;
  EXPECT_EQ(written.size(), 1u);
}

// Shutdown during a rebuild that cannot finish (no broker) does not wait
// for it: Close answers, and the producer stays closed.
TEST_F(ExposureLogProducerTest, CloseDuringARebuildReturns) {
  auto producer = Start(absl::Seconds(30));
  ASSERT_NE(producer, nullptr);
  cluster_->SetBrokerDown(1);
  producer->RaiseFatalErrorForTesting("sequence lost in this test");
  ASSERT_TRUE(WaitUntil([&] { return !producer->stats().writable; }));
  producer->Close(absl::Seconds(1));
  EXPECT_FALSE(producer->stats().writable);
  EXPECT_EQ(producer->stats().rebuilds, 0u);
  bool answered = false;
  producer->Produce({Message("late")},
                    [&](std::vector<LogDeliveryFailure> f, WrittenOffsets) {
                      answered = f.size() == 1;
                    });
  EXPECT_TRUE(answered);
}

}  // namespace
}  // namespace exposure_filter
