package io.kquota.kafka;

import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;

/**
 * Kafka's spelling of a user name in quota metric tags and storage paths: URL-encoded as UTF-8, then
 * {@code *} as {@code %2A} and a space as {@code %20} (URL encoding writes it {@code +}). Kafka's own
 * class for it has moved between versions, so the plug-in carries the rule.
 */
final class Sanitizer {
    private Sanitizer() {
    }

    static String sanitize(String name) {
        String encoded = URLEncoder.encode(name, StandardCharsets.UTF_8);
        if (encoded.indexOf('*') < 0 && encoded.indexOf('+') < 0) {
            return encoded;
        }
        StringBuilder out = new StringBuilder(encoded.length() + 8);
        for (int i = 0; i < encoded.length(); i++) {
            char c = encoded.charAt(i);
            if (c == '*') {
                out.append("%2A");
            } else if (c == '+') {
                out.append("%20");
            } else {
                out.append(c);
            }
        }
        return out.toString();
    }
}
