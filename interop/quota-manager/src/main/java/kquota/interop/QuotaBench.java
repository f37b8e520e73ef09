package kquota.interop;

import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Quota;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.utils.Sanitizer;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.network.Session;
import org.apache.kafka.server.config.ClientQuotaManagerConfig;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.QuotaType;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Threads;

import java.net.InetAddress;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * Kafka's produce-quota path, ClientQuotaManager.recordAndGetThrottleTimeMs, as a broker calls it for
 * every produce request: the same workloads as kquota's benches/versus_kafka.rs.
 *
 * <ul>
 *   <li>{@code hot}: one client, {@code {user=hot, client-id=app}}.</li>
 *   <li>{@code spread}: 100,000 clients (user-i, client-i), a third each resolving to
 *   {@code {user=u, client-id=c}} (level 1), {@code {user=u}} (level 3) and {@code {client-id=<default>}}
 *   (level 8), visited in a scattered order.</li>
 * </ul>
 * Limits are high enough that nothing is throttled: Kafka's throttled path throws an exception, which
 * would flatter the comparison.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
public class QuotaBench {
    static final int SPREAD_CLIENTS = 100_000;
    /** Visits clients in a scattered order, the same stride as the Rust bench. */
    static final int STRIDE = 7_919;
    static final double REQUEST_BYTES = 1024;
    static final Quota NEVER = new Quota(1e18, true);

    @Param({"hot", "spread"})
    public String workload;

    Metrics metrics;
    ClientQuotaManager manager;
    Session[] sessions;
    String[] clientIds;

    @Setup(Level.Trial)
    public void setup() {
        metrics = new Metrics(Time.SYSTEM);
        manager = new ClientQuotaManager(new ClientQuotaManagerConfig(), metrics, QuotaType.PRODUCE,
                Time.SYSTEM, "bench-");
        int n = workload.equals("hot") ? 1 : SPREAD_CLIENTS;
        sessions = new Session[n];
        clientIds = new String[n];
        for (int i = 0; i < n; i++) {
            String user = n == 1 ? "hot" : "user-" + i;
            clientIds[i] = n == 1 ? "app" : "client-" + i;
            sessions[i] = new Session(new KafkaPrincipal(KafkaPrincipal.USER_TYPE, user),
                    InetAddress.getLoopbackAddress());
            var userEntity = Optional.<org.apache.kafka.server.quota.ClientQuotaEntity.ConfigEntity>of(
                    new ClientQuotaManager.UserEntity(Sanitizer.sanitize(user)));
            if (i % 3 == 0) {
                manager.updateQuota(userEntity,
                        Optional.of(new ClientQuotaManager.ClientIdEntity(clientIds[i])), Optional.of(NEVER));
            } else if (i % 3 == 1) {
                manager.updateQuota(userEntity, Optional.empty(), Optional.of(NEVER));
            }
        }
        if (n > 1) {
            manager.updateQuota(Optional.empty(), Optional.of(ClientQuotaManager.DEFAULT_USER_CLIENT_ID),
                    Optional.of(NEVER));
        }
        // Every client has sent a request before: its sensors exist, as in a broker's steady state.
        for (int i = 0; i < n; i++) {
            manager.recordAndGetThrottleTimeMs(sessions[i], clientIds[i], REQUEST_BYTES, Time.SYSTEM.milliseconds());
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        manager.shutdown();
        metrics.close();
    }

    /** Each thread walks the clients from its own starting point. */
    @State(Scope.Thread)
    public static class Cursor {
        int next;
        static int threads;

        @Setup(Level.Trial)
        public void setup(QuotaBench bench) {
            synchronized (Cursor.class) {
                next = (threads++ * (bench.sessions.length / 2)) % bench.sessions.length;
            }
        }
    }

    int record(Cursor c) {
        int i = c.next;
        int n = sessions.length;
        c.next = (i + STRIDE) % n;
        return manager.recordAndGetThrottleTimeMs(sessions[i], clientIds[i], REQUEST_BYTES, Time.SYSTEM.milliseconds());
    }

    @Benchmark
    @Threads(1)
    public int oneThread(Cursor c) {
        return record(c);
    }

    @Benchmark
    @Threads(2)
    public int twoThreads(Cursor c) {
        return record(c);
    }
}
