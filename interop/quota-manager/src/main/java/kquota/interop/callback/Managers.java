package kquota.interop.callback;

import io.kquota.kafka.KquotaCallback;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.internals.Plugin;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.config.ClientQuotaManagerConfig;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.ControllerMutationQuotaManager;
import org.apache.kafka.server.quota.QuotaType;

import java.lang.reflect.Field;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A broker's four client quota managers, with their own Metrics, built as Kafka's QuotaFactory builds
 * them: either each with Kafka's DefaultQuotaCallback, or all sharing one configured callback instance.
 */
final class Managers implements AutoCloseable {
    static final List<QuotaType> TYPES =
            List.of(QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST, QuotaType.CONTROLLER_MUTATION);

    /** The policy this harness proves: answers exactly as Kafka's DefaultQuotaCallback. */
    static final Map<String, String> KAFKA_POLICY = Map.of("kquota.sub.quota.policy", "kafka");

    private static final Field CALLBACK_FIELD = callbackField();

    private final Metrics metrics;
    private final Map<QuotaType, ClientQuotaManager> managers = new EnumMap<>(QuotaType.class);
    private final KquotaCallback callback;

    private Managers(Time time, KquotaCallback callback) {
        this.metrics = new Metrics(time);
        this.callback = callback;
        Optional<Plugin<ClientQuotaCallback>> plugin = callback == null ? Optional.empty()
                : Optional.of(Plugin.wrapInstance(callback, metrics, "client.quota.callback.class"));
        ClientQuotaManagerConfig config = new ClientQuotaManagerConfig();
        for (QuotaType type : TYPES) {
            managers.put(type, type == QuotaType.CONTROLLER_MUTATION
                    ? new ControllerMutationQuotaManager(config, metrics, time, "callback-parity-", plugin)
                    : new ClientQuotaManager(config, metrics, type, time, "callback-parity-", plugin));
        }
    }

    /** The managers of a broker with no callback configured: Kafka's DefaultQuotaCallback, the reference. */
    static Managers kafkaDefault(Time time) {
        return new Managers(time, null);
    }

    /** The managers of a broker with {@code client.quota.callback.class=io.kquota.kafka.KquotaCallback}. */
    static Managers kquota(Time time, Map<String, String> settings) {
        return new Managers(time, newCallback(settings));
    }

    /**
     * A configured kquota callback. The broker hands configure all of server.properties, so a key that is
     * not the callback's rides along (it must be ignored).
     */
    static KquotaCallback newCallback(Map<String, String> settings) {
        Map<String, Object> configs = new HashMap<>(settings);
        configs.put("broker.id", "1");
        configs.put("client.quota.callback.class", KquotaCallback.class.getName());
        KquotaCallback callback = new KquotaCallback();
        callback.configure(configs);
        return callback;
    }

    ClientQuotaManager manager(QuotaType type) {
        return managers.get(type);
    }

    /**
     * The callback answering {@code type}'s quota manager: the shared kquota callback, or Kafka's private
     * DefaultQuotaCallback of that manager (read by reflection, so its answers to the interface methods
     * serve as the reference where a test calls a callback directly).
     */
    ClientQuotaCallback callback(QuotaType type) {
        if (callback != null) {
            return callback;
        }
        try {
            return (ClientQuotaCallback) CALLBACK_FIELD.get(managers.get(type));
        } catch (IllegalAccessException e) {
            throw new IllegalStateException("cannot read ClientQuotaManager.quotaCallback", e);
        }
    }

    /** The quota bound of the sensor metered under {@code tags}, or null if there is no such metric. */
    Double sensorBound(QuotaType type, Map<String, String> tags) {
        String name = type == QuotaType.CONTROLLER_MUTATION ? "tokens" : "byte-rate";
        MetricName metricName = metrics.metricName(name, type.toString(), tags);
        KafkaMetric metric = metrics.metric(metricName);
        return metric == null ? null : metric.config().quota().bound();
    }

    @Override
    public void close() {
        for (ClientQuotaManager manager : managers.values()) {
            manager.shutdown();
        }
        if (callback != null) {
            callback.close();
        }
        metrics.close();
    }

    private static Field callbackField() {
        try {
            Field field = ClientQuotaManager.class.getDeclaredField("quotaCallback");
            field.setAccessible(true);
            return field;
        } catch (NoSuchFieldException e) {
            throw new IllegalStateException("ClientQuotaManager has no quotaCallback field", e);
        }
    }
}
