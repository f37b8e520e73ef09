package kquota.interop.callback;

import org.apache.kafka.common.utils.Sanitizer;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaManager;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

/**
 * Names exactly as Java holds them, and the entities a broker builds from them.
 *
 * <p>A Java string is any sequence of UTF-16 code units: the pool holds non-ASCII and supplementary
 * characters, NUL, the characters {@link Sanitizer} rewrites ('+', '*', ' ', '%'), {@code <default>} as a
 * literal name, strings that are not valid UTF-16 (lone surrogates), U+FFFF and U+F0000 (where an
 * implementation might escape lone surrogates), and names that only a lone surrogate tells apart:
 * {@code "a\uD800"}, {@code "a\uDBFF"} and {@code "a?"} are three client-ids but one user, because the
 * sanitizer encodes a lone surrogate as {@code %3F}.
 */
final class Names {
    /** Names for configured entities and for requests; never empty (Kafka's controller refuses that). */
    static final List<String> POOL = List.of(
            "alice", "bob", "é", "日本", "😀", "nul\u0000", "a+b", "a*b", "a b", "100%", "x:y", "<default>",
            "a\uD800", "a\uDBFF", "a?", "\uDC00b", "?b", "\uD800", "\uFFFF", "\uFFFF\uDB80\uDC00", "\uDB80\uDC00");

    private Names() {
    }

    /** A user entity as ClientQuotaMetadataManager.transferToClientQuotaEntity builds it: sanitized. */
    static ClientQuotaEntity.ConfigEntity user(String raw) {
        return new ClientQuotaManager.UserEntity(Sanitizer.sanitize(raw));
    }

    /** A client-id entity as the broker builds it: the name as it is. */
    static ClientQuotaEntity.ConfigEntity clientId(String raw) {
        return new ClientQuotaManager.ClientIdEntity(raw);
    }

    /** Metric tags in their order, each value shown as {@link #show} does; "null" for no tags. */
    static String showTags(Collection<Map.Entry<String, String>> tags) {
        return tags == null ? "null" : tags.stream().map(e -> e.getKey() + "=" + show(e.getValue()))
                .collect(Collectors.joining(", ", "{", "}"));
    }

    static String showTags(Map<String, String> tags) {
        return showTags(tags == null ? null : tags.entrySet());
    }

    /** A name quoted, with every code unit outside printable ASCII as a Java escape. */
    static String show(String name) {
        if (name == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < name.length(); i++) {
            char c = name.charAt(i);
            if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
                out.append(c);
            } else {
                out.append(String.format("\\u%04X", (int) c));
            }
        }
        return out.append('"').toString();
    }
}
