package kquota.interop.callback;

import kquota.interop.callback.Alteration.Shape;

import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.QuotaType;

import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * Kafka's own quota managers, once with the DefaultQuotaCallback and once with the kquota callback per
 * {@link Variant}, fed the same seeded alteration sequences and the same requests at the same times;
 * after every alteration each request's answer (metric tags, limits, throttle time) must be Kafka's.
 */
final class ParityRun {
    private static final int MAX_STEPS = 12;
    private static final int REQUESTS = 10;

    /**
     * What a broker makes of one request for one quota type: the sensor's metric tags (in order: they
     * also name the sensor), the bound of its quota metric, quota(user, clientId), maxValueInQuotaWindow
     * and the throttle time of recording an amount. Read in this order, as a request would.
     */
    record Answer(List<Map.Entry<String, String>> tags, Double sensorBound, double quotaBound,
                  double maxValue, int throttleMs) {
        static final int FIELDS = 5;

        static Answer of(Managers side, Request request, QuotaType type, double amount, long nowMs) {
            ClientQuotaManager manager = side.manager(type);
            Map<String, String> tags = manager.getOrCreateQuotaSensors(request.session(), request.clientId())
                    .metricTags();
            List<Map.Entry<String, String>> entries = tags.entrySet().stream()
                    .map(e -> (Map.Entry<String, String>) new AbstractMap.SimpleImmutableEntry<>(e))
                    .toList();
            return new Answer(entries,
                    side.sensorBound(type, tags),
                    manager.quota(request.user(), request.clientId()).bound(),
                    manager.maxValueInQuotaWindow(request.session(), request.clientId()),
                    manager.recordAndGetThrottleTimeMs(request.session(), request.clientId(), amount, nowMs));
        }

        /** The fields in which {@code other} differs from this answer, one line each. */
        List<String> diff(Answer other) {
            List<String> out = new ArrayList<>();
            if (!tags.equals(other.tags)) {
                out.add(field("metric tags", Names.showTags(tags), Names.showTags(other.tags)));
            }
            if (!Objects.equals(sensorBound, other.sensorBound)) {
                out.add(field("sensor quota bound", sensorBound, other.sensorBound));
            }
            if (Double.compare(quotaBound, other.quotaBound) != 0) {
                out.add(field("quota(user, client-id)", quotaBound, other.quotaBound));
            }
            if (Double.compare(maxValue, other.maxValue) != 0) {
                out.add(field("maxValueInQuotaWindow", maxValue, other.maxValue));
            }
            if (throttleMs != other.throttleMs) {
                out.add(field("throttle ms", throttleMs, other.throttleMs));
            }
            return out;
        }

        private static String field(String name, Object kafka, Object kquota) {
            return String.format("%-24s Kafka %s | kquota %s", name, kafka, kquota);
        }
    }

    private final long seed;
    private final Report report = new Report("parity");
    private int singleShapeCases;
    private int cases;

    ParityRun(long seed) {
        this.seed = seed;
    }

    /** Runs cases {@code from} (inclusive) to {@code to} (exclusive). */
    Report run(int from, int to) {
        for (int index = from; index < to; index++) {
            runCase(index, to - from == 1);
        }
        report.note(String.format("%d cases (%d with a single entity shape), each on Kafka's default, %s"
                + " and %s", cases, singleShapeCases, Variant.MEMO.label, Variant.NATIVE.label));
        return report;
    }

    /** The seed of case {@code index}: each case replays alone. */
    static long caseSeed(long seed, int index) {
        return seed ^ (0x9E3779B97F4A7C15L * (index + 1L));
    }

    /** Runs one case; {@code describe}: note its alterations and requests in the report (a replay). */
    private void runCase(int index, boolean describe) {
        Generator random = new Generator(caseSeed(seed, index));
        List<Shape> shapes = random.shapes();
        List<String> users = random.sample(Names.POOL, 1 + random.nextInt(3));
        List<String> clientIds = random.sample(Names.POOL, 1 + random.nextInt(3));
        List<Alteration> steps = random.alterations(1 + random.nextInt(MAX_STEPS), shapes, users, clientIds,
                Managers.TYPES);
        List<Request> requests = random.requests(withOthers(random, users), withOthers(random, clientIds),
                REQUESTS);
        if (describe) {
            report.note("case " + index + " alterations: " + steps);
            report.note("case " + index + " requests: " + requests);
        }
        cases++;
        if (shapes.size() == 1) {
            singleShapeCases++;
        }

        ManualTime time = new ManualTime();
        try (Managers kafka = Managers.kafkaDefault(time);
             Managers memo = Managers.kquota(time, Variant.MEMO.settings);
             Managers direct = Managers.kquota(time, Variant.NATIVE.settings)) {
            Map<Variant, Managers> kquota = Map.of(Variant.MEMO, memo, Variant.NATIVE, direct);
            boolean failed = false;
            for (int step = 0; step < steps.size(); step++) {
                Alteration alteration = steps.get(step);
                alteration.applyTo(kafka);
                for (Variant variant : Variant.values()) {
                    try {
                        alteration.applyTo(kquota.get(variant));
                    } catch (RuntimeException e) {
                        failed = mismatch(failed, index, steps, step, variant, null, null,
                                List.of("updateQuota threw " + e));
                    }
                }
                for (Request request : requests) {
                    for (QuotaType type : Managers.TYPES) {
                        double limit = kafka.manager(type).quota(request.user(), request.clientId()).bound();
                        double amount = random.amount(limit);
                        long now = time.milliseconds();
                        Answer expected = Answer.of(kafka, request, type, amount, now);
                        for (Variant variant : Variant.values()) {
                            List<String> diff;
                            try {
                                diff = expected.diff(Answer.of(kquota.get(variant), request, type, amount, now));
                            } catch (RuntimeException e) {
                                diff = List.of("threw " + e);
                            }
                            report.compared(type.toString(), Answer.FIELDS);
                            if (!diff.isEmpty()) {
                                failed = mismatch(failed, index, steps, step, variant, type, request, diff);
                            }
                        }
                    }
                }
                time.advance(random.pauseMs());
            }
        }
    }

    /** The case's names, two names it did not configure, and the empty name. */
    private static List<String> withOthers(Generator random, List<String> configured) {
        List<String> out = new ArrayList<>(configured);
        out.addAll(random.sample(Names.POOL.stream().filter(name -> !configured.contains(name)).toList(), 2));
        out.add("");
        return out;
    }

    /**
     * Reports a mismatch; the first one of a case also lists the case's alterations up to that step and
     * how to replay it. Returns true: the case has failed.
     */
    private boolean mismatch(boolean caseFailedBefore, int index, List<Alteration> steps, int step,
                             Variant variant, QuotaType type, Request request, List<String> diff) {
        StringBuilder detail = new StringBuilder(String.format("case %d, after alteration %d, %s%s%s:",
                index, step + 1, variant.label, type == null ? "" : ", " + type,
                request == null ? "" : ", request " + request));
        diff.forEach(line -> detail.append("\n  ").append(line));
        if (!caseFailedBefore) {
            detail.append("\nalterations (each applied to all three brokers):");
            for (int i = 0; i <= step; i++) {
                detail.append(String.format("\n  %d. %s", i + 1, steps.get(i)));
            }
            detail.append(String.format("\nreplay: interop/quota-manager/callback.sh --seed %d --case %d",
                    seed, index));
        }
        report.mismatch(detail.toString());
        return true;
    }
}
