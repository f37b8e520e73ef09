package kquota.interop.callback;

import org.apache.kafka.common.utils.Time;

import java.util.function.Supplier;

/** A clock that moves only when told (kafka-clients' MockTime is in its test jar, which is not used). */
final class ManualTime implements Time {
    private volatile long nowMs = 1_700_000_000_000L;

    void advance(long ms) {
        nowMs += ms;
    }

    @Override
    public long milliseconds() {
        return nowMs;
    }

    @Override
    public long nanoseconds() {
        return nowMs * 1_000_000L;
    }

    @Override
    public void sleep(long ms) {
        advance(ms);
    }

    @Override
    public void waitObject(Object obj, Supplier<Boolean> condition, long deadlineMs) {
        if (!condition.get()) {
            throw new IllegalStateException("a manual clock cannot wait for another thread");
        }
    }
}
