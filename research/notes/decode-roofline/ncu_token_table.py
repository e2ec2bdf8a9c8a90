"""Per-token kernel table from an ncu CSV of a Llama decode (issue 7 notes).

usage: python3 ncu_token_table.py NCU.csv[.xz]
The CSV comes from `ncu --csv --page raw --metrics gpu__time_duration.sum,dram__bytes_read.sum,
dram__bytes_write.sum,launch__grid_size,launch__block_size` (see decode-roofline.md). A token
runs from one embed kernel to the next; its body is 32 layers of 8 launches in the order of
`roles` (the launch plan of engine/src/cuda/decode/fuse.rs at eb9ba18), then the head.
"""
import csv, sys, lzma, collections
path = sys.argv[1]
op = lzma.open if path.endswith('.xz') else open
rows = list(csv.reader(op(path, 'rt')))
# find header row
hi = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
h = rows[hi]
def col(sub):
    return next(i for i, c in enumerate(h) if sub in c)
kn, tdur, rd, wrc, grid, blk = col('Kernel Name'), col('gpu__time_duration.sum'), col('dram__bytes_read.sum'), col('dram__bytes_write.sum'), col('launch__grid_size'), col('launch__block_size')
units = rows[hi + 1]
print('units:', units[tdur], units[rd])
data = []
for r in rows[hi + 2:]:
    if len(r) < len(h): continue
    def f(i):
        try: return float(r[i].replace(',', ''))
        except: return float('nan')
    data.append((r[kn], f(tdur), f(rd), f(wrc), r[grid], r[blk]))
tscale = {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1.0, 'usecond': 1.0, 'ms': 1e3, 'msecond': 1e3}.get(units[tdur], 1.0)
bscale = {'byte': 1, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9}.get(units[rd], 1)
# tokens: from an embed kernel to the next
starts = [i for i, d in enumerate(data) if d[0].startswith('embed')]
toks = [data[a:b] for a, b in zip(starts, starts[1:])]
print(f'{len(data)} kernels profiled, {len(toks)} complete tokens, kernels per token: {[len(t) for t in toks]}')
roles = ['q', 'k', 'v', 'rope_kv', 'attention', 'o (+res)', 'gate/up (glu)', 'down (+res)']
agg = collections.OrderedDict()
for t in toks:
    body = t[1:]
    nl = 32
    for i, d in enumerate(body):
        if i < nl * len(roles):
            role = roles[i % len(roles)]
        else:
            role = 'head: ' + d[0]
        a = agg.setdefault(role, [0, 0.0, 0.0, 0.0, set()])
        a[0] += 1; a[1] += d[1] * tscale; a[2] += d[2] * bscale; a[3] += d[3] * bscale; a[4].add(f'{d[0]} grid={d[4]} block={d[5]}')
    a = agg.setdefault('embed', [0, 0.0, 0.0, 0.0, set()])
    a[0] += 1; a[1] += t[0][1] * tscale; a[2] += t[0][2] * bscale; a[3] += t[0][3] * bscale; a[4].add(t[0][0])
n = len(toks)
tot_t = sum(a[1] for a in agg.values()) / n
tot_b = sum(a[2] for a in agg.values()) / n
print(f'| kernel (role) | launches/token | mean us/launch | us/token | share | DRAM read MB/token | GB/s while running |')
print('|---|---|---|---|---|---|---|')
for role, a in agg.items():
    c = a[0] / n; us = a[1] / n; mb = a[2] / n / 1e6
    print(f'| {role} | {c:.0f} | {us / c:.2f} | {us:.1f} | {100 * us / tot_t:.1f}% | {mb:.2f} | {mb * 1e6 / (us * 1e-6) / 1e9 if us else 0:.0f} |')
print(f'| **sum of kernel time** | {sum(a[0] for a in agg.values()) / n:.0f} | | **{tot_t:.1f}** | | {tot_b / 1e6:.1f} | {tot_b / (tot_t * 1e-6) / 1e9:.0f} |')
for role, a in agg.items():
    print(role, sorted(a[4])[:3])
