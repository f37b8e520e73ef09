package kquota.interop.callback;

import io.kquota.kafka.KquotaCallback;

import kquota.interop.callback.Alteration.Shape;

import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.apache.kafka.server.quota.QuotaType;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * The fault drill: with the engine failing on purpose ({@code setFailing(true)}) the callback must keep
 * answering as the last good configuration did (with its memo; without one, unlimited), count the failures, and take alterations without
 * throwing; once the engine is back it must answer as Kafka does under every alteration it was given,
 * the ones made during the failure included, and tell Kafka to refresh its sensors
 * ({@code quotaResetRequired}).
 */
final class FailureDrill {
    private static final int ALTERATIONS = 40;
    private static final int REQUESTS = 24;
    /**
     * How long the callback may take to catch up once the engine answers again, while asked as a busy
     * broker asks it. It retries failed changes at most once a second.
     */
    private static final long CATCH_UP_MS = 5_000;
    private static final long ROUND_MS = 10;
    /** A byte rate no generated configuration holds, so the alteration made during the failure shows. */
    private static final double DURING_FAILURE = 123_456_789.0;

    /** Tags and limit of one request for one quota type, as the interface methods answer them. */
    record Answer(Map<String, String> tags, Double limit) {
        @Override
        public String toString() {
            return Names.showTags(tags) + " limit " + limit;
        }

        static Answer of(ClientQuotaCallback callback, QuotaType type, Request request) {
            ClientQuotaType clientType = QuotaType.toClientQuotaType(type);
            Map<String, String> tags = callback.quotaMetricTags(clientType, request.principal(), request.clientId());
            return new Answer(tags, callback.quotaLimit(clientType, tags));
        }
    }

    private final long seed;
    private final Variant variant;
    private final Report report;

    FailureDrill(long seed, Variant variant) {
        this.seed = seed;
        this.variant = variant;
        this.report = new Report("failure drill, " + variant.label);
    }

    Report run() throws InterruptedException {
        Generator random = new Generator(seed);
        List<String> users = random.sample(Names.POOL, 4);
        List<String> clientIds = random.sample(Names.POOL, 4);
        List<Alteration> before = random.alterations(ALTERATIONS, List.of(Shape.values()), users, clientIds,
                Managers.TYPES);
        users.add("");
        clientIds.add("");
        List<Request> requests = random.requests(users, clientIds, REQUESTS);
        Request target = Request.of(users.get(0), clientIds.get(0));
        requests.add(target);
        // A random alteration, then one that surely changes the target's Produce answer.
        List<Alteration> during = List.of(
                random.alterations(1, List.of(Shape.values()), users.subList(0, 4), clientIds.subList(0, 4),
                        Managers.TYPES).get(0),
                Alteration.of(Shape.USER_CLIENT_ID, target.user(), target.clientId(), QuotaType.PRODUCE,
                        DURING_FAILURE));

        KquotaCallback callback = Managers.newCallback(variant.settings);
        try (Managers kafka = Managers.kafkaDefault(new ManualTime())) {
            for (Alteration alteration : before) {
                alteration.applyTo(kafka);
                alteration.applyTo(callback);
            }
            Map<String, Answer> good = answers(requests, type -> callback);
            expectEqual("before the failure", answers(requests, kafka::callback), good);
            for (QuotaType type : Managers.TYPES) {
                callback.quotaResetRequired(QuotaType.toClientQuotaType(type));
            }

            long failuresBefore = callback.failures();
            callback.setFailing(true);
            expectWhileFailing("failing", good, answers(requests, type -> callback));
            for (Alteration alteration : during) {
                alteration.applyTo(kafka);
                check("failing: " + alteration + " does not throw", () -> alteration.applyTo(callback));
            }
            expectWhileFailing("failing, after alterations made during the failure", good,
                    answers(requests, type -> callback));
            for (QuotaType type : Managers.TYPES) {
                check("failing: quotaResetRequired(" + type + ") does not throw",
                        () -> callback.quotaResetRequired(QuotaType.toClientQuotaType(type)));
            }
            long failuresDuring = callback.failures() - failuresBefore;
            expect("failures() grows while failing (grew by " + failuresDuring + ")", failuresDuring > 0);

            callback.setFailing(false);
            Map<String, Answer> expected = answers(requests, kafka::callback);
            CatchUp catchUp = catchUp(callback, requests, expected);
            report.note(String.format("after setFailing(false): %s in %d ms",
                    catchUp.answers.equals(expected) && catchUp.resetRequired ? "caught up" : "not caught up",
                    catchUp.millis));
            expectEqual("recovered: as Kafka after every alteration, within " + CATCH_UP_MS + " ms", expected,
                    catchUp.answers);
            expect("the alteration made during the failure changes " + target + "'s Produce answer"
                    + " (a check of the drill itself)",
                    !expected.get(key(QuotaType.PRODUCE, target)).equals(good.get(key(QuotaType.PRODUCE, target))));
            expect("quotaResetRequired(PRODUCE) returns true at least once after recovery", catchUp.resetRequired);
        } catch (RuntimeException e) {
            report.mismatch("threw " + e);
        } finally {
            callback.close();
        }
        report.note("alterations during the failure: " + during);
        return report;
    }

    /** The answers once caught up (or at the deadline), whether a Produce reset was asked, and when. */
    private record CatchUp(Map<String, Answer> answers, boolean resetRequired, long millis) {
    }

    /**
     * Asks the callback as a busy broker does, a round of every request every few milliseconds (each
     * quotaMetricTags followed by quotaResetRequired, as in getOrCreateQuotaSensors: that drives its
     * retries), until it answers as {@code expected} and has asked for a Produce reset, or the deadline.
     */
    private static CatchUp catchUp(ClientQuotaCallback callback, List<Request> requests,
                                   Map<String, Answer> expected) throws InterruptedException {
        long start = System.nanoTime();
        long deadline = start + TimeUnit.MILLISECONDS.toNanos(CATCH_UP_MS);
        boolean resetRequired = false;
        while (true) {
            Map<String, Answer> answers = new LinkedHashMap<>();
            for (QuotaType type : Managers.TYPES) {
                for (Request request : requests) {
                    answers.put(key(type, request), Answer.of(callback, type, request));
                    resetRequired |= callback.quotaResetRequired(QuotaType.toClientQuotaType(type))
                            && type == QuotaType.PRODUCE;
                }
            }
            long now = System.nanoTime();
            if ((answers.equals(expected) && resetRequired) || now >= deadline) {
                return new CatchUp(answers, resetRequired, TimeUnit.NANOSECONDS.toMillis(now - start));
            }
            Thread.sleep(ROUND_MS);
        }
    }

    private static String key(QuotaType type, Request request) {
        return type + " " + request;
    }

    private static Map<String, Answer> answers(List<Request> requests,
                                               Function<QuotaType, ClientQuotaCallback> callback) {
        Map<String, Answer> out = new LinkedHashMap<>();
        for (QuotaType type : Managers.TYPES) {
            for (Request request : requests) {
                out.put(key(type, request), Answer.of(callback.apply(type), type, request));
            }
        }
        return out;
    }

    /**
     * While the engine fails: with the memo, the last good configuration's answers; without it
     * ({@code kquota.cache.entries=0}, documented so in docs/kafka.md) nothing was remembered, and every
     * connection is unlimited until the engine answers again.
     */
    private void expectWhileFailing(String what, Map<String, Answer> good, Map<String, Answer> actual) {
        if (variant == Variant.MEMO) {
            expectEqual(what + ", as before the failure", good, actual);
            return;
        }
        List<String> limited = new ArrayList<>();
        actual.forEach((key, answer) -> {
            report.compared(what, 1);
            if (answer.limit() != null) {
                limited.add(key + ": " + answer);
            }
        });
        if (!limited.isEmpty()) {
            report.mismatch(what + ", unlimited with nothing remembered: " + limited.size()
                    + " answers have a limit, first: " + limited.get(0));
        }
    }

    private void expectEqual(String what, Map<String, Answer> expected, Map<String, Answer> actual) {
        List<String> diff = new ArrayList<>();
        expected.forEach((key, answer) -> {
            report.compared(what, 1);
            if (!answer.equals(actual.get(key))) {
                diff.add(key + ": expected " + answer + ", got " + actual.get(key));
            }
        });
        if (!diff.isEmpty()) {
            report.mismatch(what + ": " + diff.size() + " answers differ, first: " + diff.get(0));
        }
    }

    private void expect(String what, boolean holds) {
        report.compared("checks", 1);
        if (!holds) {
            report.mismatch(what + ": no");
        }
    }

    private void check(String what, Runnable call) {
        report.compared("checks", 1);
        try {
            call.run();
        } catch (RuntimeException e) {
            report.mismatch(what + ": threw " + e);
        }
    }
}
