package kquota.interop;

/** Placeholder. */
public final class AdminCheck {
    public static void main(String[] args) {}
}
