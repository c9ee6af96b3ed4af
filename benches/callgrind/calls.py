#!/usr/bin/env python3
"""Calls to, and inclusive instructions of, the functions whose names match
each regex (usage: calls.py CALLGRIND_OUT REGEX...). Inclusive cost is
summed over calls from non-matching callers, so recursion counts once.
A regex written CALLER=>CALLEE counts only the calls from CALLER."""
import sys, re, collections
path = sys.argv[1]; pats = sys.argv[2:]
names = {}; calls = collections.Counter(); incl = collections.Counter(); total = 0
cur_cfn = None; pending_calls = None; self_ir = collections.Counter(); cur_fn=None
def name(tok, kind):
    m = re.match(r'\((\d+)\)(?: (.*))?', tok)
    if not m: return tok
    if m.group(2): names[m.group(1)] = m.group(2)
    return names.get(m.group(1), m.group(1))
with open(path) as f:
    for line in f:
        line=line.rstrip('\n')
        if line.startswith('fn='): cur_fn = name(line[3:], 'fn'); continue
        if line.startswith('cfn='): cur_cfn = name(line[4:], 'fn'); continue
        if line.startswith('calls='): pending_calls = int(line[6:].split()[0]); continue
        if line.startswith('summary:') or line.startswith('totals:'): total = int(line.split()[1]); continue
        if line and (line[0].isdigit() or line[0] in '+-*'):
            parts = line.split()
            if len(parts) >= 2:
                ir = int(parts[1])
                if pending_calls is not None:
                    calls[cur_cfn] += pending_calls; incl[(cur_fn,cur_cfn)] += ir; pending_calls=None
                else:
                    self_ir[cur_fn] += ir
print("total Ir", total)
for p in pats:
    if '=>' in p:
        caller, callee = p.split('=>', 1)
        i = sum(v for (a,b),v in incl.items() if re.search(callee,b) and re.search(caller,a or ''))
        print(f"{p}: inclusive_Ir={i}")
        continue
    c = sum(v for k,v in calls.items() if re.search(p,k))
    # inclusive Ir of matching callee over calls from non-matching callers (avoid recursion double count)
    i = sum(v for (a,b),v in incl.items() if re.search(p,b) and not re.search(p,a or ''))
    print(f"{p}: calls={c} inclusive_Ir={i} per_call={i/c if c else 0:.1f}")
