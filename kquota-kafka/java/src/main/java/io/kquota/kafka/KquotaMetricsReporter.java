package io.kquota.kafka;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Hands kquota's callback the rates Kafka's {@code ClientQuotaManager} meters on this broker, so that
 * a cluster-wide {@code bps} limit ({@code kquota.cluster.bootstrap.servers}) is shared by what each
 * broker serves. Name it beside Kafka's own reporter in {@code server.properties}:
 *
 * <pre>
 * metric.reporters=org.apache.kafka.common.metrics.JmxReporter,io.kquota.kafka.KquotaMetricsReporter
 * </pre>
 *
 * <p>Setting {@code metric.reporters} replaces its default (Kafka's {@code JmxReporter}), so Kafka's
 * JMX metrics are kept only when {@code JmxReporter} is listed too. Checked against the 4.3.1 jars:
 * neither {@code kafka-clients} nor {@code kafka-server} holds the setting
 * {@code auto.include.jmx.reporter} any more (KIP-830 deprecated it in 3.x; 4.0 removed it), the
 * broker's default for {@code metric.reporters} is {@code JmxReporter} alone
 * ({@code MetricConfigs.METRIC_REPORTER_CLASSES_DEFAULT}), and the setting's documentation says "When
 * custom reporters are set and JmxReporter is needed, it has to be explicitly added to the list".
 *
 * <p>It keeps references to the client-quota sensors' metrics only: {@code byte-rate} in group
 * {@code Produce} or {@code Fetch}, tagged {@code user} and {@code client-id} (the tags the callback
 * gave, either possibly empty). {@link #metricChange} runs on the thread creating the sensor, under
 * Kafka's locks, so it only stores the reference; the rates are read by the callback's feed thread
 * ({@link #snapshot}). At most {@value #MAX_SENSORS} are kept; those beyond are counted
 * ({@link #dropped}) and left out.
 *
 * <p>The references are static: the broker loads this class and the callback from {@code libs/}
 * with one class loader, and that is how the callback reaches them. Without this reporter the cluster
 * mode still runs, but splits each limit by partition leadership instead of by what each broker
 * serves (the callback warns).
 */
public final class KquotaMetricsReporter implements MetricsReporter {
    /** How many sensors' metrics are kept at most. */
    static final int MAX_SENSORS = 1_000_000;

    /** {@link #snapshot}'s types: {@code ClientQuotaType}'s ordinals. */
    static final int PRODUCE = 0;
    static final int FETCH = 1;

    private static final String BYTE_RATE = "byte-rate";
    private static final String PRODUCE_GROUP = "Produce";
    private static final String FETCH_GROUP = "Fetch";
    private static final String USER_TAG = "user";
    private static final String CLIENT_ID_TAG = "client-id";

    private static final ConcurrentHashMap<MetricName, KafkaMetric> METRICS = new ConcurrentHashMap<>();
    private static final AtomicLong DROPPED = new AtomicLong();
    /** Reporters initialised and not closed: the last to close lets the references go. */
    private static final AtomicInteger OPEN = new AtomicInteger();
    private static volatile boolean installed;

    private final AtomicBoolean open = new AtomicBoolean();

    /** Kafka's no-arg constructor for plug-ins. */
    public KquotaMetricsReporter() {
    }

    @Override
    public void configure(Map<String, ?> configs) {
        installed = true;
    }

    @Override
    public void init(List<KafkaMetric> metrics) {
        installed = true;
        if (open.compareAndSet(false, true)) {
            OPEN.incrementAndGet();
        }
        for (KafkaMetric metric : metrics) {
            metricChange(metric);
        }
    }

    @Override
    public void metricChange(KafkaMetric metric) {
        // Under Kafka's locks: a filter on the name and one map operation, nothing measured.
        MetricName name = metric.metricName();
        if (!kept(name)) {
            return;
        }
        if (METRICS.size() >= MAX_SENSORS && !METRICS.containsKey(name)) {
            DROPPED.incrementAndGet();
            return;
        }
        METRICS.put(name, metric);
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
        // Only this metric: one that replaced it under the same name stays.
        METRICS.remove(metric.metricName(), metric);
    }

    @Override
    public void close() {
        // A closed Metrics does not remove its metrics: once no reporter is open, none is current.
        if (open.compareAndSet(true, false) && OPEN.decrementAndGet() == 0) {
            METRICS.clear();
        }
    }

    private static boolean kept(MetricName name) {
        if (!BYTE_RATE.equals(name.name())) {
            return false;
        }
        String group = name.group();
        if (!PRODUCE_GROUP.equals(group) && !FETCH_GROUP.equals(group)) {
            return false;
        }
        Map<String, String> tags = name.tags();
        return tags.get(USER_TAG) != null && tags.get(CLIENT_ID_TAG) != null;
    }

    /**
     * Fills the parallel arrays with the kept sensors' current rates, at most as many as the shortest
     * array holds, and answers how many: the type ({@link #PRODUCE} or {@link #FETCH}), the
     * {@code user} tag (the sanitized user, as Kafka tags it), the {@code client-id} tag and the rate
     * in bytes per second. A rate that is not a finite {@code Double} is left out. Reading a rate takes
     * its sensor's lock, so only the callback's feed thread calls this.
     */
    static int snapshot(int[] types, String[] users, String[] clients, double[] rates) {
        int capacity = Math.min(Math.min(types.length, users.length), Math.min(clients.length, rates.length));
        int count = 0;
        for (KafkaMetric metric : METRICS.values()) {
            if (count >= capacity) {
                break;
            }
            Object value;
            try {
                value = metric.metricValue();
            } catch (RuntimeException e) {
                // One sensor that cannot be measured leaves the others' rates.
                continue;
            }
            if (!(value instanceof Double rate) || !Double.isFinite(rate)) {
                continue;
            }
            MetricName name = metric.metricName();
            Map<String, String> tags = name.tags();
            String user = tags.get(USER_TAG);
            String client = tags.get(CLIENT_ID_TAG);
            if (user == null || client == null) {
                continue;
            }
            types[count] = PRODUCE_GROUP.equals(name.group()) ? PRODUCE : FETCH;
            users[count] = user;
            clients[count] = client;
            rates[count] = rate;
            count++;
        }
        return count;
    }

    /** Whether a {@code KquotaMetricsReporter} was ever configured or initialised in this JVM. */
    static boolean installed() {
        return installed;
    }

    /** Sensors whose metrics are kept now. */
    static int size() {
        return METRICS.size();
    }

    /** Sensors left out since start because {@value #MAX_SENSORS} were kept. */
    static long dropped() {
        return DROPPED.get();
    }
}
