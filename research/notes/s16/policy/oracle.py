#!/usr/bin/env python3
"""Ceiling for any per-round depth policy over the board's SmolLM2 sequences: a dynamic
program that knows the sequence and picks each round's depth (0 = plain, 1..7 drafts) to
minimise decode time at the H200 receipts' costs (engine/src/spec/adaptive/replay_tests.rs
has the same costs and sequences). Usage: python3 oracle.py (from the repository root)."""

FIX = "engine/src/spec/adaptive/fixtures/smollm2-%s.ids"
COST = {  # plain step ms, verification ms by rows (bench.jsonl 2026-12-01T21:47, a9f3bb6)
    "short": (0.702, {2: 1.244, 3: 1.465, 4: 1.681, 5: 1.895}),
    "medium": (0.759, {2: 1.321, 3: 1.609, 4: 1.795, 5: 2.005, 6: 2.192, 7: 2.404, 8: 2.649}),
    "long": (0.830, {2: 1.418, 3: 1.653, 4: 1.917, 5: 2.164, 6: 2.416, 7: 2.637, 8: 2.882}),
}


def verify(c, rows):
    t = COST[c][1]
    if rows in t:
        return t[rows]
    xs = sorted(t)
    mr = sum(xs) / len(xs)
    mv = sum(t[x] for x in xs) / len(xs)
    b = sum((x - mr) * (t[x] - mv) for x in xs) / sum((x - mr) ** 2 for x in xs)
    return mv + b * (rows - mr)


def lookup(ctx, k, max_n=4):
    """engine::spec::NgramProposer::lookup (min_n 1)."""
    n = len(ctx)
    if k == 0 or n < 2:
        return []
    mx, last, best = min(max_n, n - 1), ctx[-1], None
    for e in range(n - 2, -1, -1):
        if ctx[e] != last:
            continue
        cap, l = min(mx, e + 1), 1
        while l < cap and ctx[e - l] == ctx[n - 1 - l]:
            l += 1
        if best is None or l > best[0]:
            best = (l, e)
            if l == mx:
                break
    return [] if best is None else ctx[best[1] + 1 : best[1] + 1 + k]


for c in COST:
    lines = open(FIX % c).read().split("\n")
    prompt, out = [list(map(int, l.split())) for l in lines[:2]]
    n = len(out)
    rem, avail = [0], [0]
    for i in range(1, n):
        d = lookup(prompt + out[:i], 8)
        a = 0
        while a < len(d) and i + a < n and d[a] == out[i + a]:
            a += 1
        rem.append(a)
        avail.append(len(d))
    plain = COST[c][0]
    best = [0.0] * (n + 1)
    for i in range(n - 1, 0, -1):
        b = plain + best[i + 1]
        for k in range(1, min(7, avail[i], n - 1 - i) + 1):
            b = min(b, verify(c, k + 1) + best[min(n, i + min(k, rem[i]) + 1)])
        best[i] = b
    print(f"{c}: oracle {(n - 1) * plain / best[1]:.3f}x plain")
