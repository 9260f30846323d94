#!/usr/bin/env python3
"""Groups a flat `perf report` by where server CPU goes, for two runs side by side.

    perf report -i A.data --no-children --sort comm,dso,sym --stdio > a.txt
    perf report -i B.data --no-children --sort comm,dso,sym --stdio > b.txt
    bench/perf-breakdown.py a.txt A_US_PER_CERT b.txt B_US_PER_CERT

Each side's samples (the load generator's threads left out) are scaled to its
run's server CPU per certificate, as `warrant bench` printed it.
"""
import re,collections,sys
def classify(path, us_per_cert):
    cat=collections.Counter()
    for l in open(path):
        m=re.match(r'\s*([\d.]+)%\s+(\S+)\s+(\S+)\s+\[(.)\]\s+(.*)',l)
        if not m: continue
        p,comm,dso,k,sym=m.groups(); p=float(p)
        if comm.startswith('gust') or comm=='bench-progress': c='client'
        elif k=='k':
            if re.search(r'switch|schedule|futex|wake|idle|enqueue|dequeue|pick_next|update_curr|select_task',sym): c='kernel: scheduling, futex, wake-ups'
            elif re.search(r'tcp|ip_|skb|sock|net_|napi|loopback|__dev|epoll|ep_',sym): c='kernel: TCP loopback, epoll'
            elif re.search(r'ext4|jbd2|fsync|blk|bio|page|folio|filemap|iomap|writeback',sym): c='kernel: file writes, fsync'
            else: c='kernel: syscalls, other'
        elif re.search(r'nistz|bignum|aws_lc|ecp_|Lbignum|sha256|sha512|beeu|ecdsa',sym): c='crypto (aws-lc)'
        elif re.search(r'^_?mi_|malloc|free|__rust_alloc|__rust_dealloc|realloc|memmove|memcpy|memset',sym): c='allocation, copies'
        elif re.search(r'tokio|clock_gettime|mio|Sleep|timer|Wheel|vdso',sym) or dso=='[vdso]': c='tokio runtime, timers, clock'
        elif re.search(r'sqlite|sqlx|Vdbe|btree|pager|wal',sym,re.I) or comm.startswith('sqlx'): c='SQLite and sqlx (user space)'
        else: c='rest (HTTP, JSON, DER, CA, store)'
        cat[c]+=p
    server=100-cat['client']
    return {k:v/server*us_per_cert for k,v in cat.items() if k!='client'}
if len(sys.argv) != 5:
    sys.exit(__doc__)
a_path, a_us, b_path, b_us = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
t2 = classify(a_path, a_us)
t3 = classify(b_path, b_us)
print('| where | A µs/cert | B µs/cert | B − A |\n|---|---|---|---|')
for k in sorted(t3,key=lambda k:-(t3[k]-t2.get(k,0))):
    print(f'| {k} | {t2.get(k,0):.0f} | {t3[k]:.0f} | {t3[k]-t2.get(k,0):+.0f} |')
print(f'| total | {a_us:.0f} | {b_us:.0f} | {b_us - a_us:+.0f} |')
