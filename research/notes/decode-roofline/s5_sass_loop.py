# The weight loop of a matvec entry point in `cuobjdump -sass -fun NAME CUBIN` output: the
# smallest backward-branch loop holding >= 100 FFMA; prints its instruction count, FFMA,
# 16-byte global loads (LDG.128), how many of those are issued before the loop's first
# FFMA, and the instruction mix. Usage: python3 s5_sass_loop.py FILE.sass ...
# (cuobjdump / nvdisasm: PyPI wheels nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm.)
import collections
import re
import sys

for f in sys.argv[1:]:
    ins = []
    for line in open(f):
        m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?);', line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    best = None
    for a, t in ins:
        m = re.search(r'BRA\s+(?:`\(\.L_x_\d+\)\s*|)0x([0-9a-f]+)', t)
        if not m:
            continue
        tg = int(m.group(1), 16)
        if tg >= a:
            continue
        body = [x for x in ins if tg <= x[0] <= a]
        if sum('FFMA' in x[1] for x in body) >= 100 and (best is None or len(body) < len(best)):
            best = body
    if best is None:
        print(f, 'no loop with >= 100 FFMA')
        continue
    ff = next(i for i, x in enumerate(best) if 'FFMA' in x[1])
    l128 = [i for i, x in enumerate(best) if 'LDG.E.128' in x[1]]
    ops = collections.Counter(re.sub(r'^@!?U?P\w+\s+', '', x[1]).split()[0].split('.')[0] for x in best)
    print(f'{f}: {len(best)} instr, FFMA {ops["FFMA"]} ({len(best) / ops["FFMA"]:.2f} per FFMA), '
          f'LDG.128 {len(l128)}, {sum(i < ff for i in l128)} before the first FFMA; '
          + ' '.join(f'{k}:{v}' for k, v in ops.most_common(12)))
