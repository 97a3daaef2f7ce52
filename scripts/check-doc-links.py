#!/usr/bin/env python3
# Every relative link (and #anchor) in README.md and docs/*.md points at something that exists.
import re, os, sys, glob
def slug(h):
    h = h.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)   # drop punctuation (keeps letters, digits, _, -, space)
    return h.replace(' ', '-')
def anchors(path):
    out, seen, fence = set(), {}, False
    for l in open(path, encoding='utf-8'):
        if l.startswith('```'): fence = not fence; continue
        if fence: continue
        m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', l)
        if m:
            s = slug(m.group(2)); n = seen.get(s, 0); seen[s] = n + 1
            out.add(s if n == 0 else f'{s}-{n}')
    return out
bad = 0; count = 0
files = ['README.md'] + sorted(glob.glob('docs/*.md'))
for f in files:
    text = open(f, encoding='utf-8').read()
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    text = re.sub(r'`[^`\n]*`', lambda m: m.group(0) if '](' not in m.group(0) else '', text)
    for t in re.findall(r'\]\(([^)\s]+)\)', text):
        count += 1
        if re.match(r'^[a-z]+:', t): continue
        p, _, a = t.partition('#')
        target = os.path.normpath(os.path.join(os.path.dirname(f), p)) if p else f
        if not os.path.exists(target): print(f'{f}: missing file {t}'); bad += 1; continue
        if a and (not target.endswith('.md') or a not in anchors(target)):
            print(f'{f}: missing anchor {t}'); bad += 1
print(f'{count} links, {bad} broken'); sys.exit(1 if bad else 0)
