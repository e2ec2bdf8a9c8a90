# launch_rewrite.py IN OUT: rewrites every `K<<<cfg>>>(args)` of a CUDA source into
# `K(args), dp_cfg_check(cfg)` so that g++ (with host_view.h) type-checks the launches.
import sys
s = open(sys.argv[1]).read()
out = []
i = 0
while True:
    a = s.find("<<<", i)
    if a < 0:
        out.append(s[i:]); break
    b = s.find(">>>", a)
    cfg = s[a + 3:b]
    # the call's argument list: from b+3 '(' to its matching ')'
    j = b + 3
    assert s[j] == "(", s[j:j+20]
    depth = 0
    k = j
    while True:
        if s[k] == "(": depth += 1
        elif s[k] == ")":
            depth -= 1
            if depth == 0: break
        k += 1
    out.append(s[i:a])
    out.append(s[j:k + 1] + ", dp_cfg_check(" + cfg + ")")
    i = k + 1
open(sys.argv[2], "w").write("".join(out))
