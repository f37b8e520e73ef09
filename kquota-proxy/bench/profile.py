"""What one small request costs each forwarding process, from the profile run of run.sh.

    profile.py REQUESTS NAME=STRACE_FILE:CTX_SWITCHES:CPU_MS ... [PERF_REPORT]

STRACE_FILE is `strace -c -f` output for REQUESTS requests; CTX_SWITCHES and CPU_MS are the
process's context switches (voluntary and involuntary, all threads) and CPU time over a run of
REQUESTS requests without strace. Prints a Markdown table of system calls per request (each call
that any process makes at least 0.05 times a request), then the context switches and CPU time per
request, then PERF_REPORT (perf report's top symbols of the first process) if given.
"""
import sys


def syscalls(path):
    calls = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            # "% time  seconds  usecs/call  calls  [errors]  syscall"
            if len(parts) < 5 or not parts[0].replace(".", "").isdigit() or parts[-1] == "total":
                continue
            try:
                n = int(parts[3])
            except ValueError:
                continue
            calls[parts[-1]] = n
    return calls


def main():
    requests = int(sys.argv[1])
    runs, perf = [], None
    for arg in sys.argv[2:]:
        if "=" not in arg:
            perf = arg
            continue
        name, rest = arg.split("=", 1)
        path, ctx, cpu = rest.rsplit(":", 2)
        runs.append((name, syscalls(path), int(ctx), float(cpu)))
    names = sorted({s for _, c, _, _ in runs for s in c},
                   key=lambda s: -max(c.get(s, 0) for _, c, _, _ in runs))
    print("| per request | " + " | ".join(n for n, _, _, _ in runs) + " |")
    print("| --- |" + " ---: |" * len(runs))
    for s in names:
        if max(c.get(s, 0) for _, c, _, _ in runs) / requests < 0.05:
            continue
        print("| `%s` | " % s + " | ".join("%.2f" % (c.get(s, 0) / requests) for _, c, _, _ in runs) + " |")
    print("| all system calls | " + " | ".join("%.2f" % (sum(c.values()) / requests) for _, c, _, _ in runs) + " |")
    print("| context switches | " + " | ".join("%.2f" % (x / requests) for _, _, x, _ in runs) + " |")
    print("| CPU (µs) | " + " | ".join("%.1f" % (1000 * ms / requests) for _, _, _, ms in runs) + " |")
    if perf:
        print()
        print("Where %s's CPU goes (perf, user and kernel as allowed, %% of its samples):" % runs[0][0])
        print()
        print("```")
        with open(perf) as f:
            shown = 0
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                print(line.rstrip()[:110])
                shown += 1
                if shown == 25:
                    break
        print("```")


if __name__ == "__main__":
    main()
