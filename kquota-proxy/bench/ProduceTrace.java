import java.io.FileInputStream;
import java.io.FileWriter;
import java.io.InputStream;
import java.io.PrintWriter;
import java.time.Duration;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's Java producer with a trace of what it saw, for the pictures (kquota-proxy/bench/picture.sh,
 * kquota-cluster/tests/instances/picture.sh).
 *
 * <pre>
 * ProduceTrace PROPS TOPIC SECONDS RECORD_BYTES RATE TRACE
 * </pre>
 *
 * Produces RECORD_BYTES-byte values to partition 0 of TOPIC for SECONDS from the producer's creation:
 * with RATE 0 as fast as the producer takes them (as Workload's produce-rate does), otherwise offered
 * on a fixed schedule of RATE bytes/s, a record whose turn comes while more than half a second of the
 * rate (at least four records) is unacknowledged being skipped, not queued (as load.py does), so a
 * throttled producer never catches up later with a burst. Every 100 ms a JSON line goes to TRACE:
 * {"t": wall clock ms, "acked": bytes, "skipped": bytes, "tmax": ms, "tavg": ms}, where tmax and tavg
 * are the producer's produce-throttle-time-max and -avg with metrics.sample.window.ms=100 (so over
 * the responses of the last 100-200 ms; null when none came). PROPS (bootstrap.servers, client.id,
 * any producer setting) is given to the producer as it is. The last line of stdout is a JSON summary.
 */
public final class ProduceTrace {
    private ProduceTrace() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println("usage: ProduceTrace PROPS TOPIC SECONDS RECORD_BYTES RATE TRACE");
            System.exit(2);
        }
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        String topic = args[1];
        double seconds = Double.parseDouble(args[2]);
        int size = Integer.parseInt(args[3]);
        double rate = Double.parseDouble(args[4]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.putIfAbsent(ProducerConfig.METRICS_SAMPLE_WINDOW_MS_CONFIG, "100");
        props.putIfAbsent(ProducerConfig.METRICS_NUM_SAMPLES_CONFIG, "2");

        AtomicLong acked = new AtomicLong();
        AtomicLong skipped = new AtomicLong();
        AtomicReference<Exception> failure = new AtomicReference<>();
        byte[] value = new byte[size];
        new Random(1).nextBytes(value);
        long start = System.nanoTime();
        long deadline = start + (long) (seconds * 1e9);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props);
        PrintWriter trace = new PrintWriter(new FileWriter(args[5]), true);
        ScheduledExecutorService sampler = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "sampler");
            t.setDaemon(true);
            return t;
        });
        sampler.scheduleAtFixedRate(() -> {
            Map<MetricName, ? extends Metric> m = producer.metrics();
            trace.printf(Locale.ROOT, "{\"t\":%d,\"acked\":%d,\"skipped\":%d,\"tmax\":%s,\"tavg\":%s}%n",
                    System.currentTimeMillis(), acked.get(), skipped.get(),
                    num(metric(m, "produce-throttle-time-max")), num(metric(m, "produce-throttle-time-avg")));
        }, 0, 100, TimeUnit.MILLISECONDS);

        long sent = 0;
        long bound = (long) Math.max(rate * 0.5, 4.0 * size);
        try {
            while (System.nanoTime() < deadline) {
                if (failure.get() != null) throw failure.get();
                if (rate > 0) {
                    double due = rate * (System.nanoTime() - start) / 1e9 - sent - skipped.get();
                    if (due < size) {
                        Thread.sleep(1);
                        continue;
                    }
                    if (sent - acked.get() > bound) {
                        skipped.addAndGet(size);
                        continue;
                    }
                }
                producer.send(new ProducerRecord<>(topic, 0, null, value), (md, e) -> {
                    if (e != null) {
                        failure.compareAndSet(null, e);
                    } else {
                        acked.addAndGet(size);
                    }
                });
                sent += size;
            }
        } finally {
            // What is still buffered is abandoned: closing must not wait for it at the quota's rate.
            sampler.shutdown();
            sampler.awaitTermination(5, TimeUnit.SECONDS);
            producer.close(Duration.ZERO);
            trace.close();
        }
        System.out.printf(Locale.ROOT, "{\"ok\":true,\"sent\":%d,\"acked\":%d,\"skipped\":%d}%n", sent, acked.get(),
                skipped.get());
    }

    private static double metric(Map<MetricName, ? extends Metric> metrics, String name) {
        for (Map.Entry<MetricName, ? extends Metric> e : metrics.entrySet()) {
            MetricName n = e.getKey();
            if (n.group().equals("producer-metrics") && n.name().equals(name)) {
                Object v = e.getValue().metricValue();
                if (v instanceof Double) return (Double) v;
            }
        }
        return Double.NaN;
    }

    private static String num(double d) {
        return Double.isFinite(d) ? String.format(Locale.ROOT, "%.1f", d) : "null";
    }
}
