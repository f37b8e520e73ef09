package kquota.interop.callback;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Proof that kquota's KIP-257 callback ({@code io.kquota.kafka.KquotaCallback},
 * {@code kquota.sub.quota.policy=kafka}) is Kafka-exact inside Kafka 4.3.1's own
 * {@code ClientQuotaManager}s, in one process, with both answer paths (the memo and
 * {@code kquota.cache.entries=0}):
 *
 * <ol>
 *   <li>{@link ParityRun}: seeded random configurations, applied as alteration sequences the way a broker
 *       applies its metadata log; after every alteration the metric tags, limits and throttle times of
 *       requests by configured and unconfigured names (non-ASCII, NUL, lone surrogates, the empty name)
 *       equal those of Kafka's DefaultQuotaCallback, for all four client quota types;</li>
 *   <li>{@link ConcurrencyRun}: 16 readers against one writer; every answer is one that Kafka gives under
 *       a configuration in force during the call; no exception, no hang;</li>
 *   <li>{@link FailureDrill}: while the engine fails, the last good answers; after, Kafka's again;</li>
 *   <li>{@link SettingsCheck}: configure refuses malformed settings with a ConfigException naming the key.</li>
 * </ol>
 *
 * <p>Exits 1 on any mismatch, printing the first ones with the alterations that led there. Replay with
 * the printed seed: {@code interop/quota-manager/callback.sh --seed N [--cases N]}, or one parity case
 * alone with {@code --case K}.
 */
public final class CallbackParity {
    private static final int DEFAULT_CASES = 2000;

    private CallbackParity() {
    }

    public static void main(String[] args) throws InterruptedException {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        long seed = ThreadLocalRandom.current().nextLong();
        int cases = DEFAULT_CASES;
        Integer only = null;
        for (int i = 0; i < args.length; i++) {
            String value = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--seed" -> seed = Long.parseLong(value);
                case "--cases" -> cases = Integer.parseInt(value);
                case "--case" -> only = Integer.parseInt(value);
                default -> {
                    System.err.println("usage: CallbackParity [--seed N] [--cases N] [--case K]");
                    System.exit(2);
                }
            }
            i++;
        }

        long start = System.nanoTime();
        out.println("callback parity: seed " + seed);
        List<Report> reports = new ArrayList<>();
        try {
            ParityRun parity = new ParityRun(seed);
            reports.add(only == null ? parity.run(0, cases) : parity.run(only, only + 1));
            if (only == null) {
                for (Variant variant : Variant.values()) {
                    reports.add(new ConcurrencyRun(seed, variant).run());
                }
                for (Variant variant : Variant.values()) {
                    reports.add(new FailureDrill(seed, variant).run());
                }
                reports.add(new SettingsCheck().run());
            }
        } catch (ConcurrencyRun.HungException e) {
            reports.forEach(report -> report.print(out));
            out.println("callback parity: FAILED, " + e.getMessage());
            out.println("callback parity: replay with --seed " + seed);
            System.exit(1);
        }

        long mismatches = 0;
        long comparisons = 0;
        for (Report report : reports) {
            report.print(out);
            mismatches += report.mismatches();
            comparisons += report.total();
        }
        out.printf("callback parity: %s, seed %d: %d parity cases, %d comparisons, %d mismatches, %.1f s%n",
                mismatches == 0 ? "PASSED" : "FAILED", seed, only == null ? cases : 1, comparisons, mismatches,
                (System.nanoTime() - start) / 1e9);
        if (mismatches > 0) {
            out.println("callback parity: replay with interop/quota-manager/callback.sh --seed " + seed
                    + (only == null ? " --cases " + cases : " --case " + only));
        }
        System.exit(mismatches == 0 ? 0 : 1);
    }
}
