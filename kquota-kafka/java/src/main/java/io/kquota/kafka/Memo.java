package io.kquota.kafka;

import java.util.concurrent.ConcurrentHashMap;

/**
 * One quota type's remembered answers, each stamped with the configuration generation it came from.
 * A stamp that is not the current generation is stale: the engine is asked again. A stale answer is
 * still what the last good configuration answered, which is what the callback gives while the engine
 * fails. At most {@code capacity} answers of each kind are held; a full memo starts over.
 */
final class Memo {
    /** A connection's tags: its user sanitized once, and who shares its bucket. */
    record Tags(String sanitizedUser, long generation, int code) {
    }

    /** A bucket's limit ({@link NativeEngine#NO_QUOTA} for none). */
    record Limit(long generation, double value) {
    }

    private record Names(String first, String second) {
    }

    private final int capacity;
    private final ConcurrentHashMap<Names, Tags> tags;
    private final ConcurrentHashMap<Names, Limit> limits;

    Memo(int capacity) {
        this.capacity = capacity;
        this.tags = new ConcurrentHashMap<>(Math.min(capacity, 1024));
        this.limits = new ConcurrentHashMap<>(Math.min(capacity, 1024));
    }

    /** The tags remembered for (principal name, client-id), current or not. */
    Tags tags(String principal, String clientId) {
        return tags.get(new Names(principal, clientId));
    }

    void putTags(String principal, String clientId, Tags answer) {
        put(tags, new Names(principal, clientId), answer);
    }

    /** The limit remembered for a bucket's tags, current or not. */
    Limit limit(String userTag, String clientTag) {
        return limits.get(new Names(userTag, clientTag));
    }

    void putLimit(String userTag, String clientTag, Limit answer) {
        put(limits, new Names(userTag, clientTag), answer);
    }

    private <V> void put(ConcurrentHashMap<Names, V> map, Names names, V answer) {
        if (map.size() >= capacity) {
            map.clear();
        }
        map.put(names, answer);
    }
}
