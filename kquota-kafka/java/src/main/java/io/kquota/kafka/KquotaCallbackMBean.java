package io.kquota.kafka;

/**
 * What a running broker's callback shows over JMX, as
 * {@code io.kquota:type=ClientQuotaCallback,instance=N} (a broker has one callback: instance=0).
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
     * Why a connection of (user, client-id) gets its limits: per quota type, the bucket and limit the
     * callback answers, the entry that matched and the entries it overrode.
     *
     * @param user the principal's name, as Kafka's {@code KafkaPrincipal.getName()} gives it
     * @param clientId the client-id
     */
    String explain(String user, String clientId);

    /**
     * The fault drill: while on, every call into the engine fails on purpose and the callback
     * answers as it does on a real failure (the last good configuration's answers).
     */
    void setFailing(boolean failing);
}
