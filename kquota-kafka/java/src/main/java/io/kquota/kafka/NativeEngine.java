package io.kquota.kafka;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * The engine's native methods (kquota-kafka's Rust library, carried in this jar) and its loading.
 *
 * <p>Every method answers a plain value and never throws: a failure inside the library is answered
 * with the method's failure value ({@code -1}, {@code -2.0} for {@link #limit}, {@code null} for
 * strings) and its message is kept for {@link #lastError()} on the same thread.
 */
final class NativeEngine {
    /** Where the library sits in the jar. */
    static final String RESOURCE = "/io/kquota/kafka/native/linux-x86_64/libkquota_kafka.so";

    /** {@link #limit}'s answer when no quota applies. */
    static final double NO_QUOTA = -1.0;
    /** {@link #limit}'s answer on a failure. */
    static final double LIMIT_FAILED = -2.0;
    /** {@link #update}'s answer when the engine refused the change. */
    static final int REFUSED = -2;

    private static volatile Throwable loadFailure;
    private static volatile boolean loaded;

    private NativeEngine() {
    }

    /**
     * Loads the library from the jar once: copied to a private temporary file, loaded, and the file
     * deleted (the loaded mapping stays). Throws with a message saying why it cannot be loaded.
     */
    static synchronized void load() {
        if (loaded) {
            return;
        }
        if (loadFailure != null) {
            throw new IllegalStateException(loadFailure.getMessage(), loadFailure);
        }
        try {
            String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
            String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
            if (!os.startsWith("linux") || !(arch.equals("amd64") || arch.equals("x86_64"))) {
                throw new IllegalStateException("kquota's native library is built for linux-x86_64; this JVM runs on "
                        + os + "-" + arch);
            }
            Path file = Files.createTempFile("libkquota_kafka", ".so");
            try (InputStream in = NativeEngine.class.getResourceAsStream(RESOURCE)) {
                if (in == null) {
                    throw new IllegalStateException("the kquota-kafka jar holds no native library at " + RESOURCE
                            + "; build the jar with kquota-kafka/build.sh");
                }
                Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
                System.load(file.toAbsolutePath().toString());
            } finally {
                Files.deleteIfExists(file);
            }
            loaded = true;
        } catch (IOException | RuntimeException | UnsatisfiedLinkError e) {
            loadFailure = e;
            throw new IllegalStateException("kquota could not load its native library: " + e.getMessage(), e);
        }
    }

    /** {@link #tick}'s answer bit: kquota's configuration log applied something (masks and limits may differ). */
    static final int TICK_CONFIGURATION = 1;
    /** {@link #tick}'s answer bit: the cluster-wide limits' shares on this broker moved. */
    static final int TICK_LIMITS = 2;

    /**
     * A new engine from the {@code kquota.*} settings, or 0 with the refusal in {@code error[0]}.
     * {@code nodeId} is the broker's {@code node.id} (else {@code broker.id}), -1 if unknown: the
     * cluster mode names this broker by it and counts the partitions it leads.
     */
    static native long open(String[] keys, String[] values, int nodeId, String[] error);

    /**
     * How often, in milliseconds, the callback hands the engine this broker's usage ({@link #tick}):
     * 0 when the cluster mode is off (no {@code kquota.cluster.bootstrap.servers}), -1 on a failure.
     */
    static native int usageIntervalMs(long handle);

    /**
     * This broker's usage since the last tick, from Kafka's client-quota sensors: {@code count}
     * entries of parallel arrays, the type ({@code ClientQuotaType}'s ordinal, produce 0 or fetch 1),
     * the {@code user} tag (sanitized), the {@code client-id} tag and the rate in bytes per second.
     * Answers bits, {@link #TICK_CONFIGURATION} and {@link #TICK_LIMITS} (0 when nothing changed), or
     * -1 on a failure.
     */
    static native int tick(long handle, int[] types, String[] users, String[] clients, double[] rates, int count);

    /**
     * The partitions this broker leads ({@code led}) of those with a leader ({@code total}), internal
     * and kquota's own topics left out: without the metrics reporter, the cluster mode splits each
     * cluster-wide limit by them. Answers 1 when the limits moved, 0 when not, -1 on a failure.
     */
    static native int leadership(long handle, int led, int total);

    /**
     * The cluster mode's state: {@code off}, {@code joining}, {@code ready} or
     * {@code stopped: <why>}; null on a failure.
     */
    static native String clusterState(long handle);

    /** The kquota instances (one per broker) the cluster mode's membership counts as live now, or -1. */
    static native int liveInstances(long handle);

    /** Closes an engine; later calls with its handle fail. */
    static native void close(long handle);

    /** This thread's last failure, or null. */
    static native String lastError();

    /** The memo size the settings asked for, or -1. */
    static native int cacheEntries(long handle);

    /** {@code kafka} or {@code kip55}, or null. */
    static native String policy(long handle);

    /** Configured entities, or -1. */
    static native long entities(long handle);

    /** The shape bits of a quota type (Kafka's {@code quotaTypesEnabled}), or -1. */
    static native int mask(long handle, int type);

    /** The fault drill on or off. */
    static native void setFailing(long handle, boolean failing);

    /**
     * {@code updateQuota}: component kinds are 0 absent, 1 named, 2 default; the user's name is
     * sanitized. Answers the type's new shape bits, -1 on a failure, {@link #REFUSED}.
     */
    static native int update(long handle, int type, int userKind, String user, int clientKind, String client,
                             double value);

    /** {@code removeQuota}, as {@link #update}. */
    static native int remove(long handle, int type, int userKind, String user, int clientKind, String client);

    /** Who shares the bucket of (sanitized user, client-id): 0 both, 1 the user, 2 the client-id; -1. */
    static native int tags(long handle, int type, String sanitizedUser, String clientId);

    /** A bucket's limit from its tags; {@link #NO_QUOTA}, {@link #LIMIT_FAILED}. */
    static native double limit(long handle, int type, String userTag, String clientTag);

    /** Why each type's limit is what it is, for (sanitized user, client-id); null on a failure. */
    static native String explain(long handle, String sanitizedUser, String clientId);

    /**
     * The log lines of the library's own threads since the last call, each {@code LEVEL message} (ERROR,
     * WARN or INFO), oldest first; at most a thousand, then a line counting those dropped. Null on a failure.
     */
    static native String[] drainLog();
}
