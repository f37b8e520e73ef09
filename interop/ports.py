#!/usr/bin/env python3
"""Loopback ports for listeners the suites start later than they choose them.

A port from bind(0) is one of the kernel's ephemeral ports: any outgoing connection may take it
before the process it was chosen for listens on it. kquota-proxy binds its broker listeners
(--listen-base + node id) only when the cluster first names that broker, often a minute after
start and thousands of connections later, so its ports are chosen below the ephemeral range,
where no outgoing connection ever lands.

    python3 interop/ports.py [SPAN]   prints a port P with P..P+SPAN-1 free (SPAN defaults to 1)

or, imported: listen_ports(span, used).
"""

import random
import socket
import sys

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def ephemeral_range():
    """The kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        with open(RANGE_FILE) as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def listen_ports(span=1, used=None):
    """A port P such that P..P+span-1 are free now, outside the ephemeral range, and not in `used`
    (which gets them). Fails loudly if none is found."""
    used = set() if used is None else used
    low, high = ephemeral_range()
    # Below the range if there is room there, else above it.
    if low - span > 10000:
        first, last = 10000, low - span
    else:
        first, last = high + 1, 65535 - span
    if last <= first:
        raise RuntimeError("no room outside the ephemeral port range %d-%d" % (low, high))
    for _ in range(2000):
        p = random.randint(first, last)
        ports = range(p, p + span)
        if any(q in used for q in ports):
            continue
        if all(_free(q) for q in ports):
            used.update(ports)
            return p
    raise RuntimeError("no %d free port(s) in %d-%d" % (span, first, last))


if __name__ == "__main__":
    try:
        print(listen_ports(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
    except (RuntimeError, ValueError) as e:
        print("interop/ports.py: %s" % e, file=sys.stderr)
        sys.exit(1)
