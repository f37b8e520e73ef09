package io.kquota.kafka;

import javax.management.Attribute;
import javax.management.AttributeList;
import javax.management.AttributeNotFoundException;
import javax.management.DynamicMBean;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanInfo;
import javax.management.MBeanOperationInfo;
import javax.management.MBeanParameterInfo;
import javax.management.ReflectionException;

/**
 * The callback's JMX bean, {@code io.kquota:type=ClientQuotaCallback,instance=N}: the read-only
 * attributes of {@link KquotaCallbackMBean} (the engine's, and the cluster mode's: {@code ClusterState},
 * {@code Ready}, {@code LiveBrokers}, {@code Sensors}, {@code ReporterInstalled}) and two operations,
 * {@code explain(String, String)} and {@code setFailing(boolean)}.
 *
 * <p>A dynamic bean because a Standard MBean would make {@code setFailing(boolean)} beside
 * {@code isFailing()} the writable attribute {@code Failing}: the fault drill is something an operator
 * does, so it is an operation, as docs/kafka.md lists it, and {@code Failing} only says whether it is on.
 */
final class CallbackBean implements DynamicMBean {
    private static final String EXPLAIN = "explain";
    private static final String SET_FAILING = "setFailing";

    private static final MBeanInfo INFO = new MBeanInfo(
            KquotaCallback.class.getName(),
            "kquota's client quota callback (KIP-257): its state, why a client gets its limits, the fault drill",
            new MBeanAttributeInfo[] {
                attribute("Policy", String.class, "kquota.sub.quota.policy: kafka or kip55", false),
                attribute("Entities", long.class, "configured entities (user, client-id or pair with a quota)", false),
                attribute("Failures", long.class, "calls into the engine that failed since start", false),
                attribute("PendingChanges", int.class, "quota changes that failed and wait to be applied again",
                        false),
                attribute("Failing", boolean.class, "whether the fault drill is on", true),
                attribute("ClusterState", String.class, "the cluster mode (kquota.cluster.bootstrap.servers): off,"
                        + " joining, ready, stopped: <why>, or unknown: <why> when the engine could not answer",
                        false),
                attribute("Ready", boolean.class, "whether ClusterState is off or ready: the quotas are what the"
                        + " configuration says", true),
                attribute("LiveBrokers", int.class, "kquota instances (one per broker) the cluster mode counts as"
                        + " live, or -1", false),
                attribute("Sensors", int.class, "client-quota sensors whose rates KquotaMetricsReporter hands the"
                        + " cluster mode", false),
                attribute("ReporterInstalled", boolean.class, "whether io.kquota.kafka.KquotaMetricsReporter is in"
                        + " metric.reporters", true),
            },
            null,
            new MBeanOperationInfo[] {
                new MBeanOperationInfo(EXPLAIN,
                        "for each quota type: the bucket and limit answered, the entry that matched, those it"
                                + " overrode",
                        new MBeanParameterInfo[] {
                            new MBeanParameterInfo("user", String.class.getName(),
                                    "the principal's name, as KafkaPrincipal.getName() gives it"),
                            new MBeanParameterInfo("clientId", String.class.getName(), "the client-id"),
                        },
                        String.class.getName(), MBeanOperationInfo.INFO),
                new MBeanOperationInfo(SET_FAILING,
                        "the fault drill: while true, every call into the engine fails on purpose and the"
                                + " callback answers as on a real failure",
                        new MBeanParameterInfo[] {
                            new MBeanParameterInfo("failing", boolean.class.getName(), "on (true) or off (false)"),
                        },
                        void.class.getName(), MBeanOperationInfo.ACTION),
            },
            null);

    private final KquotaCallback callback;

    CallbackBean(KquotaCallback callback) {
        this.callback = callback;
    }

    private static MBeanAttributeInfo attribute(String name, Class<?> type, String description, boolean is) {
        return new MBeanAttributeInfo(name, type.getName(), description, true, false, is);
    }

    @Override
    public Object getAttribute(String name) throws AttributeNotFoundException {
        return switch (name) {
            case "Policy" -> callback.getPolicy();
            case "Entities" -> callback.getEntities();
            case "Failures" -> callback.getFailures();
            case "PendingChanges" -> callback.getPendingChanges();
            case "Failing" -> callback.isFailing();
            case "ClusterState" -> callback.getClusterState();
            case "Ready" -> callback.isReady();
            case "LiveBrokers" -> callback.getLiveBrokers();
            case "Sensors" -> callback.getSensors();
            case "ReporterInstalled" -> callback.isReporterInstalled();
            default -> throw new AttributeNotFoundException("no attribute " + name);
        };
    }

    @Override
    public void setAttribute(Attribute attribute) throws AttributeNotFoundException {
        String name = attribute.getName();
        throw new AttributeNotFoundException(
                "Failing".equals(name) ? "Failing is read-only: the operation setFailing(boolean) turns the drill on and off"
                        : "no writable attribute " + name);
    }

    @Override
    public AttributeList getAttributes(String[] names) {
        AttributeList list = new AttributeList();
        for (String name : names) {
            try {
                list.add(new Attribute(name, getAttribute(name)));
            } catch (AttributeNotFoundException e) {
                // JMX's contract: attributes that cannot be read are left out of the list.
            }
        }
        return list;
    }

    @Override
    public AttributeList setAttributes(AttributeList attributes) {
        return new AttributeList();
    }

    @Override
    public Object invoke(String operation, Object[] params, String[] signature) throws ReflectionException {
        Object[] args = params == null ? new Object[0] : params;
        if (EXPLAIN.equals(operation) && args.length == 2 && args[0] instanceof String user
                && args[1] instanceof String clientId) {
            return callback.explain(user, clientId);
        }
        if (SET_FAILING.equals(operation) && args.length == 1 && args[0] instanceof Boolean failing) {
            callback.setFailing(failing);
            return null;
        }
        throw new ReflectionException(new NoSuchMethodException(operation + " with " + args.length
                + " argument(s): the bean's operations are explain(String user, String clientId) and"
                + " setFailing(boolean)"));
    }

    @Override
    public MBeanInfo getMBeanInfo() {
        return INFO;
    }
}
