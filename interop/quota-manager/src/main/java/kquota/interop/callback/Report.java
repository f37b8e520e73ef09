package kquota.interop.callback;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/** What one part of the harness compared, and the first mismatches it found. Thread-safe. */
final class Report {
    private static final int SHOWN = 10;

    final String part;
    private final Map<String, Long> comparisons = new TreeMap<>();
    private final List<String> shown = new ArrayList<>();
    private long mismatches;
    private final List<String> notes = new ArrayList<>();

    Report(String part) {
        this.part = part;
    }

    /** Counts {@code n} comparisons under {@code label} (a quota type, or what was compared). */
    synchronized void compared(String label, long n) {
        comparisons.merge(label, n, Long::sum);
    }

    /** Records a mismatch; the first ones are kept for the report. */
    synchronized void mismatch(String detail) {
        if (mismatches++ < SHOWN) {
            shown.add(detail);
        }
    }

    /** A line printed with the report whatever the outcome (e.g. how to replay). */
    synchronized void note(String line) {
        notes.add(line);
    }

    synchronized long mismatches() {
        return mismatches;
    }

    synchronized long total() {
        return comparisons.values().stream().mapToLong(Long::longValue).sum();
    }

    synchronized void print(PrintStream out) {
        out.printf("%s: %d comparisons %s, %d mismatches%n", part, total(), comparisons, mismatches);
        for (String detail : shown) {
            out.println("  MISMATCH " + detail.replace("\n", "\n    "));
        }
        if (mismatches > shown.size()) {
            out.printf("  ... and %d more mismatches%n", mismatches - shown.size());
        }
        for (String line : notes) {
            out.println("  " + line);
        }
    }
}
