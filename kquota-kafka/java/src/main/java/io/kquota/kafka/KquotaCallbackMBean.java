package io.kquota.kafka;

/**
 * What a running broker's callback shows over JMX, as
 * {@code io.kquota:type=ClientQuotaCallback,instance=N} (a broker has one callback: instance=0): its
 * attributes and {@code explain}, for {@code JMX.newMBeanProxy}. The bean ({@link CallbackBean}) also
 * has the operation {@code setFailing(boolean)}, the fault drill, which is not here: a proxy of this
 * interface would send it as a write of the read-only attribute {@code Failing}.
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
}
