package io.kquota.kafka;

import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.management.ManagementFactory;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.BitSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;

import javax.management.ObjectName;

/**
 * kquota's client quota callback for Apache Kafka's brokers (KIP-257): install the jar in Kafka's
 * {@code libs/} and set {@code client.quota.callback.class=io.kquota.kafka.KquotaCallback}.
 *
 * <p>Kafka's {@code ClientQuotaManager} keeps metering and throttling; this callback answers who
 * shares a bucket ({@link #quotaMetricTags}) and its limit ({@link #quotaLimit}) from kquota's engine,
 * which Kafka's metadata log keeps up to date ({@link #updateQuota}, {@link #removeQuota}). Under
 * {@code kquota.sub.quota.policy=kafka} (the default) every answer is Kafka's
 * {@code DefaultQuotaCallback}'s; under {@code kip55} a client's sub-quota is carved from its user's
 * total.
 *
 * <p>Nothing here takes the broker down. Calls into the engine never throw; when one fails, the
 * answer is the one the last good configuration gave (remembered per connection), a connection never
 * seen before is not limited until the engine answers again, a change that could not be applied is
 * applied again (in order) once it can, and failures are logged at most once a second. Once the engine
 * answers again {@link #quotaResetRequired} tells Kafka to read every limit again.
 *
 * <p>With {@code kquota.cluster.bootstrap.servers}, the engine also follows kquota's configuration log
 * (a Kafka topic) and shares cluster-wide {@code bps} limits with the other brokers' callbacks, on its
 * own threads. The callback then runs one daemon thread, {@code kquota-usage-feed}, that hands the
 * engine what this broker serves (the client-quota sensors' rates, through
 * {@link KquotaMetricsReporter}, which {@code metric.reporters} must name) and asks Kafka to read the
 * limits again when the log or the shares moved them; {@link #updateClusterMetadata} tells the engine
 * how many partitions this broker leads, the split it falls back on without the reporter. The bean's
 * {@code ClusterState}, {@code Ready} and {@code LiveBrokers} show the cluster mode.
 */
public final class KquotaCallback implements ClientQuotaCallback, KquotaCallbackMBean {
    private static final Logger LOG = LoggerFactory.getLogger(KquotaCallback.class);
    private static final AtomicInteger INSTANCES = new AtomicInteger();

    private static final String USER_TAG = "user";
    private static final String CLIENT_ID_TAG = "client-id";

    /** {@link NativeEngine#tags}'s answers. */
    private static final int USER_CLIENT = 0;
    private static final int USER = 1;
    private static final int CLIENT = 2;

    /** Kafka's shape bits ({@code ClientQuotaManager.quotaTypesEnabled}). */
    private static final int CLIENT_SHAPE = 1;
    private static final int USER_SHAPE = 2;
    private static final int USER_CLIENT_SHAPE = 4;

    private static final long RETRY_NANOS = 1_000_000_000L;

    /** How long {@link #close} waits for the usage feed before closing the engine all the same. */
    private static final long FEED_JOIN_MILLIS = 5_000;
    /** When the feed checks, once, that the metrics reporter is installed. */
    private static final long REPORTER_CHECK_NANOS = 10_000_000_000L;
    /** Bounds on the engine's usage interval: never a busy loop. */
    private static final int MIN_INTERVAL_MS = 10;
    private static final int MAX_INTERVAL_MS = 3_600_000;
    /** At most one warning a minute about sensors the reporter left out. */
    private static final long DROPPED_LOG_NANOS = 60_000_000_000L;
    private static final String KQUOTA_TOPICS = "_kquota";

    private volatile long handle;
    private String policy = "kafka";
    private final AtomicIntegerArray masks = new AtomicIntegerArray(ClientQuotaType.values().length);
    /**
     * Held across a change's call into the engine and its new mask, and across the feed's re-read of
     * every mask: neither overwrites a newer mask with an older one.
     */
    private final Object maskLock = new Object();
    /** Bumped after every change the engine applied: a memo stamp older than this is stale. */
    private final AtomicLong generation = new AtomicLong();
    private volatile Memo[] memos = new Memo[ClientQuotaType.values().length];

    /** Changes that failed, in Kafka's order, applied again before any later one. */
    private final ArrayDeque<Change> pending = new ArrayDeque<>();
    private volatile boolean hasPending;
    private volatile long retryAfterNanos;
    /** Set when the engine failed; cleared once it answers again and every type was told to reset. */
    private volatile boolean recovering;
    private final AtomicIntegerArray resets = new AtomicIntegerArray(ClientQuotaType.values().length);
    private volatile boolean resetsDue;

    private final AtomicLong failures = new AtomicLong();
    private final AtomicLong lastLogNanos = new AtomicLong(System.nanoTime() - RETRY_NANOS);
    private final AtomicLong unlogged = new AtomicLong();
    private final AtomicBoolean failing = new AtomicBoolean();
    private final AtomicLong unexpectedLogNanos = new AtomicLong(System.nanoTime() - RETRY_NANOS);
    private final AtomicLong unexpectedUnlogged = new AtomicLong();
    private ObjectName jmxName;

    /** The broker's {@code node.id} (else {@code broker.id}), -1 if unknown. */
    private volatile int nodeId = -1;
    /** Whether the engine's cluster mode is on ({@code kquota.cluster.bootstrap.servers}). */
    private volatile boolean clusterMode;
    /** The usage feed while the cluster mode is on; guarded by this. */
    private Feed feed;

    /** A change Kafka made, kept until the engine has applied it. */
    private record Change(int type, int userKind, String user, int clientKind, String client, Double value) {
    }

    /** Kafka's no-arg constructor for plug-ins; {@link #configure} starts the engine. */
    public KquotaCallback() {
    }

    @Override
    public synchronized void configure(Map<String, ?> configs) {
        TreeMap<String, String> settings = new TreeMap<>();
        for (Map.Entry<String, ?> e : configs.entrySet()) {
            if (e.getKey().startsWith("kquota.")) {
                settings.put(e.getKey(), String.valueOf(e.getValue()));
            }
        }
        int node = nodeId(configs);
        NativeEngine.load();
        String[] error = new String[1];
        long opened = NativeEngine.open(settings.keySet().toArray(new String[0]),
                settings.values().toArray(new String[0]), node, error);
        if (opened == 0) {
            if (error[0] != null) {
                throw new ConfigException(error[0]);
            }
            throw new ConfigException("kquota: the engine could not start: " + NativeEngine.lastError());
        }
        int interval = NativeEngine.usageIntervalMs(opened);
        if (interval < 0) {
            // Serving without the cluster-wide limits it was asked for would be silent: stop at start.
            String why = NativeEngine.lastError();
            NativeEngine.close(opened);
            throw new ConfigException("kquota: the engine's cluster mode could not start: " + why);
        }
        // The old engine's feed stops before the old engine closes.
        stopFeed();
        if (handle != 0) {
            NativeEngine.close(handle);
        }
        handle = opened;
        nodeId = node;
        clusterMode = interval > 0;
        policy = NativeEngine.policy(opened);
        int capacity = NativeEngine.cacheEntries(opened);
        memos = new Memo[ClientQuotaType.values().length];
        for (int t = 0; t < memos.length; t++) {
            memos[t] = capacity > 0 ? new Memo(capacity) : null;
            masks.set(t, NativeEngine.mask(opened, t));
        }
        registerMBean();
        LOG.info("kquota quota callback started: kquota.sub.quota.policy={}, kquota.cache.entries={}", policy,
                capacity);
        if (interval > 0) {
            int ms = Math.max(MIN_INTERVAL_MS, Math.min(MAX_INTERVAL_MS, interval));
            feed = new Feed(opened, ms);
            feed.start();
            LOG.info("kquota: cluster mode on (node {}): this broker's usage goes to the engine every {} ms", node,
                    ms);
        }
    }

    /** {@code node.id}, else {@code broker.id}; -1 if neither is a non-negative int. */
    private static int nodeId(Map<String, ?> configs) {
        int id = parseId(configs.get("node.id"));
        return id >= 0 ? id : parseId(configs.get("broker.id"));
    }

    private static int parseId(Object value) {
        try {
            long id;
            if (value instanceof Number n) {
                id = n.longValue();
            } else if (value != null) {
                id = Long.parseLong(String.valueOf(value).trim());
            } else {
                return -1;
            }
            return id >= 0 && id <= Integer.MAX_VALUE ? (int) id : -1;
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    @Override
    public Map<String, String> quotaMetricTags(ClientQuotaType quotaType, KafkaPrincipal principal, String clientId) {
        int type = quotaType.ordinal();
        String name = principal.getName();
        Memo memo = memos[type];
        Memo.Tags known = memo == null ? null : memo.tags(name, clientId);
        String user = known != null ? known.sanitizedUser() : Sanitizer.sanitize(name);
        int code;
        switch (masks.get(type)) {
            case 0, CLIENT_SHAPE -> code = CLIENT;
            case USER_SHAPE -> code = USER;
            case USER_CLIENT_SHAPE -> code = USER_CLIENT;
            default -> {
                return tags(user, clientId, askTags(type, name, user, clientId, known));
            }
        }
        if (known == null && memo != null) {
            // Kafka's shortcut decided the tags; the sanitized name is remembered all the same.
            memo.putTags(name, clientId, new Memo.Tags(user, -1, code));
        }
        return tags(user, clientId, code);
    }

    /** The tags the engine gives, remembered; on a failure, the last good answer. */
    private int askTags(int type, String name, String user, String clientId, Memo.Tags known) {
        long stamp = generation.get();
        if (known != null && known.generation() == stamp) {
            return known.code();
        }
        int code = NativeEngine.tags(handle, type, user, clientId);
        if (code < 0) {
            failed("quotaMetricTags");
            // The last good configuration's answer, or else the most specific bucket.
            return known != null && known.generation() >= 0 ? known.code() : USER_CLIENT;
        }
        Memo memo = memos[type];
        if (memo != null) {
            memo.putTags(name, clientId, new Memo.Tags(user, stamp, code));
        }
        return code;
    }

    private static Map<String, String> tags(String user, String clientId, int code) {
        // Ordered: Kafka names a bucket's sensor by the tags' values in order.
        LinkedHashMap<String, String> tags = new LinkedHashMap<>(4);
        tags.put(USER_TAG, code == CLIENT ? "" : user);
        tags.put(CLIENT_ID_TAG, code == USER ? "" : clientId);
        return tags;
    }

    @Override
    public Double quotaLimit(ClientQuotaType quotaType, Map<String, String> metricTags) {
        String user = metricTags.get(USER_TAG);
        String clientId = metricTags.get(CLIENT_ID_TAG);
        if (user == null || clientId == null || (user.isEmpty() && clientId.isEmpty())) {
            return null;
        }
        int type = quotaType.ordinal();
        Memo memo = memos[type];
        Memo.Limit known = memo == null ? null : memo.limit(user, clientId);
        long stamp = generation.get();
        double limit;
        if (known != null && known.generation() == stamp) {
            limit = known.value();
        } else {
            limit = NativeEngine.limit(handle, type, user, clientId);
            if (limit == NativeEngine.LIMIT_FAILED) {
                failed("quotaLimit");
                limit = known != null ? known.value() : NativeEngine.NO_QUOTA;
            } else if (memo != null) {
                memo.putLimit(user, clientId, new Memo.Limit(stamp, limit));
            }
        }
        return limit == NativeEngine.NO_QUOTA ? null : limit;
    }

    @Override
    public void updateQuota(ClientQuotaType quotaType, ClientQuotaEntity entity, double newValue) {
        apply(change(quotaType, entity, newValue));
    }

    @Override
    public void removeQuota(ClientQuotaType quotaType, ClientQuotaEntity entity) {
        apply(change(quotaType, entity, null));
    }

    @Override
    public boolean quotaResetRequired(ClientQuotaType quotaType) {
        if (hasPending || recovering) {
            recover();
        }
        // A plain read first: the exchange only for a reset that is due.
        int type = quotaType.ordinal();
        return resetsDue && resets.get(type) != 0 && resets.getAndSet(type, 0) != 0;
    }

    /**
     * Under the cluster mode, tells the engine how many partitions this broker leads of all that have
     * a leader (internal and kquota's own topics left out), the split of cluster-wide limits without
     * the metrics reporter; answers true when the limits moved. Runs on Kafka's metadata loader thread
     * at every topic or cluster delta: one pass over the partitions, and it never throws.
     */
    @Override
    public boolean updateClusterMetadata(Cluster cluster) {
        try {
            long h = handle;
            if (h == 0 || !clusterMode || cluster == null) {
                return false;
            }
            int me = nodeId;
            int total = 0;
            int led = 0;
            Set<String> internal = cluster.internalTopics();
            // Kafka's Cluster lists a partition once per listener of its leader: counted once.
            BitSet seen = new BitSet();
            for (String topic : cluster.topics()) {
                if (topic.startsWith(KQUOTA_TOPICS) || internal.contains(topic)) {
                    continue;
                }
                seen.clear();
                for (PartitionInfo partition : cluster.partitionsForTopic(topic)) {
                    Node leader = partition.leader();
                    int number = partition.partition();
                    if (leader == null || leader.id() < 0 || number < 0 || seen.get(number)) {
                        continue;
                    }
                    seen.set(number);
                    total++;
                    if (leader.id() == me) {
                        led++;
                    }
                }
            }
            int answer = NativeEngine.leadership(h, led, total);
            if (answer < 0) {
                failed("updateClusterMetadata");
                return false;
            }
            if (answer == 1) {
                limitsMoved(false);
                return true;
            }
            return false;
        } catch (Throwable t) {
            unexpected("updateClusterMetadata", t);
            return false;
        }
    }

    /**
     * Bumps the generation (every remembered answer is stale) and marks a reset due for the byte-rate
     * types, or for every type when kquota's configuration log changed the configuration.
     */
    private void limitsMoved(boolean everyType) {
        generation.incrementAndGet();
        if (everyType) {
            for (int t = 0; t < resets.length(); t++) {
                resets.set(t, 1);
            }
        } else {
            resets.set(ClientQuotaType.PRODUCE.ordinal(), 1);
            resets.set(ClientQuotaType.FETCH.ordinal(), 1);
        }
        resetsDue = true;
    }

    @Override
    public synchronized void close() {
        // The feed uses the engine: it stops (bounded) before the engine closes.
        stopFeed();
        unregisterMBean();
        long h = handle;
        handle = 0;
        boolean wasCluster = clusterMode;
        clusterMode = false;
        if (h != 0) {
            NativeEngine.close(h);
        }
        if (wasCluster) {
            // What the cluster threads said while stopping.
            drainNativeLog();
        }
    }

    /**
     * The native library's own threads (joining, the configuration log, membership, usage sharing) log
     * into a bounded queue; its lines reach the broker's log here, at their level.
     */
    private static void drainNativeLog() {
        String[] lines = NativeEngine.drainLog();
        if (lines == null) {
            return;
        }
        for (String line : lines) {
            int space = line.indexOf(' ');
            String level = space < 0 ? "INFO" : line.substring(0, space);
            String message = space < 0 ? line : line.substring(space + 1);
            switch (level) {
                case "ERROR" -> LOG.error("{}", message);
                case "WARN" -> LOG.warn("{}", message);
                default -> LOG.info("{}", message);
            }
        }
    }

    /** Stops the usage feed, if any; called holding this (the feed never takes it). */
    private void stopFeed() {
        Feed f = feed;
        feed = null;
        if (f != null) {
            f.stop();
        }
    }

    // What Kafka's entity says, as the engine takes it: kinds 0 absent, 1 named, 2 default.
    private static Change change(ClientQuotaType quotaType, ClientQuotaEntity entity, Double value) {
        int userKind = 0;
        int clientKind = 0;
        String user = "";
        String client = "";
        for (ClientQuotaEntity.ConfigEntity part : entity.configEntities()) {
            switch (part.entityType()) {
                case USER -> {
                    userKind = 1;
                    user = Sanitizer.sanitize(part.name());
                }
                case DEFAULT_USER -> userKind = 2;
                case CLIENT_ID -> {
                    clientKind = 1;
                    client = part.name();
                }
                case DEFAULT_CLIENT_ID -> clientKind = 2;
                default -> throw new IllegalArgumentException("kquota: an entity part of type " + part.entityType());
            }
        }
        return new Change(quotaType.ordinal(), userKind, user, clientKind, client, value);
    }

    private synchronized void apply(Change change) {
        pending.addLast(change);
        drain();
    }

    /** Applies the pending changes in order, stopping at the first that fails. */
    private synchronized void drain() {
        while (!pending.isEmpty()) {
            Change c = pending.peekFirst();
            int answer;
            synchronized (maskLock) {
                answer = c.value() != null
                        ? NativeEngine.update(handle, c.type(), c.userKind(), c.user(), c.clientKind(), c.client(),
                                c.value())
                        : NativeEngine.remove(handle, c.type(), c.userKind(), c.user(), c.clientKind(), c.client());
                if (answer >= 0) {
                    masks.set(c.type(), answer);
                }
            }
            if (answer == -1) {
                failed(c.value() != null ? "updateQuota" : "removeQuota");
                retryAfterNanos = System.nanoTime() + RETRY_NANOS;
                break;
            }
            pending.removeFirst();
            if (answer == NativeEngine.REFUSED) {
                // Kafka's controller accepted it, so only a value at or below 0 gets here.
                LOG.warn("kquota: the engine refused a quota change Kafka made ({}); the rest apply",
                        NativeEngine.lastError());
                continue;
            }
            generation.incrementAndGet();
        }
        hasPending = !pending.isEmpty();
    }

    /** After a failure: retries the pending changes, and once the engine answers, asks Kafka to reset. */
    private void recover() {
        long now = System.nanoTime();
        if (now - retryAfterNanos < 0) {
            return;
        }
        synchronized (this) {
            if (now - retryAfterNanos < 0) {
                return;
            }
            retryAfterNanos = now + RETRY_NANOS;
            if (hasPending) {
                drain();
            }
            if (!hasPending && NativeEngine.mask(handle, 0) >= 0) {
                recovering = false;
                generation.incrementAndGet();
                for (int t = 0; t < resets.length(); t++) {
                    resets.set(t, 1);
                }
                resetsDue = true;
                LOG.info("kquota: the engine answers again; Kafka reads every limit again");
            }
        }
    }

    private void failed(String call) {
        failures.incrementAndGet();
        recovering = true;
        String message = NativeEngine.lastError();
        long now = System.nanoTime();
        long last = lastLogNanos.get();
        if (now - last >= RETRY_NANOS && lastLogNanos.compareAndSet(last, now)) {
            long more = unlogged.getAndSet(0);
            LOG.error("kquota: {} failed: {}; answering with the last good configuration's answers"
                    + " ({} more failures since the last message)", call, message, more);
        } else {
            unlogged.incrementAndGet();
        }
    }

    /** A Java error where nothing may throw: logged at most once a second, with a count of the rest. */
    private void unexpected(String where, Throwable t) {
        long now = System.nanoTime();
        long last = unexpectedLogNanos.get();
        if (now - last >= RETRY_NANOS && unexpectedLogNanos.compareAndSet(last, now)) {
            long more = unexpectedUnlogged.getAndSet(0);
            LOG.error("kquota: {} failed ({} more since the last message)", where, more, t);
        } else {
            unexpectedUnlogged.incrementAndGet();
        }
    }

    /**
     * The cluster mode's usage feed: one daemon thread, {@code kquota-usage-feed}, that every
     * interval hands the engine the client-quota sensors' rates ({@link KquotaMetricsReporter#snapshot})
     * and applies what the engine answers. It catches everything and runs until {@link #stop}.
     */
    private final class Feed implements Runnable {
        private final long engine;
        private final long intervalNanos;
        private final long startNanos = System.nanoTime();
        private final CountDownLatch stopped = new CountDownLatch(1);
        private final Thread thread;

        // Reused from tick to tick, grown (and shrunk) with the sensors kept.
        private int[] types = new int[0];
        private String[] users = new String[0];
        private String[] clients = new String[0];
        private double[] rates = new double[0];
        private int lastCount;

        /** A re-read of the masks failed: tried again at the next tick. */
        private boolean masksStale;
        private boolean reporterChecked;
        private long droppedSeen;
        private long droppedLogNanos = startNanos - DROPPED_LOG_NANOS;

        Feed(long engine, int intervalMs) {
            this.engine = engine;
            this.intervalNanos = TimeUnit.MILLISECONDS.toNanos(intervalMs);
            this.thread = new Thread(this, "kquota-usage-feed");
            thread.setDaemon(true);
        }

        void start() {
            thread.start();
        }

        /** Stops the thread and waits for it, at most {@value #FEED_JOIN_MILLIS} ms. */
        void stop() {
            stopped.countDown();
            try {
                thread.join(FEED_JOIN_MILLIS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            if (thread.isAlive()) {
                LOG.warn("kquota: the usage feed did not stop within {} ms; the engine closes all the same",
                        FEED_JOIN_MILLIS);
            }
        }

        @Override
        public void run() {
            long next = System.nanoTime() + intervalNanos;
            while (stopped.getCount() > 0) {
                try {
                    long wait = next - System.nanoTime();
                    if (wait > 0 && stopped.await(wait, TimeUnit.NANOSECONDS)) {
                        return;
                    }
                } catch (InterruptedException e) {
                    // Only close stops the feed.
                    continue;
                }
                long now = System.nanoTime();
                next += intervalNanos;
                if (next - now <= 0) {
                    // Late (a long pause): the missed ticks are skipped, not run back to back.
                    next = now + intervalNanos;
                }
                try {
                    once(now);
                } catch (Throwable t) {
                    unexpected("the usage feed", t);
                }
            }
        }

        private void once(long now) {
            drainNativeLog();
            check(now);
            int count = sample();
            int answer = NativeEngine.tick(engine, types, users, clients, rates, count);
            if (answer < 0) {
                failed("tick");
                return;
            }
            boolean configuration = (answer & NativeEngine.TICK_CONFIGURATION) != 0;
            if (configuration || masksStale) {
                // A re-read that failed before counts as the change it missed once it succeeds.
                configuration = refreshMasks() || configuration;
            }
            if (configuration || (answer & NativeEngine.TICK_LIMITS) != 0) {
                // The log may have changed any type's limits; the shares move only the byte rates.
                limitsMoved(configuration);
            }
        }

        /** Once, 10 s after start: the reporter; and, at most once a minute, sensors it left out. */
        private void check(long now) {
            if (!reporterChecked && now - startNanos >= REPORTER_CHECK_NANOS) {
                reporterChecked = true;
                if (!KquotaMetricsReporter.installed()) {
                    LOG.warn("kquota: kquota.cluster.bootstrap.servers is set but io.kquota.kafka.KquotaMetricsReporter"
                            + " is not in metric.reporters: cluster-wide bps limits are split by partition leadership,"
                            + " not by what each broker serves; add it (listing"
                            + " org.apache.kafka.common.metrics.JmxReporter too)");
                }
            }
            long dropped = KquotaMetricsReporter.dropped();
            if (dropped > droppedSeen && now - droppedLogNanos >= DROPPED_LOG_NANOS) {
                droppedSeen = dropped;
                droppedLogNanos = now;
                LOG.warn("kquota: {} client-quota sensors were left out of the usage shared with the other brokers"
                        + " since start: the metrics reporter keeps at most {}", dropped,
                        KquotaMetricsReporter.MAX_SENSORS);
            }
        }

        /** The sensors' rates into the reused arrays; answers how many. */
        private int sample() {
            int want = Math.min(KquotaMetricsReporter.size(), KquotaMetricsReporter.MAX_SENSORS);
            int length = types.length;
            if (want > length || (length > 4096 && want < length / 4)) {
                int size = (int) Math.min((long) want + want / 4 + 16, KquotaMetricsReporter.MAX_SENSORS);
                types = new int[size];
                users = new String[size];
                clients = new String[size];
                rates = new double[size];
                lastCount = 0;
            }
            int count = KquotaMetricsReporter.snapshot(types, users, clients, rates);
            if (count < lastCount) {
                // The names of sensors gone are not held on to.
                Arrays.fill(users, count, lastCount, null);
                Arrays.fill(clients, count, lastCount, null);
            }
            lastCount = count;
            return count;
        }

        /** Every type's mask again, after kquota's log changed the configuration; false on a failure. */
        private boolean refreshMasks() {
            synchronized (maskLock) {
                for (int t = 0; t < masks.length(); t++) {
                    int mask = NativeEngine.mask(engine, t);
                    if (mask < 0) {
                        masksStale = true;
                        failed("tick");
                        return false;
                    }
                    masks.set(t, mask);
                }
            }
            masksStale = false;
            return true;
        }
    }

    // JMX.

    private void registerMBean() {
        try {
            unregisterMBean();
            jmxName = new ObjectName("io.kquota:type=ClientQuotaCallback,instance=" + INSTANCES.getAndIncrement());
            ManagementFactory.getPlatformMBeanServer()
                    .registerMBean(new CallbackBean(this), jmxName);
        } catch (Exception e) {
            LOG.warn("kquota: the callback's JMX bean could not be registered: {}", e.toString());
            jmxName = null;
        }
    }

    private void unregisterMBean() {
        if (jmxName == null) {
            return;
        }
        try {
            ManagementFactory.getPlatformMBeanServer().unregisterMBean(jmxName);
        } catch (Exception e) {
            LOG.warn("kquota: the callback's JMX bean could not be unregistered: {}", e.toString());
        }
        jmxName = null;
    }

    @Override
    public String getPolicy() {
        return policy;
    }

    @Override
    public long getEntities() {
        return NativeEngine.entities(handle);
    }

    @Override
    public long getFailures() {
        return failures.get();
    }

    @Override
    public synchronized int getPendingChanges() {
        return pending.size();
    }

    @Override
    public boolean isFailing() {
        return failing.get();
    }

    @Override
    public String getClusterState() {
        String state = NativeEngine.clusterState(handle);
        return state != null ? state : "unknown: " + NativeEngine.lastError();
    }

    @Override
    public boolean isReady() {
        String state = getClusterState();
        return state.equals("off") || state.equals("ready");
    }

    @Override
    public int getLiveBrokers() {
        return NativeEngine.liveInstances(handle);
    }

    @Override
    public int getSensors() {
        return KquotaMetricsReporter.size();
    }

    @Override
    public boolean isReporterInstalled() {
        return KquotaMetricsReporter.installed();
    }

    @Override
    public String explain(String user, String clientId) {
        String text = NativeEngine.explain(handle, Sanitizer.sanitize(user), clientId);
        return text != null ? text : "kquota: the engine could not explain: " + NativeEngine.lastError();
    }

    /**
     * The fault drill (the bean's operation {@code setFailing(boolean)}): while on, every call into the
     * engine fails on purpose and the callback answers as it does on a real failure (the last good
     * configuration's answers).
     */
    public void setFailing(boolean failing) {
        this.failing.set(failing);
        NativeEngine.setFailing(handle, failing);
        LOG.warn("kquota: fault drill {}", failing ? "on: every call into the engine fails" : "off");
    }

    /** Calls into the engine that failed since start. */
    public long failures() {
        return failures.get();
    }
}
