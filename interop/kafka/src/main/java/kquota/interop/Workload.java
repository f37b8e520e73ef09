package kquota.interop;

import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's own Java producer and consumer, at their default settings, for kquota-proxy's tests against a
 * real cluster (kquota-proxy/tests/kafka). Every mode prints one JSON object on its last line of stdout.
 *
 * <pre>
 * Workload roundtrip PROPS TOPIC PARTITIONS SMALL LARGE BASE_MS
 *     creates TOPIC (PARTITIONS partitions, replication factor 3) with the Admin client, produces SMALL
 *     small and LARGE ~1 MB records to each partition (acks=all), then reads them back with a consumer
 *     group and checks every record byte for byte (key, value, headers, timestamp) and in order per
 *     partition, then commits and checks the committed offsets. Prints the brokers and partition
 *     leaders the clients were given. Record i's timestamp is BASE_MS + i (it must be recent: Kafka's
 *     time-based retention deletes records whose timestamps are older than retention.ms).
 * Workload produce-rate PROPS TOPIC SECONDS RECORD_BYTES [any]
 *     produces RECORD_BYTES-byte values to partition 0 (with "any": to every partition, as the
 *     producer's default partitioner chooses) as fast as the producer takes them, for SECONDS after
 *     the first acknowledgement; prints the acknowledged bytes over time and the producer's
 *     produce-throttle-time-avg/max, and start_ms: the wall-clock time (ms since the epoch) of the first
 *     sample, the origin of the samples' times.
 * Workload consume-rate PROPS TOPIC SECONDS
 *     reads partition 0 of TOPIC from the beginning (assigned, no group) for SECONDS after the first
 *     record; prints the bytes consumed over time, fetch-throttle-time-avg/max and start_ms.
 * Workload authfail PROPS TOPIC
 *     expects the producer to fail authenticating (PROPS has a wrong password); prints the error.
 * </pre>
 *
 * PROPS is a properties file with bootstrap.servers, client.id and the security settings; it is given to
 * every client as it is. The records are the ones kquota-proxy/tests/kafka/records.py makes (the same
 * keys, values, headers and timestamps), so either side can check the other's.
 */
public final class Workload {
    static final int LARGE_BYTES = 990_000;
    /** The first record's timestamp (the roundtrip's BASE_MS): recent, or Kafka's retention deletes the records. */
    static long baseTimestamp;

    private Workload() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            usage();
        }
        switch (args[0]) {
            case "roundtrip":
                if (args.length != 7) usage();
                baseTimestamp = Long.parseLong(args[6]);
                roundtrip(load(args[1]), args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                        Integer.parseInt(args[5]));
                break;
            case "produce-rate":
                if (args.length != 5 && args.length != 6) usage();
                produceRate(load(args[1]), args[2], Double.parseDouble(args[3]), Integer.parseInt(args[4]),
                        args.length == 6 && args[5].equals("any") ? null : 0);
                break;
            case "consume-rate":
                if (args.length != 4) usage();
                consumeRate(load(args[1]), args[2], Double.parseDouble(args[3]));
                break;
            case "authfail":
                if (args.length != 3) usage();
                authfail(load(args[1]), args[2]);
                break;
            default:
                usage();
        }
    }

    private static void usage() {
        System.err.println("usage: Workload roundtrip PROPS TOPIC PARTITIONS SMALL LARGE BASE_MS"
                + " | produce-rate PROPS TOPIC SECONDS RECORD_BYTES [any] | consume-rate PROPS TOPIC SECONDS"
                + " | authfail PROPS TOPIC");
        System.exit(2);
    }

    private static Properties load(String path) throws Exception {
        Properties p = new Properties();
        try (InputStream in = new FileInputStream(path)) {
            p.load(in);
        }
        return p;
    }

    // ---- the records (records.py makes the same ones) ----

    /** Record i of partition p: LARGE ~1 MB records at the positions largeIndex names, small ones elsewhere. */
    static boolean isLarge(int i, int small, int large) {
        if (large == 0) return false;
        int total = small + large;
        for (int k = 0; k < large; k++) {
            if (i == (k + 1) * total / (large + 1)) return true;
        }
        return false;
    }

    static byte[] key(String topic, int p, int i) {
        return (topic + "/" + p + "/" + i).getBytes(StandardCharsets.UTF_8);
    }

    static int smallSize(int p, int i) {
        return 1 + (i * 37 + p * 11) % 400;
    }

    /** SHA-256 in counter mode over the key: SHA256(key || be32(block)) for block 0, 1, ... */
    static byte[] value(byte[] key, int size) throws Exception {
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        byte[] out = new byte[size];
        int pos = 0;
        for (int block = 0; pos < size; block++) {
            sha.reset();
            sha.update(key);
            sha.update(new byte[] {(byte) (block >>> 24), (byte) (block >>> 16), (byte) (block >>> 8), (byte) block});
            byte[] d = sha.digest();
            int n = Math.min(d.length, size - pos);
            System.arraycopy(d, 0, out, pos, n);
            pos += n;
        }
        return out;
    }

    static List<Header> headers(byte[] key, int p, int i) throws Exception {
        byte[] digest = MessageDigest.getInstance("SHA-256").digest(key);
        List<Header> h = new ArrayList<>();
        h.add(new RecordHeader("index", Integer.toString(i).getBytes(StandardCharsets.UTF_8)));
        h.add(new RecordHeader("partition", Integer.toString(p).getBytes(StandardCharsets.UTF_8)));
        h.add(new RecordHeader("digest", Arrays.copyOf(digest, 16)));
        h.add(new RecordHeader("empty", new byte[0]));
        if (i % 5 == 0) {
            h.add(new RecordHeader("index", "again".getBytes(StandardCharsets.UTF_8)));
        }
        return h;
    }

    static ProducerRecord<byte[], byte[]> record(String topic, int p, int i, int small, int large) throws Exception {
        byte[] k = key(topic, p, i);
        int size = isLarge(i, small, large) ? LARGE_BYTES : smallSize(p, i);
        return new ProducerRecord<>(topic, p, baseTimestamp + i, k, value(k, size), headers(k, p, i));
    }

    // ---- roundtrip ----

    private static Properties producerProps(Properties base) {
        Properties p = new Properties();
        p.putAll(base);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return p;
    }

    private static Properties consumerProps(Properties base) {
        Properties p = new Properties();
        p.putAll(base);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return p;
    }

    private static void createTopic(Properties base, String topic, int partitions) throws Exception {
        Properties p = new Properties();
        p.putAll(base);
        try (Admin admin = Admin.create(p)) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 3))).all().get();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
        }
    }

    private static String brokersJson(List<PartitionInfo> parts) {
        TreeMap<Integer, String> brokers = new TreeMap<>();
        StringBuilder leaders = new StringBuilder("{");
        parts.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
        for (PartitionInfo pi : parts) {
            Node l = pi.leader();
            if (leaders.length() > 1) leaders.append(',');
            leaders.append('"').append(pi.partition()).append("\":").append(l == null ? -1 : l.id());
            for (Node n : pi.replicas()) brokers.put(n.id(), n.host() + ":" + n.port());
            if (l != null) brokers.put(l.id(), l.host() + ":" + l.port());
        }
        leaders.append('}');
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<Integer, String> e : brokers.entrySet()) {
            if (b.length() > 1) b.append(',');
            b.append('"').append(e.getKey()).append("\":\"").append(e.getValue()).append('"');
        }
        b.append('}');
        return "\"brokers\":" + b + ",\"leaders\":" + leaders;
    }

    private static void roundtrip(Properties base, String topic, int partitions, int small, int large) throws Exception {
        long t0 = System.nanoTime();
        createTopic(base, topic, partitions);
        // Until every partition's leader answers ListOffsets: a new topic's partitions become ready on
        // their leaders one by one.
        try (KafkaConsumer<byte[], byte[]> ready = new KafkaConsumer<>(consumerProps(base))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
            ready.endOffsets(tps);
        }
        int perPartition = small + large;
        long bytes = 0;
        String producerMeta;
        AtomicReference<Exception> failure = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(base))) {
            for (int p = 0; p < partitions; p++) {
                for (int i = 0; i < perPartition; i++) {
                    ProducerRecord<byte[], byte[]> r = record(topic, p, i, small, large);
                    bytes += r.key().length + r.value().length;
                    producer.send(r, (md, e) -> {
                        if (e != null) failure.compareAndSet(null, e);
                    });
                }
            }
            producer.flush();
            if (failure.get() != null) throw failure.get();
            producerMeta = brokersJson(new ArrayList<>(producer.partitionsFor(topic)));
        }
        double produced = (System.nanoTime() - t0) / 1e9;

        Properties cp = consumerProps(base);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, topic + "-group");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        int[] next = new int[partitions];
        int seen = 0;
        int expected = partitions * perPartition;
        String consumerMeta;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            while (seen < expected) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("read " + seen + " of " + expected + " records in 120 s; next index per partition "
                            + Arrays.toString(next));
                }
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    int p = r.partition();
                    int i = next[p];
                    if (i >= perPartition) {
                        throw new IllegalStateException("partition " + p + ": a record after the last one, at offset " + r.offset());
                    }
                    check(r, topic, p, i, small, large);
                    next[p] = i + 1;
                    seen++;
                }
            }
            consumer.commitSync();
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(
                    new java.util.HashSet<>(consumer.assignment()));
            long sum = 0;
            for (OffsetAndMetadata om : committed.values()) sum += om == null ? 0 : om.offset();
            if (sum != expected) {
                throw new IllegalStateException("committed offsets add up to " + sum + ", not " + expected);
            }
            consumerMeta = brokersJson(new ArrayList<>(consumer.partitionsFor(topic)));
            if (consumer.poll(Duration.ofMillis(200)).count() != 0) {
                throw new IllegalStateException("records after the last one");
            }
        }
        double total = (System.nanoTime() - t0) / 1e9;
        System.out.printf(Locale.ROOT,
                "{\"ok\":true,\"records\":%d,\"bytes\":%d,\"produce_s\":%.2f,\"total_s\":%.2f,\"producer\":{%s},\"consumer\":{%s}}%n",
                expected, bytes, produced, total, producerMeta, consumerMeta);
    }

    private static void check(ConsumerRecord<byte[], byte[]> r, String topic, int p, int i, int small, int large) throws Exception {
        ProducerRecord<byte[], byte[]> want = record(topic, p, i, small, large);
        String where = "partition " + p + " offset " + r.offset() + " (expected record " + i + ")";
        if (!Arrays.equals(r.key(), want.key())) {
            throw new IllegalStateException(where + ": key " + new String(r.key() == null ? new byte[0] : r.key(), StandardCharsets.UTF_8)
                    + ", expected " + new String(want.key(), StandardCharsets.UTF_8));
        }
        if (!Arrays.equals(r.value(), want.value())) {
            throw new IllegalStateException(where + ": value differs (" + (r.value() == null ? -1 : r.value().length)
                    + " bytes, expected " + want.value().length + ")");
        }
        if (r.timestamp() != want.timestamp()) {
            throw new IllegalStateException(where + ": timestamp " + r.timestamp() + ", expected " + want.timestamp());
        }
        Header[] got = r.headers().toArray();
        Header[] exp = want.headers().toArray();
        boolean same = got.length == exp.length;
        for (int k = 0; same && k < got.length; k++) {
            same = got[k].key().equals(exp[k].key()) && Arrays.equals(got[k].value(), exp[k].value());
        }
        if (!same) {
            throw new IllegalStateException(where + ": headers " + Arrays.toString(got) + ", expected " + Arrays.toString(exp));
        }
    }

    // ---- rates ----

    /** Samples a counter every 100 ms from the moment start() is called: [[ms, value], ...]. */
    static final class Sampler {
        private final AtomicLong counter;
        private final List<long[]> samples = Collections.synchronizedList(new ArrayList<>());
        private final ScheduledExecutorService ex = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "sampler");
            t.setDaemon(true);
            return t;
        });
        private volatile long startNanos;
        /** The wall-clock time of the first sample (ms since the epoch), for lining it up with events outside. */
        private volatile long startEpochMs;

        Sampler(AtomicLong counter) {
            this.counter = counter;
        }

        synchronized void start(long startNanos) {
            if (this.startNanos != 0) return;
            this.startEpochMs = System.currentTimeMillis();
            this.startNanos = startNanos;
            ex.scheduleAtFixedRate(() -> samples.add(new long[] {(System.nanoTime() - this.startNanos) / 1_000_000, counter.get()}),
                    0, 100, TimeUnit.MILLISECONDS);
        }

        boolean started() {
            return startNanos != 0;
        }

        long startEpochMs() {
            return startEpochMs;
        }

        double elapsed() {
            return startNanos == 0 ? 0 : (System.nanoTime() - startNanos) / 1e9;
        }

        String stop() {
            ex.shutdownNow();
            StringBuilder b = new StringBuilder("[");
            synchronized (samples) {
                for (long[] s : samples) {
                    if (b.length() > 1) b.append(',');
                    b.append('[').append(s[0]).append(',').append(s[1]).append(']');
                }
            }
            return b.append(']').toString();
        }
    }

    private static double metric(Map<MetricName, ? extends Metric> metrics, String group, String name) {
        for (Map.Entry<MetricName, ? extends Metric> e : metrics.entrySet()) {
            MetricName n = e.getKey();
            if (n.group().equals(group) && n.name().equals(name) && n.tags().size() <= 1) {
                Object v = e.getValue().metricValue();
                if (v instanceof Double) return (Double) v;
            }
        }
        return Double.NaN;
    }

    private static String num(double d) {
        return Double.isFinite(d) ? String.format(Locale.ROOT, "%.3f", d) : "null";
    }

    private static void produceRate(Properties base, String topic, double seconds, int recordBytes, Integer partition)
            throws Exception {
        AtomicLong acked = new AtomicLong();
        AtomicReference<Exception> failure = new AtomicReference<>();
        Sampler sampler = new Sampler(acked);
        byte[] value = new byte[recordBytes];
        new java.util.Random(1).nextBytes(value);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(base));
        long sent = 0;
        String throttle;
        try {
            while (!sampler.started() || sampler.elapsed() < seconds) {
                if (failure.get() != null) throw failure.get();
                producer.send(new ProducerRecord<>(topic, partition, null, value), (md, e) -> {
                    if (e != null) {
                        failure.compareAndSet(null, e);
                        return;
                    }
                    sampler.start(System.nanoTime());
                    acked.addAndGet(recordBytes);
                });
                sent++;
            }
            Map<MetricName, ? extends Metric> m = producer.metrics();
            throttle = String.format(Locale.ROOT, "\"throttle_avg_ms\":%s,\"throttle_max_ms\":%s",
                    num(metric(m, "producer-metrics", "produce-throttle-time-avg")),
                    num(metric(m, "producer-metrics", "produce-throttle-time-max")));
        } finally {
            // What is still buffered is abandoned: closing must not wait for it at the quota's rate.
            producer.close(Duration.ZERO);
        }
        String samples = sampler.stop();
        System.out.printf(Locale.ROOT, "{\"ok\":true,\"record_bytes\":%d,\"sent\":%d,%s,\"start_ms\":%d,\"samples\":%s}%n",
                recordBytes, sent, throttle, sampler.startEpochMs(), samples);
    }

    private static void consumeRate(Properties base, String topic, double seconds) throws Exception {
        AtomicLong consumed = new AtomicLong();
        Sampler sampler = new Sampler(consumed);
        long records = 0;
        String throttle;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps(base))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!sampler.started() || sampler.elapsed() < seconds) {
                if (!sampler.started() && System.nanoTime() > deadline) {
                    throw new IllegalStateException("no record in 120 s");
                }
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(100));
                if (recs.isEmpty()) continue;
                sampler.start(System.nanoTime());
                long b = 0;
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    b += (r.key() == null ? 0 : r.key().length) + (r.value() == null ? 0 : r.value().length);
                    records++;
                }
                consumed.addAndGet(b);
            }
            Map<MetricName, ? extends Metric> m = consumer.metrics();
            throttle = String.format(Locale.ROOT, "\"throttle_avg_ms\":%s,\"throttle_max_ms\":%s",
                    num(metric(m, "consumer-fetch-manager-metrics", "fetch-throttle-time-avg")),
                    num(metric(m, "consumer-fetch-manager-metrics", "fetch-throttle-time-max")));
        }
        String samples = sampler.stop();
        System.out.printf(Locale.ROOT, "{\"ok\":true,\"records\":%d,%s,\"start_ms\":%d,\"samples\":%s}%n", records,
                throttle, sampler.startEpochMs(), samples);
    }

    private static void authfail(Properties base, String topic) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(base))) {
            producer.partitionsFor(topic);
        } catch (org.apache.kafka.common.errors.SaslAuthenticationException e) {
            String m = e.getMessage() == null ? "" : e.getMessage().replace("\\", "\\\\").replace("\"", "\\\"");
            System.out.println("{\"ok\":true,\"error\":\"" + e.getClass().getSimpleName() + ": " + m + "\"}");
            return;
        }
        throw new IllegalStateException("a producer with a wrong password was given metadata");
    }
}
