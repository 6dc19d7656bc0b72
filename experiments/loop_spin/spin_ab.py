"""A/B of the loop clock's spin before each tick at 1 kHz: the node's assembled loop (bench loop's rig, reference bundle on MNN,
execution horizon 12), one Scheduler, its MonotonicClock swapped between 1 ms and 0.2 ms spin, 5,000 ticks each,
interleaved in 2 rounds; prints [missed, overruns, p99 lateness ms] per round."""
import sys, json, time
from omni_vla.core.loop import Scheduler, MonotonicClock
from omni_vla.tools.bench_loop import LoopRig, parse_args, WARMUP_TICKS
sys.setswitchinterval(0.001)
args = parse_args(["--bundle", "bundles/reference", "--backends", "mnn", "--execution-horizon", "12"])
rig = LoopRig(args, "mnn", 1000.0)
res = {}
try:
    s = Scheduler(1000.0, rig.tick, rt_priority=50)
    s.run(max_ticks=WARMUP_TICKS)
    for rnd in range(2):
        for spin in (0.001, 0.0002):
            s.clock = MonotonicClock(spin)
            s.stats.reset()
            s.run(max_ticks=5000)
            res.setdefault(spin, []).append((s.stats.missed, s.stats.overruns, round(1e3*s.stats.percentile(99), 3)))
finally:
    rig.close()
print(json.dumps({str(k): v for k, v in res.items()}))
