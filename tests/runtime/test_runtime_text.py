"""A new instruction is embedded on the robot without torch: tokenizers + the exported MiniLM (MNN)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from omni_vla.runtime.bundle import BundleError
from omni_vla.runtime.text import Tokenizer
from fixtures_policy import cached_tiny_bundle
from omni_vla_policies.text_encoder import MAX_TOKENS, encode_texts, export_text_encoder, model_dir

NEW = ["juggle the cubes", "put the red block on top of the blue block, then wave"]


@pytest.fixture(scope="module")
def bundle_with_text_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = cached_tiny_bundle(tmp_path_factory.getbasetemp())
    dst = tmp_path_factory.mktemp("te") / "bundle"
    shutil.copytree(src, dst)
    export_text_encoder(dst, backends=("mnn",))
    return dst


def test_tokenizer_pads_and_truncates_to_the_static_length() -> None:
    tok = Tokenizer(model_dir() / "tokenizer.json", MAX_TOKENS)
    ids, mask = tok("pick up the red cube")
    assert ids.shape == mask.shape == (1, MAX_TOKENS) and ids.dtype == np.int32
    assert mask.sum() == 7 and ids[0, 0] == 101 and ids[0, 6] == 102  # [CLS] 5 words [SEP]
    ids, mask = tok("word " * 100)
    assert mask.sum() == MAX_TOKENS and ids[0, -1] == 102


@pytest.mark.slow
def test_mnn_text_encoder_matches_minilm_without_torch(bundle_with_text_encoder: Path) -> None:
    code = f"""
import json, sys
from omni_vla.runtime.mnn import MNNRuntime
rt = MNNRuntime({str(bundle_with_text_encoder)!r})
emb = [rt.encode_instruction(t).tolist() for t in {NEW!r}]
print(json.dumps({{"torch": "torch" in sys.modules, "emb": emb}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["torch"] is False
    got, ref = np.array(res["emb"], np.float32), encode_texts(NEW)
    for g, w in zip(got, ref):
        assert g.shape == (384,)
        assert 10 * np.log10(np.sum(w ** 2) / np.sum((g - w) ** 2)) >= 40
    assert float(got[0] @ got[1]) < 0.9  # different sentences, different embeddings


@pytest.mark.slow
def test_tampered_text_encoder_is_refused(bundle_with_text_encoder: Path, tmp_path: Path) -> None:
    from omni_vla.runtime.mnn import MNNRuntime

    dst = tmp_path / "b"
    shutil.copytree(bundle_with_text_encoder, dst)
    p = dst / "text_encoder" / "tokenizer.json"
    p.write_text(p.read_text().replace("[CLS]", "[XLS]", 1))
    with pytest.raises(BundleError, match="tokenizer.json .*(sha256|bytes)"):
        MNNRuntime(dst)
