package kquota.interop.callback;

import io.kquota.kafka.KquotaCallback;

import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.quota.ClientQuotaType;

import java.util.List;
import java.util.Map;

/**
 * The callback's settings as a broker hands them to configure: a malformed value or an unknown
 * {@code kquota.*} key throws ConfigException naming the key (the broker stops at start); good values
 * and keys that are not the callback's are accepted.
 */
final class SettingsCheck {
    private static final List<Map<String, String>> REFUSED = List.of(
            Map.of("kquota.sub.quota.policy", "bogus"),
            Map.of("kquota.cache.entries", "-1"),
            Map.of("kquota.cache.entries", "abc"),
            Map.of("kquota.cache.entries", "10000001"),
            Map.of("kquota.nonsense", "1"));

    private static final List<Map<String, String>> ACCEPTED = List.of(
            Map.of(),
            Map.of("kquota.sub.quota.policy", "kafka", "kquota.cache.entries", "0"),
            Map.of("kquota.sub.quota.policy", "kip55", "kquota.cache.entries", "10000000"),
            Map.of("kquotanonsense", "1", "quota.window.num", "11", "nonsense", "x"));

    private final Report report = new Report("settings");

    Report run() {
        for (Map<String, String> settings : REFUSED) {
            String key = settings.keySet().iterator().next();
            KquotaCallback callback = new KquotaCallback();
            report.compared("refused", 1);
            try {
                callback.configure(settings);
                report.mismatch("configure(" + settings + ") was accepted; expected a ConfigException naming " + key);
            } catch (ConfigException e) {
                if (e.getMessage() == null || !e.getMessage().contains(key)) {
                    report.mismatch("configure(" + settings + "): the ConfigException does not name " + key + ": "
                            + e.getMessage());
                }
            } catch (RuntimeException e) {
                report.mismatch("configure(" + settings + ") threw " + e + ", not a ConfigException");
            } finally {
                callback.close();
            }
        }
        for (Map<String, String> settings : ACCEPTED) {
            report.compared("accepted", 1);
            try {
                KquotaCallback callback = Managers.newCallback(settings);
                try {
                    callback.quotaMetricTags(ClientQuotaType.PRODUCE, Request.of("alice", "c").principal(), "c");
                } finally {
                    callback.close();
                }
            } catch (RuntimeException e) {
                report.mismatch("configure(" + settings + " and broker keys) threw " + e);
            }
        }
        return report;
    }
}
