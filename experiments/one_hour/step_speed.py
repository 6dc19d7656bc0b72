"""Training step time on a synthetic batch (config/policy.yaml model, batch 64, 2 threads): eager, bf16 autocast,
channels_last, torch.compile and combinations; median of 25 steps after 3 warm-up steps (commit 3b7ab64).

    python experiments/one_hour/step_speed.py [kinds...] > results/one_hour/step_speed.json
"""
import sys, time, json
import numpy as np, torch
from omni_vla_policies.model import VLAPolicy, ModelConfig
from omni_vla_policies.train import load_config, augment, to_images
from pathlib import Path
cfg = load_config(Path(__file__).resolve().parents[2] / "config/policy.yaml", {})
torch.set_num_threads(2)
mc = cfg.model
B = cfg.batch_size
g = torch.Generator().manual_seed(0)
u8f = np.random.randint(0, 255, (B, 64, 64, 3), dtype=np.uint8)
u8w = np.random.randint(0, 255, (B, 64, 64, 3), dtype=np.uint8)
def batch():
    f = augment(to_images(u8f), 2, g); w = augment(to_images(u8w), 2, g)
    return (f, w, torch.randn(B, 8), torch.randn(B, 384), torch.randn(B, 16, 8), torch.randint(0, 7, (B,)), torch.randn(B, 4, 8))
def make(kind):
    torch.manual_seed(0)
    m = VLAPolicy(mc)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    fn = m.loss
    if "compile" in kind:
        fn = torch.compile(m.loss)
    def step():
        fr, wr, st, ins, ch, d, fut = batch()
        if "cl" in kind:
            fr = fr.contiguous(memory_format=torch.channels_last); wr = wr.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled="bf16" in kind):
            loss = fn(fr, wr, st, ins, ch, d, repeats=2, state_dropout=0.3, future=fut, aux_weight=1.0)
        opt.zero_grad(); loss.backward(); opt.step()
        return loss.item()
    if "cl" in kind:
        m.to(memory_format=torch.channels_last)
    return step
res = {}
t = time.perf_counter(); [batch() for _ in range(50)]; res["batch_ms"] = (time.perf_counter() - t) / 50 * 1e3
kinds = sys.argv[1:] or ["eager", "bf16", "cl", "compile", "compile_bf16"]
for k in kinds:
    st = make(k)
    t = time.perf_counter(); st(); st(); st(); warm = time.perf_counter() - t
    ts = []
    for _ in range(25):
        t = time.perf_counter(); st(); ts.append(time.perf_counter() - t)
    res[k] = {"warm_s": round(warm, 1), "median_ms": round(float(np.median(ts)) * 1e3, 1)}
    print(k, res[k], file=sys.stderr, flush=True)
print(json.dumps(res))
