"""Produces and consumes through kquota-proxy in front of a real Kafka, with kafka-python.

    python check.py PROXY_BOOTSTRAP LISTEN_BASE_PORT KAFKA_BOOTSTRAP

Checks that every broker the cluster names is the proxy's listener for it (LISTEN_BASE_PORT plus
its node id), never Kafka's own address; that a topic can be created, written (acks=all and
acks=0) and read back by a consumer group, with its offsets committed.
"""
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

proxy, base, kafka = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kafka_port = int(kafka.rsplit(":", 1)[1])


def check_brokers(brokers, what):
    assert brokers, f"{what}: no brokers"
    for b in brokers:
        node_id, host, port = b
        assert port != kafka_port, f"{what}: Kafka's own address {host}:{port} reached the client"
        assert (host, port) == ("127.0.0.1", base + node_id), f"{what}: broker {b} is not the proxy's"
    print(f"   {what}: brokers {sorted(brokers)} are the proxy's listeners")


admin = KafkaAdminClient(bootstrap_servers=proxy, request_timeout_ms=30000)
cluster = admin.describe_cluster()
check_brokers([(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]], "DescribeCluster")
topic = "proxy-check-%d" % int(time.time())
admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])

producer = KafkaProducer(bootstrap_servers=proxy, acks="all", linger_ms=5)
for i in range(200):
    producer.send(topic, key=b"k%d" % (i % 7), value=b"value-%d" % i)
producer.flush(30)
check_brokers(
    [(b.node_id, b.host, b.port) for b in producer._metadata.brokers()], "producer Metadata"
)
producer.close()

fire_and_forget = KafkaProducer(bootstrap_servers=proxy, acks=0)
for i in range(200, 250):
    fire_and_forget.send(topic, value=b"value-%d" % i)
fire_and_forget.flush(30)
fire_and_forget.close()

consumer = KafkaConsumer(
    topic,
    bootstrap_servers=proxy,
    group_id=topic + "-group",
    auto_offset_reset="earliest",
    enable_auto_commit=False,
    consumer_timeout_ms=20000,
)
seen = set()
for message in consumer:
    seen.add(message.value)
    if len(seen) == 250:
        break
missing = {b"value-%d" % i for i in range(250)} - seen
assert not missing, f"{len(missing)} messages not read back, for example {sorted(missing)[:3]}"
consumer.commit()
committed = sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in range(3))
assert committed == 250, f"committed offsets add up to {committed}, not 250"
check_brokers(
    [(b.node_id, b.host, b.port) for b in consumer._client.cluster.brokers()], "consumer Metadata"
)
consumer.close()
admin.close()
print(f"   kafka-python: 250 messages written to {topic} and read back by a group, offsets committed")
