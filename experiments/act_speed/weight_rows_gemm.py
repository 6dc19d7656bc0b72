"""One Linear [M, K] -> [M, N] three ways, timed interleaved on eager PyTorch, onnxruntime, ExecuTorch and MNN:
as nn.Linear, as mm(W, x^T)^T, and as bmm(W[1], x^T[None]) (the weights as the GEMM's rows, so a runtime that
tiles the activation rows by 7 streams the weights once even at M = 8).

    python experiments/act_speed/weight_rows_gemm.py M K N     # e.g. 8 4608 512: a 3x3 conv of ResNet layer4
"""
import sys, time, tempfile, numpy as np, torch
from pathlib import Path
from parts import runners
import torch.nn.functional as F
from torch import nn
torch.set_num_threads(1)
from executorch.extension.pybindings import portable_lib
portable_lib._unsafe_reset_threadpool(1)
class Lin(nn.Module):
    def __init__(s,k,n): super().__init__(); s.l=nn.Linear(k,n)
    def forward(s,x): return s.l(x)
class TLin(nn.Module):
    """y = x W^T + b computed as (W x^T)^T: the weights are the GEMM's rows."""
    def __init__(s,k,n): super().__init__(); s.w=nn.Parameter(torch.randn(n,k)*0.01); s.b=nn.Parameter(torch.randn(n))
    def forward(s,x): return torch.mm(s.w, x.t()).t() + s.b
class TLin2(nn.Module):
    def __init__(s,k,n): super().__init__(); s.w=nn.Parameter(torch.randn(1,n,k)*0.01); s.b=nn.Parameter(torch.randn(n))
    def forward(s,x): return torch.bmm(s.w, x.t()[None])[0].t() + s.b
M=int(sys.argv[1]); K=int(sys.argv[2]); N=int(sys.argv[3])
mods={'lin':Lin(K,N),'tmm':TLin(K,N),'tbmm':TLin2(K,N)}
calls={}; info={}
with tempfile.TemporaryDirectory() as d, torch.no_grad():
    x=torch.randn(M,K)
    for k,m in mods.items():
        m.eval(); r,info[k]=runners({'torch':m,'executorch':m,'onnx':m},(x,),Path(d),k,1)
        for b,f in r.items(): calls[k+'/'+b]=f
    for f in calls.values():
        for _ in range(5): f()
    T={k:[] for k in calls}
    for rep in range(60):
        for k,f in calls.items():
            t0=time.perf_counter(); f(); T[k].append((time.perf_counter()-t0)*1e3)
print({k: round(float(np.median(v)),3) for k,v in T.items()})
print({k:v['pte'] for k,v in info.items()})
