package kquota.interop.callback;

import kquota.interop.callback.Alteration.Shape;

import org.apache.kafka.server.quota.QuotaType;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/** Seeded random configurations, alteration sequences and requests. */
final class Generator {
    private final SplittableRandom random;

    Generator(long seed) {
        this.random = new SplittableRandom(seed);
    }

    int nextInt(int bound) {
        return random.nextInt(bound);
    }

    <T> T pick(List<T> items) {
        return items.get(random.nextInt(items.size()));
    }

    /** {@code n} distinct items (all of them if there are fewer), in random order. */
    <T> List<T> sample(List<T> items, int n) {
        List<T> pool = new ArrayList<>(items);
        List<T> out = new ArrayList<>();
        while (out.size() < n && !pool.isEmpty()) {
            out.add(pool.remove(random.nextInt(pool.size())));
        }
        return out;
    }

    /**
     * The entity shapes a configuration uses. Kafka's manager answers by fast paths that depend on which
     * shapes exist (quotaTypesEnabled), so four in ten configurations use a single shape.
     */
    List<Shape> shapes() {
        List<Shape> all = List.of(Shape.values());
        return random.nextInt(10) < 4 ? sample(all, 1) : sample(all, 2 + random.nextInt(all.size() - 1));
    }

    /**
     * A quota value as Kafka's controller accepts it: positive; for the byte rates (LONG keys) whole up to
     * 2^63 = (double) Long.MAX_VALUE, or within 1e-6 of whole (|v % 1| <= 1e-6 passes, e.g. 5.0000001);
     * for request_percentage and controller_mutation_rate (DOUBLE keys) any positive double.
     */
    double value(QuotaType type) {
        int r = random.nextInt(20);
        if (type == QuotaType.PRODUCE || type == QuotaType.FETCH) {
            if (r < 13) {
                return 1 + random.nextInt(100_000);
            } else if (r < 16) {
                return 1 + random.nextInt(1_000) + 1e-7;
            } else if (r < 18) {
                return Math.max(1.0, Math.floor(random.nextDouble() * 0x1p63));
            }
            return (double) Long.MAX_VALUE;
        }
        if (r < 11) {
            return random.nextDouble(0.001, 1_000.0);
        } else if (r < 14) {
            return 1 + random.nextInt(400);
        } else if (r < 17) {
            return Math.scalb(1.0 + random.nextDouble(), random.nextInt(-80, 80));
        }
        return List.of(Double.MIN_VALUE, Double.MAX_VALUE, (double) Long.MAX_VALUE).get(r - 17);
    }

    /**
     * {@code n} alterations over the given shapes, names and types: sets of new values, re-sets of the
     * value in force, changes, removals, and removals of quotas that are not set.
     */
    List<Alteration> alterations(int n, List<Shape> shapes, List<String> users, List<String> clientIds,
                                 List<QuotaType> types) {
        Map<List<Object>, Double> inForce = new HashMap<>();
        List<Alteration> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Shape shape = pick(shapes);
            QuotaType type = pick(types);
            Alteration probe = Alteration.of(shape, pick(users), pick(clientIds), type, null);
            List<Object> key = List.of(probe.entity(), type);
            Double current = inForce.get(key);
            int r = random.nextInt(10);
            Double value = r < 2 && current != null ? current : r < 7 ? value(type) : null;
            if (value == null) {
                inForce.remove(key);
            } else {
                inForce.put(key, value);
            }
            out.add(Alteration.of(shape, probe.user(), probe.clientId(), type, value));
        }
        return out;
    }

    /**
     * Up to {@code n} distinct requests by the given users to the given client-ids, mostly with a User
     * principal; sometimes of another principal type, which Kafka's default ignores.
     */
    List<Request> requests(List<String> users, List<String> clientIds, int n) {
        List<List<String>> pairs = new ArrayList<>();
        for (String user : new LinkedHashSet<>(users)) {
            for (String clientId : new LinkedHashSet<>(clientIds)) {
                pairs.add(List.of(user, clientId));
            }
        }
        List<Request> out = new ArrayList<>();
        for (List<String> pair : sample(pairs, n)) {
            String principalType = random.nextInt(10) == 0 ? "Group" : "User";
            out.add(Request.of(principalType, pair.get(0), pair.get(1)));
        }
        return out;
    }

    /** An amount to record against a quota of {@code limit}: around the limit, so some records throttle. */
    double amount(double limit) {
        return limit < 1e9 ? random.nextDouble() * 2.5 * limit : random.nextDouble() * 1e6;
    }

    /** How far the clock moves between two alteration steps, in milliseconds. */
    long pauseMs() {
        return random.nextInt(1_500);
    }

    /** A writer's pause between two alterations, in microseconds. */
    long pauseMicros(int maxMicros) {
        return random.nextInt(maxMicros);
    }
}
