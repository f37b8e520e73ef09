package io.kquota.kafka;

import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.management.ManagementFactory;
import java.util.ArrayDeque;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
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

    private volatile long handle;
    private String policy = "kafka";
    private final AtomicIntegerArray masks = new AtomicIntegerArray(ClientQuotaType.values().length);
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
    private ObjectName jmxName;

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
        NativeEngine.load();
        String[] error = new String[1];
        long opened = NativeEngine.open(settings.keySet().toArray(new String[0]),
                settings.values().toArray(new String[0]), error);
        if (opened == 0) {
            if (error[0] != null) {
                throw new ConfigException(error[0]);
            }
            throw new ConfigException("kquota: the engine could not start: " + NativeEngine.lastError());
        }
        if (handle != 0) {
            NativeEngine.close(handle);
        }
        handle = opened;
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

    @Override
    public boolean updateClusterMetadata(Cluster cluster) {
        return false;
    }

    @Override
    public synchronized void close() {
        unregisterMBean();
        long h = handle;
        handle = 0;
        if (h != 0) {
            NativeEngine.close(h);
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
            int answer = c.value() != null
                    ? NativeEngine.update(handle, c.type(), c.userKind(), c.user(), c.clientKind(), c.client(),
                            c.value())
                    : NativeEngine.remove(handle, c.type(), c.userKind(), c.user(), c.clientKind(), c.client());
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
            masks.set(c.type(), answer);
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
