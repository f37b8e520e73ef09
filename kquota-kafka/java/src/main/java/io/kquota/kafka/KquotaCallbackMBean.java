package io.kquota.kafka;

/**
 * What a running broker's callback shows over JMX, as
 * {@code io.kquota:type=ClientQuotaCallback,instance=N} (a broker has one callback: instance=0): its
 * attributes and {@code explain}, for {@code JMX.newMBeanProxy}. The bean ({@link CallbackBean}) also
 * has the operation {@code setFailing(boolean)}, the fault drill, which is not here: a proxy of this
 * interface would send it as a write of the read-only attribute {@code Failing}.
 *
 * <p>The cluster mode ({@code kquota.cluster.bootstrap.servers}) shows in {@code ClusterState},
 * {@code Ready} and {@code LiveBrokers}; {@code Sensors} and {@code ReporterInstalled} show whether
 * {@link KquotaMetricsReporter} hands it what this broker serves.
 */
public interface KquotaCallbackMBean {
    /** {@code kafka} or {@code kip55}. */
    String getPolicy();

    /** Configured entities (each user, client-id or pair with at least one quota). */
    long getEntities();

    /** Calls into the engine that failed since start. */
    long getFailures();

    /** Quota changes that failed and wait to be applied again. */
    int getPendingChanges();

    /** Whether the fault drill is on. */
    boolean isFailing();

    /**
     * The cluster mode's state: {@code off} (no {@code kquota.cluster.bootstrap.servers}),
     * {@code joining} (following kquota's configuration log and finding the other brokers),
     * {@code ready} (sharing cluster-wide limits), {@code stopped: <why>}, or {@code unknown: <why>}
     * when the engine could not answer.
     */
    String getClusterState();

    /**
     * Whether this broker's quotas are what the configuration says: {@code ClusterState} is
     * {@code off} or {@code ready} (the attribute a readiness check watches).
     */
    boolean isReady();

    /** The kquota instances (one per broker) the cluster mode counts as live, or -1. */
    int getLiveBrokers();

    /**
     * Client-quota sensors (produce and fetch byte rates) whose rates {@link KquotaMetricsReporter}
     * hands the cluster mode: 0 without the reporter.
     */
    int getSensors();

    /** Whether {@link KquotaMetricsReporter} is in {@code metric.reporters} (was started in this JVM). */
    boolean isReporterInstalled();

    /**
     * Why a connection of (user, client-id) gets its limits: per quota type, the bucket and limit the
     * callback answers, the entry that matched and the entries it overrode.
     *
     * @param user the principal's name, as Kafka's {@code KafkaPrincipal.getName()} gives it
     * @param clientId the client-id
     */
    String explain(String user, String clientId);
}
