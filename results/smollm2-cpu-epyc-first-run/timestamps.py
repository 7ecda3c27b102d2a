"""Prefix each line (and each progress-bar redraw) of a piped command with seconds since $1 (a date +%s.%N),
so a log shows when timing started. Usage: cmd 2>&1 | python timestamps.py $(date +%s.%N)"""
import sys, time
t0 = float(sys.argv[1])
for l in sys.stdin:
    for part in l.replace('\r', '\n').split('\n'):
        if part.strip() and 'AUTOTUNE' not in part and not part.startswith('  '):
            sys.stdout.write(f'{time.time()-t0:7.1f} {part[:220]}\n'); sys.stdout.flush()
