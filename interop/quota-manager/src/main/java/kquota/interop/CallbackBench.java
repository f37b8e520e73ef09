package kquota.interop;

import org.apache.kafka.common.internals.Plugin;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Quota;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.utils.Sanitizer;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.config.ClientQuotaManagerConfig;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity.ConfigEntity;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.apache.kafka.server.quota.QuotaType;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Threads;
import org.openjdk.jmh.infra.Blackhole;

import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.lang.management.ThreadMXBean;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Method;
import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

/**
 * What a broker's quota manager asks its KIP-257 callback: {@code quotaMetricTags} (every request) and
 * then {@code quotaLimit} for those tags, through the public {@link ClientQuotaCallback} interface, for
 * Kafka 4.3.1's own DefaultQuotaCallback (a private class of ClientQuotaManager, read from a manager
 * built with no plug-in) and for kquota's {@code io.kquota.kafka.KquotaCallback}
 * ({@code kquota.sub.quota.policy=kafka}), with its per-connection memo (default settings) and without it
 * ({@code kquota.cache.entries=0}: every call crosses JNI into the engine).
 *
 * <p>Both sides are configured the way a broker configures them: {@code ClientQuotaManager.updateQuota}
 * with {@code UserEntity(Sanitizer.sanitize(name))} and {@code ClientIdEntity(name)}, one call per entity.
 * The configuration mixes every shape, so Kafka's default takes its full lookup (no single-shape
 * shortcut): of {@code size} named entities a third each {@code {user, client-id}}, {@code {user}} and
 * {@code {client-id}}; one {@code {user}} entity in a hundred also has {@code {user, client-id=<default>}};
 * and {@code {client-id=<default>}}. (A {@code <default>} user quota is left out on purpose: in Kafka's
 * order it outranks {@code {client-id}}, which would leave a third of the entities unreachable.) One user
 * in eight is a TLS-style name that sanitizing changes ({@code CN=svc-7,O=corp}).
 *
 * <p>Requests cycle through one fixed set of 10,000 (principal, client-id) pairs, the same for every
 * variant (seeded): 60 % a configured entity's own pair, 30 % a configured user with another entity's
 * client-id, 10 % names configured nowhere. The principals are built once. Each thread walks the set from
 * its own starting point.
 *
 * <p>The kquota callback is loaded by name, so this class compiles without the plug-in's jar (the
 * module's plain {@code mvn compile}); {@code callback-bench.sh} puts the jar on the class path.
 *
 * <p>{@link Memory#main} is not a benchmark: it loads 1,000,000 entities into one callback in a fresh JVM
 * and prints the Java heap and the resident set it added.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Fork(value = 1, jvmArgsAppend = {"-Xms3g", "-Xmx3g"})
public class CallbackBench {
    static final String KQUOTA_CLASS = "io.kquota.kafka.KquotaCallback";
    static final int REQUESTS = 10_000;
    /** Prime, so the walk visits every request of the set. */
    static final int STRIDE = 7_919;
    static final long SEED = 257;

    @Param({"1000", "100000", "1000000"})
    public int size;

    @Param({"default", "kquota", "kquota-nomemo"})
    public String variant;

    Metrics metrics;
    ClientQuotaManager manager;
    ClientQuotaCallback callback;
    ClientQuotaCallback owned;
    KafkaPrincipal[] principals;
    String[] clientIds;

    static String user(int i) {
        return i % 8 == 7 ? "CN=svc-" + i + ",O=corp" : "user-" + i;
    }

    static String client(int i) {
        return "client-" + i;
    }

    /** A broker's configuration (see the class comment), through the manager as Kafka's broker feeds it. */
    static int configure(ClientQuotaManager manager, int size) {
        int entities = 0;
        for (int i = 0; i < size; i++) {
            Optional<ConfigEntity> u = Optional.of(new ClientQuotaManager.UserEntity(Sanitizer.sanitize(user(i))));
            Optional<ConfigEntity> c = Optional.of(new ClientQuotaManager.ClientIdEntity(client(i)));
            Optional<Quota> q = Optional.of(Quota.upperBound(1_000_000.0 + i));
            switch (i % 3) {
                case 0 -> manager.updateQuota(u, c, q);
                case 1 -> {
                    manager.updateQuota(u, Optional.empty(), q);
                    if (i % 300 == 1) {
                        manager.updateQuota(u, Optional.of(ClientQuotaManager.DEFAULT_USER_CLIENT_ID),
                                Optional.of(Quota.upperBound(500_000.0 + i)));
                        entities++;
                    }
                }
                default -> manager.updateQuota(Optional.empty(), c, q);
            }
            entities++;
        }
        manager.updateQuota(Optional.empty(), Optional.of(ClientQuotaManager.DEFAULT_USER_CLIENT_ID),
                Optional.of(Quota.upperBound(250_000.0)));
        return entities + 1;
    }

    static ClientQuotaManager newManager(Metrics metrics, ClientQuotaCallback plugin) {
        Optional<Plugin<ClientQuotaCallback>> wrapped = plugin == null ? Optional.empty()
                : Optional.of(Plugin.wrapInstance(plugin, metrics, "client.quota.callback.class"));
        return new ClientQuotaManager(new ClientQuotaManagerConfig(), metrics, QuotaType.PRODUCE, Time.SYSTEM,
                "callback-bench-", wrapped);
    }

    /** kquota's callback, configured as a broker configures it (all of server.properties is handed over). */
    static ClientQuotaCallback newKquota(boolean memo) throws ReflectiveOperationException {
        ClientQuotaCallback cb = (ClientQuotaCallback) Class.forName(KQUOTA_CLASS).getConstructor().newInstance();
        Map<String, Object> configs = new HashMap<>();
        configs.put("broker.id", "1");
        configs.put("client.quota.callback.class", KQUOTA_CLASS);
        configs.put("kquota.sub.quota.policy", "kafka");
        if (!memo) {
            configs.put("kquota.cache.entries", "0");
        }
        cb.configure(configs);
        return cb;
    }

    static ClientQuotaCallback defaultCallback(ClientQuotaManager manager) throws ReflectiveOperationException {
        Field field = ClientQuotaManager.class.getDeclaredField("quotaCallback");
        field.setAccessible(true);
        return (ClientQuotaCallback) field.get(manager);
    }

    @Setup(Level.Trial)
    public void setup() throws ReflectiveOperationException {
        metrics = new Metrics(Time.SYSTEM);
        owned = switch (variant) {
            case "default" -> null;
            case "kquota" -> newKquota(true);
            case "kquota-nomemo" -> newKquota(false);
            default -> throw new IllegalArgumentException("variant " + variant);
        };
        manager = newManager(metrics, owned);
        long start = System.nanoTime();
        int entities = configure(manager, size);
        long ms = (System.nanoTime() - start) / 1_000_000;
        callback = owned != null ? owned : defaultCallback(manager);
        // One line per trial, picked up by callback-bench.sh.
        System.out.printf("CALLBACK-BENCH-SETUP variant=%s size=%d entities=%d ms=%d%n", variant, size, entities, ms);

        principals = new KafkaPrincipal[REQUESTS];
        clientIds = new String[REQUESTS];
        requests(size, principals, clientIds);
    }

    /** The fixed request set (see the class comment): the same for every variant at a size. */
    static void requests(int size, KafkaPrincipal[] principals, String[] clientIds) {
        Random rnd = new Random(SEED);
        for (int k = 0; k < REQUESTS; k++) {
            int r = rnd.nextInt(100);
            int j = rnd.nextInt(size);
            String u;
            String c;
            if (r < 60) {
                u = user(j);
                c = client(j);
            } else if (r < 90) {
                u = user(j);
                c = client(rnd.nextInt(size));
            } else {
                u = "guest-" + k;
                c = "app-" + k;
            }
            principals[k] = new KafkaPrincipal(KafkaPrincipal.USER_TYPE, u);
            clientIds[k] = c;
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        manager.shutdown();
        if (owned != null) {
            owned.close();
        }
        metrics.close();
    }

    /** Each thread walks the requests from its own starting point. */
    @State(Scope.Thread)
    public static class Cursor {
        int next;
        static int threads;

        @Setup(Level.Trial)
        public void setup() {
            synchronized (Cursor.class) {
                next = (threads++ * 1_237) % REQUESTS;
            }
        }
    }

    Double request(Cursor cursor, Blackhole bh) {
        int i = cursor.next;
        cursor.next = (i + STRIDE) % REQUESTS;
        Map<String, String> tags = callback.quotaMetricTags(ClientQuotaType.PRODUCE, principals[i], clientIds[i]);
        bh.consume(tags);
        return callback.quotaLimit(ClientQuotaType.PRODUCE, tags);
    }

    @Benchmark
    @Threads(1)
    public Double oneThread(Cursor cursor, Blackhole bh) {
        return request(cursor, bh);
    }

    @Benchmark
    @Threads(8)
    public Double eightThreads(Cursor cursor, Blackhole bh) {
        return request(cursor, bh);
    }

    /**
     * {@code java ... kquota.interop.CallbackBench$Memory default|kquota SIZE}: loads SIZE entities (the
     * benchmark's configuration) into one callback through its manager and prints one line: the Java heap
     * in use after a full collection, before and after, and the resident set (VmRSS) before and after. Run
     * with a pre-touched fixed heap (-Xms = -Xmx, -XX:+AlwaysPreTouch) so the resident set does not grow
     * with the heap: what it gains is native memory (kquota's engine) and a little code.
     */
    public static final class Memory {
        public static void main(String[] args) throws Exception {
            String variant = args[0];
            int size = Integer.parseInt(args[1]);
            Metrics metrics = new Metrics(Time.SYSTEM);
            ClientQuotaCallback cb = variant.equals("default") ? null : newKquota(true);
            ClientQuotaManager manager = newManager(metrics, cb);
            // Warm the load path on a throw-away manager first, so JIT code and class metadata are in the
            // "before" figure, not counted per entity.
            Metrics warmMetrics = new Metrics(Time.SYSTEM);
            ClientQuotaCallback warmCb = variant.equals("default") ? null : newKquota(true);
            ClientQuotaManager warm = newManager(warmMetrics, warmCb);
            configure(warm, 20_000);
            warm.shutdown();
            if (warmCb != null) {
                warmCb.close();
            }
            warmMetrics.close();

            long[] before = measure();
            long start = System.nanoTime();
            int entities = configure(manager, size);
            long ms = (System.nanoTime() - start) / 1_000_000;
            long[] after = measure();
            long engineEntities = -1;
            if (cb != null) {
                engineEntities = (long) cb.getClass().getMethod("getEntities").invoke(cb);
            }
            long heap = after[0] - before[0];
            long rss = after[1] - before[1];
            System.out.printf("CALLBACK-BENCH-MEMORY variant=%s entities=%d engine_entities=%d load_ms=%d"
                    + " heap_before=%d heap_after=%d heap_delta=%d rss_before=%d rss_after=%d rss_delta=%d"
                    + " heap_per_entity=%.1f rss_per_entity=%.1f%n",
                    variant, entities, engineEntities, ms, before[0], after[0], heap, before[1], after[1], rss,
                    (double) heap / entities, (double) rss / entities);
            // Keep everything reachable until the figures are taken.
            manager.shutdown();
            if (cb != null) {
                cb.close();
            }
            metrics.close();
        }

        /** {heap used after full collections, VmRSS}, in bytes. */
        static long[] measure() throws Exception {
            MemoryMXBean mx = ManagementFactory.getMemoryMXBean();
            long used = Long.MAX_VALUE;
            for (int i = 0; i < 4; i++) {
                System.gc();
                Thread.sleep(200);
                used = Math.min(used, mx.getHeapMemoryUsage().getUsed());
            }
            long rss = -1;
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmRSS:")) {
                    rss = Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
                }
            }
            return new long[] {used, rss};
        }
    }
    /**
     * {@code java ... kquota.interop.CallbackBench$Paired SIZES THREADS REPS WINDOW_MS}: the ratios in
     * paired windows. JMH runs each variant in its own fork, tens of seconds to minutes apart, and on a
     * shared machine the speed of the same work moves by more than the differences measured. Here one
     * JVM holds the three callbacks, each configured with the same entities through its own manager, and
     * runs them in short windows one after the other (the order rotating from one repetition to the
     * next), THREADS threads at a time, all calling the same callback. Each window reports the calls
     * made and the threads' CPU time (ThreadMXBean, so time spent descheduled is left out) and wall
     * time. One line per window, {@code CALLBACK-BENCH-PAIRED ...}; callback-bench.sh takes the ratio
     * in each repetition and reports their median and range. (Both callbacks' classes reach the one
     * call site here, a bimorphic call HotSpot inlines; JMH's forks see one each.)
     *
     * <p>A fourth variant, {@code default-session}, is the same DefaultQuotaCallback called the way the
     * broker's ClientQuotaManager calls it ({@code getOrCreateQuotaSensors}): through its
     * {@code quotaMetricTags(sanitizedUser, clientId)}, with the user sanitized once per connection
     * ({@code Session.sanitizedUser}) instead of on every call through the interface.
     */
    public static final class Paired {
        static final String[] VARIANTS = {"default", "kquota", "kquota-nomemo", "default-session"};
        /** DefaultQuotaCallback#quotaMetricTags(String, String): (Object, String, String) -> Map. */
        static final MethodHandle SESSION_TAGS = sessionTags();

        static MethodHandle sessionTags() {
            try {
                Class<?> c = Class.forName("org.apache.kafka.server.quota.ClientQuotaManager$DefaultQuotaCallback");
                Method m = c.getDeclaredMethod("quotaMetricTags", String.class, String.class);
                m.setAccessible(true);
                return MethodHandles.lookup().unreflect(m)
                        .asType(MethodType.methodType(Map.class, Object.class, String.class, String.class));
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("DefaultQuotaCallback#quotaMetricTags(String, String)", e);
            }
        }

        public static void main(String[] args) throws Exception {
            int reps = Integer.parseInt(args[2]);
            long windowMs = Long.parseLong(args[3]);
            for (String sizeArg : args[0].split(",")) {
                int size = Integer.parseInt(sizeArg);
                ClientQuotaCallback[] callbacks = new ClientQuotaCallback[VARIANTS.length];
                ClientQuotaManager[] managers = new ClientQuotaManager[VARIANTS.length];
                Metrics[] metrics = new Metrics[VARIANTS.length];
                ClientQuotaCallback[] owned = new ClientQuotaCallback[VARIANTS.length];
                for (int v = 0; v < 3; v++) {
                    metrics[v] = new Metrics(Time.SYSTEM);
                    owned[v] = v == 0 ? null : newKquota(v == 1);
                    managers[v] = newManager(metrics[v], owned[v]);
                    long start = System.nanoTime();
                    int entities = configure(managers[v], size);
                    System.out.printf("CALLBACK-BENCH-SETUP variant=%s size=%d entities=%d ms=%d%n", VARIANTS[v],
                            size, entities, (System.nanoTime() - start) / 1_000_000);
                    callbacks[v] = owned[v] != null ? owned[v] : defaultCallback(managers[v]);
                }
                callbacks[3] = callbacks[0];
                KafkaPrincipal[] principals = new KafkaPrincipal[REQUESTS];
                String[] clientIds = new String[REQUESTS];
                requests(size, principals, clientIds);
                String[] sanitized = new String[REQUESTS];
                for (int k = 0; k < REQUESTS; k++) {
                    sanitized[k] = Sanitizer.sanitize(principals[k].getName());
                }
                for (String threadsArg : args[1].split(",")) {
                    int threads = Integer.parseInt(threadsArg);
                    try (Workers workers = new Workers(threads, principals, sanitized, clientIds)) {
                        for (int v = 0; v < VARIANTS.length; v++) {
                            for (int w = 0; w < 4; w++) {
                                workers.window(callbacks[(v + w) % VARIANTS.length], (v + w) % VARIANTS.length == 3, 500); // warm-up, not reported
                            }
                        }
                        for (int rep = 0; rep < reps; rep++) {
                            for (int k = 0; k < VARIANTS.length; k++) {
                                int v = (k + rep) % VARIANTS.length;
                                long[] r = workers.window(callbacks[v], v == 3, windowMs);
                                System.out.printf("CALLBACK-BENCH-PAIRED size=%d threads=%d rep=%d variant=%s ops=%d"
                                        + " cpu_ns=%d wall_ns=%d%n", size, threads, rep, VARIANTS[v], r[0], r[1], r[2]);
                            }
                        }
                    }
                }
                for (int v = 0; v < 3; v++) {
                    managers[v].shutdown();
                    if (owned[v] != null) {
                        owned[v].close();
                    }
                    metrics[v].close();
                }
            }
        }

        /** THREADS threads calling one callback for a window at a time. */
        static final class Workers implements AutoCloseable {
            final Thread[] threads;
            final CyclicBarrier start;
            final CyclicBarrier done;
            final long[] ops;
            final long[] cpu;
            volatile ClientQuotaCallback target;
            volatile boolean session;
            volatile boolean stop;
            volatile boolean closed;
            volatile long sink;

            Workers(int n, KafkaPrincipal[] principals, String[] sanitized, String[] clientIds) {
                threads = new Thread[n];
                start = new CyclicBarrier(n + 1);
                done = new CyclicBarrier(n + 1);
                ops = new long[n];
                cpu = new long[n];
                ThreadMXBean mx = ManagementFactory.getThreadMXBean();
                for (int t = 0; t < n; t++) {
                    int id = t;
                    threads[t] = new Thread(() -> {
                        int next = (id * 1_237) % REQUESTS;
                        long local = 0;
                        try {
                            while (true) {
                                start.await();
                                if (closed) {
                                    return;
                                }
                                ClientQuotaCallback cb = target;
                                boolean viaSession = session;
                                long count = 0;
                                long cpu0 = mx.getCurrentThreadCpuTime();
                                while (!stop) {
                                    for (int k = 0; k < 32; k++) {
                                        @SuppressWarnings("unchecked")
                                        Map<String, String> tags = viaSession
                                                ? (Map<String, String>) SESSION_TAGS.invokeExact((Object) cb,
                                                        sanitized[next], clientIds[next])
                                                : cb.quotaMetricTags(ClientQuotaType.PRODUCE, principals[next],
                                                        clientIds[next]);
                                        Double limit = cb.quotaLimit(ClientQuotaType.PRODUCE, tags);
                                        local += tags.size() + (limit == null ? 0 : 1);
                                        next = (next + STRIDE) % REQUESTS;
                                    }
                                    count += 32;
                                }
                                cpu[id] = mx.getCurrentThreadCpuTime() - cpu0;
                                ops[id] = count;
                                sink = local;
                                done.await();
                            }
                        } catch (Throwable e) {
                            if (!closed) {
                                throw new IllegalStateException(e);
                            }
                        }
                    }, "paired-" + t);
                    threads[t].setDaemon(true);
                    threads[t].start();
                }
            }

            /** {calls, CPU ns summed over the threads, wall ns}. */
            long[] window(ClientQuotaCallback cb, boolean viaSession, long ms) throws Exception {
                target = cb;
                session = viaSession;
                stop = false;
                start.await();
                long t0 = System.nanoTime();
                Thread.sleep(ms);
                stop = true;
                done.await();
                long wall = System.nanoTime() - t0;
                long totalOps = 0;
                long totalCpu = 0;
                for (int t = 0; t < threads.length; t++) {
                    totalOps += ops[t];
                    totalCpu += cpu[t];
                }
                return new long[] {totalOps, totalCpu, wall};
            }

            @Override
            public void close() throws Exception {
                closed = true;
                start.await();
                for (Thread t : threads) {
                    t.join();
                }
            }
        }
    }
}
