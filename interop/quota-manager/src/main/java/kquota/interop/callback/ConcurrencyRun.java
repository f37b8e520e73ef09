package kquota.interop.callback;

import io.kquota.kafka.KquotaCallback;

import kquota.interop.callback.Alteration.Shape;

import org.apache.kafka.common.utils.Sanitizer;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.apache.kafka.server.quota.QuotaType;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.LockSupport;

/**
 * Sixteen threads ask one kquota callback for metric tags and limits (the interface methods, as Kafka's
 * request path calls them) while one thread applies a fixed sequence of alterations. Every answer must be
 * the one Kafka's DefaultQuotaCallback gives under some configuration in force during the call: between
 * the last alteration finished before the call started and the last one started before it ended. After
 * the writer is done every answer must be the final configuration's. No call may throw or hang.
 */
final class ConcurrencyRun {
    private static final int READERS = 16;
    private static final int ALTERATIONS = 500;
    /** The writer pauses up to this long between alterations: about 5 s for the sequence. */
    private static final int MAX_PAUSE_MICROS = 20_000;
    private static final long TIMEOUT_MS = 60_000;

    private final long seed;
    private final Variant variant;
    private final Report report;

    private final List<Request> requests = new ArrayList<>();
    /** Per request: the four tag maps an answer can be (user tag sanitized or "", client-id tag or ""). */
    private final List<List<Map<String, String>>> forms = new ArrayList<>();
    /** [configuration][request][type]: the index in forms of Kafka's tags. */
    private byte[][][] expectedForm;
    /** [configuration][request][type][form]: Kafka's quotaLimit for those tags (null: no quota). */
    private Double[][][][] expectedLimit;
    private List<Alteration> sequence;

    /** Alterations started and finished by the writer; configuration k is the one after k alterations. */
    private final AtomicInteger started = new AtomicInteger();
    private final AtomicInteger finished = new AtomicInteger();
    private volatile boolean writerDone;
    private final LongAdder answers = new LongAdder();

    ConcurrencyRun(long seed, Variant variant) {
        this.seed = seed;
        this.variant = variant;
        this.report = new Report("concurrency, " + variant.label);
    }

    Report run() throws InterruptedException {
        Generator random = new Generator(seed);
        List<String> users = random.sample(Names.POOL, 7);
        List<String> clientIds = random.sample(Names.POOL, 7);
        sequence = random.alterations(ALTERATIONS, List.of(Shape.values()), users, clientIds, Managers.TYPES);
        users.add("");
        clientIds.add("");
        for (String user : users) {
            for (String clientId : clientIds) {
                requests.add(Request.of(user, clientId));
                forms.add(tagForms(Sanitizer.sanitize(user), clientId));
            }
        }
        computeExpected();

        KquotaCallback callback = Managers.newCallback(variant.settings);
        try {
            race(callback, random);
            checkFinal(callback);
        } finally {
            callback.close();
        }
        report.note(String.format("%d readers, %d alterations, %d answers checked against Kafka's",
                READERS, ALTERATIONS, answers.sum()));
        return report;
    }

    private static List<Map<String, String>> tagForms(String sanitizedUser, String clientId) {
        List<Map<String, String>> out = new ArrayList<>();
        for (String user : List.of(sanitizedUser, "")) {
            for (String client : List.of(clientId, "")) {
                Map<String, String> tags = new LinkedHashMap<>();
                tags.put(ClientQuotaManager.USER_TAG, user);
                tags.put(ClientQuotaManager.CLIENT_ID_TAG, client);
                out.add(tags);
            }
        }
        return out;
    }

    /** Kafka's answers under every configuration of the sequence, from its own managers. */
    private void computeExpected() {
        int types = Managers.TYPES.size();
        expectedForm = new byte[ALTERATIONS + 1][requests.size()][types];
        expectedLimit = new Double[ALTERATIONS + 1][requests.size()][types][4];
        try (Managers kafka = Managers.kafkaDefault(new ManualTime())) {
            for (int k = 0; k <= ALTERATIONS; k++) {
                if (k > 0) {
                    sequence.get(k - 1).applyTo(kafka);
                }
                for (int r = 0; r < requests.size(); r++) {
                    Request request = requests.get(r);
                    for (int t = 0; t < types; t++) {
                        ClientQuotaType type = QuotaType.toClientQuotaType(Managers.TYPES.get(t));
                        ClientQuotaCallback reference = kafka.callback(Managers.TYPES.get(t));
                        Map<String, String> tags =
                                reference.quotaMetricTags(type, request.principal(), request.clientId());
                        expectedForm[k][r][t] = (byte) forms.get(r).indexOf(tags);
                        for (int f = 0; f < 4; f++) {
                            expectedLimit[k][r][t][f] = reference.quotaLimit(type, forms.get(r).get(f));
                        }
                    }
                }
            }
        }
    }

    private void race(KquotaCallback callback, Generator random) throws InterruptedException {
        List<Thread> threads = new ArrayList<>();
        Thread writer = new Thread(() -> {
            try {
                for (int i = 0; i < ALTERATIONS; i++) {
                    started.incrementAndGet();
                    sequence.get(i).applyTo(callback);
                    finished.incrementAndGet();
                    LockSupport.parkNanos(TimeUnit.MICROSECONDS.toNanos(random.pauseMicros(MAX_PAUSE_MICROS)));
                }
            } catch (RuntimeException e) {
                report.mismatch("writer: alteration " + (started.get()) + " (" + sequence.get(started.get() - 1)
                        + ") threw " + e);
            } finally {
                writerDone = true;
            }
        }, "concurrency-writer");
        threads.add(writer);
        for (int i = 0; i < READERS; i++) {
            threads.add(new Thread(() -> read(callback), "concurrency-reader-" + i));
        }
        for (Thread thread : threads) {
            thread.setDaemon(true);
            thread.start();
        }
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(TIMEOUT_MS);
        for (Thread thread : threads) {
            thread.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
            if (thread.isAlive()) {
                StringBuilder stack = new StringBuilder();
                for (StackTraceElement frame : thread.getStackTrace()) {
                    stack.append("\n    at ").append(frame);
                }
                throw new HungException(String.format("%s: %s still running after %d s (deadlock?)%s",
                        report.part, thread.getName(), TIMEOUT_MS / 1000, stack));
            }
        }
    }

    private void read(ClientQuotaCallback callback) {
        ThreadLocalRandom random = ThreadLocalRandom.current();
        while (!writerDone) {
            int r = random.nextInt(requests.size());
            int t = random.nextInt(Managers.TYPES.size());
            Request request = requests.get(r);
            ClientQuotaType type = QuotaType.toClientQuotaType(Managers.TYPES.get(t));
            try {
                int tagsFrom = finished.get();
                Map<String, String> tags = callback.quotaMetricTags(type, request.principal(), request.clientId());
                int tagsTo = started.get();
                // Kafka asks this after every quotaMetricTags (getOrCreateQuotaSensors).
                callback.quotaResetRequired(type);
                int form = forms.get(r).indexOf(tags);
                if (!anyForm(tagsFrom, tagsTo, r, t, form)) {
                    report.mismatch(String.format("%s %s: tags %s; Kafka's %s%s", Managers.TYPES.get(t),
                            request, Names.showTags(tags), expectedTags(tagsFrom, tagsTo, r, t),
                            during(tagsFrom, tagsTo)));
                    continue;
                }
                int limitFrom = finished.get();
                Double limit = callback.quotaLimit(type, tags);
                int limitTo = started.get();
                if (!anyLimit(limitFrom, limitTo, r, t, form, limit)) {
                    report.mismatch(String.format("%s %s: quotaLimit(%s) = %s; Kafka's %s%s",
                            Managers.TYPES.get(t), request, Names.showTags(tags), limit,
                            expectedLimits(limitFrom, limitTo, r, t, form), during(limitFrom, limitTo)));
                }
                answers.increment();
            } catch (RuntimeException e) {
                report.mismatch(String.format("%s %s: threw %s", Managers.TYPES.get(t), request, e));
            }
        }
    }

    /** Which configurations a call overlapped, and the alterations between them. */
    private String during(int from, int to) {
        StringBuilder out = new StringBuilder(String.format(" under configurations %d..%d", from, to));
        for (int k = from; k < to; k++) {
            out.append(String.format("\n  alteration %d: %s", k + 1, sequence.get(k)));
        }
        return out.toString();
    }

    private boolean anyForm(int from, int to, int r, int t, int form) {
        for (int k = from; k <= to; k++) {
            if (expectedForm[k][r][t] == form) {
                return true;
            }
        }
        return false;
    }

    private boolean anyLimit(int from, int to, int r, int t, int form, Double limit) {
        for (int k = from; k <= to; k++) {
            if (Objects.equals(expectedLimit[k][r][t][form], limit)) {
                return true;
            }
        }
        return false;
    }

    private Set<String> expectedTags(int from, int to, int r, int t) {
        Set<String> out = new LinkedHashSet<>();
        for (int k = from; k <= to; k++) {
            out.add(Names.showTags(forms.get(r).get(expectedForm[k][r][t])));
        }
        return out;
    }

    private Set<Double> expectedLimits(int from, int to, int r, int t, int form) {
        Set<Double> out = new LinkedHashSet<>();
        for (int k = from; k <= to; k++) {
            out.add(expectedLimit[k][r][t][form]);
        }
        return out;
    }

    /** After the writer: every answer is the final configuration's. */
    private void checkFinal(ClientQuotaCallback callback) {
        for (int r = 0; r < requests.size(); r++) {
            Request request = requests.get(r);
            for (int t = 0; t < Managers.TYPES.size(); t++) {
                ClientQuotaType type = QuotaType.toClientQuotaType(Managers.TYPES.get(t));
                Map<String, String> tags = callback.quotaMetricTags(type, request.principal(), request.clientId());
                int form = forms.get(r).indexOf(tags);
                Double limit = form < 0 ? null : callback.quotaLimit(type, tags);
                if (form != expectedForm[ALTERATIONS][r][t]
                        || !Objects.equals(limit, expectedLimit[ALTERATIONS][r][t][form])) {
                    report.mismatch(String.format("final configuration, %s %s: tags %s limit %s, Kafka's %s %s",
                            Managers.TYPES.get(t), request, Names.showTags(tags), limit,
                            Names.showTags(forms.get(r).get(expectedForm[ALTERATIONS][r][t])),
                            expectedLimit[ALTERATIONS][r][t][expectedForm[ALTERATIONS][r][t]]));
                }
                report.compared("final answers", 1);
            }
        }
        report.compared("answers during alterations", answers.sum());
    }

    /** A thread of the race did not finish in time. */
    static final class HungException extends RuntimeException {
        HungException(String message) {
            super(message);
        }
    }
}
