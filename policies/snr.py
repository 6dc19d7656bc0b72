"""The parity figure every comparison reports: signal-to-noise of a result against its reference, in dB."""
from __future__ import annotations

import numpy as np


def snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    """Signal-to-noise of `got` against `ref` in dB (inf when equal); shapes must match (no broadcasting)."""
    if ref.shape != got.shape:
        raise ValueError(f"shape {got.shape} compared with the reference's {ref.shape}")
    err = float(np.sum((got.astype(np.float64) - ref.astype(np.float64)) ** 2))
    sig = float(np.sum(ref.astype(np.float64) ** 2))
    return float("inf") if err == 0 else 10.0 * float(np.log10(sig / err))
