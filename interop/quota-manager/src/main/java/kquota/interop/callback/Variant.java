package kquota.interop.callback;

import java.util.HashMap;
import java.util.Map;

/** The kquota callback's two answer paths: the Java-side memo, and every call into the engine. */
enum Variant {
    MEMO("kquota (memo)", Map.of()),
    NATIVE("kquota (kquota.cache.entries=0)", Map.of("kquota.cache.entries", "0"));

    final String label;
    final Map<String, String> settings;

    Variant(String label, Map<String, String> extra) {
        this.label = label;
        Map<String, String> all = new HashMap<>(Managers.KAFKA_POLICY);
        all.putAll(extra);
        this.settings = Map.copyOf(all);
    }
}
